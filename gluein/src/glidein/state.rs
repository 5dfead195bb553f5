//! The backend-independent state of a pilot job.
//!
//! Every batch system has its own zoo of states (Slurm has over twenty);
//! the CLI and `prune` only need to know whether a pilot is still waiting,
//! doing work, winding down, or over, and if over, how it ended.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Where a pilot job stands, as far as the batch system (or, for the ssh and
/// local backends, the process table) tells us.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum JobState {
    /// Queued, held, configuring or suspended: agents are not working yet
    /// (or, when suspended, not at the moment), but may later.
    Pending,
    /// Agents are (or are being) started on the nodes.
    Running,
    /// The batch system is tearing the job down (Slurm COMPLETING, PBS E).
    Finishing,
    /// The job ended by itself; `exit` is the pilot's exit status when the
    /// batch system still remembers it.
    Finished {
        /// Exit status of the pilot script, if known.
        exit: Option<i32>,
    },
    /// The job, or its submission, failed; `reason` says how.
    Failed {
        /// Human-readable cause (batch system state and reason, or the
        /// submission error).
        reason: String,
    },
    /// The job was cancelled (by `glidein cancel` or by an administrator).
    Cancelled,
    /// We cannot tell: the batch system reported a state we do not know.
    Unknown,
}

impl JobState {
    /// True while the job holds, or may still get, resources: such
    /// allocations are never pruned and can be cancelled.
    pub fn is_active(&self) -> bool {
        matches!(self, Self::Pending | Self::Running | Self::Finishing)
    }

    /// True once nothing can change any more: `refresh` stops querying the
    /// batch system for such jobs (it may have forgotten them anyway).
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Self::Finished { .. } | Self::Failed { .. } | Self::Cancelled
        )
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Pending => f.write_str("pending"),
            Self::Running => f.write_str("running"),
            Self::Finishing => f.write_str("finishing"),
            Self::Finished { exit: Some(code) } => write!(f, "finished (exit {code})"),
            Self::Finished { exit: None } => f.write_str("finished"),
            Self::Failed { reason } => write!(f, "failed: {reason}"),
            Self::Cancelled => f.write_str("cancelled"),
            Self::Unknown => f.write_str("unknown"),
        }
    }
}

/// What a cancel request achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The job (or its agents) was told to stop.
    Cancelled,
    /// There was nothing left to stop: the job had already ended.
    AlreadyOver,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activity_classification() {
        assert!(JobState::Pending.is_active());
        assert!(JobState::Running.is_active());
        assert!(JobState::Finishing.is_active());
        assert!(!JobState::Unknown.is_active() && !JobState::Unknown.is_terminal());
        assert!(JobState::Cancelled.is_terminal());
        assert!(JobState::Finished { exit: None }.is_terminal());
        assert!(JobState::Failed { reason: "x".into() }.is_terminal());
    }

    #[test]
    fn display_and_json() {
        let s = JobState::Finished { exit: Some(0) };
        assert_eq!(s.to_string(), "finished (exit 0)");
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(json, r#"{"kind":"finished","exit":0}"#);
        assert_eq!(serde_json::from_str::<JobState>(&json).unwrap(), s);
        let json = serde_json::to_string(&JobState::Running).unwrap();
        assert_eq!(json, r#"{"kind":"running"}"#);
    }
}
