//! Retargeting a graph without editing it: renaming labels
//! (`--relabel cpu=gpu`) and assigning contexts by id pattern
//! (`--context-file`). This is the user-facing form of Table 1 of the
//! Constellation paper: the same graph runs `anywhere`, at one location, at
//! a location with a size, at a list of locations, with an `anywhere`
//! fallback, or on GPUs instead of CPUs.

use std::collections::HashMap;
use std::path::Path;

use constellation::{Context, ContextList, Label, ListMode};

use crate::graph::{glob_match, Graph};
use crate::input::{read_bounded, RAISE_LIMIT};

/// One `FROM=TO` label rename.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relabel {
    /// The label to replace.
    pub from: String,
    /// Its replacement.
    pub to: String,
}

impl std::str::FromStr for Relabel {
    type Err = String;

    /// Parses `FROM=TO`, e.g. `cpu=gpu` or `site:vu=site:uva`.
    fn from_str(text: &str) -> Result<Relabel, String> {
        let (from, to) = text
            .split_once('=')
            .ok_or_else(|| format!("`{text}` is not FROM=TO (e.g. cpu=gpu)"))?;
        let (from, to) = (from.trim(), to.trim());
        for (side, label) in [("FROM", from), ("TO", to)] {
            if label.is_empty() {
                return Err(format!("`{text}`: {side} is empty"));
            }
            if label.contains([',', '|', '>', '=', ' ']) {
                return Err(format!(
                    "`{text}`: `{label}` is not one label (one rename per --relabel)"
                ));
            }
            // A label must parse as a context on its own, without a rank.
            match label.parse::<Context>() {
                Ok(context) if context.rank.is_none() => {}
                _ => return Err(format!("`{text}`: `{label}` is not a plain label")),
            }
        }
        Ok(Relabel {
            from: from.to_string(),
            to: to.to_string(),
        })
    }
}

/// One `pattern = context` line of a context file.
#[derive(Debug, Clone)]
pub struct ContextRule {
    /// An activity id, or a glob with `*`.
    pub pattern: String,
    /// The context activities matching it get.
    pub context: ContextList,
}

/// Reads a context file: TOML whose keys are activity ids or `*` globs and
/// whose values are contexts, as in a graph file.
///
/// ```toml
/// "detect-*" = "site:vu|anywhere"
/// "subtract-*" = ["gpu", "cpu"]
/// prepare = "anywhere"
/// ```
///
/// Later rules win over earlier ones for the ids both match. The file
/// must be a regular file of at most `max_bytes`.
pub fn read_context_file(path: &Path, max_bytes: u64) -> Result<Vec<ContextRule>, String> {
    let text = read_bounded(path, "context file", max_bytes, RAISE_LIMIT)?;
    parse_context_rules(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Parses the text of a context file; see [`read_context_file`].
pub fn parse_context_rules(text: &str) -> Result<Vec<ContextRule>, String> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
    let mut rules = Vec::new();
    for (pattern, value) in table {
        let raw = match value {
            toml::Value::String(text) => crate::file::RawContext::Text(text),
            toml::Value::Array(items) => crate::file::RawContext::List(
                items
                    .into_iter()
                    .map(|item| match item {
                        toml::Value::String(text) => Ok(text),
                        other => Err(format!(
                            "`{pattern}`: list items must be strings, found {}",
                            other.type_str()
                        )),
                    })
                    .collect::<Result<_, _>>()?,
            ),
            other => {
                return Err(format!(
                    "`{pattern}`: a context is a string or a list of strings, found {}",
                    other.type_str()
                ))
            }
        };
        let context = crate::graph::parse_context(&raw).map_err(|e| format!("`{pattern}`: {e}"))?;
        rules.push(ContextRule { pattern, context });
    }
    Ok(rules)
}

/// What retargeting changed, for the user.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Retargeted {
    /// Activities whose context changed.
    pub changed: usize,
    /// Rules (context-file patterns or relabels) that matched nothing,
    /// which is usually a typo.
    pub unused: Vec<String>,
}

