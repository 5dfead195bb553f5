//! Reading a graph file: each entry's fields checked once for all its
//! activities, sweeps expanded into ids, and the whole assembled into a
//! [`Graph`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use constellation::ContextList;

use super::errors::{Errors, GraphError, GraphErrors};
use super::fields::{check_id, parse_context, parse_duration};
use super::{hash_id, Entry, Format, Graph, ProgramTemplate, Variable, MAX_INSTANCES};
use crate::file::{toml_spans, RawEntry, RawGraph, RawValues};
use crate::input::{kept_sweep_name, read_bounded, LoadOptions, RAISE_LIMIT};
use crate::template::Template;

impl Graph {
    /// Reads and checks the graph file at `path`; relative `file` sweeps
    /// are read next to it. Each file may have at most
    /// [`DEFAULT_MAX_INPUT_BYTES`](crate::DEFAULT_MAX_INPUT_BYTES).
    pub fn load(path: &Path) -> Result<Graph, GraphErrors> {
        Graph::load_with(path, &LoadOptions::default())
    }

    /// [`load`](Self::load), with the size limit and the place of sweep
    /// files in `options`.
    pub fn load_with(path: &Path, options: &LoadOptions) -> Result<Graph, GraphErrors> {
        let text = read_bounded(path, "graph file", options.max_bytes, RAISE_LIMIT).map_err(
            |message| {
                GraphErrors(vec![GraphError {
                    file: path.display().to_string(),
                    line_column: None,
                    entry: None,
                    message,
                }])
            },
        )?;
        let base = path.parent().unwrap_or(Path::new("."));
        Graph::parse_with(
            &text,
            Format::of(path),
            &path.display().to_string(),
            base,
            options,
        )
    }

    /// Checks the graph in `text`. `file` names it in messages; `base` is
    /// where relative sweep files are.
    pub fn parse(
        text: &str,
        format: Format,
        file: &str,
        base: &Path,
    ) -> Result<Graph, GraphErrors> {
        Graph::parse_with(text, format, file, base, &LoadOptions::default())
    }

    /// [`parse`](Self::parse), reading sweep files as `options` says.
    pub fn parse_with(
        text: &str,
        format: Format,
        file: &str,
        base: &Path,
        options: &LoadOptions,
    ) -> Result<Graph, GraphErrors> {
        let (raw, mut errors) = read_raw(text, format, file)?;
        let mut graph = Graph::default();
        graph.sources.push((file.to_string(), text.to_string()));
        graph.add_entries(&raw, (base, options), &mut errors);
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
            graph.refuse_cycle(&cycle, &read_from, &raw, &mut errors);
            return Err(errors.finish());
        }
        graph.places = errors.entry_places(&raw);
        Ok(graph)
    }

    /// Compiles every entry of `raw` and adds its ids, giving each distinct
    /// context list one number.
    fn add_entries(
        &mut self,
        raw: &RawGraph,
        sweep_files: (&Path, &LoadOptions),
        errors: &mut Errors,
    ) {
        let mut context_at: HashMap<ContextList, u32> = HashMap::new();
        for (k, raw_entry) in raw.activities.iter().enumerate() {
            let Some((entry, context)) =
                compile(raw_entry, k, sweep_files, &mut self.sources, errors)
            else {
                continue;
            };
            if !errors.list.is_empty() {
                // Ids are only checked while the file is good so far: the
                // node numbers of an entry that failed would be off.
                continue;
            }
            let context = *context_at.entry(context.clone()).or_insert_with(|| {
                self.contexts.push(context);
                (self.contexts.len() - 1) as u32
            });
            self.starts.push(self.ends.len() as u32);
            self.add_ids(&entry, k, raw_entry, errors);
            let added = self.ends.len() - self.context_of.len();
            self.context_of.extend(std::iter::repeat_n(context, added));
            self.kinds.push(raw_entry.id.clone());
            self.entries.push(entry);
        }
    }

    /// Records the error for a dependency `cycle`, naming each link at the
    /// field that makes it (the first ten of them).
    fn refuse_cycle(
        &self,
        cycle: &[usize],
        read_from: &HashMap<(u32, u32), PathBuf>,
        raw: &RawGraph,
        errors: &mut Errors,
    ) {
        let names: Vec<&str> = cycle.iter().map(|&n| self.id(n)).collect();
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
                let entry = self.kind_of(cycle[k]);
                let (field, why) = link(k);
                format!(
                    "`{}` at {}{why}",
                    names[k],
                    errors.place(entry, field, &raw.activities[entry].id)
                )
            })
            .collect();
        let first = self.kind_of(cycle[0]);
        let message = format!(
            "the dependencies form a cycle: {} -> {}; {}{}",
            names.join(" -> "),
            names[0],
            places.join(", "),
            if cycle.len() > shown { ", ..." } else { "" }
        );
        errors.at_field(first, &raw.activities[first], link(0).0, message);
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
}

