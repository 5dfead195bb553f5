//! Starting a command without copying this process's memory, in the
//! cgroup it is tracked by.
//!
//! `std::process::Command` starts a child with `posix_spawn`, which glibc
//! implements with `clone(CLONE_VM | CLONE_VFORK)`: the child borrows the
//! parent's memory until its `exec`, so the start costs the same whatever
//! the parent's size. But as soon as a command has a `pre_exec` hook, as
//! joining a cgroup before the `exec` needed, std falls back to `fork`,
//! which copies the page tables of the whole parent: with a runner of
//! 1.4 GB that copy was about 69% of the runner's CPU at 100,000
//! activities, and it grows with every byte the runner holds.
//!
//! The options, measured on the 2-core development VM (under load from
//! other work, so CPU seconds rather than wall time):
//!
//! - `clone3` with `CLONE_INTO_CGROUP` creates the child in its cgroup
//!   directly, but with `CLONE_VM` the child needs a stack of its own and
//!   a return path that only assembly can give (the raw syscall returns
//!   twice on one stack); without `CLONE_VM` it copies the page tables
//!   like `fork`. glibc's `posix_spawnattr_setcgroup_np` does it right,
//!   from glibc 2.39 on; this machine (2.36) and many login nodes have
//!   older ones, and no maintained crate offers it. What it would save,
//!   the child's own write to `cgroup.procs`, was within the noise of a
//!   C loop starting `/bin/true` 2,000 times each way.
//! - A wrapper, `/bin/sh -c 'echo 0 >"$0" && exec "$@"'`, keeps
//!   `posix_spawn`, but adds a whole shell start to every command: 1.72 ms
//!   of CPU per `/bin/true` against 0.85 ms started directly (mkdir and
//!   rmdir of its cgroup included in both).
//! - A spawner process forked early, while the runner is small, would make
//!   the commands its children, not the runner's: no `wait4` CPU times, no
//!   subreaper adoption, and every start a round trip between processes.
//!
//! With the start below, `scripts/bench.sh shell_true` holding 1.5 GB of
//! touched heap (`BENCH_BALLAST_MIB=1500`) went from 5.6 commands/s (about
//! 52 ms of system time per command, copying page tables) to 930/s, no
//! slower than with no heap (555/s in the same, loaded, session).
//!
//! So this module does what glibc's `posix_spawn` does, with the one step
//! it lacks: glibc's `clone` wrapper (which gives the child its own stack
//! and entry function) with `CLONE_VM | CLONE_VFORK`, and in the child only
//! system calls on data prepared beforehand: default signal handlers, a
//! process group of its own, the write of `0` to its cgroup's
//! `cgroup.procs` (so it is in the cgroup before it can fork anything),
//! its standard streams, its working directory, an empty signal mask, and
//! `execve`. A step that fails is reported through the shared memory, and
//! the child exits; the parent resumes only once the child has called
//! `execve` or exited (`CLONE_VFORK`), so it learns the failure as the
//! start's error, as from `Command::spawn`.

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::process::{ChildStderr, ChildStdout};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::OnceLock;

/// The child's stack, while it shares the parent's memory. It runs a few
/// system calls, so 64 KiB leaves a wide margin; a guard page below it
/// turns an overflow into a crash of the child rather than a write into
/// the parent's memory.
const CHILD_STACK: usize = 64 * 1024;

/// Where one of the command's standard streams goes.
#[derive(Debug)]
pub(crate) enum Stream {
    /// `/dev/null`.
    Null,
    /// An open file (the command's output files, or its standard input).
    File(File),
    /// A pipe whose other end is given back in [`Started`] (output only).
    Pipe,
}

/// A command to start: what [`Command`](std::process::Command) holds, for
/// the few settings the shell executor uses.
#[derive(Debug)]
pub(crate) struct Launch {
    /// The program and its arguments; the program is sought on `PATH`
    /// (the command's own `PATH`, if its environment sets one) unless it
    /// holds a `/`.
    pub argv: Vec<OsString>,
    /// Variables set on top of this process's environment, later ones
    /// winning over earlier ones.
    pub env: Vec<(OsString, OsString)>,
    /// The working directory; this process's own if `None`.
    pub cwd: Option<PathBuf>,
    pub stdin: Stream,
    pub stdout: Stream,
    pub stderr: Stream,
    /// A cgroup v2 `cgroup.procs` file the child writes `0` to before its
    /// `exec`, which moves it into that cgroup.
    pub cgroup_procs: Option<PathBuf>,
}

