//! The graph file as written: TOML (or JSON) deserialized into plain
//! structs, plus, for TOML, where each field stands in the text.

use std::collections::BTreeMap;
use std::ops::Range;

use serde::de::IgnoredAny;
use serde::Deserialize;

/// A whole graph file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGraph {
    /// The entries, in file order.
    #[serde(default, rename = "activity")]
    pub activities: Vec<RawEntry>,
}

/// One `[[activity]]` entry: one activity, or many with `for`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawEntry {
    /// The id, with `{var}` placeholders if the entry has `for`.
    pub id: String,
    /// An executable and no shell.
    pub command: Option<String>,
    /// Script text for `/bin/sh -c`.
    pub script: Option<String>,
    /// Arguments; `$1…` for a script.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment variables.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The working directory.
    pub cwd: Option<String>,
    /// Where it may run: `"site:vu|anywhere"`, or a list, any-of.
    pub context: Option<RawContext>,
    /// Ids (or templates, or globs with `*`) this entry runs after.
    #[serde(default)]
    pub after: Vec<String>,
    /// Files it reads.
    #[serde(default)]
    pub inputs: Vec<String>,
    /// Files it writes.
    #[serde(default)]
    pub outputs: Vec<String>,
    /// Extra attempts after a failure.
    #[serde(default)]
    pub retries: u32,
    /// The longest one attempt may take: seconds, or text like `"90s"`, `"10m"`, `"2h"`.
    pub timeout: Option<RawDuration>,
    /// The sweep: variable name to values.
    #[serde(default, rename = "for")]
    pub sweep: BTreeMap<String, RawValues>,
}

/// A context as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawContext {
    /// `"gpu>cpu"`, `"site:vu|site:uva"`.
    Text(String),
    /// `["site:vu", "site:uva"]`: any of these.
    List(Vec<String>),
}

/// A duration as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawDuration {
    /// A number without a unit: read only to refuse it with a message that
    /// says which unit to add, at the place it was written.
    Number(f64),
    /// `"90s"`, `"10m"`, `"1h30m"`, `"1:00:00"`.
    Text(String),
}

/// The values of one sweep variable.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawValues {
    /// `"1..=1052"` or `"0..8"`.
    Range(String),
    /// `["r", "g", "i"]` or `[1, 2, 3]`.
    List(Vec<toml::Value>),
    /// `{ file = "pairs.txt" }`: one value per non-empty line.
    File {
        /// The file, relative to the graph file.
        file: String,
    },
}

/// Byte ranges of an entry and its fields in the TOML text.
#[derive(Debug, Clone, Default)]
pub(crate) struct EntrySpans {
    /// The whole entry.
    pub entry: Option<Range<usize>>,
    /// Each field's value, by field name.
    pub fields: BTreeMap<String, Range<usize>>,
    /// Each item of `after`.
    pub after: Vec<Range<usize>>,
}

/// Where each entry and field is; the values themselves are skipped, not
/// built (a `toml::Value` per field of a file of 486,000 entries took
/// gigabytes just to learn their places).
#[derive(Deserialize)]
struct SpanDoc {
    #[serde(default)]
    activity: Vec<toml::Spanned<BTreeMap<String, toml::Spanned<IgnoredAny>>>>,
}

/// `after` once more, as spanned strings, for the place of each item; a
/// `toml::Value` keeps no spans inside the list.
#[derive(Deserialize)]
struct AfterDoc {
    #[serde(default)]
    activity: Vec<AfterItems>,
}

#[derive(Deserialize)]
struct AfterItems {
    #[serde(default)]
    after: Vec<toml::Spanned<String>>,
}

/// Where each entry's fields stand in `text`; empty if `text` is not TOML
/// of the expected shape (the main parse reports that).
pub(crate) fn toml_spans(text: &str) -> Vec<EntrySpans> {
    let Ok(doc) = toml::from_str::<SpanDoc>(text) else {
        return Vec::new();
    };
    let mut afters = toml::from_str::<AfterDoc>(text)
        .map(|d| d.activity)
        .unwrap_or_default()
        .into_iter();
    doc.activity
        .into_iter()
        .map(|entry| EntrySpans {
            entry: Some(entry.span()),
            fields: entry
                .get_ref()
                .iter()
                .map(|(k, v)| (k.clone(), v.span()))
                .collect(),
            after: afters
                .next()
                .map(|a| a.after.iter().map(toml::Spanned::span).collect())
                .unwrap_or_default(),
        })
        .collect()
}
