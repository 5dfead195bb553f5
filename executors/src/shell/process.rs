//! Running one attempt of a command: spawning it in its own process group,
//! waiting with a deadline, and killing everything it started when it ends
//! (the group, and whatever left the group, through [`super::tracking`]).

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use constellation::ActivityId;

use super::exit::wait_for_exit;
use super::launch::{Launch, Started, Stream};
use super::output::{Output, OutputFiles};
use super::result::ShellOutcome;
use super::running::Refusal;
use super::spec::{Capture, ShellSpec};
use super::stream::{Pump, StreamSink};
use super::tracking::ProcessTracking;

/// Why a command was not started: this process stopped starting commands
/// ([`super::stop_starting`]).
pub(crate) const STOPPING: &str = "this process is stopping and starts no more commands";

/// Why a command was not started: the work of the node that created its
/// activity was cancelled ([`super::cancel_origin`]).
pub(crate) const CANCELLED: &str = "the work of the node that created it was cancelled";

/// How long to wait for a killed command's leader to die.
const DEATH_PATIENCE: Duration = Duration::from_secs(10);

/// What one attempt produced.
pub(crate) struct Attempt {
    pub outcome: ShellOutcome,
    /// When the attempt began, by the wall clock, for journals.
    pub started: SystemTime,
    pub duration: Duration,
    /// User + system CPU time of the command, where the kernel reported it.
    pub cpu: Option<Duration>,
    pub stdout: Output,
    pub stderr: Output,
}

/// Where one attempt's output goes, as its caller prepared it for the
/// spec's [`Capture`].
pub(crate) enum Destination<'a> {
    /// Nothing prepared: memory or nowhere, as the capture says (output
    /// meant for files or a stream goes nowhere).
    Unprepared,
    /// These `stdout` and `stderr` files, removed again if the command
    /// wrote nothing into them.
    Files(&'a OutputFiles),
    /// The executor's stream file in the capture's directory, as attempt
    /// `attempt` of the activity `name`.
    Stream {
        /// The activity's name, which the stream's records carry.
        name: &'a str,
        /// The attempt's number.
        attempt: u32,
    },
}

/// Runs `spec` once for `activity`. `env` is the executor's environment
/// for its children, applied before the spec's own variables;
/// `destination` is where output goes. The command is registered as
/// running ([`super::running`]) while it runs, for
/// [`kill_all_running`](super::kill_all_running) and
/// [`cancel_origin`](super::cancel_origin); once this process has stopped
/// starting commands, or the activity's origin was cancelled, it does not
/// start.
pub(crate) fn run_once(
    activity: ActivityId,
    spec: &ShellSpec,
    env: &[(String, String)],
    destination: Destination<'_>,
) -> Attempt {
    run_once_to(
        Some(activity),
        spec,
        env,
        destination,
        ProcessTracking::current(),
    )
}

/// [`run_once`] with the command's processes tracked by `tracking`, and
/// its output in `files` if given.
#[cfg(test)]
pub(crate) fn run_once_tracked(
    spec: &ShellSpec,
    env: &[(String, String)],
    files: Option<&OutputFiles>,
    tracking: &ProcessTracking,
) -> Attempt {
    let destination = files.map_or(Destination::Unprepared, Destination::Files);
    run_once_to(None, spec, env, destination, tracking)
}

