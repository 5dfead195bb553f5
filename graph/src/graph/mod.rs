//! From a graph file to a checked graph of shell activities.
//!
//! A graph is held compactly, so that a sweep of a million activities
//! costs tens of megabytes and not gigabytes: each file entry keeps its
//! templates, parsed once, and its sweep values once; an activity is an
//! entry and an item number, and everything but its id is rendered when
//! asked for ([`Graph::spec`]). Ids are rendered once into one string
//! arena, indexed by a hash table of node numbers.
//!
//! Dependencies are kept per template where the file allows it: an
//! `after` item without a placeholder (`prepare`, `detect-*`) is resolved
//! once per entry into a shared *group* of nodes, which every activity of
//! the entry runs after; a fan-in of 5,000 × 5,000 is one group of 5,000
//! and 5,000 consumers, not 25,000,000 edges. Items with placeholders
//! (`b-{n}` after `a-{n}`) and files (`inputs` another activity writes)
//! give per-activity edges, in one compact list.
//!
//! The code is split by concern: `parse` reads and checks entries and
//! expands sweeps, `after` resolves `after` items, `files` turns
//! files read and written into dependencies, `deps` holds the
//! dependency structure and walks it (order, resume, cycles), `fields`
//! checks single fields (ids, contexts, durations), `errors`
//! collects and places what is wrong with a file, and `size` finds
//! activities too large to travel to another node.

mod after;
mod deps;
mod errors;
mod fields;
mod files;
mod parse;
mod size;

use std::hash::BuildHasher;
use std::path::{Path, PathBuf};
use std::time::Duration;

use constellation::ContextList;
use executors::shell::{RetryPolicy, ShellSpec};
use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;
use sha2::{Digest, Sha256};

use crate::template::Template;
use deps::{Csr, Group};
pub use errors::{GraphError, GraphErrors};
pub(crate) use fields::glob_match;
pub use fields::{check_printable, parse_context, parse_duration, MAX_ID_BYTES};
pub use size::TRAVEL_SLACK;

/// Instances one entry may expand into; a sweep beyond this is a typo more
/// often than a plan.
pub const MAX_INSTANCES: usize = 1_000_000;

/// How a graph file is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// TOML; errors carry line and column.
    Toml,
    /// JSON with the same fields; errors name the entry and field.
    Json,
}

impl Format {
    /// JSON for `.json` files, TOML otherwise.
    pub fn of(path: &Path) -> Format {
        match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("json") => Format::Json,
            _ => Format::Toml,
        }
    }
}

/// What an entry runs, before its values are put in.
#[derive(Debug, Clone)]
enum ProgramTemplate {
    /// An executable and no shell.
    Command(Template),
    /// A script for `/bin/sh`; values go in as shell words.
    Script(Template),
}

/// One sweep variable and its values, held once for all instances.
#[derive(Debug, Clone)]
struct Variable {
    name: String,
    values: Vec<String>,
}

/// One file entry, checked: its templates parsed once and its sweep values.
#[derive(Debug, Clone)]
struct Entry {
    id: Template,
    program: ProgramTemplate,
    args: Vec<Template>,
    env: Vec<(String, Template)>,
    cwd: Option<Template>,
    timeout: Option<Duration>,
    retries: u32,
    inputs: Vec<Template>,
    outputs: Vec<Template>,
    /// `after` as written, for [`Graph::spec_hash`].
    after_texts: Vec<String>,
    /// `after` parsed; those with placeholders give per-activity edges.
    after: Vec<Template>,
    /// In name order; the last changes fastest from one item to the next.
    variables: Vec<Variable>,
    /// Instances: the product of the variables' value counts (1 without `for`).
    count: u32,
    /// The groups every activity of the entry runs after.
    groups: Vec<u32>,
}

impl Entry {
    /// Item `item`'s value of each variable, by position in `variables`.
    fn digits(&self, item: u32) -> Vec<u32> {
        let mut digits = vec![0; self.variables.len()];
        let mut rest = item as usize;
        for (k, variable) in self.variables.iter().enumerate().rev() {
            let len = variable.values.len();
            digits[k] = (rest % len) as u32;
            rest /= len;
        }
        digits
    }

