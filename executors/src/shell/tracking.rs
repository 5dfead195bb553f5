//! Tracking every process a command starts, so that none outlives it.
//!
//! A process group does not hold a command's descendants: one that calls
//! `setsid` leaves it, and killing the group misses it. Two mechanisms
//! catch such processes:
//!
//! - **cgroup v2**, where this process's own cgroup lies on a cgroup2
//!   hierarchy it may create cgroups in (as root, or in a subtree that
//!   systemd or a container delegates). Each command runs in a cgroup of its
//!   own, as Slurm's `proctrack/cgroup` does: the child joins it before its
//!   `exec`, nothing it starts can leave it without privileges, and
//!   `cgroup.kill` ends all of them at once (Linux ≥ 5.14; before, every
//!   process `cgroup.procs` lists is killed until none is left).
//! - **Child subreaper**, elsewhere. The executor's process marks itself a
//!   child subreaper (`PR_SET_CHILD_SUBREAPER`), so a command's orphans are
//!   reparented to it instead of to init. Every command carries a token of
//!   its own in [`TOKEN_VAR`], which its descendants inherit; when the command
//!   ends, the executor kills the reparented processes that carry the token,
//!   or share the command's process group or the session of one it killed,
//!   and reaps them. A descendant that clears its environment and leaves the
//!   session escapes this mechanism, not the cgroup one; and one that leaves
//!   the session and exits while its command still runs stays a zombie of
//!   this process, as a dead process's environment can no longer be read
//!   to tell whose it was (reaping an unknown zombie could take another
//!   thread's child from under its `wait`). The subreaper is process-wide:
//!   orphans of other children this process starts are adopted too.
//!
//! [`TRACKING_VAR`] picks one: `cgroup`, `subreaper` or `auto` (the default:
//! cgroup v2 where it works, else the subreaper).

use std::collections::{BTreeSet, HashSet};
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Once, OnceLock};
use std::time::{Duration, Instant};

use super::launch::Launch;

/// The environment variable that picks how commands are tracked:
/// `cgroup`, `subreaper` or `auto` (the default).
pub const TRACKING_VAR: &str = "CONSTELLATION_PROCESS_TRACKING";

/// The environment variable that carries each command's token, so that the
/// subreaper can tell the command's orphans from other processes'.
pub const TOKEN_VAR: &str = "CONSTELLATION_COMMAND_TOKEN";

/// How long ending a command waits for its processes to die. SIGKILL is
/// not refused, but a process in uninterruptible sleep (a hung NFS read)
/// dies only when the sleep ends.
const KILL_PATIENCE: Duration = Duration::from_secs(10);

/// How this process keeps track of the processes its commands start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessTracking {
    /// Every command in a cgroup of its own, created under this directory
    /// (this process's own cgroup).
    Cgroup {
        /// The cgroup2 directory the commands' cgroups are created in.
        parent: PathBuf,
    },
    /// This process is a child subreaper and kills the orphans that carry
    /// a command's token.
    Subreaper,
}