/// [`run_once`] with the command's processes tracked by `tracking`.
fn run_once_to(
    activity: Option<ActivityId>,
    spec: &ShellSpec,
    env: &[(String, String)],
    destination: Destination<'_>,
    tracking: &ProcessTracking,
) -> Attempt {
    let files = match destination {
        Destination::Files(files) => Some(files),
        _ => None,
    };
    let started = Instant::now();
    let started_at = SystemTime::now();
    let failed = |reason: String| Attempt {
        outcome: ShellOutcome::StartFailed { reason },
        started: started_at,
        duration: started.elapsed(),
        cpu: None,
        stdout: Output::Discarded,
        stderr: Output::Discarded,
    };
    match super::running::refusal(activity) {
        Some(Refusal::Stopping) => return failed(STOPPING.to_string()),
        Some(Refusal::Cancelled) => return failed(CANCELLED.to_string()),
        None => {}
    }
    let argv = spec.program.argv();
    // Started in a process group of its own, so a timeout can kill
    // everything the command started.
    let mut command = Launch::new(&argv);
    command.env.reserve(env.len() + spec.env.len() + 1);
    for (key, value) in env.iter().map(|(k, v)| (k, v)).chain(&spec.env) {
        command.env(key, value);
    }
    if let Some(dir) = &spec.cwd {
        if !dir.is_dir() {
            return failed(format!(
                "working directory {} does not exist or is not a directory",
                dir.display()
            ));
        }
        command.cwd = Some(dir.clone());
    }
    command.stdin = match &spec.stdin {
        None => Stream::Null,
        Some(path) => match File::open(path) {
            Ok(file) => Stream::File(file),
            Err(error) => {
                return failed(format!(
                    "cannot open standard input {}: {error}",
                    path.display()
                ))
            }
        },
    };
    let tracked = match tracking.track(&mut command) {
        Ok(tracked) => tracked,
        Err(error) => {
            tracing::warn!(
                "cannot create a cgroup for {}: {error}; tracking it as a child subreaper instead",
                argv[0]
            );
            match ProcessTracking::Subreaper.track(&mut command) {
                Ok(tracked) => tracked,
                Err(error) => return failed(format!("cannot track the command: {error}")),
            }
        }
    };
    // The files are created last, just before the start, so that a check
    // that fails above leaves none behind.
    let mut created = None;
    match (&spec.capture, files) {
        (Capture::Files { .. }, Some(files)) => {
            let opened = match files.open() {
                Ok(opened) => opened,
                Err(error) => {
                    let folder = files.stdout.parent().unwrap_or(&files.stdout);
                    return failed(format!(
                        "cannot create output files in {}: {error}",
                        folder.display()
                    ));
                }
            };
            command.stdout = Stream::File(opened.stdout);
            command.stderr = Stream::File(opened.stderr);
            created = Some(opened.identities);
        }
        (Capture::Memory { .. }, _) => {
            (command.stdout, command.stderr) = (Stream::Pipe, Stream::Pipe);
        }
        (Capture::Stream { .. }, _) if matches!(destination, Destination::Stream { .. }) => {
            (command.stdout, command.stderr) = (Stream::Pipe, Stream::Pipe);
        }
        _ => {}
    }
    let started_child = super::spawn::retry_busy(|| command.start());
    // The child has copies of the descriptors: closing this process's
    // leaves the command and what it starts as the files' only writers.
    drop(command);
    let mut child = match started_child {
        Ok(child) => child,
        Err(error) => {
            if let (Some(files), Some(created)) = (files, &created) {
                // Never started, so never wrote: remove the empty files.
                files.settle(created);
            }
            return failed(describe_spawn_error(&argv[0], &error));
        }
    };
    if !super::running::register(child.pid, activity) {
        // The stop (or the cancel of its origin) came while it started:
        // it goes with the others.
        kill_group(&child);
    }
    let readers = match spec.capture {
        Capture::Memory { limit } => Some((
            read_capped(child.stdout.take(), limit),
            read_capped(child.stderr.take(), limit),
        )),
        _ => None,
    };
    // Streamed output is moved to the executor's stream file as it comes,
    // on this thread, while it waits for the exit.
    let mut pump = match (&spec.capture, destination) {
        (Capture::Stream { dir }, Destination::Stream { name, attempt }) => Some(Pump::new(
            child.stdout.take(),
            child.stderr.take(),
            StreamSink::new(dir, name, attempt),
        )),
        _ => None,
    };
    let deadline = spec.timeout.map(|t| started + t);
    let exited = match &mut pump {
        Some(pump) => pump.until_exit(child.id() as libc::pid_t, deadline),
        None => wait_until_exit(&child, deadline),
    };
    // The leader has exited (or must die) but is not reaped yet, so its pid
    // cannot have been reused: killing the group reaches only what the
    // command left behind. What left the group (`setsid`) is found through
    // the command's tracking, also while the leader is unreaped.
    kill_group(&child);
    // A leader that timed out was only just sent SIGKILL; what is left is
    // sought once it is dead, when its children have been reparented.
    if !matches!(exited, Ok(true)) {
        let _ = wait_until_exit(&child, Some(Instant::now() + DEATH_PATIENCE));
    }
    tracked.finish(child.id() as libc::pid_t);
    // Before the reap, which frees the group's id for reuse.
    super::running::unregister(child.pid);
    let status = reap(&child);
    let cpu = status.as_ref().ok().map(|&(_, cpu)| cpu);
    let mut outcome = match (exited, status.map(|(status, _)| status)) {
        (Ok(false), _) => ShellOutcome::TimedOut {
            after: spec.timeout.unwrap_or_default(),
        },
        (Err(error), _) => ShellOutcome::StartFailed {
            reason: format!("lost track of the process: {error}"),
        },
        (Ok(true), Ok(status)) => ShellOutcome::from_status(status),
        (Ok(true), Err(error)) => ShellOutcome::StartFailed {
            reason: format!("the exit status could not be read: {error}"),
        },
    };
    let (stdout, stderr) = match (readers, files, &created) {
        _ if pump.is_some() => {
            let pumped = pump.expect("a pump").finish(DEATH_PATIENCE);
            let outputs = Output::streamed(&pumped);
            if let Some(lost) = pumped.lost {
                // Its output is gone: the attempt fails, whatever the
                // command's status, which the reason keeps.
                outcome = ShellOutcome::OutputLost {
                    reason: format!("{lost}; the command {outcome}"),
                };
            }
            outputs
        }
        (Some((out, err)), _, _) => (join_reader(out), join_reader(err)),
        // Everything the command started is dead: nothing writes to the
        // files any more, so an empty one stays empty.
        (None, Some(files), Some(created)) => files.settle(created),
        _ => (Output::Discarded, Output::Discarded),
    };
    Attempt {
        outcome,
        started: started_at,
        duration: started.elapsed(),
        cpu,
        stdout,
        stderr,
    }
}

