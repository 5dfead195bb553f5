//! Why a report could not be made or drawn.

use std::path::PathBuf;

use journal::JournalError;

/// Why a report could not be built from a journal, or its plot not drawn.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The journal could not be read.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// The journal has no runs to report on.
    #[error("journal {0} has no runs yet: nothing to report")]
    NoRuns(PathBuf),
    /// The run asked for is not in the journal.
    #[error("journal {path} has no run {run}; it has {existing}")]
    NoSuchRun {
        /// The journal.
        path: PathBuf,
        /// The run asked for.
        run: i64,
        /// The runs it does have, in words (e.g. "runs 1, 2, 3").
        existing: String,
    },
    /// A row holds values no run could have written (e.g. a time that is not
    /// a number, or an attempt that ends before it starts).
    #[error("journal {path} is inconsistent: {detail}")]
    Corrupt {
        /// The journal.
        path: PathBuf,
        /// What is wrong, naming the row.
        detail: String,
    },
    /// The plot file's extension names no format we can write.
    #[error("cannot plot to {0}: the file name must end in .svg or .png")]
    UnsupportedFormat(PathBuf),
    /// The plotting library failed, e.g. the file could not be written.
    #[error("cannot draw the plot {path}: {message}")]
    Plot {
        /// The plot file.
        path: PathBuf,
        /// The plotting library's complaint.
        message: String,
    },
}
