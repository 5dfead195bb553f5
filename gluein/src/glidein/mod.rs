//! Glide-in backends for constellation.
//!
//! Users "glide" executors onto clusters by submitting pilot jobs; each
//! pilot starts `constellation agent` processes that join a pool. This
//! crate does everything `constellation glidein` needs below the argument
//! parser:
//!
//! * [`submit`]: validate a [`PilotSpec`], respect the per-backend
//!   [`backoff`], create an allocation directory, write the pilot script,
//!   run `sbatch`/`qsub`/ssh/local, and record the job id or the failure;
//! * [`refresh`]: ask the batch system (or hosts) for the job's state;
//! * [`cancel`]: stop the job (`scancel`, `qdel`, or the cancel script);
//! * [`resubmit`]: retry a failed submission in the same directory;
//! * [`dry_run`]: show the script and exact submit command, running nothing;
//! * [`alloc::list`] / [`alloc::prune`]: the `glidein list` side.
//!
//! All external commands go through a [`Runner`], so everything here can be
//! driven with canned output in tests.

pub mod alloc;
pub mod backoff;
pub mod direct;
pub mod pbs;
pub mod runner;
pub mod script;
pub mod slurm;
pub mod spec;
pub mod state;

use std::path::{Path, PathBuf};
use std::process::Output;

use thiserror::Error;

pub use alloc::{AllocError, Allocation, AllocationRecord};
pub use backoff::{BackoffError, Gate, Governor};
pub use runner::{BackendError, CommandLine, Runner, SystemRunner};
pub use script::ScriptError;
pub use spec::{Backend, PbsFlavor, PilotSpec, SpecError};
pub use state::{CancelOutcome, JobState};

use alloc::{CANCEL_SCRIPT, PILOT_SCRIPT, STDERR_FILE, STDOUT_FILE};
use direct::Started;