impl Graph {
    /// Applies context-file rules, then label renames, to every node's
    /// context. Rules are matched against each id; the new context is
    /// worked out once per distinct (context, winning rule).
    pub fn retarget(&mut self, rules: &[ContextRule], relabels: &[Relabel]) -> Retargeted {
        let mut report = Retargeted::default();
        let mut used_rules = vec![false; rules.len()];
        let mut used_relabels = vec![false; relabels.len()];
        let mut contexts: Vec<ContextList> = Vec::new();
        let mut context_at: HashMap<ContextList, u32> = HashMap::new();
        // (old context, winning rule) -> (new context, changed).
        let mut outcome: HashMap<(u32, Option<usize>), (u32, bool)> = HashMap::new();
        let mut context_of = std::mem::take(&mut self.context_of);
        for (n, slot) in context_of.iter_mut().enumerate() {
            let id = self.id(n);
            let winner = (rules.iter().enumerate())
                .filter(|(_, rule)| glob_match(&rule.pattern, id))
                .map(|(k, _)| k)
                .inspect(|&k| used_rules[k] = true)
                .last();
            let (context, changed) = *outcome.entry((*slot, winner)).or_insert_with(|| {
                let before = &self.contexts[*slot as usize];
                let mut context =
                    winner.map_or_else(|| before.clone(), |k| rules[k].context.clone());
                for (k, relabel) in relabels.iter().enumerate() {
                    if let Some(renamed) = rename(&context, relabel) {
                        context = renamed;
                        used_relabels[k] = true;
                    }
                }
                let changed = context != *before;
                let at = *context_at.entry(context.clone()).or_insert_with(|| {
                    contexts.push(context);
                    (contexts.len() - 1) as u32
                });
                (at, changed)
            });
            if changed {
                report.changed += 1;
            }
            *slot = context;
        }
        self.context_of = context_of;
        self.contexts = contexts;
        report.unused.extend(
            (rules.iter().zip(&used_rules))
                .filter(|(_, used)| !**used)
                .map(|(rule, _)| format!("context rule `{}` matches no activity", rule.pattern)),
        );
        report.unused.extend(
            (relabels.iter().zip(&used_relabels))
                .filter(|(_, used)| !**used)
                .map(|(r, _)| {
                    format!("relabel {}={}: no activity uses `{}`", r.from, r.to, r.from)
                }),
        );
        report
    }
}

/// `context` with `relabel.from` renamed, ranks kept; `None` if it has no such label.
fn rename(context: &ContextList, relabel: &Relabel) -> Option<ContextList> {
    let from = Label::new(&relabel.from);
    if !context.items().iter().any(|c| c.label == from) {
        return None;
    }
    let to = Label::new(&relabel.to);
    let items = context.items().iter().map(|c| Context {
        label: if c.label == from { to } else { c.label },
        rank: c.rank,
    });
    Some(match context.mode() {
        ListMode::AnyOf => ContextList::any_of(items),
        ListMode::Priority => ContextList::priority(items),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Format;

    fn graph() -> Graph {
        Graph::parse(
            r#"
[[activity]]
id = "prepare"
script = "true"

[[activity]]
id = "detect-{i}"
for = { i = "1..=3" }
script = "true"
context = "cpu|site:vu"
after = ["prepare"]
"#,
            Format::Toml,
            "g.toml",
            Path::new("."),
        )
        .unwrap()
    }

    #[test]
    fn relabel_renames_labels_and_keeps_the_rest() {
        let mut g = graph();
        let relabel: Relabel = "cpu=gpu".parse().unwrap();
        let report = g.retarget(&[], &[relabel]);
        assert_eq!(report.changed, 3);
        assert!(report.unused.is_empty());
        assert_eq!(
            g.context(g.index_of("detect-2").unwrap()).to_string(),
            "gpu | site:vu"
        );
        assert!(g.context(g.index_of("prepare").unwrap()).is_anywhere());
    }

    #[test]
    fn context_rules_apply_by_glob_and_later_rules_win() {
        let mut g = graph();
        let rules = parse_context_rules(
            "\"detect-*\" = \"site:uva\"\n\"detect-3\" = [\"gpu\", \"anywhere\"]\n\"nothing-*\" = \"x\"\n",
        )
        .unwrap();
        let report = g.retarget(&rules, &[]);
        assert_eq!(report.changed, 3);
        assert_eq!(
            g.context(g.index_of("detect-1").unwrap()).to_string(),
            "site:uva"
        );
        assert_eq!(
            g.context(g.index_of("detect-3").unwrap()).to_string(),
            "gpu | anywhere"
        );
        assert_eq!(report.unused.len(), 1, "{:?}", report.unused);
    }

    #[test]
    fn bad_retargeting_input_says_what_is_wrong() {
        assert!("cpu".parse::<Relabel>().unwrap_err().contains("FROM=TO"));
        assert!("=gpu"
            .parse::<Relabel>()
            .unwrap_err()
            .contains("FROM is empty"));
        assert!("gpu=cpu,x"
            .parse::<Relabel>()
            .unwrap_err()
            .contains("not one label"));
        assert!(parse_context_rules("a = 3")
            .unwrap_err()
            .contains("string or a list"));
        assert!(parse_context_rules("a = \"x=\"")
            .unwrap_err()
            .contains("`a`"));
        assert!(parse_context_rules("a = ").is_err());
    }
}
