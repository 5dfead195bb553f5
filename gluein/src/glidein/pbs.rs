//! PBS (Torque and PBS Pro / OpenPBS): `qsub`, `qstat -f` and `qdel`.
//!
//! As in [`crate::glidein::slurm`], commands and parsers are pure functions, tested
//! on recorded output (`fixtures/pbs`). The two PBS families differ where
//! it matters here:
//!
//! * Torque keeps finished jobs visible to `qstat -f` for `keep_completed`
//!   seconds in state `C` with `exit_status`, then answers
//!   `qstat: Unknown Job Id`.
//! * PBS Pro hides finished jobs from plain `qstat` ("Job has finished, use
//!   -x or -H ...") and shows them with `qstat -x -f` in state `F` with
//!   `Exit_status`. We only use `-x` after that message, because Torque's
//!   `qstat -x` means XML output.
//! * They start one task per node differently (see
//!   [`crate::glidein::spec::PbsFlavor`]); [`detect_flavor`] tells them
//!   apart by `qstat --version`. Queries and cancels are the same for both.

use std::path::Path;

use crate::glidein::runner::{
    last_line, spawn, stderr_text, stdout_text, BackendError, CommandLine, ParseError, Runner,
};
use crate::glidein::spec::PbsFlavor;
use crate::glidein::state::{CancelOutcome, JobState};

/// `qsub [raw args] SCRIPT`: command-line options override `#PBS` lines.
pub fn submit_command(raw_args: &[String], script: &Path) -> CommandLine {
    let mut args = raw_args.to_vec();
    args.push(script.to_string_lossy().into_owned());
    CommandLine::new("qsub", args)
}

/// Parses `qsub` output: the job id (`123.server.domain`, PBS Pro
/// `123.server`, array `123[].server`) on the last line.
pub fn parse_submit(stdout: &str) -> Result<String, ParseError> {
    let line =
        last_line(stdout).ok_or_else(|| ParseError::new("qsub printed no job id", stdout))?;
    let digits_first = line.starts_with(|c: char| c.is_ascii_digit());
    if !digits_first || line.chars().any(char::is_whitespace) {
        return Err(ParseError::new(
            "expected a PBS job id such as `123.server`",
            stdout,
        ));
    }
    Ok(line.to_string())
}

/// `qstat -f ID`: full status of a queued or running job.
pub fn qstat_command(job_id: &str) -> CommandLine {
    CommandLine::new("qstat", ["-f", job_id])
}

/// `qstat -x -f ID`: PBS Pro only, includes finished jobs.
pub fn qstat_history_command(job_id: &str) -> CommandLine {
    CommandLine::new("qstat", ["-x", "-f", job_id])
}

/// `qstat --version`, which both families answer.
pub fn version_command() -> CommandLine {
    CommandLine::new("qstat", ["--version"])
}

/// Which PBS printed `output` (stdout and stderr of `qstat --version`):
/// PBS Pro and OpenPBS print `pbs_version = 2022.1.1`, Torque prints
/// `Version: 6.1.3` (older ones `version: 2.4.16`). `None` if neither.
pub fn flavor_from_version(output: &str) -> Option<PbsFlavor> {
    let lower = output.to_ascii_lowercase();
    if lower.contains("pbs_version") {
        Some(PbsFlavor::Pro)
    } else if lower.contains("version") {
        Some(PbsFlavor::Torque)
    } else {
        None
    }
}

/// Asks `qstat --version` which PBS this cluster runs. The exit status is
/// not trusted either way (some versions print their version and exit 1);
/// only the text is.
pub fn detect_flavor(runner: &dyn Runner) -> Result<PbsFlavor, BackendError> {
    let cmd = version_command();
    let out = spawn(&cmd, runner)?;
    let text = format!("{}{}", stdout_text(&out), stderr_text(&out));
    flavor_from_version(&text).ok_or_else(|| {
        BackendError::parse(
            &cmd,
            ParseError::new("expected `pbs_version = ...` or `Version: ...`", &text),
        )
    })
}

/// `qdel ID`.
pub fn cancel_command(job_id: &str) -> CommandLine {
    CommandLine::new("qdel", [job_id])
}

