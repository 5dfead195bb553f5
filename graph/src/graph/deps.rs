//! The dependency structure of a checked graph: shared groups, compact
//! per-node lists, and the walks over them (Kahn's algorithm for the
//! order, what a resume skips, and cycles).

use std::collections::HashMap;

use super::Graph;

/// Nodes that many activities run after, resolved once: an `after` item
/// without placeholders. A consumer waits for a group as for one
/// dependency, released when its last member succeeds.
#[derive(Debug, Clone, Default)]
pub(super) struct Group {
    /// The members, as runs of consecutive node numbers.
    members: Vec<(u32, u32)>,
    /// How many members.
    pub(super) size: u32,
    /// The entries all of whose activities run after the group.
    pub(super) consumers: Vec<u32>,
}

impl Group {
    pub(super) fn nodes(&self) -> impl Iterator<Item = usize> + '_ {
        (self.members.iter()).flat_map(|&(start, end)| (start as usize)..(end as usize))
    }

    pub(super) fn push(&mut self, node: u32) {
        match self.members.last_mut() {
            Some((_, end)) if *end == node => *end += 1,
            _ => self.members.push((node, node + 1)),
        }
        self.size += 1;
    }
}

/// Lists per node, compactly: node `n`'s list is
/// `targets[offsets[n]..offsets[n + 1]]`.
#[derive(Debug, Clone, Default)]
pub(super) struct Csr {
    offsets: Vec<u32>,
    pub(super) targets: Vec<u32>,
}

impl Csr {
    pub(super) fn new(nodes: usize) -> Csr {
        let mut offsets = Vec::with_capacity(nodes + 1);
        offsets.push(0);
        Csr {
            offsets,
            targets: Vec::new(),
        }
    }

    /// Ends the list of the next node.
    pub(super) fn close(&mut self) {
        self.offsets.push(self.targets.len() as u32);
    }

    pub(super) fn of(&self, n: usize) -> &[u32] {
        match (self.offsets.get(n), self.offsets.get(n + 1)) {
            (Some(&start), Some(&end)) => &self.targets[start as usize..end as usize],
            _ => &[],
        }
    }

    /// Each target's list of the nodes that have it: the edges reversed.
    pub(super) fn reversed(&self, nodes: usize) -> Csr {
        if self.targets.is_empty() {
            return Csr::default();
        }
        let mut counts = vec![0u32; nodes + 1];
        for &t in &self.targets {
            counts[t as usize + 1] += 1;
        }
        for k in 1..counts.len() {
            counts[k] += counts[k - 1];
        }
        let mut fill = counts.clone();
        let mut targets = vec![0u32; self.targets.len()];
        for n in 0..self.offsets.len().saturating_sub(1) {
            for &t in self.of(n) {
                targets[fill[t as usize] as usize] = n as u32;
                fill[t as usize] += 1;
            }
        }
        Csr {
            offsets: counts,
            targets,
        }
    }
}

