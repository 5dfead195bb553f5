//! A job's runner process, the job service's effects on it: starting it
//! (`constellation run` in a process group of its own), signalling it,
//! telling whether it still runs (`/proc`, its run journal's lock), and
//! reading its log.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::DirBuilderExt as _;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::SystemTime;

use anyhow::Context as _;
use journal::Journal;

use super::decide::Exit;
use super::intake::{kept_graph_name, KEPT_CONTEXT_FILE, KEPT_SWEEPS};
use super::store::JobRow;
use super::supervisor::{ServiceConfig, RUNNER_RECONNECT};

/// How many lines of its log a runner that ended badly leaves in its
/// job's message.
const LOG_TAIL_LINES: usize = 5;

/// A job's runner process, started by this pool node or adopted from a
/// previous one.
pub(super) struct RunnerProcess {
    /// The process, when this pool node started it.
    pub(super) child: Option<Child>,
    /// Its process id, if known (an adopted runner's comes from its run
    /// journal's lock file).
    pub(super) pid: Option<u32>,
    /// The job's run journal, whose lock the runner holds while it runs.
    pub(super) journal: PathBuf,
}

impl RunnerProcess {
    /// How it ended, once it has.
    pub(super) fn ended(&mut self) -> Option<Exit> {
        match &mut self.child {
            Some(child) => match child.try_wait() {
                Ok(Some(status)) => Some(Exit::Status(status)),
                Ok(None) => None,
                // Not a child any more (cannot happen for one we spawned
                // and did not reap): the journal decides.
                Err(_) => Some(Exit::Unseen),
            },
            None => runner_gone(self.pid, &self.journal).then_some(Exit::Unseen),
        }
    }
}

/// `constellation run` for the job, in the submitter's directory, in a
/// process group of its own, its output appended to the runner log.
pub(super) fn spawn_runner(
    config: &ServiceConfig,
    job: &JobRow,
    resume: bool,
) -> anyhow::Result<Child> {
    // Made at submit; a job queued by an older pool node has none yet.
    // Never its parents: a state directory removed under the pool is
    // not silently made again.
    let dir = job_dir(job);
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Err(error) if error.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(error).with_context(|| format!("cannot create {}", dir.display()))
        }
        _ => {}
    }
    let log_path = runner_log(job);
    let mut log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("cannot open {}", log_path.display()))?;
    let progress = progress_file(job);
    let _ = std::fs::remove_file(&progress);
    let args = runner_args(config, job, resume, &dir, progress);
    let shown: Vec<String> = (args.iter())
        .map(|arg| arg.to_string_lossy().into_owned())
        .collect();
    writeln!(
        log,
        "== {} job {}: {} {} {} (in {})",
        timefmt::format_timestamp(SystemTime::now()),
        job.id,
        if resume { "resuming:" } else { "starting:" },
        config.program.display(),
        shown.join(" "),
        job.cwd.display()
    )
    .with_context(|| format!("cannot write {}", log_path.display()))?;
    let output = log
        .try_clone()
        .with_context(|| format!("cannot share {}", log_path.display()))?;
    Command::new(&config.program)
        .args(&args)
        .current_dir(&job.cwd)
        .stdin(Stdio::null())
        .stdout(output)
        .stderr(log)
        // Its own group: Ctrl-C in the pool's terminal is not for it.
        .process_group(0)
        .spawn()
        .with_context(|| {
            format!(
                "cannot start {} in {}",
                config.program.display(),
                job.cwd.display()
            )
        })
}