/// Deserializes `text` and sets up the error collector that points into
/// it; a file that is not valid TOML or JSON, or has no entries, is
/// refused here.
fn read_raw<'t>(
    text: &'t str,
    format: Format,
    file: &str,
) -> Result<(RawGraph, Errors<'t>), GraphErrors> {
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
    Ok((raw, errors))
}

/// Checks entry `k`'s fields once for all its activities: sweep values,
/// templates, context and timeout. Returns the entry and its context.
pub(super) fn compile(
    raw: &RawEntry,
    k: usize,
    sweep_files: (&Path, &LoadOptions),
    sources: &mut Vec<(String, String)>,
    errors: &mut Errors,
) -> Option<(Entry, ContextList)> {
    let (variables, total) = sweep_variables(raw, k, sweep_files, sources, errors)?;
    let known: Vec<&str> = variables.iter().map(|v| v.name.as_str()).collect();
    let after = after_templates(raw, k, &known, errors)?;
    // Parses one field's text, or records why it cannot be.
    let template = |field: &str, text: &str, errors: &mut Errors| {
        field_template(raw, k, &known, field, text, errors)
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
    let program = program_template(raw, k, &known, &id, errors)?;
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

/// Entry `k`'s sweep variables with their values, and how many activities
/// they expand to (at most [`MAX_INSTANCES`]).
fn sweep_variables(
    raw: &RawEntry,
    k: usize,
    sweep_files: (&Path, &LoadOptions),
    sources: &mut Vec<(String, String)>,
    errors: &mut Errors,
) -> Option<(Vec<Variable>, usize)> {
    let mut variables: Vec<Variable> = Vec::new();
    for (name, values) in &raw.sweep {
        match sweep_values(values, sweep_files, sources) {
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
    Some((variables, total))
}

/// Entry `k`'s `after` items as templates over its sweep variables.
fn after_templates(
    raw: &RawEntry,
    k: usize,
    known: &[&str],
    errors: &mut Errors,
) -> Option<Vec<Template>> {
    let mut after = Vec::new();
    for (item, text) in raw.after.iter().enumerate() {
        match Template::checked(text, known) {
            Ok(t) => after.push(t),
            Err(e) => {
                errors.at_after_item(k, raw, item, format!("in `after`: {e}"));
                return None;
            }
        }
    }
    Some(after)
}

/// Parses the text of entry `k`'s `field` as a template over `known`, or
/// records why it cannot be.
fn field_template(
    raw: &RawEntry,
    k: usize,
    known: &[&str],
    field: &str,
    text: &str,
    errors: &mut Errors,
) -> Option<Template> {
    Template::checked(text, known)
        .map_err(|e| errors.at_field(k, raw, field, format!("in `{field}`: {e}")))
        .ok()
}

/// Entry `k`'s program: its `command` or its `script`, exactly one of them.
/// `id` is the first activity's id, for the messages.
fn program_template(
    raw: &RawEntry,
    k: usize,
    known: &[&str],
    id: &str,
    errors: &mut Errors,
) -> Option<ProgramTemplate> {
    Some(match (&raw.command, &raw.script) {
        (Some(command), None) => {
            ProgramTemplate::Command(field_template(raw, k, known, "command", command, errors)?)
        }
        // The shell reads the script: values go in quoted, as one word each.
        (None, Some(text)) => match Template::checked_script(text, known) {
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
    })
}

/// A sweep variable's values; a `file` it reads (beside the graph file
/// in `base`, or kept as `options` says) is kept in `sources`.
fn sweep_values(
    values: &RawValues,
    (base, options): (&Path, &LoadOptions),
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
            let path = match &options.kept_sweeps {
                Some(kept) => kept.join(kept_sweep_name(file)),
                None => base.join(file),
            };
            let text = read_bounded(&path, "sweep file", options.max_bytes, RAISE_LIMIT)?;
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
