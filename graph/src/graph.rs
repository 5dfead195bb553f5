//! From a graph file to a checked graph of shell activities.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::ops::Range;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use constellation::{Context, ContextList};
use executors::shell::{RetryPolicy, ShellSpec};

use crate::file::{toml_spans, EntrySpans, RawContext, RawDuration, RawEntry, RawGraph, RawValues};
use crate::suggest::Suggestions;
use crate::template::{Template, TemplateError};

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

/// One activity of a checked graph.
#[derive(Debug, Clone)]
pub struct Node {
    /// Its id, templates rendered.
    pub id: String,
    /// The command, named by the id.
    pub spec: ShellSpec,
    /// The nodes it runs after, as indices into [`Graph::nodes`]: those its
    /// `after` names, and those that write a file it reads.
    pub after: Vec<usize>,
    /// Files it reads.
    pub inputs: Vec<PathBuf>,
    /// Files it writes.
    pub outputs: Vec<PathBuf>,
    /// The file entry it came from (0-based).
    pub entry: usize,
    /// That entry's id before sweep expansion, e.g. `detect-{pair}`: what
    /// reports group durations by.
    pub kind: String,
}

/// A checked graph: ids unique, every dependency known, no cycle.
#[derive(Debug, Clone, Default)]
pub struct Graph {
    /// The activities, in file order, sweeps expanded in place.
    pub nodes: Vec<Node>,
    index: HashMap<String, usize>,
    /// Per file entry, where to point a user at it: see [`Graph::place`].
    places: Vec<String>,
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
        // Each node's dependency texts, rendered, with their entry's item index.
        let mut wanted: Vec<Vec<(String, usize)>> = Vec::new();
        for (k, entry) in raw.activities.iter().enumerate() {
            let Some(instances) = expand(entry, k, base, &mut errors) else {
                continue;
            };
            // The entry's script, parsed and checked for the shell once for
            // all its activities.
            let mut script = None;
            for (values, after) in instances {
                let node = match build(entry, k, &values, &mut script, &mut errors) {
                    Some(node) => node,
                    None => break,
                };
                if let Some(&first) = graph.index.get(&node.id) {
                    let earlier = graph.nodes[first].entry;
                    errors.at_field(
                        k,
                        entry,
                        "id",
                        format!(
                            "duplicate id `{}`: entry {} already has it{}",
                            node.id,
                            earlier + 1,
                            errors.line_of_entry(earlier)
                        ),
                    );
                    break;
                }
                graph.index.insert(node.id.clone(), graph.nodes.len());
                graph.nodes.push(node);
                wanted.push(after);
            }
        }
        if !errors.list.is_empty() {
            return Err(errors.finish());
        }

