//! Slurm: `sbatch`, `squeue`, `scontrol` and `scancel`.
//!
//! Command construction and output parsing are separate pure functions so
//! they can be tested on output recorded from real clusters (see
//! `fixtures/slurm`); [`query_state`] and [`cancel`] tie them together
//! through a [`Runner`].
//!
//! State lookup goes `squeue` first (cheap, and what sites expect users to
//! poll), then `scontrol show job` once `squeue` no longer lists the job:
//! the controller keeps finished jobs for `MinJobAge` (5 min by default)
//! and `scontrol` reports how they ended. After that the job is forgotten
//! and we can only say it finished.

use std::path::Path;

use crate::glidein::runner::{
    last_line, spawn, stderr_text, stdout_text, BackendError, CommandLine, ParseError, Runner,
};
use crate::glidein::state::{CancelOutcome, JobState};

/// A Slurm job id as printed by `sbatch --parsable`: `12345` or
/// `12345;cluster` in a multi-cluster (federated `-M`) setup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmJobId {
    /// Numeric job id.
    pub id: String,
    /// Cluster name, when the job went to another cluster.
    pub cluster: Option<String>,
}

impl SlurmJobId {
    /// Parses `12345` or `12345;cluster`.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let text = text.trim();
        let (id, cluster) = match text.split_once(';') {
            Some((id, cluster)) => (id, Some(cluster)),
            None => (text, None),
        };
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ParseError::new("expected a numeric Slurm job id", text));
        }
        if let Some(c) = cluster {
            if c.is_empty() || c.chars().any(char::is_whitespace) {
                return Err(ParseError::new("expected `JOBID;CLUSTER`", text));
            }
        }
        Ok(Self {
            id: id.to_string(),
            cluster: cluster.map(str::to_string),
        })
    }

    /// `--clusters=NAME` when the job lives on another cluster: every Slurm
    /// client command needs it to find the job there.
    fn cluster_args(&self) -> Vec<String> {
        self.cluster
            .iter()
            .map(|c| format!("--clusters={c}"))
            .collect()
    }
}

/// `sbatch --parsable [raw args] SCRIPT`. Raw arguments come before the
/// script, where sbatch lets them override the script's `#SBATCH` lines.
pub fn submit_command(raw_args: &[String], script: &Path) -> CommandLine {
    let mut args = vec!["--parsable".to_string()];
    args.extend(raw_args.iter().cloned());
    args.push(script.to_string_lossy().into_owned());
    CommandLine::new("sbatch", args)
}

/// Parses `sbatch --parsable` output into the job id to record
/// (`12345` or `12345;cluster`).
pub fn parse_submit(stdout: &str) -> Result<String, ParseError> {
    let line =
        last_line(stdout).ok_or_else(|| ParseError::new("sbatch printed no job id", stdout))?;
    SlurmJobId::parse(line)?;
    Ok(line.to_string())
}

/// `squeue -h -j ID -o %T`: just the state name, no header.
pub fn squeue_command(job: &SlurmJobId) -> CommandLine {
    let mut args = job.cluster_args();
    args.extend(["-h", "-j", &job.id, "-o", "%T"].map(String::from));
    CommandLine::new("squeue", args)
}

/// `scontrol show job ID`.
pub fn scontrol_command(job: &SlurmJobId) -> CommandLine {
    let mut args = job.cluster_args();
    args.extend(["show", "job", &job.id].map(String::from));
    CommandLine::new("scontrol", args)
}

/// `scancel ID`.
pub fn cancel_command(job: &SlurmJobId) -> CommandLine {
    let mut args = job.cluster_args();
    args.push(job.id.clone());
    CommandLine::new("scancel", args)
}

/// Parses `squeue -h -o %T` output; `None` when squeue listed nothing
/// (the job has left the queue). `-M` adds a `CLUSTER: name` line first.
pub fn parse_squeue(stdout: &str) -> Option<JobState> {
    stdout
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("CLUSTER:"))
        .map(|name| state_from_name(name, None, None))
}