/// Everything that can go wrong in a glide-in operation.
#[derive(Debug, Error)]
pub enum GlideinError {
    /// The request itself is wrong; nothing was created.
    #[error("invalid glide-in request: {0}")]
    Spec(#[from] SpecError),
    /// The script cannot be written for this allocation directory.
    #[error(transparent)]
    Script(#[from] ScriptError),
    /// Allocation directory trouble.
    #[error(transparent)]
    Alloc(#[from] AllocError),
    /// Backoff file trouble.
    #[error(transparent)]
    Backoff(#[from] BackoffError),
    /// Too many consecutive failures: submissions wait for a human.
    #[error("{reason}. Fix the cause, then resume {backend} submissions (or delete {} to do so by hand)", file.display())]
    Paused {
        /// The paused backend.
        backend: Backend,
        /// Why, with the last error.
        reason: String,
        /// The backoff file.
        file: PathBuf,
    },
    /// A recent failure makes submissions wait a little.
    #[error("{backend} submissions are backing off after {failures} failed attempt(s): try again in {secs:.0} s (last error: {last_error})")]
    BackingOff {
        /// The backend.
        backend: Backend,
        /// Seconds left to wait.
        secs: f64,
        /// Consecutive failures so far.
        failures: u32,
        /// The last submission error.
        last_error: String,
    },
    /// The submit command failed; the allocation records the failure.
    #[error("submitting allocation {id} failed: {source} (details in {})", dir.display())]
    SubmitFailed {
        /// Allocation id.
        id: String,
        /// Allocation directory.
        dir: PathBuf,
        /// What failed (boxed: keeps every `Result` small).
        source: Box<BackendError>,
    },
    /// Asking for the job's state failed; the last known state is kept.
    #[error("could not get the state of allocation {id}: {source}")]
    Query {
        /// Allocation id.
        id: String,
        /// What failed (boxed: keeps every `Result` small).
        source: Box<BackendError>,
    },
    /// Cancelling failed; the job may still be running.
    #[error("could not cancel allocation {id}: {source}")]
    Cancel {
        /// Allocation id.
        id: String,
        /// What failed (boxed: keeps every `Result` small).
        source: Box<BackendError>,
    },
    /// Only failed submissions can be resubmitted.
    #[error("allocation {id} cannot be resubmitted: {why}")]
    NotResubmittable {
        /// Allocation id.
        id: String,
        /// Why not.
        why: String,
    },
}

/// The command that starts the pilot whose directory is `dir`.
pub fn submit_command(spec: &PilotSpec, dir: &Path) -> CommandLine {
    let script = dir.join(PILOT_SCRIPT);
    match spec.backend {
        Backend::Slurm => slurm::submit_command(&spec.raw_args, &script),
        Backend::Pbs => pbs::submit_command(&spec.raw_args, &script),
        Backend::Ssh => direct::submit_command(false, dir),
        Backend::Local => direct::submit_command(true, dir),
    }
}

/// Submits a pilot: checks the spec and the backend's backoff, creates the
/// allocation directory under `root` with its scripts, runs the submit
/// command, and records the job id (or the failure, which also feeds the
/// backoff). `now` is the current time in UNIX seconds.
///
/// On a submission failure the allocation stays on disk in state `Failed`
/// (see [`GlideinError::SubmitFailed`]) so the user can inspect and
/// [`resubmit`] it.
pub fn submit(
    spec: &PilotSpec,
    root: &Path,
    runner: &dyn Runner,
    now: f64,
) -> Result<Allocation, GlideinError> {
    let now = sane_time(now);
    spec.validate()?;
    // The directory name adds only safe characters, so checking the root
    // catches unusable paths before anything is created.
    script::check_directive_path(spec.backend, root)?;
    check_gate(root, spec.backend, now)?;
    let mut alloc = alloc::create(root, spec.backend, &timefmt::path_unix_timestamp(now))?;
    let record = &mut alloc.record;
    record.submitted_at = now;
    record.nodes = spec.nodes;
    record.walltime_secs = spec.walltime.as_secs();
    record.hosts = spec.hosts.clone();
    record.ssh_options = spec.ssh_options.clone();
    write_scripts(spec, &alloc)?;
    let cmd = submit_command(spec, alloc.dir());
    alloc.record.submit_command = Some(cmd.clone());
    alloc.save()?;
    attempt(&mut alloc, &cmd, root, runner, now)?;
    Ok(alloc)
}

/// Retries the submission of an allocation whose submission failed, in the
/// same directory with the same script and command (`attempts` counts up).
pub fn resubmit(
    alloc: &mut Allocation,
    root: &Path,
    runner: &dyn Runner,
    now: f64,
) -> Result<(), GlideinError> {
    let not = |why: String| GlideinError::NotResubmittable {
        id: alloc.id().to_string(),
        why,
    };
    if !matches!(alloc.record.state, JobState::Failed { .. }) || alloc.record.job_id.is_some() {
        return Err(not(format!(
            "only failed submissions can be retried, and it is {}",
            alloc.record.state
        )));
    }
    let now = sane_time(now);
    let Some(cmd) = alloc.record.submit_command.clone() else {
        return Err(not("it has no recorded submit command".to_string()));
    };
    check_gate(root, alloc.record.backend, now)?;
    alloc.record.submitted_at = now;
    attempt(alloc, &cmd, root, runner, now)
}

/// A NaN or infinite time would be written to JSON as `null` and make the
/// state file unreadable; use the clock instead.
fn sane_time(now: f64) -> f64 {
    if now.is_finite() {
        now
    } else {
        alloc::unix_now()
    }
}

/// Refuses to submit while the backend is backing off or paused.
fn check_gate(root: &Path, backend: Backend, now: f64) -> Result<(), GlideinError> {
    let gov = backoff::load(root, backend)?;
    match gov.next_allowed(now) {
        Gate::Open => Ok(()),
        Gate::Wait { secs, .. } => Err(GlideinError::BackingOff {
            backend,
            secs: secs.ceil(),
            failures: gov.consecutive_failures,
            last_error: gov.last_error.unwrap_or_default(),
        }),
        Gate::Paused { reason } => Err(GlideinError::Paused {
            backend,
            reason,
            file: backoff::path(root, backend),
        }),
    }
}

/// Lifts a pause (or wait) on `backend` submissions, e.g. for a
/// `glidein resume` command after the user fixed the cause.
pub fn resume(root: &Path, backend: Backend) -> Result<(), GlideinError> {
    let mut gov = backoff::load(root, backend)?;
    gov.resume();
    gov.save(root)?;
    Ok(())
}

fn write_scripts(spec: &PilotSpec, alloc: &Allocation) -> Result<(), GlideinError> {
    alloc.write_script(PILOT_SCRIPT, &script::pilot_script(spec, alloc.dir())?)?;
    if let Some(text) = script::cancel_script(spec, alloc.dir())? {
        alloc.write_script(CANCEL_SCRIPT, &text)?;
    }
    Ok(())
}

/// Runs the submit command once and records the outcome in the allocation
/// and the backend's governor.
fn attempt(
    alloc: &mut Allocation,
    cmd: &CommandLine,
    root: &Path,
    runner: &dyn Runner,
    now: f64,
) -> Result<(), GlideinError> {
    let backend = alloc.record.backend;
    alloc.record.attempts += 1;
    let output = runner::spawn(cmd, runner);
    if backend == Backend::Ssh {
        // The ssh pilot runs here, not under a batch system: keep its log.
        if let Ok(out) = &output {
            alloc.write_file(STDOUT_FILE, &out.stdout)?;
            alloc.write_file(STDERR_FILE, &out.stderr)?;
        }
    }
    let result = output.and_then(|out| interpret_submit(backend, cmd, &out));
    let mut gov = backoff::load(root, backend)?;
    match &result {
        Ok(started) => {
            alloc.record.job_id = started.job_id.clone();
            alloc.record.state = match backend {
                Backend::Slurm | Backend::Pbs => JobState::Pending,
                Backend::Ssh | Backend::Local => JobState::Running,
            };
            alloc.record.last_error = started.warning.clone();
            gov.record_success();
        }
        Err(e) => {
            let message = e.to_string();
            alloc.record.state = JobState::Failed {
                reason: format!("submission failed: {message}"),
            };
            alloc.record.last_error = Some(message.clone());
            // A missing sbatch is a setup problem, not scheduler trouble.
            if !e.is_missing_program() {
                gov.record_failure(now, &message);
            }
        }
    }
    alloc.save()?;
    gov.save(root)?;
    result
        .map(|_| ())
        .map_err(|source| GlideinError::SubmitFailed {
            id: alloc.id().to_string(),
            dir: alloc.dir().to_path_buf(),
            source: Box::new(source),
        })
}

/// Reads the submit command's output: a job id for batch systems, the
/// pilot pid for local, a start report for ssh.
fn interpret_submit(
    backend: Backend,
    cmd: &CommandLine,
    out: &Output,
) -> Result<Started, BackendError> {
    let batch_id = |parse: fn(&str) -> Result<String, runner::ParseError>| {
        if !out.status.success() {
            return Err(BackendError::failed(cmd, out));
        }
        let job_id = parse(&runner::stdout_text(out)).map_err(|e| BackendError::parse(cmd, e))?;
        Ok(Started {
            job_id: Some(job_id),
            warning: None,
        })
    };
    match backend {
        Backend::Slurm => batch_id(slurm::parse_submit),
        Backend::Pbs => batch_id(pbs::parse_submit),
        Backend::Ssh => direct::interpret_ssh_start(cmd, out),
        Backend::Local => direct::interpret_local_start(cmd, out),
    }
}

/// Updates `alloc`'s state from the batch system (or hosts) and saves it.
/// Finished, failed and cancelled allocations are not queried again. On a
/// query error the last known state is kept and the error recorded.
pub fn refresh(alloc: &mut Allocation, runner: &dyn Runner) -> Result<JobState, GlideinError> {
    if alloc.record.state.is_terminal() {
        return Ok(alloc.record.state.clone());
    }
    let result = match (alloc.record.backend, alloc.record.job_id.clone()) {
        (Backend::Slurm, Some(id)) => slurm::query_state(&id, runner),
        (Backend::Pbs, Some(id)) => pbs::query_state(&id, runner),
        // Not submitted (yet): nothing to ask.
        (Backend::Slurm | Backend::Pbs, None) => return Ok(alloc.record.state.clone()),
        (Backend::Ssh, _) => direct::ssh_query(alloc, runner),
        (Backend::Local, _) => direct::local_query(alloc, runner),
    };
    record_outcome(alloc, result, JobState::clone, |id, source| {
        GlideinError::Query { id, source }
    })
}

/// Cancels `alloc`: `scancel`/`qdel` for batch jobs, the cancel script for
/// ssh and local. Allocations that are already over are left alone.
pub fn cancel(alloc: &mut Allocation, runner: &dyn Runner) -> Result<CancelOutcome, GlideinError> {
    if alloc.record.state.is_terminal() {
        return Ok(CancelOutcome::AlreadyOver);
    }
    let result = match (alloc.record.backend, alloc.record.job_id.clone()) {
        (Backend::Slurm, Some(id)) => slurm::cancel(&id, runner),
        (Backend::Pbs, Some(id)) => pbs::cancel(&id, runner),
        // Never reached the batch system: nothing to stop.
        (Backend::Slurm | Backend::Pbs, None) => Ok(CancelOutcome::Cancelled),
        (Backend::Ssh | Backend::Local, _) => direct::cancel(alloc, runner),
    };
    let state_after = |outcome: &CancelOutcome| match outcome {
        CancelOutcome::Cancelled => JobState::Cancelled,
        CancelOutcome::AlreadyOver => JobState::Finished { exit: None },
    };
    record_outcome(alloc, result, state_after, |id, source| {
        GlideinError::Cancel { id, source }
    })
}

/// Saves what asking the batch system (or hosts) about `alloc` taught: on
/// success the state `state_after` gives, on failure the error, keeping
/// the last known state; the error comes back as `failed` names it.
fn record_outcome<T>(
    alloc: &mut Allocation,
    result: Result<T, BackendError>,
    state_after: impl FnOnce(&T) -> JobState,
    failed: fn(String, Box<BackendError>) -> GlideinError,
) -> Result<T, GlideinError> {
    match result {
        Ok(value) => {
            alloc.record.state = state_after(&value);
            alloc.record.last_error = None;
            alloc.save()?;
            Ok(value)
        }
        Err(source) => {
            alloc.record.last_error = Some(source.to_string());
            alloc.save()?;
            Err(failed(alloc.id().to_string(), Box::new(source)))
        }
    }
}

/// What [`submit`] would do, as text: the allocation directory it would
/// create under `root`, the pilot (and cancel) script, and the exact
/// submit command. Runs and creates nothing.
pub fn dry_run(spec: &PilotSpec, root: &Path, now: f64) -> Result<String, GlideinError> {
    spec.validate()?;
    script::check_directive_path(spec.backend, root)?;
    let dir = alloc::next_dir(root, spec.backend, &timefmt::path_unix_timestamp(now))?;
    let mut text = format!("# allocation directory (not created): {}\n", dir.display());
    text.push_str(&format!("# --- {} ---\n", dir.join(PILOT_SCRIPT).display()));
    text.push_str(&script::pilot_script(spec, &dir)?);
    if let Some(cancel) = script::cancel_script(spec, &dir)? {
        text.push_str(&format!(
            "# --- {} ---\n",
            dir.join(CANCEL_SCRIPT).display()
        ));
        text.push_str(&cancel);
    }
    text.push_str("# --- submit command ---\n");
    text.push_str(&submit_command(spec, &dir).to_string());
    text.push('\n');
    Ok(text)
}

#[cfg(test)]
mod tests;
