//! Running external commands (`sbatch`, `qstat`, `ssh`, ...).
//!
//! All process spawning goes through the [`Runner`] trait so the backends
//! can be tested with canned output recorded on real clusters, and so the
//! CLI can be exercised on machines without any batch system. The real
//! runner can put a time limit on each command
//! ([`SystemRunner::with_timeout`]), so a hung `squeue` or an ssh to a host
//! that stopped answering cannot hang `glidein list`.

use std::ffi::OsString;
use std::fmt;
use std::io::{self, Read};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::glidein::script::shell_quote;

/// Runs a program to completion and returns its output.
pub trait Runner {
    /// Runs `program` with `args` (no shell involved), stdin closed, and
    /// returns its exit status, stdout and stderr.
    ///
    /// An `Err` means the program could not be started at all; a program
    /// that ran and failed is an `Ok` with a non-success status.
    fn run(&self, program: &str, args: &[String]) -> io::Result<Output>;
}

/// How long queries (`squeue`, `scontrol`, `qstat`, `ssh ... kill -0`) and
/// cancels may take before they are given up: long enough for a busy
/// controller, short enough that `glidein list` never looks hung.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// How often a runner with a time limit checks whether its child is done.
const POLL: Duration = Duration::from_millis(20);

/// The real [`Runner`], based on [`std::process::Command`].
#[derive(Debug, Clone, Default)]
pub struct SystemRunner {
    /// Replacement for `PATH` in the child (and for finding the program),
    /// or `None` to inherit ours.
    search_path: Option<OsString>,
    /// Longest a command may run before it is killed; `None`: no limit.
    timeout: Option<Duration>,
}

impl SystemRunner {
    /// A runner that finds programs on the inherited `PATH` and waits for
    /// them as long as they take. Use it for submissions: killing `sbatch`
    /// or `qsub` halfway can leave a job in the queue that nobody recorded.
    /// Give queries a limit with [`SystemRunner::with_timeout`].
    pub fn new() -> Self {
        Self::default()
    }

    /// A runner whose children see `path` as `PATH`; programs are looked up
    /// there too. Used to put wrappers or fakes in front of real tools.
    pub fn with_search_path(path: impl Into<OsString>) -> Self {
        Self {
            search_path: Some(path.into()),
            timeout: None,
        }
    }

    /// The same runner, but a command still running after `limit` is
    /// killed (with everything it started) and reported as an error of
    /// kind [`io::ErrorKind::TimedOut`] that names the program and the
    /// limit. [`DEFAULT_TIMEOUT`] suits batch system queries.
    pub fn with_timeout(mut self, limit: Duration) -> Self {
        self.timeout = Some(limit);
        self
    }

    /// The time limit, if any.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }
}

impl Runner for SystemRunner {
    fn run(&self, program: &str, args: &[String]) -> io::Result<Output> {
        let mut cmd = Command::new(program);
        cmd.args(args).stdin(Stdio::null());
        if let Some(path) = &self.search_path {
            // std resolves the program with the child's PATH when it is set.
            cmd.env("PATH", path);
        }
        let Some(limit) = self.timeout else {
            let child =
                executors::shell::spawn::spawn(cmd.stdout(Stdio::piped()).stderr(Stdio::piped()))
                    .map_err(|e| explain_spawn_error(program, e))?;
            return child.wait_with_output();
        };
        // Its own process group, so a timeout kills what it started too (a
        // script's `sleep` would otherwise keep our pipes open). Only with
        // a limit: a group of its own no longer gets the terminal's Ctrl-C.
        cmd.process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = executors::shell::spawn::spawn(&mut cmd)
            .map_err(|e| explain_spawn_error(program, e))?;
        run_with_limit(child, program, limit)
    }
}

/// Waits for `child` and reads its output, killing its process group if
/// that takes longer than `limit`.
fn run_with_limit(mut child: Child, program: &str, limit: Duration) -> io::Result<Output> {
    let deadline = Instant::now() + limit;
    // Both pipes are drained on threads, so a chatty child never blocks on
    // a full pipe while we wait for it to exit.
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            kill_group(&mut child);
            return Err(timed_out(program, limit));
        }
        std::thread::sleep(POLL);
    };
    // A background process the child left behind may still hold the
    // pipes; it gets what is left of the limit, then is killed too.
    let mut collect = |rx: mpsc::Receiver<Vec<u8>>| {
        let left = deadline.saturating_duration_since(Instant::now());
        rx.recv_timeout(left).map_err(|_| {
            kill_group(&mut child);
            timed_out(program, limit)
        })
    };
    let stdout = collect(stdout)?;
    let stderr = collect(stderr)?;
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

