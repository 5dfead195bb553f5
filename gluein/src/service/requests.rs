//! What the pool's processes ask each other beyond the node protocol: the
//! job service's requests (`submit`, `jobs`, `job`, `wait`, `cancel` ask
//! the pool node) and the kill request a runner sends its agents.
//!
//! They travel as the bodies of `constellation::net` app requests, as
//! JSON: the pool key guards them as it guards everything else on the
//! pool's connections, and a person can read them in a packet dump.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A request to a pool member's service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "snake_case")]
pub enum ServiceRequest {
    /// Store a job and start it when its turn comes. Answered with
    /// [`ServiceResponse::Submitted`]. Pool node only.
    Submit(JobSubmission),
    /// The jobs that are queued or running, or all with `all`. Answered
    /// with [`ServiceResponse::Jobs`]. Pool node only.
    Jobs {
        /// Finished jobs too.
        all: bool,
    },
    /// One job. Answered with [`ServiceResponse::Job`]. Pool node only.
    Job {
        /// The job's id.
        id: u64,
    },
    /// Cancel a job: queued, it never starts; running, its runner is
    /// stopped and its commands killed. Answered with
    /// [`ServiceResponse::Job`] as the job stands after the request.
    /// Pool node only.
    Cancel {
        /// The job's id.
        id: u64,
    },
    /// Kill every command of an activity that `origin` created, and run
    /// none that has not started. Answered with
    /// [`ServiceResponse::Killed`]. Agents only.
    KillOrigin {
        /// The runner whose work is to go: its node id as a full UUID
        /// (`executors::shell::origin_text`; a node id's display is only
        /// its first 8 hex digits).
        origin: String,
    },
}

/// A job as `submit` hands it over. Paths are absolute: the runner
/// starts on the pool node's machine, which shares the file system with
/// the submitter (as it shares the pool key).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSubmission {
    /// The graph file.
    pub graph: PathBuf,
    /// Where the submitter was: the runner's working directory, so that
    /// relative paths in the graph mean what they meant there.
    pub cwd: PathBuf,
    /// A name to list the job by; the graph file's stem if `None`.
    pub name: Option<String>,
    /// `--relabel FROM=TO` rules, as written.
    pub relabel: Vec<String>,
    /// `--context-file`.
    pub context_file: Option<PathBuf>,
    /// Higher starts first among queued jobs; 0 by default.
    pub priority: i32,
    /// Queue work no agent offers yet, instead of refusing the job.
    pub wait_for_labels: bool,
    /// Who submitted it: `user@host`.
    pub submitter: String,
    /// The graph as `submit` read it, with the files it names: the pool
    /// node keeps this copy in the job's folder and the job runs it, so
    /// that editing the files after `submit` does not change the job.
    /// `None` from a client that sends only paths: the pool node then
    /// reads them itself, at submit.
    #[serde(default)]
    pub files: Option<Box<SubmittedFiles>>,
    /// A random token `submit` makes once per invocation and sends with
    /// every try: a job service that already has a job with this token
    /// answers with that job instead of making another, so that a try
    /// whose answer was lost can be made again.
    #[serde(default)]
    pub token: Option<String>,
}

/// The files of a job, as `submit` read them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubmittedFiles {
    /// The graph file's text.
    pub graph: String,
    /// Each sweep `file`, by the name the graph gives it, and its text.
    pub sweeps: Vec<(String, String)>,
    /// The `--context-file`'s text, if one was given.
    pub context: Option<String>,
}

/// The longest job name, in bytes, as for an activity id: a name is for
/// a person to read in `jobs`, and a longer one is data in the wrong place.
pub const MAX_JOB_NAME_BYTES: usize = 200;

/// The refusal a pool node gives while its job service is still starting
/// (just after a restart): a client that polls, such as `wait`, asks again
/// rather than taking it as an answer.
pub const SERVICE_STARTING: &str = "the pool node's job service is starting; try again";

/// Why `name` cannot name a job: empty, longer than
/// [`MAX_JOB_NAME_BYTES`], or holding a control character (which would
/// reach every terminal that lists the pool's jobs).
pub fn check_job_name(name: &str) -> Result<(), String> {
    graph::check_printable(name, "job name", MAX_JOB_NAME_BYTES)
}