/// A started command: its pid (also its process group, and the child is
/// not reaped yet), and the read ends of the streams that were
/// [`Stream::Pipe`], typed as `std::process::Child`'s.
#[derive(Debug)]
pub(crate) struct Started {
    pub pid: libc::pid_t,
    pub stdout: Option<ChildStdout>,
    pub stderr: Option<ChildStderr>,
}

impl Started {
    /// The pid, as `std::process::Child::id` gives it.
    pub(crate) fn id(&self) -> u32 {
        self.pid as u32
    }
}

/// The step of the child's setup that failed, for the error message.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(i32)]
enum Step {
    Group = 1,
    Cgroup = 2,
    Streams = 3,
    Directory = 4,
    Exec = 5,
}

/// What the child needs, prepared by the parent: pointers into values the
/// parent keeps alive, unmoved, until the child has called `execve` or
/// exited. The child only reads it, except for the two error cells.
struct Plan {
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    /// The paths to try `execve` with, in order; null-terminated.
    candidates: *const *const libc::c_char,
    cwd: *const libc::c_char,
    cgroup_procs: *const libc::c_char,
    /// The descriptors for the child's 0, 1 and 2.
    streams: [RawFd; 3],
    /// The failed [`Step`], 0 if none.
    failed_step: AtomicI32,
    /// The `errno` of the failed step.
    failed_errno: AtomicI32,
}

impl Launch {
    /// A command running `argv` (program first), with standard input,
    /// output and error on `/dev/null`.
    pub(crate) fn new<S: AsRef<OsStr>>(argv: &[S]) -> Launch {
        Launch {
            argv: argv.iter().map(|a| a.as_ref().to_owned()).collect(),
            env: Vec::new(),
            cwd: None,
            stdin: Stream::Null,
            stdout: Stream::Null,
            stderr: Stream::Null,
            cgroup_procs: None,
        }
    }

    /// Sets `key` to `value` in the command's environment.
    pub(crate) fn env(&mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) {
        self.env
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
    }

    /// Starts the command in a process group of its own. The child's
    /// setup errors come back as this call's error: the program's `execve`
    /// error as it is (so a busy script gives `ExecutableFileBusy`), any
    /// earlier step's with the step named.
    pub(crate) fn start(&self) -> io::Result<Started> {
        let Some(program) = self.argv.first() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no program to start",
            ));
        };
        let argv = self
            .argv
            .iter()
            .map(|a| c_string(a.as_bytes()))
            .collect::<io::Result<Vec<_>>>()?;
        let envp = self.environment()?;
        let candidates = candidates(program, self.path_variable().as_deref())?;
        let cwd = self
            .cwd
            .as_ref()
            .map(|dir| c_string(dir.as_os_str().as_bytes()))
            .transpose()?;
        let cgroup_procs = self
            .cgroup_procs
            .as_ref()
            .map(|procs| c_string(procs.as_os_str().as_bytes()))
            .transpose()?;

        let (stdin, _) = self.stdin.source(false)?;
        let (stdout, stdout_pipe) = self.stdout.source(true)?;
        let (stderr, stderr_pipe) = self.stderr.source(true)?;

        let argv_ptrs = null_terminated(&argv);
        let envp_ptrs = null_terminated(&envp);
        let candidate_ptrs = null_terminated(&candidates);
        let plan = Plan {
            argv: argv_ptrs.as_ptr(),
            envp: envp_ptrs.as_ptr(),
            candidates: candidate_ptrs.as_ptr(),
            cwd: cwd.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            cgroup_procs: cgroup_procs
                .as_ref()
                .map_or(std::ptr::null(), |c| c.as_ptr()),
            streams: [stdin.fd(), stdout.fd(), stderr.fd()],
            failed_step: AtomicI32::new(0),
            failed_errno: AtomicI32::new(0),
        };
        let pid = clone_vfork(&plan)?;
        // The child has called execve or exited: nothing of the plan is
        // used any more, and the child's failure, if any, is in it.
        let step = plan.failed_step.load(Ordering::Acquire);
        if step != 0 {
            let errno = plan.failed_errno.load(Ordering::Acquire);
            let mut status = 0;
            // SAFETY: `pid` is our child, which has exited; reaping it
            // leaves no zombie behind.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            let error = io::Error::from_raw_os_error(errno);
            return Err(match step {
                s if s == Step::Exec as i32 => error,
                s if s == Step::Group as i32 => {
                    io::Error::other(format!("cannot start a process group: {error}"))
                }
                s if s == Step::Cgroup as i32 => io::Error::other(format!(
                    "cannot join cgroup {}: {error}",
                    self.cgroup_procs
                        .as_deref()
                        .and_then(Path::parent)
                        .unwrap_or(Path::new("?"))
                        .display()
                )),
                s if s == Step::Streams as i32 => {
                    io::Error::other(format!("cannot set up standard streams: {error}"))
                }
                _ => io::Error::other(format!(
                    "cannot enter working directory {}: {error}",
                    self.cwd.as_deref().unwrap_or(Path::new("?")).display()
                )),
            });
        }
        Ok(Started {
            pid,
            stdout: stdout_pipe.map(ChildStdout::from),
            stderr: stderr_pipe.map(ChildStderr::from),
        })
    }

    /// `KEY=VALUE` entries: this process's environment with the
    /// command's variables set on top, the last setting of each winning.
    fn environment(&self) -> io::Result<Vec<CString>> {
        let set_later = |i: usize, key: &OsStr| self.env[i + 1..].iter().any(|(k, _)| k == key);
        let inherited =
            std::env::vars_os().filter(|(key, _)| !self.env.iter().any(|(k, _)| k == key));
        let own = (0..self.env.len())
            .filter(|&i| !set_later(i, &self.env[i].0))
            .map(|i| self.env[i].clone());
        inherited
            .chain(own)
            .map(|(key, value)| {
                let mut entry = key.into_vec();
                entry.push(b'=');
                entry.extend_from_slice(value.as_bytes());
                c_string(&entry)
            })
            .collect()
    }

    /// The `PATH` the command will see.
    fn path_variable(&self) -> Option<OsString> {
        match self.env.iter().rev().find(|(k, _)| k == "PATH") {
            Some((_, path)) => Some(path.clone()),
            None => std::env::var_os("PATH"),
        }
    }
}