/// The runner's arguments: `run` with the job's kept graph (or, for a job
/// submitted by an older build, its graph where it is), its journal (to
/// resume with `resume`), its progress file and its options.
fn runner_args(
    config: &ServiceConfig,
    job: &JobRow,
    resume: bool,
    dir: &Path,
    progress: PathBuf,
) -> Vec<OsString> {
    // The copy kept at submit; a job submitted by an older build has
    // none and runs its graph file where it is.
    let kept = dir.join(kept_graph_name(&job.graph));
    let kept = kept.exists().then_some(kept);
    let mut args: Vec<OsString> = config.program_args.clone();
    let graph = kept.as_ref().unwrap_or(&job.graph);
    args.extend(["run".into(), graph.clone().into_os_string()]);
    args.extend(["--pool".into(), config.pool_file.clone().into_os_string()]);
    let journal_flag = if resume { "--resume" } else { "--journal" };
    args.extend([journal_flag.into(), job.journal.clone().into_os_string()]);
    for (flag, value) in [
        ("--wait-agents", "0"),
        ("--reconnect", RUNNER_RECONNECT),
        ("--progress", "lines"),
    ] {
        args.extend([flag.into(), value.into()]);
    }
    args.extend(["--job-progress".into(), progress.into_os_string()]);
    for rule in &job.relabel {
        // One argument, so that a rule is never taken for a flag.
        args.push(format!("--relabel={rule}").into());
    }
    if kept.is_some() {
        args.extend([
            "--kept-sweeps".into(),
            dir.join(KEPT_SWEEPS).into_os_string(),
        ]);
    }
    if let Some(file) = &job.context_file {
        let file = match kept {
            Some(_) => dir.join(KEPT_CONTEXT_FILE),
            None => file.clone(),
        };
        args.extend(["--context-file".into(), file.into_os_string()]);
    }
    // A resumed job was accepted once with the agents it had then; the
    // runner of a restarted pool node may start before they are back,
    // and must wait for them rather than refuse their work.
    if job.wait_for_labels || resume {
        args.push("--wait-for-labels".into());
    }
    args
}

/// The runner of a job the job journal calls running, if it still runs:
/// the process that holds its run journal's lock, or, before it has one,
/// the process the job journal names if it is still that job's runner.
/// `Some(None)` for a lock holder that did not say its pid.
pub(super) fn live_runner(job: &JobRow) -> Option<Option<u32>> {
    if let Ok(Some(writer)) = Journal::writer(&job.journal) {
        return Some(writer.pid.or(job.runner_pid));
    }
    let pid = job.runner_pid?;
    runs_with(pid, &job.journal).then_some(Some(pid))
}

/// Whether an adopted runner has ended: its run journal's lock is free
/// and its process (if known) is gone.
pub(super) fn runner_gone(pid: Option<u32>, journal: &Path) -> bool {
    !matches!(Journal::writer(journal), Ok(Some(_)))
        && pid.is_none_or(|pid| !runs_with(pid, journal))
}

/// Whether process `pid` runs (not a zombie) with `journal` among its
/// arguments: a job's runner, and not some process that got its pid
/// since.
pub(super) fn runs_with(pid: u32, journal: &Path) -> bool {
    let running = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'))
    });
    let Some(journal) = journal.to_str() else {
        return false;
    };
    running
        && std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|line| line.split(|&b| b == 0).any(|arg| arg == journal.as_bytes()))
}

/// Sends `signal` to process `pid`.
pub(super) fn signal(pid: u32, signal: i32) {
    let Ok(pid) = i32::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) has no memory effects; the pid is a runner's.
    unsafe { libc::kill(pid, signal) };
}

/// The last lines of the log at `path`, joined, or a note that it has
/// none.
pub(super) fn log_tail(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut file) = std::fs::File::open(path) {
        let length = file.metadata().map_or(0, |m| m.len());
        let _ = file.seek(SeekFrom::Start(length.saturating_sub(8192)));
        let mut bytes = Vec::new();
        let _ = file.read_to_end(&mut bytes);
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    let lines: Vec<&str> = (text.lines())
        .filter(|line| !line.trim().is_empty() && !line.starts_with("== "))
        .collect();
    if lines.is_empty() {
        return format!("it printed nothing (see {})", path.display());
    }
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
}

pub(super) fn job_dir(job: &JobRow) -> PathBuf {
    job.journal
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

pub(super) fn runner_log(job: &JobRow) -> PathBuf {
    job_dir(job).join("runner.log")
}

pub(super) fn progress_file(job: &JobRow) -> PathBuf {
    job_dir(job).join("progress.json")
}