/// Reads `pipe` to its end on a thread; the bytes arrive on the channel.
fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            // A read error ends the output early; what was read still counts.
            let _ = pipe.read_to_end(&mut bytes);
        }
        let _ = tx.send(bytes);
    });
    rx
}

/// SIGKILLs the child's process group (the child leads it, see `run`)
/// and reaps the child. Errors are ignored: the group may be gone already.
fn kill_group(child: &mut Child) {
    if let Ok(pgid) = i32::try_from(child.id()) {
        // SAFETY: kill(2) with a negative pid only sends a signal to that
        // process group, which we created for this child.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn timed_out(program: &str, limit: Duration) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!(
            "`{program}` gave no answer within {} and was killed (the batch system \
             or host may be down or overloaded)",
            seconds(limit)
        ),
    )
}

/// `30 s`, or `0.5 s` for limits that are not whole seconds.
fn seconds(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// Turns the bare "No such file or directory" from a failed spawn into a
/// message that names the missing command and says how to get it.
fn explain_spawn_error(program: &str, err: io::Error) -> io::Error {
    match err.kind() {
        io::ErrorKind::NotFound => io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "command `{program}` was not found on PATH: {}",
                missing_program_hint(program)
            ),
        ),
        io::ErrorKind::PermissionDenied => io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("command `{program}` exists but is not executable by you: {err}"),
        ),
        _ => io::Error::new(err.kind(), format!("could not start `{program}`: {err}")),
    }
}

/// Advice for getting `program` onto `PATH`.
pub fn missing_program_hint(program: &str) -> &'static str {
    let name = program.rsplit('/').next().unwrap_or(program);
    match name {
        "sbatch" | "squeue" | "scontrol" | "scancel" | "srun" => {
            "run this on a Slurm login node, or make the Slurm client tools available \
             (e.g. `module load slurm`)"
        }
        "qsub" | "qstat" | "qdel" | "pbsdsh" => {
            "run this on a PBS/Torque login node, or make the PBS client tools available \
             (e.g. `module load pbs` or `module load torque`)"
        }
        "ssh" => "install an OpenSSH client (e.g. `apt-get install openssh-client`)",
        "bash" => "install bash; the generated pilot scripts need it",
        _ => "install it or add its directory to PATH",
    }
}

/// A program and its arguments, kept together so the exact command can be
/// shown (dry run, error messages), stored, and run later.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandLine {
    /// Program name or path.
    pub program: String,
    /// Arguments, passed verbatim (no shell).
    pub args: Vec<String>,
}

impl CommandLine {
    /// Creates a command line from a program and arguments.
    pub fn new<I, S>(program: &str, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            program: program.to_string(),
            args: args.into_iter().map(Into::into).collect(),
        }
    }

    /// Runs it with `runner`.
    pub fn run(&self, runner: &dyn Runner) -> io::Result<Output> {
        runner.run(&self.program, &self.args)
    }
}

impl fmt::Display for CommandLine {
    /// Shell-quoted, so it can be pasted into a terminal as is.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&shell_quote(&self.program))?;
        for arg in &self.args {
            write!(f, " {}", shell_quote(arg))?;
        }
        Ok(())
    }
}

/// Output of a batch system command that we could not make sense of.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{message} (output was: {output:?})")]
pub struct ParseError {
    /// What we expected.
    pub message: String,
    /// The offending output, trimmed.
    pub output: String,
}

impl ParseError {
    /// Creates a parse error for `output`.
    pub fn new(message: impl Into<String>, output: &str) -> Self {
        Self {
            message: message.into(),
            output: output.trim().to_string(),
        }
    }
}

/// A batch system or ssh command could not be run, failed, or said
/// something unexpected. The message always names the command.
#[derive(Debug, Error)]
pub enum BackendError {
    /// The program could not be started (missing, not executable).
    #[error("could not run `{command}`: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// Why (already explains missing programs).
        source: io::Error,
    },
    /// The program ran past the runner's time limit and was killed.
    #[error("`{command}` timed out: {source}")]
    TimedOut {
        /// The command line.
        command: String,
        /// Says which program and what the limit was.
        source: io::Error,
    },
    /// The program ran and failed.
    #[error("`{command}` failed ({status}): {message}")]
    Failed {
        /// The command line.
        command: String,
        /// Its exit status, described.
        status: String,
        /// Its stderr (or stdout).
        message: String,
    },
    /// The program succeeded but its output made no sense to us.
    #[error("could not understand the output of `{command}`: {source}")]
    Parse {
        /// The command line.
        command: String,
        /// What was wrong.
        source: ParseError,
    },
}