impl ProcessTracking {
    /// The mechanism for this process, decided once from [`TRACKING_VAR`]
    /// and what the machine allows.
    pub fn current() -> &'static ProcessTracking {
        static CURRENT: OnceLock<ProcessTracking> = OnceLock::new();
        CURRENT.get_or_init(|| {
            let wanted = std::env::var(TRACKING_VAR).unwrap_or_default();
            let tracking = match wanted.as_str() {
                "subreaper" => ProcessTracking::Subreaper,
                "cgroup" | "auto" | "" => match ProcessTracking::cgroup() {
                    Ok(tracking) => tracking,
                    Err(why) => {
                        if wanted == "cgroup" {
                            tracing::warn!("{TRACKING_VAR}=cgroup, but {why}; commands are tracked as a child subreaper instead");
                        } else {
                            tracing::debug!("commands are tracked as a child subreaper: {why}");
                        }
                        ProcessTracking::Subreaper
                    }
                },
                other => {
                    tracing::warn!("{TRACKING_VAR}={other:?} is none of cgroup, subreaper, auto; using auto");
                    ProcessTracking::cgroup().unwrap_or(ProcessTracking::Subreaper)
                }
            };
            if let ProcessTracking::Cgroup { parent } = &tracking {
                remove_stale_cgroups(parent);
            }
            tracing::debug!(?tracking, "how commands are tracked");
            tracking
        })
    }

    /// Cgroup v2 tracking under this process's own cgroup, if a command can
    /// really be started in a cgroup created there; or why not.
    pub fn cgroup() -> Result<ProcessTracking, String> {
        let parent = own_cgroup_dir()?;
        let tracking = ProcessTracking::Cgroup { parent };
        // Creating a cgroup is not enough: moving a process needs write
        // access to the common ancestor's `cgroup.procs` as well.
        let mut probe = Launch::new(&["/bin/sh", "-c", ":"]);
        let tracked = tracking
            .track(&mut probe)
            .map_err(|e| format!("no cgroup can be created: {e}"))?;
        let started = probe
            .start()
            .map_err(|e| format!("a process cannot join a new cgroup: {e}"))?;
        let mut status = 0;
        // SAFETY: `started.pid` is our unreaped child; a valid out-pointer.
        let reaped = unsafe { libc::waitpid(started.pid, &mut status, 0) };
        tracked.finish(0);
        if reaped != started.pid || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
            return Err(format!(
                "a probe in a new cgroup ended with wait status {status:#x}"
            ));
        }
        Ok(tracking)
    }

    /// Prepares `command` to be tracked: gives it a token and, with
    /// cgroups, a cgroup to join before its `exec`.
    pub(crate) fn track(&self, command: &mut Launch) -> io::Result<Tracked> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let token = format!(
            "{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        command.env(TOKEN_VAR, &token);
        let cgroup = match self {
            ProcessTracking::Cgroup { parent } => {
                let dir = parent.join(format!("constellation-{token}"));
                // One call in the common case, no check before it.
                if let Err(error) = std::fs::create_dir(&dir) {
                    if error.kind() != io::ErrorKind::AlreadyExists {
                        return Err(error);
                    }
                    // Left by a process that died with our pid before us.
                    kill_cgroup(&dir);
                    let _ = std::fs::remove_dir(&dir);
                    std::fs::create_dir(&dir)?;
                }
                // The child writes itself into it before its exec, without
                // a fork (see `launch`), so before it can start anything.
                command.cgroup_procs = Some(dir.join("cgroup.procs"));
                Some(dir)
            }
            ProcessTracking::Subreaper => {
                become_subreaper();
                None
            }
        };
        Ok(Tracked { token, cgroup })
    }
}

/// One command's tracking: its token, and its cgroup when it has one.
pub(crate) struct Tracked {
    token: String,
    cgroup: Option<PathBuf>,
}

impl Tracked {
    /// Kills everything the command started. Call it after the leader
    /// (whose pid is `leader`, also its process group) has died but before
    /// it is reaped, so its pid, and with it the group's id, cannot be
    /// reused while the orphans are sought. Returns once they are dead and
    /// reaped, or after [`KILL_PATIENCE`].
    pub(crate) fn finish(mut self, leader: libc::pid_t) {
        match self.cgroup.take() {
            Some(dir) => {
                kill_cgroup(&dir);
                remove_cgroup(&dir);
            }
            None => kill_orphans(&self.token, leader),
        }
    }
}

impl Drop for Tracked {
    /// A command that never started leaves an empty cgroup to remove.
    fn drop(&mut self) {
        if let Some(dir) = self.cgroup.take() {
            remove_cgroup(&dir);
        }
    }
}

