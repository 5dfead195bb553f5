//! Tracking as a child subreaper: a command's orphans are reparented to
//! this process, which finds them by the command's token, process group or
//! session, and kills and reaps them when the command ends.

use std::collections::{BTreeSet, HashSet};
use std::io;
use std::path::Path;
use std::sync::{Once, OnceLock};
use std::time::Instant;

use super::{KILL_PATIENCE, TOKEN_VAR};
use crate::shell::exit::wait_for_exit;

/// Makes this process a child subreaper, once.
pub(super) fn become_subreaper() {
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
pub(super) struct ChildProcess {
    pub(super) pid: libc::pid_t,
    zombie: bool,
    group: libc::pid_t,
    session: libc::pid_t,
}

/// This process's children, including the orphans reparented to it.
pub(super) fn children() -> Vec<ChildProcess> {
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
pub(super) fn child_pids() -> Option<BTreeSet<libc::pid_t>> {
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
pub(super) fn kill_orphans(token: &str, group: libc::pid_t) {
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
            let _ = wait_for_exit(pid, Some(deadline));
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
