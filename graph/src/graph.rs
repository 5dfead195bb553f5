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

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::hash::BuildHasher;
use std::ops::Range;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use constellation::{Context, ContextList};
use executors::shell::{RetryPolicy, ShellSpec};
use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;
use sha2::{Digest, Sha256};

use crate::file::{toml_spans, EntrySpans, RawContext, RawDuration, RawEntry, RawGraph, RawValues};
use crate::suggest::Suggestions;
use crate::template::Template;

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

/// Nodes that many activities run after, resolved once: an `after` item
/// without placeholders. A consumer waits for a group as for one
/// dependency, released when its last member succeeds.
#[derive(Debug, Clone, Default)]
struct Group {
    /// The members, as runs of consecutive node numbers.
    members: Vec<(u32, u32)>,
    /// How many members.
    size: u32,
    /// The entries all of whose activities run after the group.
    consumers: Vec<u32>,
}

impl Group {
    fn nodes(&self) -> impl Iterator<Item = usize> + '_ {
        (self.members.iter()).flat_map(|&(start, end)| (start as usize)..(end as usize))
    }

    fn push(&mut self, node: u32) {
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
struct Csr {
    offsets: Vec<u32>,
    targets: Vec<u32>,
}

impl Csr {
    fn new(nodes: usize) -> Csr {
        let mut offsets = Vec::with_capacity(nodes + 1);
        offsets.push(0);
        Csr {
            offsets,
            targets: Vec::new(),
        }
    }

    /// Ends the list of the next node.
    fn close(&mut self) {
        self.offsets.push(self.targets.len() as u32);
    }

    fn of(&self, n: usize) -> &[u32] {
        match (self.offsets.get(n), self.offsets.get(n + 1)) {
            (Some(&start), Some(&end)) => &self.targets[start as usize..end as usize],
            _ => &[],
        }
    }

    /// Each target's list of the nodes that have it: the edges reversed.
    fn reversed(&self, nodes: usize) -> Csr {
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
    /// Reads and checks the graph file at `path`; relative `file` sweeps
    /// are read next to it.
    pub fn load(path: &Path) -> Result<Graph, GraphErrors> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            GraphErrors(vec![GraphError {
                file: path.display().to_string(),
                line_column: None,
                entry: None,
                message: format!("cannot read the graph file: {e}"),
            }])
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Graph::parse(&text, Format::of(path), &path.display().to_string(), base)
    }

    /// Checks the graph in `text`. `file` names it in messages; `base` is
    /// where relative sweep files are.
    pub fn parse(
        text: &str,
        format: Format,
        file: &str,
        base: &Path,
    ) -> Result<Graph, GraphErrors> {
        let mut errors = Errors {
            file: file.to_string(),
            text,
            line_starts: std::iter::once(0)
                .chain(text.match_indices('\n').map(|(at, _)| at + 1))
                .collect(),
            spans: Vec::new(),
            list: Vec::new(),
        };
        let raw: RawGraph = match format {
            Format::Toml => match toml::from_str(text) {
                Ok(raw) => raw,
                Err(e) => {
                    errors.at_span(e.span(), None, e.message().to_string());
                    return Err(errors.finish());
                }
            },
            Format::Json => match serde_json::from_str(text) {
                Ok(raw) => raw,
                Err(e) => {
                    errors.list.push(GraphError {
                        file: file.to_string(),
                        line_column: Some((e.line(), e.column())),
                        entry: None,
                        message: e.to_string(),
                    });
                    return Err(errors.finish());
                }
            },
        };
        if format == Format::Toml {
            errors.spans = toml_spans(text);
        }
        if raw.activities.is_empty() {
            errors.at_span(None, None, "the graph has no `[[activity]]` entries".into());
            return Err(errors.finish());
        }

        let mut graph = Graph::default();
        graph.sources.push((file.to_string(), text.to_string()));
        let mut context_at: HashMap<ContextList, u32> = HashMap::new();
        for (k, raw_entry) in raw.activities.iter().enumerate() {
            let Some((entry, context)) =
                compile(raw_entry, k, base, &mut graph.sources, &mut errors)
            else {
                continue;
            };
            if !errors.list.is_empty() {
                // Ids are only checked while the file is good so far: the
                // node numbers of an entry that failed would be off.
                continue;
            }
            let context = *context_at.entry(context.clone()).or_insert_with(|| {
                graph.contexts.push(context);
                (graph.contexts.len() - 1) as u32
            });
            graph.starts.push(graph.ends.len() as u32);
            graph.add_ids(&entry, k, raw_entry, &mut errors);
            let added = graph.ends.len() - graph.context_of.len();
            graph.context_of.extend(std::iter::repeat_n(context, added));
            graph.kinds.push(raw_entry.id.clone());
            graph.entries.push(entry);
        }
        if !errors.list.is_empty() {
            return Err(errors.finish());
        }
        graph.starts.push(graph.ends.len() as u32);

        graph.resolve_after(&raw, &mut errors);
        if !errors.list.is_empty() {
            return Err(errors.finish());
        }
        let read_from = graph.add_file_dependencies(&raw, &mut errors);
        if !errors.list.is_empty() {
            return Err(errors.finish());
        }
        graph.dependants = graph.after.reversed(graph.len());
        if let Some(cycle) = graph.find_cycle() {
            let names: Vec<&str> = cycle.iter().map(|&n| graph.id(n)).collect();
            // Each link, at the field that makes it: `after`, or `inputs`
            // for a file another activity writes.
            let link = |k: usize| {
                let previous = (k + cycle.len() - 1) % cycle.len();
                match read_from.get(&(cycle[k] as u32, cycle[previous] as u32)) {
                    Some(file) => (
                        "inputs",
                        format!(
                            " (it reads `{}`, which `{}` writes)",
                            file.display(),
                            names[previous]
                        ),
                    ),
                    None => ("after", String::new()),
                }
            };
            let shown = cycle.len().min(10);
            let places: Vec<String> = (0..shown)
                .map(|k| {
                    let entry = graph.kind_of(cycle[k]);
                    let (field, why) = link(k);
                    format!(
                        "`{}` at {}{why}",
                        names[k],
                        errors.place(entry, field, &raw.activities[entry].id)
                    )
                })
                .collect();
            let first = graph.kind_of(cycle[0]);
            let message = format!(
                "the dependencies form a cycle: {} -> {}; {}{}",
                names.join(" -> "),
                names[0],
                places.join(", "),
                if cycle.len() > shown { ", ..." } else { "" }
            );
            errors.at_field(first, &raw.activities[first], link(0).0, message);
            return Err(errors.finish());
        }
        graph.places = errors.entry_places(&raw);
        Ok(graph)
    }

    /// Renders entry `k`'s ids into the arena, checking each and refusing
    /// one that an earlier activity has.
    fn add_ids(&mut self, entry: &Entry, k: usize, raw: &RawEntry, errors: &mut Errors) {
        self.ends.reserve(entry.count as usize);
        let mut digits = vec![0u32; entry.variables.len()];
        for item in 0..entry.count {
            if item > 0 {
                // The next item: the last variable changes fastest.
                for (d, variable) in digits.iter_mut().zip(&entry.variables).rev() {
                    *d += 1;
                    if (*d as usize) < variable.values.len() {
                        break;
                    }
                    *d = 0;
                }
            }
            let start = self.ids.len();
            let id = entry.id.render_by(|name| entry.value(&digits, name));
            if let Err(message) = check_id(&id) {
                errors.at_field(k, raw, "id", message);
                return;
            }
            if let Some(first) = self.index_of(&id) {
                let earlier = self.kind_of(first);
                errors.at_field(
                    k,
                    raw,
                    "id",
                    format!(
                        "duplicate id `{id}`: entry {} already has it{}",
                        earlier + 1,
                        errors.line_of_entry(earlier)
                    ),
                );
                return;
            }
            self.ids.push_str(&id);
            let n = self.ends.len() as u32;
            self.ends.push(self.ids.len() as u32);
            let (ids, ends) = (&self.ids, &self.ends);
            self.index.insert_unique(hash_id(&id), n, |&m| {
                let m = m as usize;
                let start = if m == 0 { 0 } else { ends[m - 1] as usize };
                hash_id(&ids[start..ends[m] as usize])
            });
            debug_assert_eq!(&self.ids[start..], id);
        }
    }

    /// Resolves every `after` item: those without placeholders once per
    /// entry into groups, the others per activity. Names that match
    /// nothing are errors, one per entry and item, with a suggestion.
    fn resolve_after(&mut self, raw: &RawGraph, errors: &mut Errors) {
        let mut unknown: Vec<UnknownAfter> = Vec::new();
        // Groups by text (and the node a lone activity's glob leaves out).
        let mut group_at: HashMap<(String, Option<u32>), u32> = HashMap::new();
        for e in 0..self.entries.len() {
            let (start, end) = (self.starts[e], self.starts[e + 1]);
            let mut groups = Vec::new();
            for (item, template) in self.entries[e].after.iter().enumerate() {
                if template.has_placeholders() {
                    continue;
                }
                let name = template.render_by(|_| "");
                // A glob leaves out the activity itself; with many
                // activities in the entry the group keeps them, and the
                // cycle they make is reported.
                let excluded = (name.contains('*') && end - start == 1).then_some(start);
                let key = (name, excluded);
                let group = match group_at.get(&key) {
                    Some(&g) => Some(g),
                    None => {
                        let group = self.resolve_group(&key.0, excluded);
                        (group.size > 0).then(|| {
                            self.groups.push(group);
                            let g = (self.groups.len() - 1) as u32;
                            group_at.insert(key.clone(), g);
                            g
                        })
                    }
                };
                match group {
                    Some(g) => {
                        self.groups[g as usize].consumers.push(e as u32);
                        groups.push(g);
                    }
                    None => unknown.push(UnknownAfter {
                        node: start as usize,
                        item,
                        dependency: key.0.clone(),
                        more: (end - start - 1) as usize,
                        last: (end - start > 1).then(|| ((end - 1) as usize, key.0)),
                    }),
                }
            }
            groups.sort_unstable();
            groups.dedup();
            self.entries[e].groups = groups;
        }
        let mut memberships: Vec<(u32, u32)> = (self.groups.iter().enumerate())
            .flat_map(|(g, group)| group.nodes().map(move |n| (n as u32, g as u32)))
            .collect();
        memberships.sort_unstable();
        self.memberships = memberships;

        if self.entries.iter().any(Entry::has_placeholder_after) {
            self.resolve_per_activity(&mut unknown);
        }
        if unknown.is_empty() {
            return;
        }
        unknown.sort_by_key(|u| (u.node, u.item));
        let suggestions = Suggestions::new((0..self.len()).map(|n| self.id(n)), self.len(), |id| {
            self.index_of(id).map(|n| self.id(n))
        });
        for u in unknown {
            let entry_index = self.kind_of(u.node);
            let hint = (suggestions.suggest(&u.dependency))
                .map(|c| format!(" (did you mean `{c}`?)"))
                .unwrap_or_default();
            let what = if u.dependency.contains('*') {
                "matches no activity"
            } else {
                "is not an activity of this graph"
            };
            let others = match (&u.last, u.more) {
                (Some((m, last)), 1) => format!("; so does `{}` (after `{last}`)", self.id(*m)),
                (Some((m, last)), more) => format!(
                    "; so do {more} more of this entry's activities, up to `{}` (after `{last}`)",
                    self.id(*m)
                ),
                (None, _) => String::new(),
            };
            let message = format!(
                "`{}` runs after `{}`, which {what}{hint}{others}",
                self.id(u.node),
                u.dependency
            );
            let entry = &raw.activities[entry_index];
            errors.at_after_item(entry_index, entry, u.item, message);
        }
    }

    /// The nodes `name` (an id, or a glob) names, leaving out `excluded`:
    /// one pass over the ids.
    fn resolve_group(&self, name: &str, excluded: Option<u32>) -> Group {
        let mut group = Group::default();
        if name.contains('*') {
            for n in 0..self.len() as u32 {
                if Some(n) != excluded && glob_match(name, self.id(n as usize)) {
                    group.push(n);
                }
            }
        } else if let Some(n) = self.index_of(name) {
            group.push(n as u32);
        }
        group
    }

    /// The `after` items with placeholders, rendered and resolved for each
    /// activity of their entries, into the per-activity lists.
    fn resolve_per_activity(&mut self, unknown: &mut Vec<UnknownAfter>) {
        // Globs with placeholders look among the ids that share their
        // text up to the first `*`, found in the ids sorted.
        let globs = (self.entries.iter()).any(|e| {
            (e.after.iter()).any(|t| t.has_placeholders() && t.render_by(|_| "").contains('*'))
        });
        let sorted: Vec<u32> = if globs {
            let mut sorted: Vec<u32> = (0..self.len() as u32).collect();
            sorted.sort_unstable_by(|&a, &b| self.id(a as usize).cmp(self.id(b as usize)));
            sorted
        } else {
            Vec::new()
        };
        let mut after = Csr::new(self.len());
        let mut unknown_at: HashMap<(usize, usize), usize> = HashMap::new();
        let mut found: Vec<u32> = Vec::new();
        for e in 0..self.entries.len() {
            let entry = &self.entries[e];
            let (start, end) = (self.starts[e], self.starts[e + 1]);
            let templated: Vec<(usize, &Template)> = (entry.after.iter().enumerate())
                .filter(|(_, t)| t.has_placeholders())
                .collect();
            for n in start..end {
                if templated.is_empty() {
                    after.close();
                    continue;
                }
                let digits = entry.digits(n - start);
                let base = after.targets.len();
                for &(item, template) in &templated {
                    let dependency = template.render_by(|name| entry.value(&digits, name));
                    found.clear();
                    if dependency.contains('*') {
                        let prefix = &dependency[..dependency.find('*').unwrap_or(0)];
                        let from = sorted.partition_point(|&m| self.id(m as usize) < prefix);
                        for &m in &sorted[from..] {
                            let id = self.id(m as usize);
                            if !id.starts_with(prefix) {
                                break;
                            }
                            if m != n && glob_match(&dependency, id) {
                                found.push(m);
                            }
                        }
                    } else if let Some(m) = self.index_of(&dependency) {
                        found.push(m as u32);
                    }
                    if found.is_empty() {
                        match unknown_at.entry((e, item)) {
                            std::collections::hash_map::Entry::Occupied(at) => {
                                let first = &mut unknown[*at.get()];
                                first.more += 1;
                                first.last = Some((n as usize, dependency));
                            }
                            std::collections::hash_map::Entry::Vacant(at) => {
                                at.insert(unknown.len());
                                unknown.push(UnknownAfter {
                                    node: n as usize,
                                    item,
                                    dependency,
                                    more: 0,
                                    last: None,
                                });
                            }
                        }
                    }
                    after.targets.extend_from_slice(&found);
                }
                let list = &mut after.targets[base..];
                list.sort_unstable();
                let kept = dedup_sorted(list);
                after.targets.truncate(base + kept);
                after.close();
            }
        }
        self.after = after;
    }

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
    fn find_cycle(&self) -> Option<Vec<usize>> {
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

    /// Where node `n` is written, for messages about it after the file
    /// was checked (an activity no executor offers to run):
    /// `file:line:column` of its `context` (of its `id` if it has none)
    /// in TOML, the file, entry number and id in JSON.
    pub fn place(&self, n: usize) -> &str {
        self.places.get(self.kind_of(n)).map_or("", String::as_str)
    }

    /// Makes every activity that reads a file run after the one that
    /// writes it, and refuses a file written by two activities: which
    /// version a reader got would depend on timing. Paths are compared as
    /// the activities resolve them: relative to their `cwd`, with `.` and
    /// `..` taken out (symbolic links are not followed: nothing exists yet).
    /// Costs nothing when no entry has `outputs`.
    ///
    /// Returns the edges it added, (reader, writer), with the file, for
    /// naming a cycle they close.
    fn add_file_dependencies(
        &mut self,
        raw: &RawGraph,
        errors: &mut Errors,
    ) -> HashMap<(u32, u32), PathBuf> {
        let mut read_from = HashMap::new();
        if self.entries.iter().all(|e| e.outputs.is_empty()) {
            return read_from;
        }
        let mut writer: HashMap<PathBuf, u32> = HashMap::new();
        // A sweep writing one file from every instance would repeat the
        // same error thousands of times: one per pair of entries.
        let mut reported: HashSet<(usize, usize)> = HashSet::new();
        for (k, entry) in self.entries.iter().enumerate() {
            if entry.outputs.is_empty() {
                continue;
            }
            for n in self.starts[k]..self.starts[k + 1] {
                let n = n as usize;
                let cwd = self.cwd(n);
                for output in self.outputs(n) {
                    let file = resolved_path(cwd.as_deref(), &output);
                    match writer.get(&file) {
                        Some(&first) if first as usize != n => {
                            let first = first as usize;
                            let first_entry = self.kind_of(first);
                            if reported.insert((first_entry, k)) {
                                let message = format!(
                                    "`{}` writes `{}`, and so does `{}` at {}: give each file one producer",
                                    self.id(n),
                                    output.display(),
                                    self.id(first),
                                    errors.place(
                                        first_entry,
                                        "outputs",
                                        &raw.activities[first_entry].id
                                    )
                                );
                                errors.at_field(k, &raw.activities[k], "outputs", message);
                            }
                        }
                        Some(_) => {}
                        None => {
                            writer.insert(file, n as u32);
                        }
                    }
                }
            }
        }
        if writer.is_empty() || !errors.list.is_empty() {
            return read_from;
        }
        let mut after = Csr::new(self.len());
        for (k, entry) in self.entries.iter().enumerate() {
            for n in self.starts[k]..self.starts[k + 1] {
                let base = after.targets.len();
                let before = self.after.of(n as usize);
                after.targets.extend_from_slice(before);
                if !entry.inputs.is_empty() {
                    let cwd = self.cwd(n as usize);
                    for input in self.inputs(n as usize) {
                        let file = resolved_path(cwd.as_deref(), &input);
                        if let Some(&from) = writer.get(&file) {
                            // Reading a file it writes itself is updating
                            // it in place.
                            if from != n && before.binary_search(&from).is_err() {
                                after.targets.push(from);
                                read_from.entry((n, from)).or_insert(input.clone());
                            }
                        }
                    }
                }
                let list = &mut after.targets[base..];
                if list.len() > before.len() {
                    list.sort_unstable();
                    let kept = dedup_sorted(list);
                    after.targets.truncate(base + kept);
                }
                after.close();
            }
        }
        self.after = after;
        read_from
    }
}

/// Sorts nothing; moves the distinct values of sorted `list` to its front
/// and says how many there are.
fn dedup_sorted(list: &mut [u32]) -> usize {
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

/// `path` as an activity with working directory `cwd` opens it, written
/// plainly: `work/./a/../x` and `work/x` are one file. Relative paths stay
/// relative to the directory the run starts in.
fn resolved_path(cwd: Option<&Path>, path: &Path) -> PathBuf {
    let joined = match cwd {
        Some(dir) if path.is_relative() => dir.join(path),
        _ => path.to_path_buf(),
    };
    let mut plain = PathBuf::new();
    for component in joined.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => match plain.components().next_back() {
                Some(Component::Normal(_)) => {
                    plain.pop();
                }
                // `/..` is `/`.
                Some(Component::RootDir | Component::Prefix(_)) => {}
                _ => plain.push(".."),
            },
            other => plain.push(other),
        }
    }
    plain
}

/// Checks entry `k`'s fields once for all its activities: sweep values,
/// templates, context and timeout. Returns the entry and its context.
fn compile(
    raw: &RawEntry,
    k: usize,
    base: &Path,
    sources: &mut Vec<(String, String)>,
    errors: &mut Errors,
) -> Option<(Entry, ContextList)> {
    let mut variables: Vec<Variable> = Vec::new();
    for (name, values) in &raw.sweep {
        match sweep_values(values, base, sources) {
            Ok(list) if list.is_empty() => {
                errors.at_field(
                    k,
                    raw,
                    "for",
                    format!("sweep variable `{name}` has no values"),
                );
                return None;
            }
            Ok(values) => variables.push(Variable {
                name: name.clone(),
                values,
            }),
            Err(message) => {
                errors.at_field(k, raw, "for", format!("sweep variable `{name}`: {message}"));
                return None;
            }
        }
    }
    let total = variables
        .iter()
        .try_fold(1usize, |acc, v| acc.checked_mul(v.values.len()))
        .filter(|&t| t <= MAX_INSTANCES);
    let Some(total) = total else {
        errors.at_field(
            k,
            raw,
            "for",
            format!("the sweep expands to more than {MAX_INSTANCES} activities"),
        );
        return None;
    };
    let known: Vec<&str> = variables.iter().map(|v| v.name.as_str()).collect();
    let mut after = Vec::new();
    for (item, text) in raw.after.iter().enumerate() {
        match Template::checked(text, &known) {
            Ok(t) => after.push(t),
            Err(e) => {
                errors.at_after_item(k, raw, item, format!("in `after`: {e}"));
                return None;
            }
        }
    }
    // Parses one field's text, or records why it cannot be.
    let template = |field: &str, text: &str, errors: &mut Errors| -> Option<Template> {
        Template::checked(text, &known)
            .map_err(|e| errors.at_field(k, raw, field, format!("in `{field}`: {e}")))
            .ok()
    };
    let id_template = template("id", &raw.id, errors)?;
    // The first item's values, for the messages that name an id.
    let first = |name: &str| {
        (variables.iter())
            .find(|v| v.name == name)
            .map_or("", |v| v.values[0].as_str())
    };
    let id = id_template.render_by(first);
    if let Err(message) = check_id(&id) {
        errors.at_field(k, raw, "id", message);
        return None;
    }
    let program = match (&raw.command, &raw.script) {
        (Some(command), None) => ProgramTemplate::Command(template("command", command, errors)?),
        // The shell reads the script: values go in quoted, as one word each.
        (None, Some(text)) => match Template::checked_script(text, &known) {
            Ok(t) => ProgramTemplate::Script(t),
            Err(e) => {
                errors.at_field(k, raw, "script", format!("in `script`: {e}"));
                return None;
            }
        },
        (Some(_), Some(_)) => {
            errors.at_field(
                k,
                raw,
                "script",
                format!("`{id}` has both `command` and `script`; give one"),
            );
            return None;
        }
        (None, None) => {
            errors.at_field(
                k,
                raw,
                "id",
                format!("`{id}` has neither `command` nor `script`"),
            );
            return None;
        }
    };
    let args = (raw.args.iter())
        .map(|arg| template("args", arg, errors))
        .collect::<Option<Vec<_>>>()?;
    let env = (raw.env.iter())
        .map(|(name, value)| Some((name.clone(), template("env", value, errors)?)))
        .collect::<Option<Vec<_>>>()?;
    let cwd = match &raw.cwd {
        Some(cwd) => Some(template("cwd", cwd, errors)?),
        None => None,
    };
    let context = match &raw.context {
        Some(context) => errors.or_record(k, raw, "context", parse_context(context))?,
        None => ContextList::anywhere(),
    };
    let timeout = match &raw.timeout {
        Some(timeout) => Some(errors.or_record(k, raw, "timeout", parse_duration(timeout))?),
        None => None,
    };
    let inputs = (raw.inputs.iter())
        .map(|p| template("inputs", p, errors))
        .collect::<Option<Vec<_>>>()?;
    let outputs = (raw.outputs.iter())
        .map(|p| template("outputs", p, errors))
        .collect::<Option<Vec<_>>>()?;
    let entry = Entry {
        id: id_template,
        program,
        args,
        env,
        cwd,
        timeout,
        retries: raw.retries,
        inputs,
        outputs,
        after_texts: raw.after.clone(),
        after,
        count: total as u32,
        variables,
        groups: Vec::new(),
    };
    Some((entry, context))
}

/// A sweep variable's values; a `file` it reads is kept in `sources`.
fn sweep_values(
    values: &RawValues,
    base: &Path,
    sources: &mut Vec<(String, String)>,
) -> Result<Vec<String>, String> {
    match values {
        RawValues::Range(text) => {
            let bad = || format!("`{text}` is not a range like `1..=1052` or `0..8`");
            let (lo, hi, inclusive) = if let Some((lo, hi)) = text.split_once("..=") {
                (lo, hi, true)
            } else if let Some((lo, hi)) = text.split_once("..") {
                (lo, hi, false)
            } else {
                return Err(bad());
            };
            let lo: i64 = lo.trim().parse().map_err(|_| bad())?;
            let hi: i64 = hi.trim().parse().map_err(|_| bad())?;
            let hi = if inclusive { hi } else { hi - 1 };
            if hi < lo {
                return Ok(Vec::new());
            }
            if (hi - lo) as u64 >= MAX_INSTANCES as u64 {
                return Err(format!("`{text}` has more than {MAX_INSTANCES} values"));
            }
            Ok((lo..=hi).map(|v| v.to_string()).collect())
        }
        RawValues::List(items) => items
            .iter()
            .map(|v| match v {
                toml::Value::String(s) => Ok(s.clone()),
                toml::Value::Integer(i) => Ok(i.to_string()),
                toml::Value::Float(f) => Ok(f.to_string()),
                toml::Value::Boolean(b) => Ok(b.to_string()),
                other => Err(format!(
                    "list items must be strings or numbers, not {other}"
                )),
            })
            .collect(),
        RawValues::File { file } => {
            let path = base.join(file);
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            let values = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_string)
                .collect();
            if !sources.iter().any(|(name, _)| name == file) {
                sources.push((file.clone(), text));
            }
            Ok(values)
        }
    }
}

