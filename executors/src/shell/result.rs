//! What a shell activity reports to its parent.

use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use constellation::{ActivityId, NodeId};
use serde::{Deserialize, Serialize};

use super::output::Output;
use super::stream::StreamPlace;

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ShellOutcome {
    /// The command exited by itself with this status.
    Exited {
        /// The exit status; 0 is success.
        code: i32,
    },
    /// The command was killed by a signal it did not send itself through a timeout.
    Signalled {
        /// The signal number, e.g. 9 for `SIGKILL`.
        signal: i32,
    },
    /// The attempt ran past its timeout; its process group was killed.
    TimedOut {
        /// The timeout.
        after: Duration,
    },
    /// The command never ran: missing program, working directory or input file.
    StartFailed {
        /// Why, in words.
        reason: String,
    },
    /// The command ran, but its output could not be kept: a write to its
    /// output stream failed (a full disk, a file size limit). The attempt
    /// fails whatever the command's own status, as HyperQueue fails a task
    /// whose stream write fails: a result whose output is gone is not a
    /// success.
    OutputLost {
        /// Why the output could not be written, and how the command ended.
        reason: String,
    },
}

impl ShellOutcome {
    /// Whether the command exited with status 0.
    pub fn is_success(&self) -> bool {
        matches!(self, ShellOutcome::Exited { code: 0 })
    }
}

impl fmt::Display for ShellOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShellOutcome::Exited { code } => write!(f, "exited with status {code}"),
            ShellOutcome::Signalled { signal } => write!(f, "was killed by signal {signal}"),
            ShellOutcome::TimedOut { after } => {
                write!(f, "timed out after {after:?} and was killed")
            }
            ShellOutcome::StartFailed { reason } => write!(f, "did not start: {reason}"),
            ShellOutcome::OutputLost { reason } => write!(f, "lost its output: {reason}"),
        }
    }
}

/// The event a shell activity sends its parent when it is done, whether
/// the command succeeded or not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShellResult {
    /// The shell activity.
    pub activity: ActivityId,
    /// The spec's name, if it had one.
    pub name: Option<String>,
    /// What was run, for messages.
    pub command: String,
    /// How the last attempt ended.
    pub outcome: ShellOutcome,
    /// Attempts made, at least 1.
    pub attempts: u32,
    /// The wall-clock time of the last attempt.
    pub duration: Duration,
    /// The last attempt's standard output.
    pub stdout: Output,
    /// The last attempt's standard error.
    pub stderr: Output,
    /// The labels of the executor that ran it, as `CONSTELLATION_LABELS` shows them.
    pub executor_labels: String,
    /// The node that ran it.
    pub node: NodeId,
    /// That node's host name.
    pub host: String,
    /// The executor's index on that node.
    pub executor: usize,
    /// Every attempt, first to last, for journals.
    pub history: Vec<AttemptRecord>,
    /// Set when the work of the node that created this activity (its
    /// runner) was cancelled here while it ran ([`cancel_origin`]): why,
    /// in words. Its command was killed, or its retry dropped, for that,
    /// not for a fault of its own; it made no further attempt.
    ///
    /// [`cancel_origin`]: super::cancel_origin
    #[serde(default)]
    pub cancelled: Option<String>,
}

/// What a shell activity that reports its starts
/// ([`ShellActivity::report_starts`]) sends its parent just before each
/// attempt's command starts, so that the parent knows of every execution,
/// also of one whose node dies before it reports: its result never comes.
///
/// [`ShellActivity::report_starts`]: super::ShellActivity::report_starts
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShellStarted {
    /// The shell activity. A copy queued again after its node died runs
    /// under the same id, on another node.
    pub activity: ActivityId,
    /// The spec's name, if it had one.
    pub name: Option<String>,
    /// The attempt about to start: 1, 2, ... within this execution of the
    /// activity, as its [`AttemptRecord::attempt`] will say.
    pub attempt: u32,
    /// The node that runs it.
    pub node: NodeId,
    /// That node's host name.
    pub host: String,
    /// The executor's index on that node.
    pub executor: usize,
    /// The executor's labels, as `CONSTELLATION_LABELS` shows them.
    pub labels: String,
    /// When the attempt was announced, by that node's wall clock: just
    /// before its command starts, never after.
    pub started: SystemTime,
}

/// What a shell activity that reports its starts sends its parent: one
/// type for both kinds of event, so the parent reads each with one
/// [`Event::take`](constellation::Event::take). A shell activity that does
/// not report its starts sends a bare [`ShellResult`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ShellReport {
    /// An attempt is starting.
    Started(ShellStarted),
    /// The activity is done: its last attempt ended.
    Ended(Box<ShellResult>),
}

impl ShellReport {
    /// The shell activity the report is about.
    pub fn activity(&self) -> ActivityId {
        match self {
            ShellReport::Started(started) => started.activity,
            ShellReport::Ended(result) => result.activity,
        }
    }

    /// The spec's name of that activity, if it had one.
    pub fn name(&self) -> Option<&str> {
        match self {
            ShellReport::Started(started) => started.name.as_deref(),
            ShellReport::Ended(result) => result.name.as_deref(),
        }
    }
}

/// One attempt of a shell activity, as a journal records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// 1 for the first attempt.
    pub attempt: u32,
    /// When it began, by the wall clock.
    pub started: SystemTime,
    /// How long it ran.
    pub duration: Duration,
    /// How it ended.
    pub outcome: ShellOutcome,
    /// User + system CPU time of the command, where the kernel reported it.
    pub cpu: Option<Duration>,
    /// Where its standard output went, if to a file.
    pub stdout: Option<PathBuf>,
    /// Where its standard error went, if to a file.
    pub stderr: Option<PathBuf>,
    /// Bytes it wrote to standard output (all of them, kept or not).
    pub stdout_bytes: u64,
    /// Bytes it wrote to standard error.
    pub stderr_bytes: u64,
    /// Where both went, if to a stream file and it wrote anything.
    #[serde(default)]
    pub stream: Option<StreamPlace>,
}

impl ShellResult {
    /// Whether the command exited with status 0.
    pub fn is_success(&self) -> bool {
        self.outcome.is_success()
    }

    /// This result if the command succeeded, or an error that says what failed.
    pub fn check(self) -> Result<ShellResult, ShellFailure> {
        if self.is_success() {
            Ok(self)
        } else {
            Err(ShellFailure(Box::new(self)))
        }
    }
}

/// A command that did not succeed; its message names the command, the
/// outcome, the attempts and where its error output is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellFailure(pub Box<ShellResult>);

impl fmt::Display for ShellFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.0;
        write!(f, "{}", r.name.as_deref().unwrap_or(&r.command))?;
        write!(f, " ({}) {}", r.activity, r.outcome)?;
        if r.attempts > 1 {
            write!(f, " on the last of {} attempts", r.attempts)?;
        }
        if let Some(why) = &r.cancelled {
            write!(f, " ({why})")?;
        }
        match &r.stderr {
            Output::File(path) => write!(f, "; its error output is in {}", path.display()),
            Output::Empty => f.write_str("; it wrote no error output"),
            Output::Memory { bytes, .. } if !bytes.is_empty() => {
                write!(f, "; it wrote: {}", r.stderr.last_lines(3).join(" / "))
            }
            Output::Stream { place, .. } => {
                write!(f, "; it wrote: {}", r.stderr.last_lines(3).join(" / "))?;
                write!(f, " (in the stream file {})", place.file.display())
            }
            _ => Ok(()),
        }
    }
}

impl std::error::Error for ShellFailure {}