impl Stream {
    /// The descriptor the child gets, and the parent's end of a pipe.
    fn source(&self, output: bool) -> io::Result<(Source, Option<OwnedFd>)> {
        Ok(match self {
            Stream::Null => (Source::Borrowed(dev_null()?.as_raw_fd()), None),
            Stream::File(file) => (Source::Borrowed(file.as_raw_fd()), None),
            Stream::Pipe if output => {
                let (read, write) = pipe()?;
                (Source::Owned(write), Some(read))
            }
            Stream::Pipe => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "standard input cannot be a pipe here",
                ))
            }
        })
    }
}

/// A descriptor for the child: one the [`Launch`] holds, or the write end
/// of a pipe made for this start, closed in the parent once it has begun.
enum Source {
    Borrowed(RawFd),
    Owned(OwnedFd),
}

impl Source {
    fn fd(&self) -> RawFd {
        match self {
            Source::Borrowed(fd) => *fd,
            Source::Owned(fd) => fd.as_raw_fd(),
        }
    }
}

/// `/dev/null`, opened once for every command's standard streams.
fn dev_null() -> io::Result<&'static File> {
    static NULL: OnceLock<File> = OnceLock::new();
    if let Some(null) = NULL.get() {
        return Ok(null);
    }
    let file = File::options().read(true).write(true).open("/dev/null")?;
    Ok(NULL.get_or_init(|| file))
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: a valid out-array of two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 returned two new descriptors that nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{:?} holds a NUL byte",
                String::from_utf8_lossy(bytes.split(|&b| b == 0).next().unwrap_or(b""))
            ),
        )
    })
}

fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// The paths `execve` is tried with: the program itself if it names a
/// path, else the program in each directory of `path` (`/bin:/usr/bin`
/// without one, as glibc's `execvp`; an empty entry is the working
/// directory).
fn candidates(program: &OsStr, path: Option<&OsStr>) -> io::Result<Vec<CString>> {
    let program = program.as_bytes();
    if program.contains(&b'/') {
        return Ok(vec![c_string(program)?]);
    }
    if program.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "empty program name",
        ));
    }
    let path = path.map_or(&b"/bin:/usr/bin"[..], |p| p.as_bytes());
    path.split(|&b| b == b':')
        .map(|dir| {
            if dir.is_empty() {
                return c_string(program);
            }
            let mut full = dir.to_vec();
            if !full.ends_with(b"/") {
                full.push(b'/');
            }
            full.extend_from_slice(program);
            c_string(&full)
        })
        .collect()
}

