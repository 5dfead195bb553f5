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
use super::output::{FileIdentity, Output, OutputFiles};
use super::result::ShellOutcome;
use super::running::Refusal;
use super::spec::{Capture, ShellSpec};
use super::stream::{Pump, StreamSink};
use super::tracking::{ProcessTracking, Tracked};

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
    let mut command = match prepare_launch(&argv, spec, env) {
        Ok(command) => command,
        Err(reason) => return failed(reason),
    };
    let tracked = match tracking.track_or_subreaper(&mut command, &argv[0]) {
        Ok(tracked) => tracked,
        Err(error) => return failed(format!("cannot track the command: {error}")),
    };
    // The files are created last, just before the start, so that a check
    // that fails above leaves none behind.
    let created = match connect_output(&mut command, spec, &destination) {
        Ok(created) => created,
        Err(reason) => return failed(reason),
    };
    let started_child = super::spawn::retry_busy(|| command.start());
    // The child has copies of the descriptors: closing this process's
    // leaves the command and what it starts as the files' only writers.
    drop(command);
    let mut child = match started_child {
        Ok(child) => child,
        Err(error) => {
            if let Some((files, created)) = &created {
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
    let mut capturing = Capturing::begin(spec, &destination, &mut child, created);
    let deadline = spec.timeout.map(|t| started + t);
    let exited = capturing.until_exit(&child, deadline);
    let (mut outcome, cpu) = end_command(&child, exited, tracked, spec.timeout);
    let (stdout, stderr) = capturing.finish(&mut outcome);
    Attempt {
        outcome,
        started: started_at,
        duration: started.elapsed(),
        cpu,
        stdout,
        stderr,
    }
}

/// The command to start for `spec`, in a process group of its own (so a
/// timeout can kill everything it started): its arguments `argv`, the
/// executor's `env` and then the spec's own variables, its working
/// directory and standard input; or why it cannot start.
fn prepare_launch(
    argv: &[String],
    spec: &ShellSpec,
    env: &[(String, String)],
) -> Result<Launch, String> {
    let mut command = Launch::new(argv);
    command.env.reserve(env.len() + spec.env.len() + 1);
    for (key, value) in env.iter().map(|(k, v)| (k, v)).chain(&spec.env) {
        command.env(key, value);
    }
    if let Some(dir) = &spec.cwd {
        if !dir.is_dir() {
            return Err(format!(
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
                return Err(format!(
                    "cannot open standard input {}: {error}",
                    path.display()
                ))
            }
        },
    };
    Ok(command)
}

/// Points the command's standard output and error where the spec's
/// capture and `destination` want them: pipes for memory and a stream,
/// or the destination's files, created now. Returns the files and who
/// they are when it created them, or why it could not.
fn connect_output<'a>(
    command: &mut Launch,
    spec: &ShellSpec,
    destination: &Destination<'a>,
) -> Result<Option<(&'a OutputFiles, [FileIdentity; 2])>, String> {
    match (&spec.capture, destination) {
        (Capture::Files { .. }, Destination::Files(files)) => {
            let opened = match files.open() {
                Ok(opened) => opened,
                Err(error) => {
                    let folder = files.stdout.parent().unwrap_or(&files.stdout);
                    return Err(format!(
                        "cannot create output files in {}: {error}",
                        folder.display()
                    ));
                }
            };
            command.stdout = Stream::File(opened.stdout);
            command.stderr = Stream::File(opened.stderr);
            return Ok(Some((files, opened.identities)));
        }
        (Capture::Memory { .. }, _) => {
            (command.stdout, command.stderr) = (Stream::Pipe, Stream::Pipe);
        }
        (Capture::Stream { .. }, Destination::Stream { .. }) => {
            (command.stdout, command.stderr) = (Stream::Pipe, Stream::Pipe);
        }
        _ => {}
    }
    Ok(None)
}

/// How a started command's output is taken in while it runs.
enum Capturing<'a> {
    /// Into memory, by a thread per pipe.
    Memory(Reader, Reader),
    /// Into the executor's stream file as it comes, on this thread, while
    /// it waits for the exit.
    Stream(Pump),
    /// By the command itself, into these files, created as these
    /// identities.
    Files(&'a OutputFiles, [FileIdentity; 2]),
    /// Not at all.
    Discarded,
}

impl<'a> Capturing<'a> {
    /// Starts taking in the output of `child`, as the spec's capture and
    /// `destination` say; `created` are the files [`connect_output`] made.
    fn begin(
        spec: &ShellSpec,
        destination: &Destination<'_>,
        child: &mut Started,
        created: Option<(&'a OutputFiles, [FileIdentity; 2])>,
    ) -> Capturing<'a> {
        match (&spec.capture, destination) {
            (Capture::Memory { limit }, _) => Capturing::Memory(
                read_capped(child.stdout.take(), *limit),
                read_capped(child.stderr.take(), *limit),
            ),
            (Capture::Stream { dir }, Destination::Stream { name, attempt }) => {
                Capturing::Stream(Pump::new(
                    child.stdout.take(),
                    child.stderr.take(),
                    StreamSink::new(dir, name, *attempt),
                ))
            }
            _ => match created {
                Some((files, created)) => Capturing::Files(files, created),
                None => Capturing::Discarded,
            },
        }
    }

    /// Waits until `child` exits (true) or `deadline` passes (false),
    /// without reaping it; a stream is pumped meanwhile.
    fn until_exit(&mut self, child: &Started, deadline: Option<Instant>) -> io::Result<bool> {
        match self {
            Capturing::Stream(pump) => pump.until_exit(child.id() as libc::pid_t, deadline),
            _ => wait_until_exit(child, deadline),
        }
    }

    /// Once everything the command started is dead: where its standard
    /// output and error ended up. An attempt whose stream could not be
    /// written fails, whatever the command's `outcome`.
    fn finish(self, outcome: &mut ShellOutcome) -> (Output, Output) {
        match self {
            Capturing::Stream(pump) => {
                let pumped = pump.finish(DEATH_PATIENCE);
                let outputs = Output::streamed(&pumped);
                if let Some(lost) = pumped.lost {
                    // Its output is gone: the attempt fails, whatever the
                    // command's status, which the reason keeps.
                    *outcome = ShellOutcome::OutputLost {
                        reason: format!("{lost}; the command {outcome}"),
                    };
                }
                outputs
            }
            Capturing::Memory(out, err) => (join_reader(out), join_reader(err)),
            // Everything the command started is dead: nothing writes to the
            // files any more, so an empty one stays empty.
            Capturing::Files(files, created) => files.settle(&created),
            Capturing::Discarded => (Output::Discarded, Output::Discarded),
        }
    }
}

/// Ends the command once its leader has exited (`exited` is true) or
/// must die: kills everything it started, reaps the leader and says how
/// the attempt ended, with the command's CPU time where the kernel gave it.
fn end_command(
    child: &Started,
    exited: io::Result<bool>,
    tracked: Tracked,
    timeout: Option<Duration>,
) -> (ShellOutcome, Option<Duration>) {
    // The leader has exited (or must die) but is not reaped yet, so its pid
    // cannot have been reused: killing the group reaches only what the
    // command left behind. What left the group (`setsid`) is found through
    // the command's tracking, also while the leader is unreaped.
    kill_group(child);
    // A leader that timed out was only just sent SIGKILL; what is left is
    // sought once it is dead, when its children have been reparented.
    if !matches!(exited, Ok(true)) {
        let _ = wait_until_exit(child, Some(Instant::now() + DEATH_PATIENCE));
    }
    tracked.finish(child.id() as libc::pid_t);
    // Before the reap, which frees the group's id for reuse.
    super::running::unregister(child.pid);
    let status = reap(child);
    let cpu = status.as_ref().ok().map(|&(_, cpu)| cpu);
    let outcome = match (exited, status.map(|(status, _)| status)) {
        (Ok(false), _) => ShellOutcome::TimedOut {
            after: timeout.unwrap_or_default(),
        },
        (Err(error), _) => ShellOutcome::StartFailed {
            reason: format!("lost track of the process: {error}"),
        },
        (Ok(true), Ok(status)) => ShellOutcome::from_status(status),
        (Ok(true), Err(error)) => ShellOutcome::StartFailed {
            reason: format!("the exit status could not be read: {error}"),
        },
    };
    (outcome, cpu)
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
