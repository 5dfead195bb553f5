//! What is wrong with a graph file, and where: [`GraphError`],
//! [`GraphErrors`], and the collector that places each error at the best
//! location the format allows.

use std::fmt;
use std::ops::Range;

use crate::file::{EntrySpans, RawEntry, RawGraph};

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
pub(super) struct Errors<'t> {
    pub(super) file: String,
    pub(super) text: &'t str,
    /// Where each line of `text` starts, for line and column numbers
    /// without a scan of the text per place.
    pub(super) line_starts: Vec<usize>,
    pub(super) spans: Vec<EntrySpans>,
    pub(super) list: Vec<GraphError>,
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

    pub(super) fn at_span(
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

    pub(super) fn at_field(&mut self, k: usize, entry: &RawEntry, field: &str, message: String) {
        let span = self
            .spans
            .get(k)
            .and_then(|s| s.fields.get(field).cloned().or_else(|| s.entry.clone()));
        self.at_span(span, Some((k + 1, entry.id.clone())), message);
    }

    /// The value, or `None` with the error recorded at `field`.
    pub(super) fn or_record<T>(
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

    pub(super) fn at_after_item(
        &mut self,
        k: usize,
        entry: &RawEntry,
        item: usize,
        message: String,
    ) {
        match self.spans.get(k).and_then(|s| s.after.get(item)).cloned() {
            Some(span) => self.at_span(Some(span), Some((k + 1, entry.id.clone())), message),
            None => self.at_field(k, entry, "after", message),
        }
    }

    /// Where entry `k`'s `field` is, for naming a second place in a
    /// message: `file:line:column`, or the entry's number and id in JSON.
    pub(super) fn place(&self, k: usize, field: &str, id: &str) -> String {
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
    pub(super) fn entry_places(&self, raw: &RawGraph) -> Vec<String> {
        (raw.activities.iter().enumerate())
            .map(|(k, entry)| {
                let has_context =
                    (self.spans.get(k)).is_some_and(|s| s.fields.contains_key("context"));
                let field = if has_context { "context" } else { "id" };
                self.place(k, field, &entry.id)
            })
            .collect()
    }

    pub(super) fn line_of_entry(&self, k: usize) -> String {
        match self.spans.get(k).and_then(|s| s.entry.clone()) {
            Some(span) => format!(" (line {})", self.line_column(span.start).0),
            None => String::new(),
        }
    }

    pub(super) fn finish(self) -> GraphErrors {
        GraphErrors(self.list)
    }
}
