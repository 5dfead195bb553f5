//! The records that go into the journal and come out of it: runs,
//! activities, attempts and executors, and the states they are in.

use std::time::{SystemTime, UNIX_EPOCH};

// The methods these records go into and come out of, for doc links.
#[cfg(doc)]
use crate::open::Journal;

/// How a run ended, as the `runs.status` column spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    /// Still running, or killed before it could say otherwise.
    Running,
    /// Every activity is done.
    Succeeded,
    /// Some activity failed for good, or was cancelled because of one.
    Failed,
    /// The user stopped it (Ctrl-C).
    Interrupted,
}

impl RunStatus {
    /// The column value.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Interrupted => "interrupted",
        }
    }
}

/// What a new run records about itself.
#[derive(Debug, Clone, Default)]
pub struct NewRun {
    /// The graph file as given.
    pub graph_path: String,
    /// A hash of what the run runs (the graph and its sweep files).
    pub graph_hash: String,
    /// Where the runner runs.
    pub host: String,
    /// The command line, for the record.
    pub command_line: String,
    /// Where this run's output files go.
    pub output_dir: String,
    /// `(name, text)` of the graph file and of each sweep values file, as
    /// read: the graph is kept as its sources, once per run, not expanded.
    pub sources: Vec<(String, String)>,
}

/// An activity as the graph declares it, for [`Journal::declare`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActivityDecl<'a> {
    /// The graph id.
    pub id: &'a str,
    /// Index into the `kinds` given to [`Journal::declare`].
    pub kind: usize,
    /// Index into the `contexts` given to [`Journal::declare`].
    pub context: usize,
    /// A hash of everything that decides what the activity does.
    pub spec_hash: u64,
    /// Whether this run runs it (again); `false` for work a resume skips.
    pub rerun: bool,
}

/// An executor of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorRow {
    /// Index within its node.
    pub executor: i64,
    /// The node's host name.
    pub node: String,
    /// Its contexts, comma separated.
    pub labels: String,
    /// Cores it may use.
    pub cores: i64,
}

/// An executor row with the number attempts refer to it by, listed by the
/// run or known only from an attempt that ran on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorSlot {
    /// The number [`AttemptFacts::slot`] gives.
    pub slot: i64,
    /// Index within its node.
    pub executor: i64,
    /// The node's host name.
    pub node: String,
    /// Its contexts, comma separated.
    pub labels: String,
    /// Cores it may use; `None` for an executor the run did not list.
    pub cores: Option<i64>,
}

/// Where an attempt's output lies in a run's stream file, for runs that
/// stream all output into a few files instead of a file per command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamPlace {
    /// The stream file.
    pub file: String,
    /// Where the attempt's output starts in it, in bytes.
    pub offset: i64,
    /// How many bytes of it are the attempt's.
    pub length: i64,
}

/// One attempt to record, for [`ActivityUpdate::attempts`]. The executor
/// is named by node, index and labels; the journal keeps each distinct
/// one once and refers to it by number.
#[derive(Debug, Clone, PartialEq)]
pub struct NewAttempt {
    /// 1, 2, ... within the run.
    pub attempt: i64,
    /// Host name of the node that ran it.
    pub node: String,
    /// Executor index on that node.
    pub executor: i64,
    /// The executor's contexts.
    pub labels: String,
    /// Unix seconds.
    pub started: f64,
    /// Unix seconds.
    pub ended: f64,
    /// `exited`, `signalled`, `timed_out`, `start_failed`, `output_lost` or [`LOST`].
    pub outcome: String,
    /// The exit status, for `exited`.
    pub exit_code: Option<i64>,
    /// The signal, for `signalled`.
    pub signal: Option<i64>,
    /// The outcome in words.
    pub message: Option<String>,
    /// User + system CPU seconds of the command, where known.
    pub cpu_seconds: Option<f64>,
    /// Standard output file, if kept in one of its own; `None` also when
    /// the command wrote nothing to it (no file is left).
    pub stdout: Option<String>,
    /// Standard error file, if kept in one of its own; `None` also when
    /// it was empty.
    pub stderr: Option<String>,
    /// Bytes written to standard output.
    pub stdout_bytes: Option<i64>,
    /// Bytes written to standard error.
    pub stderr_bytes: Option<i64>,
    /// Where the output is in the run's stream file, if the run streams.
    pub stream: Option<StreamPlace>,
}

/// One attempt to run an activity, as read back, with names joined in:
/// the run and the activity it belongs to, and the attempt as it was
/// recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRow {
    /// The run it belongs to.
    pub run: i64,
    /// The activity's graph id.
    pub activity: String,
    /// The attempt itself, field for field as [`NewAttempt`] wrote it.
    pub recorded: NewAttempt,
}