/// Reaps the exited child with `wait4`, which also reports the CPU time it
/// used — the figure a report needs for core utilization, and one that
/// `Child::wait` does not give.
fn reap(child: &Started) -> io::Result<(ExitStatus, Duration)> {
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is plain data that wait4 fills in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: valid out-pointers; `pid` is our unreaped child.
        let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if reaped == pid {
            break;
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
    let seconds = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    Ok((
        ExitStatus::from_raw(status),
        seconds(usage.ru_utime) + seconds(usage.ru_stime),
    ))
}

fn describe_spawn_error(program: &str, error: &io::Error) -> String {
    match error.kind() {
        io::ErrorKind::NotFound if program.contains('/') => {
            format!("cannot start `{program}`: no such file")
        }
        io::ErrorKind::NotFound => {
            format!("cannot start `{program}`: not found on PATH")
        }
        io::ErrorKind::PermissionDenied => {
            format!("cannot start `{program}`: permission denied (is it executable?)")
        }
        _ => format!("cannot start `{program}`: {error}"),
    }
}

/// Waits until the child has exited, without reaping it. Returns `false`
/// if the deadline passed first.
fn wait_until_exit(child: &Started, deadline: Option<Instant>) -> io::Result<bool> {
    wait_for_exit(child.id() as libc::pid_t, deadline)
}

fn kill_group(child: &Started) {
    let group = child.id() as libc::pid_t;
    // SAFETY: kill has no memory effects; ESRCH (group already empty) is fine.
    unsafe { libc::kill(-group, libc::SIGKILL) };
}

type Reader = Option<JoinHandle<io::Result<(Vec<u8>, u64)>>>;

/// Reads a pipe to its end on a thread of its own, keeping the first
/// `limit` bytes and counting the rest.
fn read_capped<P: Read + Send + 'static>(pipe: Option<P>, limit: usize) -> Reader {
    let mut pipe = pipe?;
    std::thread::Builder::new()
        .name("shell-output".to_string())
        .spawn(move || {
            let mut kept = Vec::new();
            let mut dropped = 0u64;
            let mut buf = [0u8; 8192];
            loop {
                let n = match pipe.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                };
                let room = limit.saturating_sub(kept.len()).min(n);
                kept.extend_from_slice(&buf[..room]);
                dropped += (n - room) as u64;
            }
            Ok((kept, dropped))
        })
        .ok()
}

fn join_reader(reader: Reader) -> Output {
    match reader.map(|r| r.join()) {
        Some(Ok(Ok((bytes, dropped)))) => Output::Memory {
            bytes,
            truncated: dropped,
        },
        _ => Output::Discarded,
    }
}

impl ShellOutcome {
    fn from_status(status: ExitStatus) -> Self {
        match (status.code(), status.signal()) {
            (Some(code), _) => ShellOutcome::Exited { code },
            (None, Some(signal)) => ShellOutcome::Signalled { signal },
            (None, None) => ShellOutcome::StartFailed {
                reason: format!("unrecognised exit status {status:?}"),
            },
        }
    }
}
