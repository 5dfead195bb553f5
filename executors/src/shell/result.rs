//! What a shell activity reports to its parent.

use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use constellation::{ActivityId, NodeId};
use serde::{Deserialize, Serialize};

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
        }
    }
}

/// Where one output stream ended up.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Output {
    /// In this file.
    File(PathBuf),
    /// In memory, cut at the capture limit.
    Memory {
        /// The first bytes of the stream.
        // Bytes, not an array of integers, in MessagePack.
        #[serde(with = "serde_bytes")]
        bytes: Vec<u8>,
        /// Bytes beyond the limit that were read and dropped.
        truncated: u64,
    },
    /// Not kept.
    Discarded,
}

impl Output {
    /// The stream as text, read from its file if it went to one; invalid
    /// UTF-8 is replaced. `None` if it was discarded or the file is gone.
    pub fn text(&self) -> Option<String> {
        match self {
            Output::File(path) => std::fs::read(path)
                .ok()
                .map(|b| String::from_utf8_lossy(&b).into_owned()),
            Output::Memory { bytes, .. } => Some(String::from_utf8_lossy(bytes).into_owned()),
            Output::Discarded => None,
        }
    }

    /// How many bytes the stream carried: the file's size, or what memory
    /// kept plus what it dropped; 0 when discarded.
    pub fn bytes(&self) -> u64 {
        match self {
            Output::File(path) => std::fs::metadata(path).map_or(0, |m| m.len()),
            Output::Memory { bytes, truncated } => bytes.len() as u64 + truncated,
            Output::Discarded => 0,
        }
    }

    /// The file the stream went to, if any.
    pub fn path(&self) -> Option<&PathBuf> {
        match self {
            Output::File(path) => Some(path),
            _ => None,
        }
    }
}

impl fmt::Debug for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Output::File(path) => write!(f, "File({})", path.display()),
            Output::Memory { bytes, truncated } => write!(
                f,
                "Memory({:?}{})",
                String::from_utf8_lossy(&bytes[..bytes.len().min(80)]),
                if *truncated > 0 {
                    format!(", {truncated} bytes dropped")
                } else {
                    String::new()
                }
            ),
            Output::Discarded => f.write_str("Discarded"),
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
        match &r.stderr {
            Output::File(path) => write!(f, "; its error output is in {}", path.display()),
            Output::Memory { bytes, .. } if !bytes.is_empty() => {
                let text = String::from_utf8_lossy(bytes);
                let tail: Vec<&str> = text.lines().rev().take(3).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                write!(f, "; it wrote: {}", tail.join(" / "))
            }
            _ => Ok(()),
        }
    }
}

impl std::error::Error for ShellFailure {}