/// The directory of this process's cgroup on the cgroup2 hierarchy, if
/// there is one and this process may create cgroups in it.
fn own_cgroup_dir() -> Result<PathBuf, String> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("/proc/self/cgroup cannot be read: {e}"))?;
    let own = cgroups
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .ok_or("this process is in no cgroup v2 hierarchy")?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("/proc/self/mountinfo cannot be read: {e}"))?;
    // mountinfo: ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [TAGS] - TYPE SOURCE OPTIONS
    let dir = mounts
        .lines()
        .filter_map(|line| {
            let (fields, after) = line.split_once(" - ")?;
            if after.split(' ').next()? != "cgroup2" {
                return None;
            }
            let mut fields = fields.split(' ');
            let root = fields.nth(3)?;
            let mount_point = fields.next()?;
            let inside = own.strip_prefix(root.trim_end_matches('/'))?;
            Some(Path::new(mount_point).join(inside.trim_start_matches('/')))
        })
        .find(|dir| dir.join("cgroup.procs").exists())
        .ok_or("no mounted cgroup2 hierarchy holds this process's cgroup")?;
    let c_dir = CString::new(dir.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: a valid C string.
    if unsafe { libc::access(c_dir.as_ptr(), libc::W_OK) } != 0 {
        return Err(format!(
            "cgroup {} is not writable: {}",
            dir.display(),
            io::Error::last_os_error()
        ));
    }
    Ok(dir)
}

/// Kills every process in the cgroup at `dir` and waits until it is empty.
fn kill_cgroup(dir: &Path) {
    // The common case: everything the command started has already ended.
    if !populated(dir) {
        return;
    }
    if std::fs::write(dir.join("cgroup.kill"), "1").is_err() {
        // Before Linux 5.14: kill what is listed until nothing is, since a
        // process may fork between the read and the kill.
        let deadline = Instant::now() + KILL_PATIENCE;
        while let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) {
            let pids: Vec<libc::pid_t> = procs.lines().filter_map(|l| l.parse().ok()).collect();
            if pids.is_empty() || Instant::now() > deadline {
                break;
            }
            for pid in pids {
                // SAFETY: kill has no memory effects; a pid that died meanwhile gives ESRCH.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let deadline = Instant::now() + KILL_PATIENCE;
    let mut pause = Duration::from_millis(1);
    while populated(dir) && Instant::now() < deadline {
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Kills and removes the command cgroups under `parent` whose process is
/// gone: one killed outright (SIGKILL, the OOM killer) or ended with
/// commands still running can clean up after neither.
fn remove_stale_cgroups(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(owner) = name
            .to_str()
            .and_then(|n| n.strip_prefix("constellation-"))
            .and_then(|n| n.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{owner}")).exists() {
            continue;
        }
        tracing::info!(
            "removing cgroup {} of a process that is gone",
            name.to_string_lossy()
        );
        kill_cgroup(&entry.path());
        remove_cgroup(&entry.path());
    }
}

/// Whether the cgroup at `dir` still holds a live process.
fn populated(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("cgroup.events"))
        .map(|events| events.lines().any(|l| l == "populated 1"))
        .unwrap_or(false)
}

fn remove_cgroup(dir: &Path) {
    if let Err(error) = std::fs::remove_dir(dir) {
        if error.kind() != io::ErrorKind::NotFound {
            tracing::warn!("cannot remove cgroup {}: {error}", dir.display());
        }
    }
}

/// Makes this process a child subreaper, once.
fn become_subreaper() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: prctl with an integer argument has no memory effects.
        if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
            tracing::warn!(
                "cannot become a child subreaper ({}); a command's detached children may outlive it",
                io::Error::last_os_error()
            );
        }
    });
}

/// A child of this process, as `/proc/PID/stat` describes it.
struct ChildProcess {
    pid: libc::pid_t,
    zombie: bool,
    group: libc::pid_t,
    session: libc::pid_t,
}

/// This process's children, including the orphans reparented to it.
fn children() -> Vec<ChildProcess> {
    let me = std::process::id() as libc::pid_t;
    let pids: Vec<libc::pid_t> = match child_pids() {
        Some(pids) => pids.into_iter().collect(),
        // Without the `children` files, every process's parent is read.
        None => match std::fs::read_dir("/proc") {
            Ok(entries) => entries
                .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
                .collect(),
            Err(_) => Vec::new(),
        },
    };
    pids.into_iter()
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // The command name may hold spaces and parentheses; the fields
            // after the last ')' are: state ppid pgrp session ...
            let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
            let state = fields.next()?;
            let parent: libc::pid_t = fields.next()?.parse().ok()?;
            let group = fields.next()?.parse().ok()?;
            let session = fields.next()?.parse().ok()?;
            (parent == me).then_some(ChildProcess {
                pid,
                zombie: state == "Z" || state == "X",
                group,
                session,
            })
        })
        .collect()
}