/// Parses `scontrol show job` output (`JobState=COMPLETED Reason=None ...
/// ExitCode=0:0`). Only the first job is read (arrays and heterogeneous
/// jobs print several; a pilot is a single job).
pub fn parse_scontrol(stdout: &str) -> Result<JobState, ParseError> {
    let field = |key: &str| {
        stdout
            .split_whitespace()
            .find_map(|token| token.strip_prefix(key))
    };
    let name = field("JobState=")
        .ok_or_else(|| ParseError::new("no JobState= in scontrol output", stdout))?;
    let reason = field("Reason=");
    let exit = field("ExitCode=").map(parse_exit_code);
    Ok(state_from_name(name, reason, exit))
}

/// Slurm's `ExitCode=STATUS:SIGNAL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitCode {
    /// Exit status of the batch script.
    pub status: Option<i32>,
    /// Signal that killed it (0 if none).
    pub signal: Option<i32>,
}

fn parse_exit_code(text: &str) -> ExitCode {
    let (status, signal) = text.split_once(':').unwrap_or((text, "0"));
    ExitCode {
        status: status.parse().ok(),
        signal: signal.parse().ok(),
    }
}

/// Maps a Slurm state name (`squeue %T` / `scontrol JobState=`) to a
/// [`JobState`]. `reason` and `exit` come from `scontrol` when available.
pub fn state_from_name(name: &str, reason: Option<&str>, exit: Option<ExitCode>) -> JobState {
    let name = name.trim().to_ascii_uppercase();
    // Flags such as `CANCELLED+` (sacct) or `CANCELLED by 123` carry no
    // extra meaning for us.
    let base = name
        .split(|c: char| c == '+' || c.is_whitespace())
        .next()
        .unwrap_or("");
    match base {
        // Not doing work yet (or, when suspended, right now).
        "PENDING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "RESV_DEL_HOLD"
        | "CONFIGURING" | "SUSPENDED" | "POWER_UP_NODE" | "STOPPED" => JobState::Pending,
        "RUNNING" | "RESIZING" => JobState::Running,
        "COMPLETING" | "STAGE_OUT" | "SIGNALING" | "UPDATE_DB" => JobState::Finishing,
        "COMPLETED" => JobState::Finished {
            exit: exit.and_then(|e| e.status),
        },
        "CANCELLED" => JobState::Cancelled,
        "FAILED" | "TIMEOUT" | "NODE_FAIL" | "BOOT_FAIL" | "OUT_OF_MEMORY" | "DEADLINE"
        | "PREEMPTED" | "REVOKED" | "SPECIAL_EXIT" => JobState::Failed {
            reason: failure_reason(base, reason, exit),
        },
        _ => JobState::Unknown,
    }
}

/// `Slurm state TIMEOUT (reason TimeLimit, exit code 0:15)`.
fn failure_reason(state: &str, reason: Option<&str>, exit: Option<ExitCode>) -> String {
    let mut details = Vec::new();
    if let Some(r) = reason.filter(|r| !matches!(*r, "None" | "(null)" | "")) {
        details.push(format!("reason {r}"));
    }
    if let Some(ExitCode {
        status: Some(s),
        signal,
    }) = exit
    {
        details.push(format!("exit code {s}:{}", signal.unwrap_or(0)));
    }
    if details.is_empty() {
        format!("Slurm state {state}")
    } else {
        format!("Slurm state {state} ({})", details.join(", "))
    }
}

/// True if Slurm says it does not know the job (it finished long enough
/// ago to be purged, or the id was never valid).
pub fn is_unknown_job(stderr: &str) -> bool {
    stderr.to_ascii_lowercase().contains("invalid job id")
}

/// True if `scancel` failed only because the job is already over.
pub fn cancel_was_moot(stderr: &str) -> bool {
    let lower = stderr.to_ascii_lowercase();
    lower.contains("already completing or completed") || is_unknown_job(&lower)
}