    /// The value of `name` for an item with `digits`; empty for a name the
    /// entry does not define (templates are checked before they render).
    fn value<'e>(&'e self, digits: &[u32], name: &str) -> &'e str {
        (self.variables.iter().zip(digits))
            .find(|(variable, _)| variable.name == name)
            .map_or("", |(variable, &d)| variable.values[d as usize].as_str())
    }

    fn has_placeholder_after(&self) -> bool {
        self.after.iter().any(Template::has_placeholders)
    }
}

/// A checked graph: ids unique, every dependency known, no cycle.
#[derive(Debug, Clone, Default)]
pub struct Graph {
    entries: Vec<Entry>,
    /// Each entry's id as written: what reports group activities by.
    kinds: Vec<String>,
    /// Each entry's first node, and the number of nodes at the end.
    starts: Vec<u32>,
    /// Every id, rendered, one after the other; node `n`'s ends at `ends[n]`.
    ids: String,
    ends: Vec<u32>,
    /// Node numbers by the hash of their ids.
    index: HashTable<u32>,
    /// The distinct contexts of the activities.
    pub(crate) contexts: Vec<ContextList>,
    /// Each node's context, as an index into `contexts`.
    pub(crate) context_of: Vec<u32>,
    groups: Vec<Group>,
    /// (node, group) for each member of each group, by node.
    memberships: Vec<(u32, u32)>,
    /// Per-activity dependencies (placeholders in `after`, files); empty
    /// when the file has none.
    after: Csr,
    /// `after` reversed: per node, the nodes with it in their `after`.
    dependants: Csr,
    /// Per file entry, where to point a user at it: see [`Graph::place`].
    places: Vec<String>,
    /// The graph file and each sweep file, as read.
    sources: Vec<(String, String)>,
}

fn hash_id(id: &str) -> u64 {
    FxBuildHasher.hash_one(id)
}

impl Graph {
    /// How many activities the graph has.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether the graph has no activities (a checked graph always has some).
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Node `n`'s id.
    ///
    /// # Panics
    /// If `n` is not a node of the graph.
    pub fn id(&self, n: usize) -> &str {
        let start = if n == 0 { 0 } else { self.ends[n - 1] as usize };
        &self.ids[start..self.ends[n] as usize]
    }