/// The pids of this process's children, from the `children` file of each
/// of its threads (a child belongs to the thread that started it, an
/// adopted orphan to the first live thread): a few small reads instead of
/// a read of every process's `stat` on the machine, at each command's end.
/// `None` where the kernel has no such files (`CONFIG_PROC_CHILDREN`).
///
/// The kernel walks a thread's children as the file is read, and a child
/// reaped during the walk can make it skip a sibling. So the files are
/// read again until two reads in a row agree, and every pid seen is
/// kept: a child is missed only if every read skipped it, each time
/// because another child of the same thread was reaped at that moment.
fn child_pids() -> Option<BTreeSet<libc::pid_t>> {
    /// Reads before the answer is taken as it is, should children keep
    /// being reaped meanwhile.
    const MAX_READS: usize = 8;
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    // SAFETY: gettid has no memory effects.
    let available = *AVAILABLE.get_or_init(|| {
        let tid = unsafe { libc::gettid() };
        Path::new(&format!("/proc/self/task/{tid}/children")).exists()
    });
    if !available {
        return None;
    }
    let mut seen = BTreeSet::new();
    let mut previous: Option<BTreeSet<libc::pid_t>> = None;
    for _ in 0..MAX_READS {
        let mut read = BTreeSet::new();
        for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
            // A thread that ended meanwhile has no children to give.
            let Ok(children) = std::fs::read_to_string(task.path().join("children")) else {
                continue;
            };
            read.extend(
                children
                    .split_ascii_whitespace()
                    .filter_map(|pid| pid.parse::<libc::pid_t>().ok()),
            );
        }
        seen.extend(read.iter().copied());
        if previous.as_ref() == Some(&read) {
            break;
        }
        previous = Some(read);
    }
    Some(seen)
}

/// Whether process `pid` has `wanted` (`TOKEN_VAR=token`) in its environment.
fn carries(pid: libc::pid_t, wanted: &[u8]) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|environ| environ.split(|&b| b == 0).any(|v| v == wanted))
        .unwrap_or(false)
}