/// Asks Slurm for the state of `job_id`: `squeue`, then `scontrol`, then
/// "finished" once Slurm has forgotten the job. Controller trouble is an
/// error, so the caller keeps the last known state.
pub fn query_state(job_id: &str, runner: &dyn Runner) -> Result<JobState, BackendError> {
    let job = parse_job(job_id)?;
    let cmd = squeue_command(&job);
    let out = spawn(&cmd, runner)?;
    if out.status.success() {
        if let Some(state) = parse_squeue(&stdout_text(&out)) {
            return Ok(state);
        }
    } else if !is_unknown_job(&stderr_text(&out)) {
        return Err(BackendError::failed(&cmd, &out));
    }
    let cmd = scontrol_command(&job);
    let out = spawn(&cmd, runner)?;
    if out.status.success() {
        // Known to scontrol but unreadable: say so rather than guess.
        return Ok(parse_scontrol(&stdout_text(&out)).unwrap_or(JobState::Unknown));
    }
    if is_unknown_job(&stderr_text(&out)) {
        return Ok(JobState::Finished { exit: None });
    }
    Err(BackendError::failed(&cmd, &out))
}

/// Cancels `job_id` with `scancel`.
pub fn cancel(job_id: &str, runner: &dyn Runner) -> Result<CancelOutcome, BackendError> {
    let job = parse_job(job_id)?;
    let cmd = cancel_command(&job);
    let out = spawn(&cmd, runner)?;
    let stderr = stderr_text(&out);
    // scancel may print the "already completed" error with exit status 0.
    if cancel_was_moot(&stderr) {
        return Ok(CancelOutcome::AlreadyOver);
    }
    if out.status.success() {
        Ok(CancelOutcome::Cancelled)
    } else {
        Err(BackendError::failed(&cmd, &out))
    }
}