        // Unknown names by entry and `after` item: a typo in a sweep's
        // `after` is one mistake, reported once, however many activities
        // it expands into.
        let mut unknown: Vec<UnknownAfter> = Vec::new();
        let mut unknown_at: HashMap<(usize, usize), usize> = HashMap::new();
        for (n, after) in wanted.into_iter().enumerate() {
            let entry_index = graph.nodes[n].entry;
            let mut deps = Vec::new();
            for (dependency, item) in after {
                let found: Vec<usize> = if dependency.contains('*') {
                    graph
                        .nodes
                        .iter()
                        .enumerate()
                        .filter(|(m, node)| *m != n && glob_match(&dependency, &node.id))
                        .map(|(m, _)| m)
                        .collect()
                } else {
                    graph.index.get(&dependency).copied().into_iter().collect()
                };
                if found.is_empty() {
                    match unknown_at.entry((entry_index, item)) {
                        std::collections::hash_map::Entry::Occupied(at) => {
                            let first = &mut unknown[*at.get()];
                            first.more += 1;
                            first.last = Some((n, dependency));
                        }
                        std::collections::hash_map::Entry::Vacant(at) => {
                            at.insert(unknown.len());
                            unknown.push(UnknownAfter {
                                node: n,
                                item,
                                dependency,
                                more: 0,
                                last: None,
                            });
                        }
                    }
                }
                deps.extend(found);
            }
            deps.sort_unstable();
            deps.dedup();
            graph.nodes[n].after = deps;
        }
        if !unknown.is_empty() {
            let ids = graph.nodes.iter().map(|node| node.id.as_str());
            let suggestions = Suggestions::new(ids, &graph.index);
            for u in unknown {
                let node = &graph.nodes[u.node];
                let hint = (suggestions.suggest(&u.dependency))
                    .map(|c| format!(" (did you mean `{c}`?)"))
                    .unwrap_or_default();
                let what = if u.dependency.contains('*') {
                    "matches no activity"
                } else {
                    "is not an activity of this graph"
                };
                let others = match (&u.last, u.more) {
                    (Some((m, last)), 1) => {
                        format!("; so does `{}` (after `{last}`)", graph.nodes[*m].id)
                    }
                    (Some((m, last)), more) => format!(
                        "; so do {more} more of this entry's activities, up to `{}` (after `{last}`)",
                        graph.nodes[*m].id
                    ),
                    (None, _) => String::new(),
                };
                let message = format!(
                    "`{}` runs after `{}`, which {what}{hint}{others}",
                    node.id, u.dependency
                );
                let entry = &raw.activities[node.entry];
                errors.at_after_item(node.entry, entry, u.item, message);
            }
        }
        if !errors.list.is_empty() {
            return Err(errors.finish());
        }
        let read_from = graph.add_file_dependencies(&raw, &mut errors);
        if !errors.list.is_empty() {
            return Err(errors.finish());
        }
        if let Some(cycle) = graph.find_cycle() {
            let names: Vec<&str> = cycle.iter().map(|&n| graph.nodes[n].id.as_str()).collect();
            // Each link, at the field that makes it: `after`, or `inputs`
            // for a file another activity writes.
            let link = |k: usize| {
                let previous = (k + cycle.len() - 1) % cycle.len();
                match read_from.get(&(cycle[k], cycle[previous])) {
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
                    let node = &graph.nodes[cycle[k]];
                    let (field, why) = link(k);
                    format!(
                        "`{}` at {}{why}",
                        node.id,
                        errors.place(node.entry, field, &raw.activities[node.entry].id)
                    )
                })
                .collect();
            let first = graph.nodes[cycle[0]].entry;
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

    /// Where node `n` is written, for messages about it after the file
    /// was checked (an activity no executor offers to run):
    /// `file:line:column` of its `context` (of its `id` if it has none)
    /// in TOML, the file, entry number and id in JSON.
    pub fn place(&self, n: usize) -> &str {
        self.places
            .get(self.nodes[n].entry)
            .map_or("", String::as_str)
    }

    /// Makes every activity that reads a file run after the one that
    /// writes it, and refuses a file written by two activities: which
    /// version a reader got would depend on timing. Paths are compared as
    /// the activities resolve them: relative to their `cwd`, with `.` and
    /// `..` taken out (symbolic links are not followed: nothing exists yet).
    ///
    /// Returns the edges it added, (reader, writer), with the file, for
    /// naming a cycle they close.
    fn add_file_dependencies(
        &mut self,
        raw: &RawGraph,
        errors: &mut Errors,
    ) -> HashMap<(usize, usize), PathBuf> {
        let mut writer: HashMap<PathBuf, usize> = HashMap::new();
        // A sweep writing one file from every instance would repeat the
        // same error thousands of times: one per pair of entries.
        let mut reported: HashSet<(usize, usize)> = HashSet::new();
        for (n, node) in self.nodes.iter().enumerate() {
            for output in &node.outputs {
                let file = resolved_path(node.spec.cwd.as_deref(), output);
                match writer.get(&file) {
                    Some(&other) if other != n => {
                        let first = &self.nodes[other];
                        if reported.insert((first.entry, node.entry)) {
                            let entry = &raw.activities[node.entry];
                            let message = format!(
                                "`{}` writes `{}`, and so does `{}` at {}: give each file one producer",
                                node.id,
                                output.display(),
                                first.id,
                                errors.place(first.entry, "outputs", &raw.activities[first.entry].id)
                            );
                            errors.at_field(node.entry, entry, "outputs", message);
                        }
                    }
                    Some(_) => {}
                    None => {
                        writer.insert(file, n);
                    }
                }
            }
        }
        let mut read_from = HashMap::new();
        if writer.is_empty() {
            return read_from;
        }
        for (n, node) in self.nodes.iter_mut().enumerate() {
            let before = node.after.len();
            for input in &node.inputs {
                let file = resolved_path(node.spec.cwd.as_deref(), input);
                if let Some(&from) = writer.get(&file) {
                    // Reading a file it writes itself is updating it in
                    // place. `after` is sorted up to `before`.
                    if from != n && node.after[..before].binary_search(&from).is_err() {
                        node.after.push(from);
                        read_from.entry((n, from)).or_insert_with(|| input.clone());
                    }
                }
            }
            if node.after.len() > before {
                node.after.sort_unstable();
                node.after.dedup();
            }
        }
        read_from
    }

    /// The node with this id.
    pub fn get(&self, id: &str) -> Option<&Node> {
        self.index.get(id).map(|&n| &self.nodes[n])
    }

    /// Node indices such that every node comes after its dependencies.
    pub fn topological_order(&self) -> Vec<usize> {
        let mut waiting: Vec<usize> = self.nodes.iter().map(|n| n.after.len()).collect();
        let dependants = self.dependants();
        let mut ready: Vec<usize> = (0..self.nodes.len()).filter(|&n| waiting[n] == 0).collect();
        let mut order = Vec::with_capacity(self.nodes.len());
        while let Some(n) = ready.pop() {
            order.push(n);
            for &d in &dependants[n] {
                waiting[d] -= 1;
                if waiting[d] == 0 {
                    ready.push(d);
                }
            }
        }
        order
    }

    /// For each node, the nodes that run after it.
    pub fn dependants(&self) -> Vec<Vec<usize>> {
        let mut dependants = vec![Vec::new(); self.nodes.len()];
        for (n, node) in self.nodes.iter().enumerate() {
            for &d in &node.after {
                dependants[d].push(n);
            }
        }
        dependants
    }

    /// Some cycle, as a path of node indices, if the graph has one.
    fn find_cycle(&self) -> Option<Vec<usize>> {
        let order = self.topological_order();
        if order.len() == self.nodes.len() {
            return None;
        }
        // Every node left over waits, directly or not, on a cycle: walk
        // back along unfinished dependencies until a node repeats.
        let mut done = vec![false; self.nodes.len()];
        for &n in &order {
            done[n] = true;
        }
        let start = (0..self.nodes.len()).find(|&n| !done[n])?;
        let mut path = vec![start];
        let mut seen: HashMap<usize, usize> = HashMap::from([(start, 0)]);
        let mut at = start;
        loop {
            let next = *self.nodes[at].after.iter().find(|&&d| !done[d])?;
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

/// The sweep's instances: variable values and rendered dependency texts.
type Instance = (BTreeMap<String, String>, Vec<(String, usize)>);

fn expand(entry: &RawEntry, k: usize, base: &Path, errors: &mut Errors) -> Option<Vec<Instance>> {
    let mut variables: Vec<(String, Vec<String>)> = Vec::new();
    for (name, values) in &entry.sweep {
        match sweep_values(values, base) {
            Ok(list) if list.is_empty() => {
                errors.at_field(
                    k,
                    entry,
                    "for",
                    format!("sweep variable `{name}` has no values"),
                );
                return None;
            }
            Ok(list) => variables.push((name.clone(), list)),
            Err(message) => {
                errors.at_field(
                    k,
                    entry,
                    "for",
                    format!("sweep variable `{name}`: {message}"),
                );
                return None;
            }
        }
    }
    let total = variables
        .iter()
        .try_fold(1usize, |acc, (_, v)| acc.checked_mul(v.len()))
        .filter(|&t| t <= MAX_INSTANCES);
    let Some(total) = total else {
        errors.at_field(
            k,
            entry,
            "for",
            format!("the sweep expands to more than {MAX_INSTANCES} activities"),
        );
        return None;
    };
    let known: Vec<&str> = variables.iter().map(|(n, _)| n.as_str()).collect();
    let mut after = Vec::new();
    for (item, text) in entry.after.iter().enumerate() {
        match Template::checked(text, &known) {
            Ok(t) => after.push((t, item)),
            Err(e) => {
                errors.at_after_item(k, entry, item, format!("in `after`: {e}"));
                return None;
            }
        }
    }
    let mut instances = Vec::with_capacity(total);
    for i in 0..total {
        let mut rest = i;
        let mut values = BTreeMap::new();
        // Nested loops over the variables in name order; the last changes fastest.
        for (name, list) in variables.iter().rev() {
            values.insert(name.clone(), list[rest % list.len()].clone());
            rest /= list.len();
        }
        let deps = after
            .iter()
            .map(|(t, item)| (t.render(&values), *item))
            .collect();
        instances.push((values, deps));
    }
    Some(instances)
}

fn sweep_values(values: &RawValues, base: &Path) -> Result<Vec<String>, String> {
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
            Ok(text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_string)
                .collect())
        }
    }
}

fn build(
    entry: &RawEntry,
    k: usize,
    values: &BTreeMap<String, String>,
    script: &mut Option<Result<Template, TemplateError>>,
    errors: &mut Errors,
) -> Option<Node> {
    let known: Vec<&str> = values.keys().map(String::as_str).collect();
    // Renders one field's text, or records why it cannot be.
    let render = |field: &str, text: &str, errors: &mut Errors| -> Option<String> {
        match Template::checked(text, &known) {
            Ok(t) => Some(t.render(values)),
            Err(e) => {
                errors.at_field(k, entry, field, format!("in `{field}`: {e}"));
                None
            }
        }
    };
    let id = render("id", &entry.id, errors)?;
    if let Err(message) = check_id(&id) {
        errors.at_field(k, entry, "id", message);
        return None;
    }
    let program = match (&entry.command, &entry.script) {
        (Some(command), None) => ShellSpec::command(render("command", command, errors)?),
        // The shell reads the script: values go in quoted, as one word each.
        (None, Some(text)) => {
            match script.get_or_insert_with(|| Template::checked_script(text, &known)) {
                Ok(t) => ShellSpec::script(t.render_for_shell(values)),
                Err(e) => {
                    errors.at_field(k, entry, "script", format!("in `script`: {e}"));
                    return None;
                }
            }
        }
        (Some(_), Some(_)) => {
            errors.at_field(
                k,
                entry,
                "script",
                format!("`{id}` has both `command` and `script`; give one"),
            );
            return None;
        }
        (None, None) => {
            errors.at_field(
                k,
                entry,
                "id",
                format!("`{id}` has neither `command` nor `script`"),
            );
            return None;
        }
    };
    let mut spec = program.name(id.clone());
    for arg in &entry.args {
        spec = spec.arg(render("args", arg, errors)?);
    }
    for (name, value) in &entry.env {
        spec = spec.env(name.clone(), render("env", value, errors)?);
    }
    if let Some(cwd) = &entry.cwd {
        spec = spec.cwd(render("cwd", cwd, errors)?);
    }
    if let Some(context) = &entry.context {
        spec = spec.context(errors.or_record(k, entry, "context", parse_context(context))?);
    }
    if let Some(timeout) = &entry.timeout {
        spec = spec.timeout(errors.or_record(k, entry, "timeout", parse_duration(timeout))?);
    }
    spec = spec.retry(RetryPolicy::attempts(entry.retries.saturating_add(1)));
    let paths = |field: &str, list: &[String], errors: &mut Errors| -> Option<Vec<PathBuf>> {
        list.iter()
            .map(|p| render(field, p, errors).map(PathBuf::from))
            .collect()
    };
    let inputs = paths("inputs", &entry.inputs, errors)?;
    let outputs = paths("outputs", &entry.outputs, errors)?;
    Some(Node {
        id,
        spec,
        after: Vec::new(),
        inputs,
        outputs,
        entry: k,
        kind: entry.id.clone(),
    })
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