    /// The node with this id.
    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.index
            .find(hash_id(id), |&n| self.id(n as usize) == id)
            .map(|&n| n as usize)
    }

    /// Each file entry's id as written (`detect-{pair}`), in file order:
    /// what reports group activities by.
    pub fn kinds(&self) -> &[String] {
        &self.kinds
    }

    /// Node `n`'s file entry, as an index into [`kinds`](Self::kinds).
    pub fn kind_of(&self, n: usize) -> usize {
        self.starts.partition_point(|&s| s as usize <= n) - 1
    }

    /// Node `n`'s entry's id as written.
    pub fn kind(&self, n: usize) -> &str {
        &self.kinds[self.kind_of(n)]
    }

    /// The distinct contexts of the activities (after [`retarget`](Self::retarget)).
    pub fn contexts(&self) -> &[ContextList] {
        &self.contexts
    }

    /// Node `n`'s context, as an index into [`contexts`](Self::contexts).
    pub fn context_of(&self, n: usize) -> usize {
        self.context_of[n] as usize
    }

    /// Node `n`'s context.
    pub fn context(&self, n: usize) -> &ContextList {
        &self.contexts[self.context_of[n] as usize]
    }

    /// The graph file and each sweep `file`, (name, text) as read: what a
    /// journal stores once instead of the expanded graph.
    pub fn sources(&self) -> &[(String, String)] {
        &self.sources
    }

    /// Node `n`'s entry and its values.
    fn instance(&self, n: usize) -> (&Entry, Vec<u32>) {
        let k = self.kind_of(n);
        let entry = &self.entries[k];
        (entry, entry.digits(n as u32 - self.starts[k]))
    }

    /// Node `n`'s command, rendered now; its output goes where
    /// [`Capture`](executors::shell::Capture)'s default says until the
    /// runner sets it.
    pub fn spec(&self, n: usize) -> ShellSpec {
        let (entry, digits) = self.instance(n);
        let value = |name: &str| entry.value(&digits, name);
        let mut spec = match &entry.program {
            ProgramTemplate::Command(t) => ShellSpec::command(t.render_by(value)),
            ProgramTemplate::Script(t) => ShellSpec::script(t.render_for_shell_by(value)),
        }
        .name(self.id(n));
        for arg in &entry.args {
            spec = spec.arg(arg.render_by(value));
        }
        for (name, t) in &entry.env {
            spec = spec.env(name.clone(), t.render_by(value));
        }
        if let Some(cwd) = &entry.cwd {
            spec = spec.cwd(cwd.render_by(value));
        }
        spec.context = self.context(n).clone();
        if let Some(timeout) = entry.timeout {
            spec = spec.timeout(timeout);
        }
        spec.retry(RetryPolicy::attempts(entry.retries.saturating_add(1)))
    }

    /// Node `n`'s working directory, as written.
    fn cwd(&self, n: usize) -> Option<PathBuf> {
        let (entry, digits) = self.instance(n);
        (entry.cwd.as_ref()).map(|t| PathBuf::from(t.render_by(|name| entry.value(&digits, name))))
    }

    /// Files node `n` reads, as written.
    pub fn inputs(&self, n: usize) -> Vec<PathBuf> {
        let (entry, digits) = self.instance(n);
        (entry.inputs.iter())
            .map(|t| PathBuf::from(t.render_by(|name| entry.value(&digits, name))))
            .collect()
    }

    /// Files node `n` writes, as written.
    pub fn outputs(&self, n: usize) -> Vec<PathBuf> {
        let (entry, digits) = self.instance(n);
        (entry.outputs.iter())
            .map(|t| PathBuf::from(t.render_by(|name| entry.value(&digits, name))))
            .collect()
    }

    /// A hash of what decides what node `n` does: command or script,
    /// arguments, environment, working directory, context (as retargeted),
    /// retries, timeout, inputs, outputs and its `after` as written. A
    /// resume skips a node done before only if this is unchanged.
    ///
    /// Stable across processes, builds and versions: the first 8 bytes of
    /// a SHA-256 of the fields written out in a fixed layout, not of any
    /// in-memory or serde form.
    pub fn spec_hash(&self, n: usize) -> u64 {
        let (entry, digits) = self.instance(n);
        let value = |name: &str| entry.value(&digits, name);
        let mut hash = Sha256::new();
        let mut field = |tag: &str, text: &str| {
            hash.update(tag.as_bytes());
            hash.update((text.len() as u64).to_le_bytes());
            hash.update(text.as_bytes());
        };
        field("spec", "constellation-graph-spec-1");
        match &entry.program {
            ProgramTemplate::Command(t) => field("command", &t.render_by(value)),
            ProgramTemplate::Script(t) => field("script", &t.render_for_shell_by(value)),
        }
        for arg in &entry.args {
            field("arg", &arg.render_by(value));
        }
        for (name, t) in &entry.env {
            field("env", name);
            field("=", &t.render_by(value));
        }
        if let Some(cwd) = &entry.cwd {
            field("cwd", &cwd.render_by(value));
        }
        field("context", &self.context(n).to_string());
        field("retries", &entry.retries.to_string());
        if let Some(timeout) = entry.timeout {
            field("timeout", &timeout.as_nanos().to_string());
        }
        for input in &entry.inputs {
            field("input", &input.render_by(value));
        }
        for output in &entry.outputs {
            field("output", &output.render_by(value));
        }
        for after in &entry.after_texts {
            field("after", after);
        }
        let digest = hash.finalize();
        u64::from_be_bytes(digest[..8].try_into().expect("a SHA-256 has 32 bytes"))
    }

    /// Where node `n` is written, for messages about it after the file
    /// was checked (an activity no executor offers to run):
    /// `file:line:column` of its `context` (of its `id` if it has none)
    /// in TOML, the file, entry number and id in JSON.
    pub fn place(&self, n: usize) -> &str {
        self.places.get(self.kind_of(n)).map_or("", String::as_str)
    }
}