fn parse_job(job_id: &str) -> Result<SlurmJobId, BackendError> {
    SlurmJobId::parse(job_id).map_err(|source| BackendError::Parse {
        command: format!("recorded job id `{job_id}`"),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::glidein::runner::testing::{fail, ok, FakeRunner, Reply};

    macro_rules! fixture {
        ($name:literal) => {
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/fixtures/glidein/slurm/",
                $name
            ))
        };
    }

    #[test]
    fn submit_command_puts_raw_args_before_script() {
        let raw = vec!["--account=proj42".to_string(), "-p".into(), "debug".into()];
        let cmd = submit_command(&raw, Path::new("/a/pilot.sh"));
        assert_eq!(
            cmd.to_string(),
            "sbatch --parsable --account=proj42 -p debug /a/pilot.sh"
        );
    }

    #[test]
    fn parses_sbatch_output() {
        assert_eq!(
            parse_submit(fixture!("sbatch_parsable.txt")).unwrap(),
            "1834512"
        );
        assert_eq!(
            parse_submit(fixture!("sbatch_parsable_cluster.txt")).unwrap(),
            "2291847;hpc2"
        );
        assert!(parse_submit("").is_err());
        let err = parse_submit("Submitted batch job 12\n").unwrap_err();
        assert!(err.to_string().contains("Submitted batch job 12"), "{err}");
        for bad in ["12;", "abc", "12;a b"] {
            assert!(parse_submit(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cluster_ids_add_clusters_flag() {
        let job = SlurmJobId::parse("2291847;hpc2").unwrap();
        assert_eq!(
            squeue_command(&job).to_string(),
            "squeue --clusters=hpc2 -h -j 2291847 -o %T"
        );
        assert_eq!(
            scontrol_command(&job).to_string(),
            "scontrol --clusters=hpc2 show job 2291847"
        );
        assert_eq!(
            cancel_command(&job).to_string(),
            "scancel --clusters=hpc2 2291847"
        );
        let job = SlurmJobId::parse("7").unwrap();
        assert_eq!(squeue_command(&job).to_string(), "squeue -h -j 7 -o %T");
    }

    #[test]
    fn parses_squeue_samples() {
        assert_eq!(
            parse_squeue(fixture!("squeue_running.txt")),
            Some(JobState::Running)
        );
        assert_eq!(
            parse_squeue(fixture!("squeue_pending.txt")),
            Some(JobState::Pending)
        );
        assert_eq!(
            parse_squeue(fixture!("squeue_configuring.txt")),
            Some(JobState::Pending)
        );
        assert_eq!(
            parse_squeue(fixture!("squeue_completing.txt")),
            Some(JobState::Finishing)
        );
        assert_eq!(
            parse_squeue(fixture!("squeue_cluster_pending.txt")),
            Some(JobState::Pending)
        );
        assert_eq!(parse_squeue(""), None);
        assert_eq!(parse_squeue("\n"), None);
        assert_eq!(parse_squeue("WEIRD_NEW_STATE\n"), Some(JobState::Unknown));
    }

    #[test]
    fn parses_scontrol_samples() {
        let parse = |text| parse_scontrol(text).unwrap();
        assert_eq!(
            parse(fixture!("scontrol_21.08_running.txt")),
            JobState::Running
        );
        assert_eq!(
            parse(fixture!("scontrol_21.08_completed.txt")),
            JobState::Finished { exit: Some(0) }
        );
        assert_eq!(
            parse(fixture!("scontrol_22.05_failed.txt")),
            JobState::Failed {
                reason: "Slurm state FAILED (reason NonZeroExitCode, exit code 127:0)".into()
            }
        );
        assert_eq!(
            parse(fixture!("scontrol_22.05_node_fail.txt")),
            JobState::Failed {
                reason: "Slurm state NODE_FAIL (reason NodeDown, exit code 0:0)".into()
            }
        );
        assert_eq!(
            parse(fixture!("scontrol_23.02_pending.txt")),
            JobState::Pending
        );
        assert_eq!(
            parse(fixture!("scontrol_23.02_cancelled.txt")),
            JobState::Cancelled
        );
        assert_eq!(
            parse(fixture!("scontrol_23.11_timeout.txt")),
            JobState::Failed {
                reason: "Slurm state TIMEOUT (reason TimeLimit, exit code 0:0)".into()
            }
        );
        assert_eq!(
            parse(fixture!("scontrol_23.11_completing.txt")),
            JobState::Finishing
        );
        assert!(parse_scontrol("No jobs in the system\n").is_err());
    }

    #[test]
    fn recognizes_error_messages() {
        assert!(is_unknown_job(fixture!("squeue_invalid_job.txt")));
        assert!(is_unknown_job(fixture!("scontrol_invalid_job.txt")));
        assert!(!is_unknown_job(fixture!("squeue_controller_down.txt")));
        assert!(cancel_was_moot(fixture!("scancel_already_completed.txt")));
        assert!(cancel_was_moot(fixture!("scancel_invalid_job.txt")));
        assert!(!cancel_was_moot(fixture!("scancel_denied.txt")));
    }

    #[test]
    fn state_names_map() {
        let s = |n| state_from_name(n, None, None);
        assert_eq!(s("SUSPENDED"), JobState::Pending);
        assert_eq!(s("REQUEUE_HOLD"), JobState::Pending);
        assert_eq!(s("running"), JobState::Running);
        assert_eq!(s("STAGE_OUT"), JobState::Finishing);
        assert_eq!(s("CANCELLED+"), JobState::Cancelled);
        assert_eq!(s("CANCELLED by 10421"), JobState::Cancelled);
        assert_eq!(s("COMPLETED"), JobState::Finished { exit: None });
        assert_eq!(
            s("OUT_OF_MEMORY"),
            JobState::Failed {
                reason: "Slurm state OUT_OF_MEMORY".into()
            }
        );
    }

    #[test]
    fn query_uses_squeue_while_queued() {
        let runner = FakeRunner::new(vec![ok(fixture!("squeue_running.txt"))]);
        assert_eq!(query_state("1834512", &runner).unwrap(), JobState::Running);
        assert_eq!(runner.programs(), ["squeue"]);
    }

    #[test]
    fn query_falls_back_to_scontrol_when_squeue_is_empty() {
        let runner = FakeRunner::new(vec![ok(""), ok(fixture!("scontrol_21.08_completed.txt"))]);
        assert_eq!(
            query_state("1834512", &runner).unwrap(),
            JobState::Finished { exit: Some(0) }
        );
        assert_eq!(runner.programs(), ["squeue", "scontrol"]);
    }

    #[test]
    fn query_falls_back_to_scontrol_on_invalid_job_id() {
        let runner = FakeRunner::new(vec![
            fail(1, fixture!("squeue_invalid_job.txt")),
            ok(fixture!("scontrol_23.02_cancelled.txt")),
        ]);
        assert_eq!(
            query_state("5120733", &runner).unwrap(),
            JobState::Cancelled
        );
    }

    #[test]
    fn forgotten_jobs_are_finished() {
        let runner = FakeRunner::new(vec![
            fail(1, fixture!("squeue_invalid_job.txt")),
            fail(1, fixture!("scontrol_invalid_job.txt")),
        ]);
        assert_eq!(
            query_state("5120733", &runner).unwrap(),
            JobState::Finished { exit: None }
        );
        // scontrol answers but says nothing we understand: unknown.
        let runner = FakeRunner::new(vec![ok(""), ok("garbage\n")]);
        assert_eq!(query_state("5", &runner).unwrap(), JobState::Unknown);
    }

    #[test]
    fn controller_trouble_is_an_error_naming_the_command() {
        let runner = FakeRunner::new(vec![fail(1, fixture!("squeue_controller_down.txt"))]);
        let msg = query_state("5120733", &runner).unwrap_err().to_string();
        assert!(msg.contains("`squeue -h -j 5120733 -o %T` failed"), "{msg}");
        assert!(msg.contains("Unable to contact slurm controller"), "{msg}");
        let runner = FakeRunner::new(vec![ok(""), fail(1, "scontrol: error: timeout\n")]);
        let msg = query_state("5", &runner).unwrap_err().to_string();
        assert!(msg.contains("scontrol show job 5"), "{msg}");
    }

    #[test]
    fn missing_squeue_is_explained() {
        let runner = FakeRunner::new(vec![Reply::Missing]);
        let msg = query_state("5", &runner).unwrap_err().to_string();
        assert!(
            msg.contains("`squeue` was not found") && msg.contains("Slurm"),
            "{msg}"
        );
    }

    #[test]
    fn bad_recorded_job_id_is_an_error() {
        let runner = FakeRunner::new(vec![]);
        let msg = query_state("x12", &runner).unwrap_err().to_string();
        assert!(msg.contains("recorded job id `x12`"), "{msg}");
    }

    #[test]
    fn cancel_outcomes() {
        let runner = FakeRunner::new(vec![ok("")]);
        assert_eq!(
            cancel("1834512", &runner).unwrap(),
            CancelOutcome::Cancelled
        );
        assert_eq!(runner.calls.borrow()[0].1, ["1834512"]);
        let runner = FakeRunner::new(vec![fail(1, fixture!("scancel_already_completed.txt"))]);
        assert_eq!(
            cancel("1834512", &runner).unwrap(),
            CancelOutcome::AlreadyOver
        );
        let runner = FakeRunner::new(vec![fail(1, fixture!("scancel_denied.txt"))]);
        let msg = cancel("1834512", &runner).unwrap_err().to_string();
        assert!(
            msg.contains("scancel 1834512") && msg.contains("permission denied"),
            "{msg}"
        );
    }
}
