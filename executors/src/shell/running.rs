//! The commands this process runs now, by process group, so that a process
//! told to stop (Ctrl-C on `constellation run`) can kill every command it
//! started and start no more.
//!
//! Each command runs in a process group of its own, so a signal to this
//! process's group (a terminal's Ctrl-C) never reaches it: without this
//! registry, a runner that exits leaves its commands running, and a resume
//! runs them a second time beside the orphans.
//!
//! A group is registered from its start until its leader has exited and
//! the rest of the group is killed, and leaves the registry before its
//! leader is reaped: while registered, the group's id cannot belong to an
//! unrelated process, so signalling it reaches only the command.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use constellation::ActivityId;

/// The commands running now, and whether this process stopped starting
/// more. One lock for both, so that a command either starts before the
/// stop and is killed with the others, or sees the stop and is killed at
/// once: none slips between.
struct Running {
    stopped: bool,
    /// Process group (the leader's pid) to the activity that runs it.
    groups: BTreeMap<libc::pid_t, Option<ActivityId>>,
    /// Activities whose attempt failed, waiting to retry: they report
    /// that attempt as soon as the stop comes.
    pausing: BTreeSet<ActivityId>,
}

static RUNNING: Mutex<Running> = Mutex::new(Running {
    stopped: false,
    groups: BTreeMap::new(),
    pausing: BTreeSet::new(),
});

/// Wakes the activities waiting to retry when the stop comes.
static STOPPED: Condvar = Condvar::new();

fn running() -> MutexGuard<'static, Running> {
    // The data stays consistent whatever panicked while holding the lock:
    // each change is one insert, removal or store.
    RUNNING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// How often [`kill_all_running`] looks whether the commands it signalled
/// have ended.
const POLL: Duration = Duration::from_millis(10);

/// How long [`kill_all_running`] waits, after its `SIGKILL`, for the
/// threads that ran the commands to see them dead: a `SIGKILL` cannot be
/// caught, so this is only the time a loaded machine takes to schedule them.
const KILLED_PATIENCE: Duration = Duration::from_secs(5);

/// Stops this process from starting shell commands: from now on a shell
/// activity that has not started its command ends without starting it and
/// sends no result (it stays unfinished, to run when the work is resumed),
/// and one whose attempt ends is not retried. Commands running now go on;
/// [`kill_all_running`] ends them. Cannot be undone.
///
/// It takes a lock that a command's start holds only for a map insert, so
/// a signal-handling thread may call it (not a signal handler itself).
pub fn stop_starting() {
    running().stopped = true;
    STOPPED.notify_all();
}

/// Whether [`stop_starting`] (or [`kill_all_running`]) was called.
pub fn stopped() -> bool {
    running().stopped
}

/// Stops starting commands ([`stop_starting`]) and kills every command
/// this process runs now, with all its processes: `SIGTERM` to each
/// command's process group, so a command may clean up, then `SIGKILL` to
/// the groups whose leader has not exited after `grace`. Returns once
/// every command it signalled has ended (or, for one that a `SIGKILL`
/// could not end, at most a few seconds after the `SIGKILL`), with the
/// activities whose commands it killed.
///
/// Each killed command's activity reports its attempt as killed by the
/// signal that ended it, as any command killed by a signal, unless the
/// process is marked preempted ([`super::mark_preempted`]).
pub fn kill_all_running(grace: Duration) -> Vec<ActivityId> {
    let (signalled, pausing): (Vec<(libc::pid_t, Option<ActivityId>)>, Vec<ActivityId>) = {
        let mut running = running();
        running.stopped = true;
        STOPPED.notify_all();
        let groups: Vec<_> = running.groups.iter().map(|(&g, &a)| (g, a)).collect();
        for &(group, _) in &groups {
            // SAFETY: kill has no memory effects; a registered group's
            // leader is unreaped, so its id is the command's alone.
            unsafe { libc::kill(-group, libc::SIGTERM) };
        }
        (groups, running.pausing.iter().copied().collect())
    };
    if signalled.is_empty() {
        return pausing;
    }
    let groups: Vec<libc::pid_t> = signalled.iter().map(|&(g, _)| g).collect();
    if !wait_until_gone(&groups, Instant::now() + grace) {
        let running = running();
        for group in groups.iter().filter(|g| running.groups.contains_key(g)) {
            tracing::warn!(
                group,
                "a command did not end within {grace:?} of SIGTERM; killing it"
            );
            // SAFETY: as above; the lock keeps the group registered.
            unsafe { libc::kill(-group, libc::SIGKILL) };
        }
    }
    if !wait_until_gone(&groups, Instant::now() + KILLED_PATIENCE) {
        tracing::error!(
            "commands killed with SIGKILL were not seen to end within {KILLED_PATIENCE:?}"
        );
    }
    (signalled.into_iter().filter_map(|(_, a)| a))
        .chain(pausing)
        .collect()
}

/// Waits `pause` before activity `activity` retries a failed attempt;
/// `false`, at once, if this process stopped starting commands before or
/// meanwhile: then it must not retry, and reports the failed attempt.
pub(crate) fn pause_before_retry(activity: ActivityId, pause: Duration) -> bool {
    let deadline = Instant::now() + pause;
    let mut running = running();
    running.pausing.insert(activity);
    while !running.stopped {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        running = STOPPED
            .wait_timeout(running, left)
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .0;
    }
    running.pausing.remove(&activity);
    !running.stopped
}

/// Waits until none of `groups` is registered any more; `false` if the
/// deadline came first.
fn wait_until_gone(groups: &[libc::pid_t], deadline: Instant) -> bool {
    loop {
        let left = {
            let running = running();
            groups.iter().any(|g| running.groups.contains_key(g))
        };
        if !left {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(POLL);
    }
}

/// How many commands run now.
pub fn running_count() -> usize {
    running().groups.len()
}

/// How many activities wait to retry a failed attempt now.
pub fn waiting_to_retry() -> usize {
    running().pausing.len()
}

/// Registers the just-started command whose process group is `group`.
/// `false` if this process stopped starting commands meanwhile: the caller
/// must kill the group, which is then not registered.
pub(crate) fn register(group: libc::pid_t, activity: Option<ActivityId>) -> bool {
    let mut running = running();
    if running.stopped {
        return false;
    }
    running.groups.insert(group, activity);
    true
}

/// Forgets the command whose process group is `group`: its leader has
/// exited and the rest of the group is killed. Called before the leader
/// is reaped.
pub(crate) fn unregister(group: libc::pid_t) {
    running().groups.remove(&group);
}