impl Graph {
    /// The groups node `n` is a member of.
    fn groups_of(&self, n: usize) -> impl Iterator<Item = usize> + '_ {
        let n = n as u32;
        let from = self.memberships.partition_point(|&(m, _)| m < n);
        (self.memberships[from..].iter())
            .take_while(move |&&(m, _)| m == n)
            .map(|&(_, g)| g as usize)
    }

    /// The nodes `n` runs after, expanded: group members and per-activity
    /// edges (a member may come twice if two items name it). For tests and
    /// small graphs: a node after `a-*` of a large sweep lists them all.
    pub fn dependencies(&self, n: usize) -> impl Iterator<Item = usize> + '_ {
        let entry = &self.entries[self.kind_of(n)];
        (entry.groups.iter())
            .flat_map(move |&g| self.groups[g as usize].nodes())
            .chain(self.after.of(n).iter().map(|&m| m as usize))
    }

    /// The groups all activities of node `n`'s entry run after.
    pub(crate) fn entry_groups(&self, n: usize) -> &[u32] {
        &self.entries[self.kind_of(n)].groups
    }

    /// Node `n`'s per-activity dependencies.
    pub(crate) fn after_of(&self, n: usize) -> &[u32] {
        self.after.of(n)
    }

    /// The nodes with `n` among their per-activity dependencies.
    pub(crate) fn dependants_of(&self, n: usize) -> &[u32] {
        self.dependants.of(n)
    }

    /// The groups node `n` is a member of.
    pub(crate) fn member_of(&self, n: usize) -> impl Iterator<Item = usize> + '_ {
        self.groups_of(n)
    }

    /// Group `g`'s members.
    pub(crate) fn group_members(&self, g: usize) -> impl Iterator<Item = usize> + '_ {
        self.groups[g].nodes()
    }

    /// The nodes that run after group `g`: whole entries.
    pub(crate) fn group_consumers(&self, g: usize) -> impl Iterator<Item = usize> + '_ {
        (self.groups[g].consumers.iter()).flat_map(|&e| {
            (self.starts[e as usize] as usize)..(self.starts[e as usize + 1] as usize)
        })
    }

    /// How many dependencies the coordinator waits for, in all: a group
    /// counts once per consuming entry and once per member, however many
    /// activities consume it; a per-activity edge once. A fan-in of
    /// 1,000 × 1,000 through `a-*` is 1,001 here, not 1,000,000.
    pub fn edge_count(&self) -> usize {
        let groups: usize = (self.groups.iter())
            .map(|g| g.size as usize + g.consumers.len())
            .sum();
        groups + self.after.targets.len()
    }

    /// How many shared groups the `after` items without placeholders
    /// resolved to.
    pub fn group_count(&self) -> usize {
        self.groups.len()
    }

    /// Node indices such that every node comes after its dependencies
    /// (Kahn's algorithm over groups and per-activity edges: linear). On a
    /// graph with a cycle, the nodes on and after it are missing.
    pub fn topological_order(&self) -> Vec<usize> {
        let mut walk = Walk::new(self);
        let mut order = Vec::with_capacity(self.len());
        while let Some(n) = walk.next(self) {
            order.push(n);
        }
        order
    }

    /// Which nodes a resume skips: node `n` iff `done[n]` (done before
    /// with the same spec) and every node it runs after is skipped too.
    /// Anything downstream of work that runs again runs again, since its
    /// inputs may change.
    ///
    /// # Panics
    /// If `done` is not one flag per node.
    pub fn skippable(&self, done: &[bool]) -> Vec<bool> {
        assert_eq!(done.len(), self.len(), "one flag per node");
        let mut skip = vec![false; self.len()];
        // Per group: whether every member is skipped.
        let mut group_skipped = vec![true; self.groups.len()];
        let mut walk = Walk::new(self);
        while let Some(n) = walk.next(self) {
            let entry = &self.entries[self.kind_of(n)];
            skip[n] = done[n]
                && entry.groups.iter().all(|&g| group_skipped[g as usize])
                && self.after.of(n).iter().all(|&m| skip[m as usize]);
            if !skip[n] {
                for g in self.groups_of(n) {
                    group_skipped[g] = false;
                }
            }
        }
        skip
    }

    /// Some cycle, as a path of node indices, if the graph has one.
    pub(super) fn find_cycle(&self) -> Option<Vec<usize>> {
        let mut done = vec![false; self.len()];
        let mut walk = Walk::new(self);
        let mut count = 0;
        while let Some(n) = walk.next(self) {
            done[n] = true;
            count += 1;
        }
        if count == self.len() {
            return None;
        }
        // Every node left over waits, directly or not, on a cycle: walk
        // back along unfinished dependencies until a node repeats.
        let start = (0..self.len()).find(|&n| !done[n])?;
        let mut path = vec![start];
        let mut seen: HashMap<usize, usize> = HashMap::from([(start, 0)]);
        let mut at = start;
        loop {
            let next = self.dependencies(at).find(|&d| !done[d])?;
            if let Some(&position) = seen.get(&next) {
                let mut cycle = path.split_off(position);
                // Print it in the direction work flows: dependency first.
                cycle.reverse();
                return Some(cycle);
            }
            seen.insert(next, path.len());
            path.push(next);
            at = next;
        }
    }
}

/// Sorts nothing; moves the distinct values of sorted `list` to its front
/// and says how many there are.
pub(super) fn dedup_sorted(list: &mut [u32]) -> usize {
    if list.is_empty() {
        return 0;
    }
    let mut kept = 1;
    for k in 1..list.len() {
        if list[k] != list[kept - 1] {
            list[kept] = list[k];
            kept += 1;
        }
    }
    kept
}

/// Kahn's algorithm over a graph's groups and per-activity edges: nodes
/// come out once all they run after has come out. A group counts as one
/// dependency of each of its consumers, released when its last member
/// comes out, so a fan-in costs its members plus its consumers.
struct Walk {
    /// Per node, dependencies not yet out.
    waiting: Vec<u32>,
    /// Per group, members not yet out.
    remaining: Vec<u32>,
    ready: Vec<usize>,
}

impl Walk {
    fn new(graph: &Graph) -> Walk {
        let mut waiting = Vec::with_capacity(graph.len());
        for (k, entry) in graph.entries.iter().enumerate() {
            for n in graph.starts[k]..graph.starts[k + 1] {
                waiting.push((entry.groups.len() + graph.after.of(n as usize).len()) as u32);
            }
        }
        let ready = (0..graph.len())
            .rev()
            .filter(|&n| waiting[n] == 0)
            .collect();
        Walk {
            waiting,
            remaining: graph.groups.iter().map(|g| g.size).collect(),
            ready,
        }
    }

    fn next(&mut self, graph: &Graph) -> Option<usize> {
        let n = self.ready.pop()?;
        for g in graph.groups_of(n) {
            self.remaining[g] -= 1;
            if self.remaining[g] == 0 {
                for &e in &graph.groups[g].consumers {
                    let e = e as usize;
                    for m in graph.starts[e]..graph.starts[e + 1] {
                        self.release(m as usize);
                    }
                }
            }
        }
        for &m in graph.dependants.of(n) {
            self.release(m as usize);
        }
        Some(n)
    }

    fn release(&mut self, m: usize) {
        self.waiting[m] -= 1;
        if self.waiting[m] == 0 {
            self.ready.push(m);
        }
    }
}