/// Starts the child of `plan` with `clone(CLONE_VM | CLONE_VFORK)` on a
/// stack of its own, and returns its pid once it has called `execve` or
/// exited.
fn clone_vfork(plan: &Plan) -> io::Result<libc::pid_t> {
    // SAFETY: sysconf has no memory effects.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
    let length = CHILD_STACK + page;
    // SAFETY: a new private anonymous mapping; nothing else refers to it.
    let stack = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            length,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if stack == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let unmap = Unmap(stack, length);
    // SAFETY: the lowest page of the mapping just made; stacks grow down.
    if unsafe { libc::mprotect(stack, page, libc::PROT_NONE) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // Signals are blocked until the child has reset their handlers: a
    // handler run in the child would run on the parent's memory.
    // SAFETY: sigset_t is plain data, filled by sigfillset; pthread_sigmask
    // changes only this thread's mask, restored below.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut before: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut before);
    }
    // SAFETY: the stack is a fresh mapping of `length` bytes whose top is
    // passed (x86-64 and aarch64 stacks grow down; the top is 16-byte
    // aligned as the mapping is page-aligned). `child` only reads `plan`,
    // which outlives the call: CLONE_VFORK suspends this thread until the
    // child has called execve or exited, and with it the child's use of
    // the stack and of `plan`.
    let pid = unsafe {
        libc::clone(
            child,
            stack.cast::<u8>().add(length).cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (plan as *const Plan).cast_mut().cast(),
        )
    };
    let error = io::Error::last_os_error();
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &before, std::ptr::null_mut()) };
    drop(unmap);
    if pid < 0 {
        return Err(error);
    }
    Ok(pid)
}

struct Unmap(*mut libc::c_void, usize);

impl Drop for Unmap {
    fn drop(&mut self) {
        // SAFETY: the mapping made in clone_vfork, no longer used.
        unsafe { libc::munmap(self.0, self.1) };
    }
}