/// Kills and reaps the orphans of the command whose token is `token` and
/// whose process group is `group`. They were reparented to this process,
/// a child subreaper. Killing one reparents its own children here in turn,
/// so the search repeats until a round finds nothing. The killed stay
/// unreaped until the end, so that their pids, the ids of their groups and
/// sessions, cannot be reused by an unrelated process meanwhile.
fn kill_orphans(token: &str, group: libc::pid_t) {
    // SAFETY: getsid(0) only reads this process's session id.
    let own_session = unsafe { libc::getsid(0) };
    let wanted = format!("{TOKEN_VAR}={token}");
    let deadline = Instant::now() + KILL_PATIENCE;
    let mut sessions: HashSet<libc::pid_t> = HashSet::new();
    let mut doomed: HashSet<libc::pid_t> = HashSet::new();
    loop {
        let mut found = false;
        for child in children() {
            if child.pid == group || doomed.contains(&child.pid) {
                continue;
            }
            let ours = child.group == group
                || (child.session != own_session && sessions.contains(&child.session))
                || carries(child.pid, wanted.as_bytes());
            if !ours {
                continue;
            }
            found = true;
            if !child.zombie {
                // SAFETY: kill has no memory effects; `child.pid` is our
                // unreaped child, so the pid is not someone else's.
                unsafe { libc::kill(child.pid, libc::SIGKILL) };
            }
            if child.session != own_session {
                sessions.insert(child.session);
            }
            doomed.insert(child.pid);
        }
        // Wait for this round's dead, so their children are reparented here.
        for &pid in &doomed {
            let _ = super::exit::wait_for_exit(pid, Some(deadline));
        }
        if !found || Instant::now() > deadline {
            break;
        }
    }
    for pid in doomed {
        let mut status = 0;
        // SAFETY: `pid` is our child; WNOHANG never blocks.
        unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shell::process::run_once_tracked;
    use crate::shell::{Capture, ShellOutcome, ShellSpec};
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    /// A fresh directory for one test.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tracking-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Whether `pid` is a live process (not a zombie).
    fn alive(pid: libc::pid_t) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            let state = stat.rsplit_once(')').map_or("", |(_, s)| s.trim_start());
            !state.starts_with('Z') && !state.starts_with('X')
        })
    }

    /// Runs the repro under `tracking`: a child that calls `setsid`
    /// and would sleep for minutes. It must be dead, and reaped, as soon as
    /// the command has ended, normally or by its timeout.
    fn detached_child_dies_with_its_command(tracking: &ProcessTracking, timeout: bool) {
        let name = format!("{tracking:?}-{timeout}").replace(|c: char| !c.is_alphanumeric(), "");
        let dir = scratch(&name);
        let script = if timeout {
            "setsid sleep 312 & echo $! > detached.pid; sleep 60"
        } else {
            "setsid sleep 312 & echo $! > detached.pid; sleep 1"
        };
        // Output to files: a surviving child holding a pipe would keep the
        // reader, and with it the test, waiting for 312 s.
        let mut spec = ShellSpec::script(script).cwd(&dir).output_dir(&dir);
        if timeout {
            // Long enough for the shell to start the detached child on a
            // loaded machine.
            spec = spec.timeout(Duration::from_secs(5));
        }
        let files = crate::shell::output::OutputFiles::at(dir.join("stdout"), dir.join("stderr"));
        let done = run_once_tracked(&spec, &[], Some(&files), tracking);
        if timeout {
            assert!(
                matches!(done.outcome, ShellOutcome::TimedOut { .. }),
                "{:?}",
                done.outcome
            );
        } else {
            assert_eq!(done.outcome, ShellOutcome::Exited { code: 0 });
        }
        let pid: libc::pid_t = std::fs::read_to_string(dir.join("detached.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let survived = alive(pid);
        if survived {
            // SAFETY: only the test's own stray sleep.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        assert!(
            !survived,
            "the detached `sleep 312` ({pid}) outlived its command under {tracking:?}"
        );
        if let ProcessTracking::Subreaper = tracking {
            assert!(
                std::fs::metadata(format!("/proc/{pid}")).is_err(),
                "the detached child {pid} was killed but not reaped"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_detached_child_dies_with_its_command_under_the_subreaper() {
        detached_child_dies_with_its_command(&ProcessTracking::Subreaper, false);
    }

    #[test]
    fn a_detached_child_dies_at_a_timeout_under_the_subreaper() {
        detached_child_dies_with_its_command(&ProcessTracking::Subreaper, true);
    }

    #[test]
    fn a_detached_child_dies_with_its_command_in_a_cgroup() {
        match ProcessTracking::cgroup() {
            Ok(tracking) => detached_child_dies_with_its_command(&tracking, false),
            Err(why) => println!("skipped: cgroup v2 tracking is not available here: {why}"),
        }
    }

    #[test]
    fn a_detached_child_dies_at_a_timeout_in_a_cgroup() {
        match ProcessTracking::cgroup() {
            Ok(tracking) => detached_child_dies_with_its_command(&tracking, true),
            Err(why) => println!("skipped: cgroup v2 tracking is not available here: {why}"),
        }
    }

    #[test]
    fn a_commands_cgroup_is_removed_when_it_ends() {
        let tracking = match ProcessTracking::cgroup() {
            Ok(tracking) => tracking,
            Err(why) => {
                println!("skipped: cgroup v2 tracking is not available here: {why}");
                return;
            }
        };
        let ProcessTracking::Cgroup { parent } = &tracking else {
            unreachable!("ProcessTracking::cgroup gives cgroup tracking")
        };
        let spec =
            ShellSpec::script("cat /proc/self/cgroup").capture(Capture::Memory { limit: 4096 });
        let done = run_once_tracked(&spec, &[], None, &tracking);
        let text = done.stdout.text().unwrap();
        let own = text.lines().find_map(|l| l.strip_prefix("0::")).unwrap();
        let name = own.rsplit('/').next().unwrap();
        assert!(
            name.starts_with("constellation-"),
            "the command ran in {own}"
        );
        assert!(!parent.join(name).exists(), "cgroup {name} was left behind");
    }

    #[test]
    fn the_cgroups_of_a_process_that_is_gone_are_emptied_and_removed() {
        let parent = match ProcessTracking::cgroup() {
            Ok(ProcessTracking::Cgroup { parent }) => parent,
            other => {
                println!("skipped: cgroup v2 tracking is not available here: {other:?}");
                return;
            }
        };
        let mut gone = Command::new("/bin/sh").args(["-c", ":"]).spawn().unwrap();
        gone.wait().unwrap();
        let stale = parent.join(format!("constellation-{}-1", gone.id()));
        std::fs::create_dir(&stale).unwrap();
        let mut left = Command::new("sleep").arg("315").spawn().unwrap();
        std::fs::write(stale.join("cgroup.procs"), left.id().to_string()).unwrap();
        remove_stale_cgroups(&parent);
        let removed = !stale.exists();
        // The sweep returns once the cgroup is empty: the sleep is a zombie.
        let killed = left.try_wait().unwrap();
        if killed.is_none() {
            let _ = left.kill();
            let _ = left.wait();
        }
        assert!(removed, "{} was left behind", stale.display());
        assert!(
            killed.is_some(),
            "the process in the stale cgroup was not killed"
        );
    }

    #[test]
    fn another_commands_detached_child_is_left_alone() {
        // Two commands at once under the subreaper: the one that ends first
        // must not kill the other's detached child.
        let dir = scratch("neighbour");
        let tracking = ProcessTracking::Subreaper;
        let long = ShellSpec::script(
            // Ends when the test says so (or after 60 s, should it fail first).
            "setsid sleep 313 & echo $! > long.pid; \
             for i in $(seq 1200); do [ -e go ] && break; sleep 0.05; done",
        )
        .cwd(&dir)
        .capture(Capture::Discard);
        let neighbour = std::thread::spawn({
            let tracking = tracking.clone();
            move || run_once_tracked(&long, &[], None, &tracking)
        });
        let pid_file = dir.join("long.pid");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !pid_file.exists() {
            assert!(Instant::now() < deadline, "the long command never started");
            std::thread::sleep(Duration::from_millis(10));
        }
        let short = ShellSpec::script("setsid sleep 314 & sleep 0.1").capture(Capture::Discard);
        run_once_tracked(&short, &[], None, &tracking);
        let pid: libc::pid_t = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let spared = alive(pid);
        std::fs::write(dir.join("go"), "").unwrap();
        neighbour.join().unwrap();
        assert!(
            spared,
            "the other command's detached child {pid} was killed"
        );
        assert!(
            !alive(pid),
            "the detached child {pid} outlived its own command"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Minor page faults of the calling thread so far.
    fn thread_faults() -> i64 {
        // SAFETY: rusage is plain data that getrusage fills in.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: a valid out-pointer.
        assert_eq!(
            unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) },
            0
        );
        usage.ru_minflt
    }

    /// The pages of a 64 MiB region of this thread's memory that `start`
    /// (which starts a command and waits for it) made copy-on-write: a
    /// `fork` marks every page of the parent so, and the parent's next
    /// write to each one faults; a start that borrows the memory until
    /// the `exec` (`CLONE_VM | CLONE_VFORK`) marks none. Unlike a timing,
    /// the count does not depend on the machine's load. Returns the
    /// faults and the number of pages.
    fn pages_copied_on_write_by(start: impl FnOnce()) -> (i64, i64) {
        const LENGTH: usize = 64 << 20;
        // SAFETY: a fresh private anonymous mapping, unmapped below.
        let region = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                LENGTH,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(region, libc::MAP_FAILED);
        // Small pages, so that each counts: a huge page faults once.
        // SAFETY: advice on the mapping just made.
        unsafe { libc::madvise(region, LENGTH, libc::MADV_NOHUGEPAGE) };
        let page = 4096;
        let touch = |value: u8| {
            for offset in (0..LENGTH).step_by(page) {
                // SAFETY: inside the mapping, which is writable.
                unsafe { region.cast::<u8>().add(offset).write_volatile(value) };
            }
        };
        touch(1);
        start();
        let before = thread_faults();
        touch(2);
        let faults = thread_faults() - before;
        // SAFETY: the mapping made above, no longer used.
        unsafe { libc::munmap(region, LENGTH) };
        (faults, (LENGTH / page) as i64)
    }

    #[test]
    fn starting_a_command_copies_none_of_this_process_memory() {
        // The measure itself: a start with a `pre_exec` hook, which makes
        // std fork, as joining a cgroup once did.
        let (faults, pages) = pages_copied_on_write_by(|| {
            let mut command = Command::new("true");
            // SAFETY: the hook does nothing.
            unsafe { command.pre_exec(|| Ok(())) };
            assert!(command.status().unwrap().success());
        });
        assert!(
            faults >= pages / 2,
            "a fork made only {faults} of {pages} pages copy-on-write: the measure is blind here"
        );
        let mut trackings = vec![ProcessTracking::Subreaper];
        match ProcessTracking::cgroup() {
            Ok(tracking) => trackings.push(tracking),
            Err(why) => println!("cgroup tracking not tested: {why}"),
        }
        for tracking in trackings {
            let spec = ShellSpec::command("true").capture(Capture::Discard);
            let (faults, pages) = pages_copied_on_write_by(|| {
                let done = run_once_tracked(&spec, &[], None, &tracking);
                assert_eq!(done.outcome, ShellOutcome::Exited { code: 0 });
            });
            // A few faults may come from this thread's own work meanwhile.
            assert!(
                faults < pages / 8,
                "starting a command under {tracking:?} made {faults} of {pages} pages \
                 copy-on-write: it forked, and its cost grows with this process's memory"
            );
        }
    }

    #[test]
    fn a_command_is_in_its_cgroup_before_it_can_fork() {
        let tracking = match ProcessTracking::cgroup() {
            Ok(tracking) => tracking,
            Err(why) => {
                println!("skipped: cgroup v2 tracking is not available here: {why}");
                return;
            }
        };
        // The detached child is started at once and its command ends at
        // once: a command that joined its cgroup only after it began would
        // often fork the child outside it, where nothing would kill it.
        let spec = ShellSpec::script("setsid sleep 316 </dev/null >/dev/null 2>&1 & echo $!")
            .capture(Capture::Memory { limit: 64 });
        let mut survivors = Vec::new();
        for _ in 0..40 {
            let done = run_once_tracked(&spec, &[], None, &tracking);
            assert_eq!(done.outcome, ShellOutcome::Exited { code: 0 });
            let pid: libc::pid_t = done.stdout.text().unwrap().trim().parse().unwrap();
            if alive(pid) {
                survivors.push(pid);
            }
        }
        for &pid in &survivors {
            // SAFETY: only the test's own stray sleeps.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        assert!(
            survivors.is_empty(),
            "detached children outlived their commands: {survivors:?}"
        );
    }

    #[test]
    fn an_adopted_orphan_is_among_this_process_children() {
        become_subreaper();
        // `sh` starts a sleep and exits: the sleep is reparented here.
        let output = Command::new("/bin/sh")
            .args(["-c", "sleep 318 </dev/null >/dev/null 2>&1 & echo $!"])
            .output()
            .unwrap();
        let orphan: libc::pid_t = String::from_utf8(output.stdout)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let listed = child_pids().map(|pids| pids.contains(&orphan));
        let found = children().iter().any(|c| c.pid == orphan);
        // SAFETY: the test's own orphan, now this process's child.
        unsafe { libc::kill(orphan, libc::SIGKILL) };
        let _ = super::super::exit::wait_for_exit(orphan, Some(Instant::now() + KILL_PATIENCE));
        let mut status = 0;
        // SAFETY: our child; reaps it.
        unsafe { libc::waitpid(orphan, &mut status, 0) };
        assert_ne!(
            listed,
            Some(false),
            "the children files miss the orphan {orphan}"
        );
        assert!(
            found,
            "the orphan {orphan} is not among this process's children"
        );
        assert!(
            !children()
                .iter()
                .any(|c| c.pid == 1 || c.pid == std::process::id() as libc::pid_t),
            "a process that is not a child is listed"
        );
    }
}
