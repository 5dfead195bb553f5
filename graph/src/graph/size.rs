//! How large each activity is when it travels to another node, checked
//! before a graph runs on a pool: an activity larger than a steal reply
//! can carry never leaves its runner, which has no executor for it.

use constellation::{ActivityId, NodeId};
use executors::shell::ShellActivity;

use super::{Entry, Graph, ProgramTemplate};

/// Room kept for what a runner adds to an activity before it travels
/// (its output directory, its parent, the progress of its attempts),
/// beyond what the graph file says.
pub const TRAVEL_SLACK: usize = 64 * 1024;

impl Graph {
    /// Nodes whose shell activity, encoded to travel, would take more than
    /// `limit` bytes less [`TRAVEL_SLACK`], with that size, in node order;
    /// at most `most` of them, and only among those `travels` picks (work
    /// that can run where it is created need not travel). An entry is rendered only when an upper
    /// bound of its text (each template with its longest values) comes
    /// that near the limit, so a graph far from it costs one pass over
    /// its entries, not over its activities.
    pub fn too_large_to_travel(
        &self,
        limit: usize,
        most: usize,
        travels: impl Fn(usize) -> bool,
    ) -> Vec<(usize, usize)> {
        let room = limit.saturating_sub(TRAVEL_SLACK);
        let mut found = Vec::new();
        for (k, entry) in self.entries.iter().enumerate() {
            if entry.longest_text() <= room {
                continue;
            }
            let nodes = self.starts[k] as usize..self.starts[k + 1] as usize;
            for n in nodes.filter(|&n| travels(n)) {
                let size = self.encoded_size(n);
                if size > room {
                    found.push((n, size));
                    if found.len() >= most {
                        return found;
                    }
                }
            }
        }
        found
    }

    /// Node `n`'s shell activity encoded as it travels, in bytes.
    fn encoded_size(&self, n: usize) -> usize {
        let parent = ActivityId::new(NodeId::from_u128(0), 0);
        let activity = ShellActivity::new(self.spec(n))
            .reply_to(parent)
            .report_starts();
        constellation::wire::encode_activity(&activity).map_or(usize::MAX, |bytes| bytes.len())
    }
}

impl Entry {
    /// At most how many bytes of text one of this entry's activities
    /// has: its id, program, arguments, environment and working
    /// directory, each placeholder with the variable's longest value.
    fn longest_text(&self) -> usize {
        let longest = |name: &str| {
            (self.variables.iter())
                .filter(|variable| variable.name == name)
                .flat_map(|variable| variable.values.iter().map(String::len))
                .max()
                .unwrap_or(0)
        };
        let program = match &self.program {
            ProgramTemplate::Command(t) | ProgramTemplate::Script(t) => t,
        };
        let env = (self.env.iter()).map(|(name, t)| name.len() + t.longest_render(longest));
        (std::iter::once(&self.id)
            .chain([program])
            .chain(&self.args)
            .chain(&self.cwd))
        .map(|t| t.longest_render(longest))
        .chain(env)
        .fold(0, usize::saturating_add)
    }
}