/// The child, between `clone` and `execve`. It shares the parent's memory
/// and runs on its own stack with every signal blocked, so it makes only
/// system calls, on the plan's prepared data, allocates nothing, and
/// never returns (a return would end the child with its value as status,
/// but nothing here returns before `_exit`).
extern "C" fn child(plan: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `plan` points to the parent's Plan, alive and unmoved until
    // this child has called execve or exited.
    let plan = unsafe { &*(plan as *const Plan) };
    // SAFETY: each call below is a system call on valid pointers from the
    // plan, or on this child's own stack variables.
    unsafe {
        let fail = |step: Step| -> ! {
            plan.failed_errno
                .store(*libc::__errno_location(), Ordering::Release);
            plan.failed_step.store(step as i32, Ordering::Release);
            libc::_exit(127)
        };
        // Handlers are the parent's code on the parent's memory: every
        // signal with one gets the default action. Ignored signals stay
        // ignored, as with fork, but for SIGPIPE, which Rust programs
        // ignore and std resets for its children too.
        for signal in 1..libc::SIGRTMAX() + 1 {
            if signal == libc::SIGKILL || signal == libc::SIGSTOP {
                continue;
            }
            let mut action: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut action) != 0 {
                continue;
            }
            let handled =
                action.sa_sigaction != libc::SIG_DFL && action.sa_sigaction != libc::SIG_IGN;
            if handled || signal == libc::SIGPIPE {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
        if libc::setpgid(0, 0) != 0 {
            fail(Step::Group);
        }
        if !plan.cgroup_procs.is_null() {
            let fd = libc::open(plan.cgroup_procs, libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                fail(Step::Cgroup);
            }
            libc::close(fd);
        }
        // The sources are this process's own descriptors, above 2: std
        // reopens 0, 1 and 2 on /dev/null at start-up if they are closed,
        // so no dup2 here overwrites a source still to be copied.
        for (target, &source) in plan.streams.iter().enumerate() {
            let target = target as RawFd;
            let done = if source == target {
                // dup2 onto itself keeps close-on-exec; clear it.
                libc::fcntl(target, libc::F_SETFD, 0)
            } else {
                libc::dup2(source, target)
            };
            if done < 0 {
                fail(Step::Streams);
            }
        }
        if !plan.cwd.is_null() && libc::chdir(plan.cwd) != 0 {
            fail(Step::Directory);
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        // As glibc's execvp: a directory where the program is missing or
        // not executable is passed over; any other error is the answer.
        let mut denied = false;
        let mut candidate = plan.candidates;
        while !(*candidate).is_null() {
            libc::execve(*candidate, plan.argv, plan.envp);
            match *libc::__errno_location() {
                libc::EACCES => denied = true,
                libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
                _ => fail(Step::Exec),
            }
            candidate = candidate.add(1);
        }
        *libc::__errno_location() = if denied { libc::EACCES } else { libc::ENOENT };
        fail(Step::Exec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// Reaps `pid` and returns its wait status.
    fn wait(pid: libc::pid_t) -> libc::c_int {
        let mut status = 0;
        // SAFETY: `pid` is this test's unreaped child; a valid out-pointer.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        status
    }

    #[test]
    fn arguments_environment_directory_and_streams_reach_the_program() {
        let dir = std::env::temp_dir().join(format!("launch-{}-reach", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("input"), "from stdin").unwrap();
        let mut launch = Launch::new(&[
            "sh",
            "-c",
            r#"printf '%s|%s|%s|%s|' "$1" "$GREETING" "$(pwd)" "$(cat)"; echo oops >&2"#,
            "script",
            "first argument",
        ]);
        launch.env("GREETING", "hello");
        launch.env("GREETING", "hello again");
        launch.cwd = Some(dir.clone());
        launch.stdin = Stream::File(File::open(dir.join("input")).unwrap());
        launch.stdout = Stream::Pipe;
        launch.stderr = Stream::Pipe;
        let mut started = launch.start().unwrap();
        let (mut out, mut err) = (String::new(), String::new());
        started
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        started
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert_eq!(wait(started.pid), 0);
        assert_eq!(
            out,
            format!("first argument|hello again|{}|from stdin|", dir.display())
        );
        assert_eq!(err, "oops\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_child_leads_a_process_group_of_its_own_with_default_signals() {
        // SIGPIPE is ignored in Rust programs; the command must not inherit that.
        let mut launch = Launch::new(&[
            "sh",
            "-c",
            "ps -o pgid= -p $$; grep -E '^Sig(Ign|Blk)' /proc/self/status",
        ]);
        launch.stdout = Stream::Pipe;
        let mut started = launch.start().unwrap();
        let mut out = String::new();
        started
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        assert_eq!(wait(started.pid), 0);
        let mut lines = out.lines();
        let group: libc::pid_t = lines.next().unwrap().trim().parse().unwrap();
        assert_eq!(group, started.pid, "{out}");
        let mask = |name: &str| {
            let line = out.lines().find(|l| l.starts_with(name)).unwrap();
            u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
        };
        assert_eq!(mask("SigBlk:"), 0, "signals blocked in the command: {out}");
        let sigpipe = 1u64 << (libc::SIGPIPE - 1);
        assert_eq!(mask("SigIgn:") & sigpipe, 0, "SIGPIPE ignored: {out}");
    }

    #[test]
    fn a_missing_program_or_directory_is_the_starts_error() {
        let missing = Launch::new(&["constellation-no-such-program"]).start();
        assert_eq!(missing.unwrap_err().kind(), io::ErrorKind::NotFound);
        let mut elsewhere = Launch::new(&["true"]);
        elsewhere.cwd = Some(PathBuf::from("/constellation/no/such/dir"));
        let error = elsewhere.start().unwrap_err().to_string();
        assert!(
            error.contains("cannot enter working directory /constellation/no/such/dir"),
            "{error}"
        );
        // The command's own PATH is where its program is sought.
        let mut nowhere = Launch::new(&["true"]);
        nowhere.env("PATH", "/constellation/no/such/dir");
        assert_eq!(nowhere.start().unwrap_err().kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn a_cgroup_that_cannot_be_joined_fails_the_start() {
        let mut launch = Launch::new(&["true"]);
        launch.cgroup_procs = Some(PathBuf::from("/constellation/no/such/cgroup.procs"));
        let error = launch.start().unwrap_err().to_string();
        assert!(
            error.contains("cannot join cgroup /constellation/no/such"),
            "{error}"
        );
    }
}