/// The attributes we need from `qstat -f`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QstatJob {
    /// `job_state` letter.
    pub state: String,
    /// `exit_status` (Torque) or `Exit_status` (PBS Pro), when present.
    pub exit_status: Option<i32>,
    /// `comment` (PBS Pro explains holds and failures there).
    pub comment: Option<String>,
}

/// Reads `key = value` attributes of the first job in `qstat -f` output.
/// Long values wrap at 80 columns onto tab-indented continuation lines,
/// split anywhere (even mid-word), so a continuation is appended as is to
/// the value it continues; only `comment` is long enough for that to
/// matter.
pub fn parse_qstat(stdout: &str) -> Result<QstatJob, ParseError> {
    let mut job = QstatJob::default();
    let mut jobs_seen = 0;
    let mut in_comment = false;
    for line in stdout.lines() {
        if line.starts_with("Job Id:") {
            jobs_seen += 1;
            if jobs_seen > 1 {
                break;
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix('\t') {
            if let (true, Some(comment)) = (in_comment, job.comment.as_mut()) {
                comment.push_str(rest.trim_end());
            }
            continue;
        }
        in_comment = false;
        let Some((key, value)) = line.split_once(" = ") else {
            continue;
        };
        match key.trim().to_ascii_lowercase().as_str() {
            "job_state" => job.state = value.trim().to_string(),
            "exit_status" => job.exit_status = value.trim().parse().ok(),
            "comment" => {
                job.comment = Some(value.trim().to_string());
                in_comment = true;
            }
            _ => {}
        }
    }
    if job.state.is_empty() {
        return Err(ParseError::new("no job_state in qstat -f output", stdout));
    }
    Ok(job)
}

/// Maps a `qstat -f` job to a [`JobState`].
///
/// Exit statuses follow the PBS convention: negative means PBS itself could
/// not run the job or killed it for a resource limit, above 256 means
/// killed by signal `status - 256` (all count as failures), anything else
/// is the pilot script's own status.
pub fn job_state(job: &QstatJob) -> JobState {
    match job.state.as_str() {
        // Queued, held, waiting for its start time, in transit, suspended.
        "Q" | "H" | "W" | "T" | "S" | "U" => JobState::Pending,
        "R" | "B" => JobState::Running,
        "E" => JobState::Finishing,
        "C" | "F" | "X" => finished(job.exit_status, job.comment.as_deref()),
        _ => JobState::Unknown,
    }
}

fn finished(exit: Option<i32>, comment: Option<&str>) -> JobState {
    let with_comment = |text: String| match comment {
        Some(c) if !c.is_empty() => format!("{text}: {c}"),
        _ => text,
    };
    match exit {
        Some(code) if code < 0 => JobState::Failed {
            reason: with_comment(negative_exit(code)),
        },
        Some(code) if code > 256 => JobState::Failed {
            reason: with_comment(format!(
                "killed by signal {} (exit_status {code})",
                code - 256
            )),
        },
        exit => JobState::Finished { exit },
    }
}

/// What a negative exit status means. PBS Pro's -24 to -29 are its
/// `JOB_EXEC_KILL_*` codes for jobs killed over a resource limit; the rest
/// (-1 to -20 or so, both families) mean the job never ran properly.
fn negative_exit(code: i32) -> String {
    let limit = match code {
        -24 | -25 => "cpus",
        -26 => "virtual memory",
        -27 => "memory",
        -28 => "cpu time",
        -29 => "walltime",
        _ => return format!("PBS could not run the job (exit_status {code})"),
    };
    format!("killed by PBS for exceeding its {limit} (exit_status {code})")
}

/// True if PBS does not know the job (`qstat: Unknown Job Id ...`).
pub fn is_unknown_job(stderr: &str) -> bool {
    stderr.to_ascii_lowercase().contains("unknown job id")
}

/// True if PBS Pro says the job finished and `-x` would show it.
pub fn is_finished_job(stderr: &str) -> bool {
    stderr.to_ascii_lowercase().contains("job has finished")
}

/// True if `qdel` failed only because the job is already over.
pub fn cancel_was_moot(stderr: &str) -> bool {
    let lower = stderr.to_ascii_lowercase();
    is_unknown_job(&lower)
        || is_finished_job(&lower)
        || lower.contains("invalid state for job - complete")
}

/// Asks PBS for the state of `job_id`: `qstat -f`; on PBS Pro's "job has
/// finished", `qstat -x -f`; "finished" once PBS has forgotten the job.
pub fn query_state(job_id: &str, runner: &dyn Runner) -> Result<JobState, BackendError> {
    let cmd = qstat_command(job_id);
    let out = spawn(&cmd, runner)?;
    let stderr = stderr_text(&out);
    if out.status.success() {
        return parse_to_state(&cmd, &stdout_text(&out));
    }
    if is_unknown_job(&stderr) {
        return Ok(JobState::Finished { exit: None });
    }
    if !is_finished_job(&stderr) {
        return Err(BackendError::failed(&cmd, &out));
    }
    let cmd = qstat_history_command(job_id);
    let out = spawn(&cmd, runner)?;
    if out.status.success() {
        return parse_to_state(&cmd, &stdout_text(&out));
    }
    // History expired or disabled: we know only that it finished.
    Ok(JobState::Finished { exit: None })
}

fn parse_to_state(cmd: &CommandLine, stdout: &str) -> Result<JobState, BackendError> {
    parse_qstat(stdout)
        .map(|job| job_state(&job))
        .map_err(|e| BackendError::parse(cmd, e))
}

/// Cancels `job_id` with `qdel`.
pub fn cancel(job_id: &str, runner: &dyn Runner) -> Result<CancelOutcome, BackendError> {
    let cmd = cancel_command(job_id);
    let out = spawn(&cmd, runner)?;
    if out.status.success() {
        return Ok(CancelOutcome::Cancelled);
    }
    if cancel_was_moot(&stderr_text(&out)) {
        return Ok(CancelOutcome::AlreadyOver);
    }
    Err(BackendError::failed(&cmd, &out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::glidein::runner::testing::{fail, ok, FakeRunner, Reply};

    macro_rules! fixture {
        ($name:literal) => {
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/fixtures/glidein/pbs/",
                $name
            ))
        };
    }

    fn state(text: &str) -> JobState {
        job_state(&parse_qstat(text).unwrap())
    }

    #[test]
    fn submit_command_puts_raw_args_before_script() {
        let raw = vec![
            "-A".to_string(),
            "proj42".into(),
            "-q".into(),
            "debug".into(),
        ];
        let cmd = submit_command(&raw, Path::new("/a/pilot.sh"));
        assert_eq!(cmd.to_string(), "qsub -A proj42 -q debug /a/pilot.sh");
    }

    #[test]
    fn parses_qsub_output() {
        assert_eq!(
            parse_submit(fixture!("qsub_torque.txt")).unwrap(),
            "48213.torque01.cluster.example.org"
        );
        assert_eq!(
            parse_submit(fixture!("qsub_pbspro.txt")).unwrap(),
            "7102.pbs01"
        );
        assert_eq!(parse_submit("12[].pbs01\n").unwrap(), "12[].pbs01");
        for bad in [
            "",
            fixture!("qsub_error_pbspro_limits.txt"),
            fixture!("qsub_error_torque_uid.txt"),
        ] {
            assert!(parse_submit(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn parses_torque6_samples() {
        assert_eq!(
            state(fixture!("qstat_torque6_queued.txt")),
            JobState::Pending
        );
        assert_eq!(
            state(fixture!("qstat_torque6_running.txt")),
            JobState::Running
        );
        assert_eq!(
            state(fixture!("qstat_torque6_completed.txt")),
            JobState::Finished { exit: Some(0) }
        );
        assert_eq!(
            state(fixture!("qstat_torque6_killed.txt")),
            JobState::Failed {
                reason: "killed by signal 15 (exit_status 271)".into()
            }
        );
        assert_eq!(
            state(fixture!("qstat_torque6_exec_failed.txt")),
            JobState::Failed {
                reason: "PBS could not run the job (exit_status -3)".into()
            }
        );
    }

    #[test]
    fn parses_pbspro2022_samples() {
        assert_eq!(
            state(fixture!("qstat_pbspro2022_running.txt")),
            JobState::Running
        );
        assert_eq!(
            state(fixture!("qstat_pbspro2022_exiting.txt")),
            JobState::Finishing
        );
        let held = parse_qstat(fixture!("qstat_pbspro2022_held.txt")).unwrap();
        assert_eq!(held.state, "H");
        assert_eq!(
            held.comment.as_deref(),
            Some("job held, too many failed attempts to run")
        );
        assert_eq!(job_state(&held), JobState::Pending);
        assert_eq!(
            state(fixture!("qstat_pbspro2022_finished.txt")),
            JobState::Finished { exit: Some(0) }
        );
    }

    #[test]
    fn wrapped_lines_and_missing_state() {
        let job = parse_qstat(fixture!("qstat_torque6_running.txt")).unwrap();
        assert_eq!(job.exit_status, None);
        // A wrapped comment is joined where it was split (mid-word here),
        // and the wrapped attributes around it stay out of it.
        let job = parse_qstat(fixture!("qstat_pbspro2022_finished.txt")).unwrap();
        assert_eq!(
            job.comment.as_deref(),
            Some("Job run at Tue Sep 20 at 14:02 on (node017:ncpus=1)+(node018:ncpus=1) and finished")
        );
        assert!(parse_qstat("Job Id: 1.s\n    queue = batch\n").is_err());
        // Only the first job counts.
        let two = "Job Id: 1.s\n    job_state = R\nJob Id: 2.s\n    job_state = C\n";
        assert_eq!(state(two), JobState::Running);
        assert_eq!(state("Job Id: 1.s\n    job_state = M\n"), JobState::Unknown);
    }

    #[test]
    fn recognizes_error_messages() {
        assert!(is_unknown_job(fixture!("qstat_torque_unknown.txt")));
        assert!(is_unknown_job(fixture!("qstat_pbspro_unknown.txt")));
        assert!(is_finished_job(fixture!("qstat_pbspro_finished.txt")));
        assert!(!is_unknown_job(fixture!("qstat_pbspro_server_down.txt")));
        assert!(cancel_was_moot(fixture!("qdel_torque_unknown.txt")));
        assert!(cancel_was_moot(fixture!("qdel_pbspro_finished.txt")));
        assert!(!cancel_was_moot(fixture!("qdel_torque_unauthorized.txt")));
    }

    #[test]
    fn flavor_from_qstat_version() {
        let runner = FakeRunner::new(vec![ok(fixture!("qstat_version_pbspro.txt"))]);
        assert_eq!(detect_flavor(&runner).unwrap(), PbsFlavor::Pro);
        assert_eq!(runner.calls.borrow()[0].1, ["--version"]);
        let runner = FakeRunner::new(vec![ok(fixture!("qstat_version_openpbs.txt"))]);
        assert_eq!(detect_flavor(&runner).unwrap(), PbsFlavor::Pro);
        // Torque writes it to stderr; the text counts, not the stream.
        let runner = FakeRunner::new(vec![fail(0, fixture!("qstat_version_torque6.txt"))]);
        assert_eq!(detect_flavor(&runner).unwrap(), PbsFlavor::Torque);
        let runner = FakeRunner::new(vec![fail(2, "qstat: cannot connect to server\n")]);
        let msg = detect_flavor(&runner).unwrap_err().to_string();
        assert!(
            msg.contains("qstat --version") && msg.contains("cannot connect"),
            "{msg}"
        );
        let runner = FakeRunner::new(vec![Reply::Missing]);
        assert!(detect_flavor(&runner).unwrap_err().is_missing_program());
    }

    #[test]
    fn parses_pbspro_select_job_samples() {
        // The jobs the PBS Pro pilot submits: select/place, one MPI slot per node.
        let queued = parse_qstat(fixture!("qstat_pbspro_select_queued.txt")).unwrap();
        assert_eq!(job_state(&queued), JobState::Pending);
        assert_eq!(
            queued.comment.as_deref(),
            Some("Not Running: Insufficient amount of resource: ncpus (R: 64 A: 32 T: 512)")
        );
        assert_eq!(
            state(fixture!("qstat_pbspro_select_running.txt")),
            JobState::Running
        );
        assert_eq!(
            state(fixture!("qstat_pbspro_select_walltime.txt")),
            JobState::Failed {
                reason: "killed by PBS for exceeding its walltime (exit_status -29): Job run \
                         at Thu Mar 14 at 09:12 on (cn101:ncpus=32)+(cn102:ncpus=32) and finished"
                    .into()
            }
        );
        // The pilot's own refusal (several slots per node) is a plain exit 1.
        assert_eq!(
            state(fixture!("qstat_pbspro_select_refused.txt")),
            JobState::Finished { exit: Some(1) }
        );
    }

    #[test]
    fn query_running_job() {
        let runner = FakeRunner::new(vec![ok(fixture!("qstat_torque6_running.txt"))]);
        let id = "48213.torque01.cluster.example.org";
        assert_eq!(query_state(id, &runner).unwrap(), JobState::Running);
        assert_eq!(runner.calls.borrow()[0].1, ["-f", id]);
    }

    #[test]
    fn query_torque_forgotten_job() {
        let runner = FakeRunner::new(vec![fail(153, fixture!("qstat_torque_unknown.txt"))]);
        assert_eq!(
            query_state("48213.torque01.cluster.example.org", &runner).unwrap(),
            JobState::Finished { exit: None }
        );
    }

    #[test]
    fn query_pbspro_finished_job_uses_history() {
        let runner = FakeRunner::new(vec![
            fail(35, fixture!("qstat_pbspro_finished.txt")),
            ok(fixture!("qstat_pbspro2022_finished.txt")),
        ]);
        assert_eq!(
            query_state("7102.pbs01", &runner).unwrap(),
            JobState::Finished { exit: Some(0) }
        );
        assert_eq!(runner.calls.borrow()[1].1, ["-x", "-f", "7102.pbs01"]);
        // History gone too.
        let runner = FakeRunner::new(vec![
            fail(35, fixture!("qstat_pbspro_finished.txt")),
            fail(153, fixture!("qstat_pbspro_unknown.txt")),
        ]);
        assert_eq!(
            query_state("7102.pbs01", &runner).unwrap(),
            JobState::Finished { exit: None }
        );
    }

    #[test]
    fn server_trouble_is_an_error_naming_the_command() {
        let runner = FakeRunner::new(vec![fail(2, fixture!("qstat_pbspro_server_down.txt"))]);
        let msg = query_state("7102.pbs01", &runner).unwrap_err().to_string();
        assert!(msg.contains("`qstat -f 7102.pbs01` failed"), "{msg}");
        assert!(msg.contains("cannot connect to server pbs01"), "{msg}");
        let runner = FakeRunner::new(vec![ok("Job Id: 1.s\n")]);
        let msg = query_state("1.s", &runner).unwrap_err().to_string();
        assert!(
            msg.contains("could not understand the output of `qstat -f 1.s`"),
            "{msg}"
        );
    }

    #[test]
    fn cancel_outcomes() {
        let runner = FakeRunner::new(vec![ok("")]);
        assert_eq!(
            cancel("7102.pbs01", &runner).unwrap(),
            CancelOutcome::Cancelled
        );
        let runner = FakeRunner::new(vec![fail(153, fixture!("qdel_torque_unknown.txt"))]);
        assert_eq!(
            cancel("48213.torque01", &runner).unwrap(),
            CancelOutcome::AlreadyOver
        );
        let runner = FakeRunner::new(vec![fail(35, fixture!("qdel_pbspro_finished.txt"))]);
        assert_eq!(
            cancel("7102.pbs01", &runner).unwrap(),
            CancelOutcome::AlreadyOver
        );
        let runner = FakeRunner::new(vec![fail(159, fixture!("qdel_torque_unauthorized.txt"))]);
        let msg = cancel("48213.torque01", &runner).unwrap_err().to_string();
        assert!(
            msg.contains("qdel 48213.torque01") && msg.contains("Unauthorized"),
            "{msg}"
        );
    }
}