impl BackendError {
    /// A [`BackendError::Failed`] for `cmd` from its output.
    pub fn failed(cmd: &CommandLine, output: &Output) -> Self {
        Self::Failed {
            command: cmd.to_string(),
            status: output.status.to_string(),
            message: failure_message(output),
        }
    }

    /// A [`BackendError::Parse`] for `cmd`.
    pub fn parse(cmd: &CommandLine, source: ParseError) -> Self {
        Self::Parse {
            command: cmd.to_string(),
            source,
        }
    }

    /// True if the program could not be found; such failures say nothing
    /// about the batch system, so they do not count for backoff.
    pub fn is_missing_program(&self) -> bool {
        matches!(self, Self::Spawn { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

/// Runs `cmd`, turning a failure to start or finish it into a
/// [`BackendError`]; a command that ran is returned whatever its exit
/// status.
pub fn spawn(cmd: &CommandLine, runner: &dyn Runner) -> Result<Output, BackendError> {
    cmd.run(runner).map_err(|source| {
        let command = cmd.to_string();
        if source.kind() == io::ErrorKind::TimedOut {
            BackendError::TimedOut { command, source }
        } else {
            BackendError::Spawn { command, source }
        }
    })
}

/// The last non-empty line of `text`, trimmed: submit commands print the
/// job id last, after anything a site's submit filter may add.
pub fn last_line(text: &str) -> Option<&str> {
    text.lines().map(str::trim).rfind(|l| !l.is_empty())
}

/// Stdout as text, lossily (batch tools are not always UTF-8 clean).
pub fn stdout_text(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Stderr as text, lossily.
pub fn stderr_text(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The most useful one-line description of why a command failed: its
/// stderr (trimmed), else its stdout, else its exit status.
pub fn failure_message(output: &Output) -> String {
    let err = stderr_text(output);
    let out = stdout_text(output);
    let text = if !err.trim().is_empty() { err } else { out };
    let text = text.trim();
    if text.is_empty() {
        format!("no output, {}", output.status)
    } else {
        text.to_string()
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! A scripted [`Runner`] for tests.

    use super::*;
    use std::cell::RefCell;
    use std::collections::VecDeque;
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    /// One canned reply.
    pub(crate) enum Reply {
        /// The program ran: exit code, stdout, stderr.
        Ran(i32, String, String),
        /// The program could not be started.
        Missing,
    }

    /// Replays replies in order and records every call.
    #[derive(Default)]
    pub(crate) struct FakeRunner {
        replies: RefCell<VecDeque<Reply>>,
        /// Every (program, args) seen, in order.
        pub calls: RefCell<Vec<(String, Vec<String>)>>,
    }

    impl FakeRunner {
        pub(crate) fn new(replies: Vec<Reply>) -> Self {
            Self {
                replies: RefCell::new(replies.into()),
                calls: RefCell::default(),
            }
        }

        pub(crate) fn programs(&self) -> Vec<String> {
            self.calls.borrow().iter().map(|(p, _)| p.clone()).collect()
        }
    }

    pub(crate) fn ok(stdout: &str) -> Reply {
        Reply::Ran(0, stdout.into(), String::new())
    }

    pub(crate) fn fail(code: i32, stderr: &str) -> Reply {
        Reply::Ran(code, String::new(), stderr.into())
    }

    pub(crate) fn output(code: i32, stdout: &str, stderr: &str) -> Output {
        Output {
            status: ExitStatus::from_raw(code << 8),
            stdout: stdout.as_bytes().to_vec(),
            stderr: stderr.as_bytes().to_vec(),
        }
    }

    impl Runner for FakeRunner {
        fn run(&self, program: &str, args: &[String]) -> io::Result<Output> {
            self.calls
                .borrow_mut()
                .push((program.to_string(), args.to_vec()));
            match self.replies.borrow_mut().pop_front() {
                Some(Reply::Ran(code, out, err)) => Ok(output(code, &out, &err)),
                Some(Reply::Missing) => Err(explain_spawn_error(
                    program,
                    io::Error::from(io::ErrorKind::NotFound),
                )),
                None => panic!("unexpected call: {program} {args:?}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_sbatch_is_explained() {
        // An empty search path makes sure `sbatch` is absent even on a
        // machine that has Slurm installed.
        let runner = SystemRunner::with_search_path("/nonexistent-glidein-test-dir");
        let err = runner
            .run("sbatch", &["--parsable".to_string()])
            .expect_err("sbatch must not be found");
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        let msg = err.to_string();
        assert!(msg.contains("`sbatch` was not found"), "{msg}");
        assert!(msg.contains("Slurm login node"), "{msg}");
    }

    #[test]
    fn missing_qsub_and_unknown_programs_are_explained() {
        let runner = SystemRunner::with_search_path("/nonexistent-glidein-test-dir");
        let msg = runner.run("qsub", &[]).unwrap_err().to_string();
        assert!(msg.contains("`qsub`") && msg.contains("PBS"), "{msg}");
        let msg = runner.run("frobnicate", &[]).unwrap_err().to_string();
        assert!(
            msg.contains("`frobnicate`") && msg.contains("PATH"),
            "{msg}"
        );
    }

    #[test]
    fn real_runner_captures_output_and_status() {
        let runner = SystemRunner::new();
        let out = runner
            .run(
                "bash",
                &["-c".into(), "echo out; echo err >&2; exit 3".into()],
            )
            .unwrap();
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(stdout_text(&out), "out\n");
        assert_eq!(failure_message(&out), "err");
    }

    /// A directory with an executable `name` that runs `body` (bash), and
    /// a search path that puts it first.
    fn fake_program(
        tmp: &crate::glidein::alloc::testing::TempDir,
        name: &str,
        body: &str,
    ) -> String {
        let path = tmp.path().join(name);
        crate::glidein::alloc::testing::write_executable(&path, &format!("#!/bin/bash\n{body}\n"));
        format!(
            "{}:{}",
            tmp.path().display(),
            std::env::var("PATH").unwrap_or_default()
        )
    }

    #[test]
    fn a_hanging_query_is_killed_and_named() {
        let tmp = crate::glidein::alloc::testing::TempDir::new("hang");
        let pid_file = tmp.path().join("sleep.pid");
        let body = format!("sleep 30 &\necho $! > '{}'\nwait", pid_file.display());
        let path = fake_program(&tmp, "squeue", &body);
        let runner = SystemRunner::with_search_path(path).with_timeout(Duration::from_secs(1));
        let started = Instant::now();
        let err = crate::glidein::slurm::query_state("4242", &runner).unwrap_err();
        let elapsed = started.elapsed();
        assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
        assert!(matches!(err, BackendError::TimedOut { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(
            msg.contains("`squeue") && msg.contains("4242") && msg.contains("within 1 s"),
            "{msg}"
        );
        // The sleep it started was killed with it, not left to linger.
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        let stat = format!("/proc/{}/stat", pid.trim());
        let gone = || {
            std::fs::read_to_string(&stat).map_or(true, |s| {
                s.rsplit_once(") ")
                    .is_some_and(|(_, rest)| rest.starts_with('Z'))
            })
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while !gone() {
            assert!(
                Instant::now() < deadline,
                "the squeue's sleep {pid} still runs"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn a_background_child_holding_the_pipes_cannot_hang_the_runner() {
        let tmp = crate::glidein::alloc::testing::TempDir::new("orphan");
        let path = fake_program(&tmp, "qstat", "sleep 30 &\necho started");
        let runner = SystemRunner::with_search_path(path).with_timeout(Duration::from_secs(1));
        let started = Instant::now();
        let err = runner.run("qstat", &[]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_limited_runner_returns_what_finishes_in_time() {
        let runner = SystemRunner::new().with_timeout(Duration::from_secs(20));
        assert_eq!(runner.timeout(), Some(Duration::from_secs(20)));
        // More than a pipe buffer (64 KiB) on each stream, so a runner that
        // waited before reading would deadlock instead of passing.
        let out = runner
            .run(
                "bash",
                &[
                    "-c".into(),
                    "head -c 200000 /dev/zero; head -c 100000 /dev/zero >&2; exit 3".into(),
                ],
            )
            .unwrap();
        assert_eq!(out.status.code(), Some(3));
        assert_eq!((out.stdout.len(), out.stderr.len()), (200_000, 100_000));
        let err = runner.run("frobnicate-nowhere", &[]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn command_line_display_is_shell_quoted() {
        let cmd = CommandLine::new("sbatch", ["--parsable", "--comment=a b", "/x/pilot.sh"]);
        assert_eq!(
            cmd.to_string(),
            "sbatch --parsable '--comment=a b' /x/pilot.sh"
        );
    }

    #[test]
    fn failure_message_falls_back_to_status() {
        let out = testing::output(2, "", "");
        assert!(failure_message(&out).contains("exit status: 2"));
        let out = testing::output(1, "only stdout\n", " \n");
        assert_eq!(failure_message(&out), "only stdout");
    }
}