/// The longest id, in bytes: its output folder name must stay within the
/// file name limit of 255 bytes, and longer ids are typos or data in the
/// wrong field.
pub const MAX_ID_BYTES: usize = 200;

/// Why an id cannot name an activity, its journal rows and its output folder.
fn check_id(id: &str) -> Result<(), String> {
    if id.trim().is_empty() {
        return Err("the id is empty".into());
    }
    if id.len() > MAX_ID_BYTES {
        let start: String = id.chars().take(40).collect();
        return Err(format!(
            "the id `{start}…` has {} bytes; at most {MAX_ID_BYTES} are allowed",
            id.len()
        ));
    }
    if let Some(c) = id.chars().find(|c| c.is_control()) {
        return Err(format!(
            "the id {id:?} contains the control character {:?}; ids are printable text",
            c
        ));
    }
    Ok(())
}

/// `"a|b"`, `"a>b"`, `"a,b"`, or a list meaning any of them.
pub fn parse_context(context: &RawContext) -> Result<ContextList, String> {
    match context {
        RawContext::Text(text) => text
            .parse::<ContextList>()
            .map_err(|e| format!("bad context `{text}`: {e}")),
        RawContext::List(items) => {
            let contexts = items
                .iter()
                .map(|t| {
                    t.parse::<Context>()
                        .map_err(|e| format!("bad context `{t}`: {e}"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            if contexts.is_empty() {
                return Err("an empty context list matches no executor".into());
            }
            Ok(ContextList::any_of(contexts))
        }
    }
}

/// A duration as [`timefmt::parse_duration`] reads it everywhere: `"250ms"`,
/// `"90s"`, `"10m"`, `"1h30m"`, `"2d"`, `"1:00:00"`. A bare number is
/// refused (it used to mean seconds here and minutes on the command line).
pub fn parse_duration(duration: &RawDuration) -> Result<Duration, String> {
    let text = match duration {
        RawDuration::Number(number) => &number.to_string(),
        RawDuration::Text(text) => text,
    };
    timefmt::parse_duration(text).map_err(|e| e.to_string())
}

/// `*` matches any run of characters; everything else matches itself.
pub(crate) fn glob_match(pattern: &str, text: &str) -> bool {
    if !pattern.contains('*') {
        return pattern == text;
    }
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// An `after` item that names no activity: where it is first met, and
/// how many more activities of its entry meet it.
struct UnknownAfter {
    /// The first node whose `after` has it.
    node: usize,
    /// Its index in the entry's `after` list.
    item: usize,
    /// The name, rendered for that node.
    dependency: String,
    /// Further nodes of the entry with the same item unknown.
    more: usize,
    /// The last of those, with the name rendered for it.
    last: Option<(usize, String)>,
}

/// One problem in a graph file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphError {
    /// The file, as given.
    pub file: String,
    /// 1-based line and column, when known (TOML, and JSON syntax errors).
    pub line_column: Option<(usize, usize)>,
    /// The entry (1-based) and its id as written, when the problem is in one.
    pub entry: Option<(usize, String)>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for GraphError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        match (&self.line_column, &self.entry) {
            (Some((line, column)), _) => write!(f, ":{line}:{column}")?,
            (None, Some((k, id))) => write!(f, ": activity {k} (`{id}`)")?,
            (None, None) => {}
        }
        write!(f, ": {}", self.message)
    }
}

/// Every problem found in a graph file, one per line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphErrors(pub Vec<GraphError>);

impl fmt::Display for GraphErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for GraphErrors {}

/// Collects errors, placing each at the best location the format allows.
struct Errors<'t> {
    file: String,
    text: &'t str,
    /// Where each line of `text` starts, for line and column numbers
    /// without a scan of the text per place.
    line_starts: Vec<usize>,
    spans: Vec<EntrySpans>,
    list: Vec<GraphError>,
}

impl Errors<'_> {
    fn line_column(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let line = self.line_starts.partition_point(|&start| start <= offset);
        let column = self.text[self.line_starts[line - 1]..offset]
            .chars()
            .count()
            + 1;
        (line, column)
    }

    fn at_span(
        &mut self,
        span: Option<Range<usize>>,
        entry: Option<(usize, String)>,
        message: String,
    ) {
        let line_column = span.map(|s| self.line_column(s.start));
        self.list.push(GraphError {
            file: self.file.clone(),
            line_column,
            entry,
            message,
        });
    }

    fn at_field(&mut self, k: usize, entry: &RawEntry, field: &str, message: String) {
        let span = self
            .spans
            .get(k)
            .and_then(|s| s.fields.get(field).cloned().or_else(|| s.entry.clone()));
        self.at_span(span, Some((k + 1, entry.id.clone())), message);
    }

    /// The value, or `None` with the error recorded at `field`.
    fn or_record<T>(
        &mut self,
        k: usize,
        entry: &RawEntry,
        field: &str,
        result: Result<T, String>,
    ) -> Option<T> {
        result
            .map_err(|message| self.at_field(k, entry, field, message))
            .ok()
    }

    fn at_after_item(&mut self, k: usize, entry: &RawEntry, item: usize, message: String) {
        match self.spans.get(k).and_then(|s| s.after.get(item)).cloned() {
            Some(span) => self.at_span(Some(span), Some((k + 1, entry.id.clone())), message),
            None => self.at_field(k, entry, "after", message),
        }
    }

    /// Where entry `k`'s `field` is, for naming a second place in a
    /// message: `file:line:column`, or the entry's number and id in JSON.
    fn place(&self, k: usize, field: &str, id: &str) -> String {
        let span = (self.spans.get(k))
            .and_then(|s| s.fields.get(field).cloned().or_else(|| s.entry.clone()));
        match span {
            Some(span) => {
                let (line, column) = self.line_column(span.start);
                format!("{}:{line}:{column}", self.file)
            }
            None => format!("{}: activity {} (`{id}`)", self.file, k + 1),
        }
    }

    /// [`Graph::place`] of every entry: its `context`, else its `id`.
    fn entry_places(&self, raw: &RawGraph) -> Vec<String> {
        (raw.activities.iter().enumerate())
            .map(|(k, entry)| {
                let has_context =
                    (self.spans.get(k)).is_some_and(|s| s.fields.contains_key("context"));
                let field = if has_context { "context" } else { "id" };
                self.place(k, field, &entry.id)
            })
            .collect()
    }

    fn line_of_entry(&self, k: usize) -> String {
        match self.spans.get(k).and_then(|s| s.entry.clone()) {
            Some(span) => format!(" (line {})", self.line_column(span.start).0),
            None => String::new(),
        }
    }

    fn finish(self) -> GraphErrors {
        GraphErrors(self.list)
    }
}