/// What a report needs of one attempt, borrowed from the row being read
/// (see [`Journal::scan_attempts`]): numbers instead of names, so that a
/// million attempts are read without a string per name.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttemptFacts<'a> {
    /// The activity's number ([`ActivityRow::activity`]).
    pub activity: i64,
    /// The activity's graph id.
    pub id: &'a str,
    /// The activity's kind ([`KindRow::kind`]).
    pub kind: i64,
    /// 1, 2, ... within the run.
    pub attempt: i64,
    /// The executor ([`ExecutorSlot::slot`]).
    pub slot: i64,
    /// Unix seconds.
    pub started: f64,
    /// Unix seconds.
    pub ended: f64,
    /// `exited`, `signalled`, `timed_out`, `start_failed`, `output_lost` or [`LOST`].
    pub outcome: &'a str,
    /// The exit status, for `exited`.
    pub exit_code: Option<i64>,
    /// User + system CPU seconds of the command, where known.
    pub cpu_seconds: Option<f64>,
}

/// An activity kind with its number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindRow {
    /// The number activities refer to it by.
    pub kind: i64,
    /// The graph entry's id as written, e.g. `detect-{pair}`.
    pub name: String,
}

/// Where an activity stands, as the `activities.state` column spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActivityState {
    /// Not finished yet in any run.
    Pending,
    /// Succeeded.
    Done,
    /// Failed on its last attempt.
    Failed,
    /// Never ran because something it depends on failed.
    Cancelled,
}

impl ActivityState {
    /// The column value.
    pub fn as_str(self) -> &'static str {
        match self {
            ActivityState::Pending => "pending",
            ActivityState::Done => "done",
            ActivityState::Failed => "failed",
            ActivityState::Cancelled => "cancelled",
        }
    }

    pub(crate) fn parse(text: &str) -> ActivityState {
        match text {
            "done" => ActivityState::Done,
            "failed" => ActivityState::Failed,
            "cancelled" => ActivityState::Cancelled,
            _ => ActivityState::Pending,
        }
    }
}

/// An activity's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActivityRow {
    /// Its number, which attempts refer to.
    pub activity: i64,
    /// The graph id.
    pub id: String,
    /// The file entry's id before sweep expansion.
    pub kind: String,
    /// Hash of its spec.
    pub spec_hash: u64,
    /// Where it may run.
    pub context: String,
    /// Its state after the latest run.
    pub state: ActivityState,
    /// The run that set the state.
    pub run: i64,
    /// Why it failed or was cancelled.
    pub message: Option<String>,
}

/// How many activities are in one state, set by one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateCount {
    /// The state.
    pub state: ActivityState,
    /// The run that set it.
    pub run: i64,
    /// How many activities.
    pub count: u64,
}

/// A run's row.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRow {
    /// 1 for the first run, then one more per resume.
    pub run: i64,
    /// The graph file.
    pub graph_path: String,
    /// Hash of what the run ran.
    pub graph_hash: String,
    /// Unix seconds.
    pub started: f64,
    /// Unix seconds; `None` while running or if the runner was killed.
    pub ended: Option<f64>,
    /// `running`, `succeeded`, `failed` or `interrupted`.
    pub status: String,
    /// Where the runner ran.
    pub host: String,
    /// The command line.
    pub command_line: String,
    /// Where the run's output files went.
    pub output_dir: String,
}

/// What happened to one activity, to record in one transaction.
#[derive(Debug, Clone)]
pub struct ActivityUpdate {
    /// The activity's number, as [`Journal::declare`] returned it.
    pub activity: i64,
    /// Its new state.
    pub state: ActivityState,
    /// Why it failed or was cancelled.
    pub message: Option<String>,
    /// The attempts it made in this run (none for a cancelled one).
    pub attempts: Vec<NewAttempt>,
}

/// The outcome of an attempt whose end nobody saw: the node that ran it
/// died or left before it reported. Its `ended` is when that was noticed.
pub const LOST: &str = "lost";

/// How the message of an extra execution's attempts begins: one that ran
/// after its activity had settled (its node's notice that it finished was
/// lost, so it ran again, or two copies ran). Its attempts leave the
/// activity's state as it was.
pub const EXTRA_EXECUTION: &str = "extra execution";

/// Executions of a run beyond one per activity, as the journal tells them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReExecutions {
    /// Attempts whose outcome is [`LOST`]: each execution lost with its
    /// node runs again.
    pub lost: usize,
    /// Attempts of extra executions (their message begins with
    /// [`EXTRA_EXECUTION`]).
    pub extra: usize,
}

impl ReExecutions {
    /// Both kinds together.
    pub fn total(&self) -> usize {
        self.lost + self.extra
    }
}

/// Seconds since the Unix epoch, as the journal stores times.
pub fn unix_seconds(time: SystemTime) -> f64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
