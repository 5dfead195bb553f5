//! Reports on journaled runs: what a run did, as text and as a plot.
//!
//! [`Report::from_journal`] reads one run of a journal and computes its
//! figures: a summary, activity states, executor and core utilization over
//! time (overall and per first label), and durations per activity kind.
//! The report prints as text (`Display`), with sparklines of utilization,
//! and [`plot`] draws it as an SVG or PNG: utilization, per-label lanes and
//! a Gantt chart of attempts per executor, the pictures of the Constellation
//! paper's busy-executor figures.
//!
//! [`run_dir`] makes the directories runs keep their journal and outputs
//! in, named by the time a run starts, with a `latest` link to the newest.

#![warn(missing_docs, unreachable_pub)]

mod bins;
mod error;
mod model;
mod plot;
// Public as a module: its items read as `run_dir::create_run_dir` and
// `run_dir::RUNS_DIR`, names that say what they are only beside the module.
pub mod run_dir;
mod text;

pub use error::ReportError;
pub use model::{
    AttemptCounts, Bar, ExecutorSummary, KindStats, Lane, Report, RunSummary, StateCounts,
    StateTally, Timeline, WallEnd, DEFAULT_BINS,
};
pub use plot::{
    kind_colors, plot, plot_with_options, plot_with_size, PlotOptions, DEFAULT_MAX_BARS,
    DEFAULT_PLOT_SIZE,
};