/// The answer to a [`ServiceRequest`]. A refusal (bad request, unknown
/// job, not this member's business) is the app request's error instead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "response", rename_all = "snake_case")]
pub enum ServiceResponse {
    /// The job was stored under this id.
    Submitted {
        /// The new job's id.
        id: u64,
    },
    /// Jobs, oldest first.
    Jobs {
        /// One summary per job.
        jobs: Vec<JobSummary>,
    },
    /// One job.
    Job {
        /// Its summary.
        job: JobSummary,
    },
    /// What a [`ServiceRequest::KillOrigin`] did.
    Killed {
        /// Commands killed.
        running: usize,
        /// Activities that were waiting to retry and now end without
        /// starting their command again. Work of that origin queued on the
        /// agent and not started yet is not counted: it ends without
        /// running when an executor takes it.
        not_started: usize,
    },
}

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Waiting for a free slot (`pool start --max-jobs`).
    Queued,
    /// Its runner is running (or being restarted after a pool restart).
    Running,
    /// Every activity succeeded.
    Succeeded,
    /// Some activity failed, or the runner could not run the graph.
    Failed,
    /// Cancelled with `constellation cancel`.
    Cancelled,
}

impl JobState {
    /// Whether the job has ended for good.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Cancelled
        )
    }

    /// The state as `jobs` prints it and the job journal stores it.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for JobState {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(match text {
            "queued" => JobState::Queued,
            "running" => JobState::Running,
            "succeeded" => JobState::Succeeded,
            "failed" => JobState::Failed,
            "cancelled" => JobState::Cancelled,
            other => return Err(format!("{other:?} is not a job state")),
        })
    }
}

/// Activities of a job by state. `waiting` and `running` come from the
/// runner's progress file while it runs; the rest from its journal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobCounts {
    /// Not finished and not running.
    pub waiting: u64,
    /// Running on an executor now.
    pub running: u64,
    /// Succeeded.
    pub done: u64,
    /// Failed.
    pub failed: u64,
    /// Cancelled (after a failure upstream, or with the job).
    pub cancelled: u64,
    /// All activities of the graph.
    pub total: u64,
}

/// A job as `jobs` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSummary {
    /// Its id.
    pub id: u64,
    /// Its name.
    pub name: String,
    /// Where it stands.
    pub state: JobState,
    /// Its priority.
    pub priority: i32,
    /// Its activities by state.
    pub counts: JobCounts,
    /// When it was submitted, Unix seconds.
    pub submitted: f64,
    /// When its runner first started, if it did.
    pub started: Option<f64>,
    /// When it ended, if it did.
    pub ended: Option<f64>,
    /// The graph file.
    pub graph: PathBuf,
    /// The job's run journal on the pool node (for `report`, `output`).
    pub journal: PathBuf,
    /// Who submitted it.
    pub submitter: String,
    /// Why it failed or was cancelled, in words, if it did.
    pub message: Option<String>,
}

/// A request or response as the bytes of an app request.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("service messages are plain data")
}

/// Reads a request or response; the error says what did not fit.
pub fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, String> {
    serde_json::from_slice(bytes)
        .map_err(|error| format!("not a service message this build reads: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_responses_round_trip_as_tagged_json() {
        let request = ServiceRequest::Cancel { id: 7 };
        let bytes = encode(&request);
        assert_eq!(
            String::from_utf8(bytes.clone()).unwrap(),
            r#"{"request":"cancel","id":7}"#
        );
        assert_eq!(decode::<ServiceRequest>(&bytes).unwrap(), request);
        let response = ServiceResponse::Submitted { id: 3 };
        assert_eq!(
            decode::<ServiceResponse>(&encode(&response)).unwrap(),
            response
        );
        assert!(decode::<ServiceRequest>(b"{\"request\":\"reboot\"}")
            .unwrap_err()
            .contains("not a service message"));
    }

    #[test]
    fn states_read_back_what_they_print() {
        for state in [
            JobState::Queued,
            JobState::Running,
            JobState::Succeeded,
            JobState::Failed,
            JobState::Cancelled,
        ] {
            assert_eq!(state.as_str().parse::<JobState>().unwrap(), state);
        }
        assert!("done".parse::<JobState>().is_err());
    }
}
