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
//!
//! The same registry lets an agent drop the work of one runner while it
//! serves others ([`cancel_origin`]): an activity's id names the node that
//! created it, and a runner's shell activities are created by its
//! coordinator on the runner's node, so that node is the runner's mark on
//! every command it caused.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use constellation::{ActivityId, NodeId};

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
    /// Origins whose work was cancelled ([`cancel_origin`]), oldest first,
    /// at most [`CANCELLED_ORIGINS`].
    cancelled: VecDeque<NodeId>,
}

/// Why an activity may not start (another) command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// This process stopped starting commands ([`stop_starting`]).
    Stopping,
    /// The node that created the activity had its work cancelled
    /// ([`cancel_origin`]).
    Cancelled,
}

impl Running {
    /// Why `activity` may not start (another) command, if it may not: this
    /// process stopped, or the node that created the activity had its work
    /// cancelled.
    fn refusal(&self, activity: Option<ActivityId>) -> Option<Refusal> {
        if self.stopped {
            Some(Refusal::Stopping)
        } else if activity.is_some_and(|a| self.cancelled.contains(&a.origin())) {
            Some(Refusal::Cancelled)
        } else {
            None
        }
    }

    /// Whether `activity` may not start (another) command.
    fn refuses(&self, activity: Option<ActivityId>) -> bool {
        self.refusal(activity).is_some()
    }
}

static RUNNING: Mutex<Running> = Mutex::new(Running {
    stopped: false,
    groups: BTreeMap::new(),
    pausing: BTreeSet::new(),
    cancelled: VecDeque::new(),
});

/// Wakes the activities waiting to retry when the stop comes, or when the
/// work of their origin is cancelled.
static STOPPED: Condvar = Condvar::new();

/// How many cancelled origins are remembered. Each is a runner that
/// stopped or died while this process held its work; the oldest is
/// forgotten first, by when its queued activities have long ended here.
const CANCELLED_ORIGINS: usize = 4096;

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
    kill_after_grace(&groups, grace, "a command");
    if !wait_until_gone(&groups, Instant::now() + KILLED_PATIENCE) {
        tracing::error!(
            "commands killed with SIGKILL were not seen to end within {KILLED_PATIENCE:?}"
        );
    }
    (signalled.into_iter().filter_map(|(_, a)| a))
        .chain(pausing)
        .collect()
}

/// What [`cancel_origin`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cancelled {
    /// Commands it sent `SIGTERM` (and, after the grace, `SIGKILL`): each
    /// reports its attempt as killed by that signal.
    pub running: usize,
    /// Activities waiting to retry a failed attempt: they start no other
    /// attempt and report the failed one at once. (Activities queued here
    /// that have not reached an executor yet are not counted: each ends
    /// without starting its command when it does.)
    pub not_started: usize,
}

/// Cancels the work of the node `origin` in this process: the shell
/// activities whose ids name `origin` as the node that created them.
///
/// - Each command of such an activity running now is killed with its whole
///   process group: `SIGTERM` at once, `SIGKILL` to the groups still
///   registered after `grace` (from a thread of its own: this returns at
///   once, so a request that asked for the cancel gets its answer within
///   its timeout). Its activity reports the attempt, killed by the signal,
///   to its parent as usual, marked [`ShellResult::cancelled`], and does
///   not retry it.
/// - One waiting to retry a failed attempt reports that attempt at once,
///   marked the same way, and starts no other.
/// - One that has not started its command yet, now or later, ends without
///   starting it and sends no result: from its parent's side it never ran,
///   which is what a stopping runner records (the activity stays pending,
///   to run when the work is resumed), and where the parent is gone there
///   is nobody to tell. It finishes rather than suspends, so that nothing
///   of the cancelled work stays in this process.
///
/// Other origins' work goes on. The origin stays cancelled for the life of
/// the process (the last 4096 are remembered): a node id
/// is random and never reused, so no later work is mistaken for it.
///
/// [`ShellResult::cancelled`]: super::ShellResult::cancelled
pub fn cancel_origin(origin: NodeId, grace: Duration) -> Cancelled {
    let (signalled, not_started) = {
        let mut running = running();
        if !running.cancelled.contains(&origin) {
            if running.cancelled.len() >= CANCELLED_ORIGINS {
                running.cancelled.pop_front();
            }
            running.cancelled.push_back(origin);
        }
        STOPPED.notify_all();
        let groups: Vec<libc::pid_t> = (running.groups.iter())
            .filter(|(_, activity)| activity.is_some_and(|a| a.origin() == origin))
            .map(|(&group, _)| group)
            .collect();
        for &group in &groups {
            // SAFETY: kill has no memory effects; a registered group's
            // leader is unreaped, so its id is the command's alone.
            unsafe { libc::kill(-group, libc::SIGTERM) };
        }
        let pausing = (running.pausing.iter())
            .filter(|a| a.origin() == origin)
            .count();
        (groups, pausing)
    };
    let cancelled = Cancelled {
        running: signalled.len(),
        not_started,
    };
    if signalled.is_empty() {
        return cancelled;
    }
    let escalate = {
        let groups = signalled.clone();
        move || kill_after_grace(&groups, grace, "a cancelled command")
    };
    let spawned = std::thread::Builder::new()
        .name("shell-cancel".to_string())
        .spawn(escalate);
    if spawned.is_err() {
        // No thread to spare: wait here rather than leave a command that
        // ignores SIGTERM running.
        kill_after_grace(&signalled, grace, "a cancelled command");
    }
    cancelled
}

/// Sends `SIGKILL` to those of `groups` still registered `grace` after
/// their `SIGTERM`, logging each as `what` (a command, a cancelled
/// command) that did not end.
fn kill_after_grace(groups: &[libc::pid_t], grace: Duration, what: &str) {
    if wait_until_gone(groups, Instant::now() + grace) {
        return;
    }
    let running = running();
    for group in groups.iter().filter(|g| running.groups.contains_key(g)) {
        tracing::warn!(
            group,
            "{what} did not end within {grace:?} of SIGTERM; killing it"
        );
        // SAFETY: kill has no memory effects; the lock keeps the group
        // registered, so its leader is unreaped and its id the command's.
        unsafe { libc::kill(-group, libc::SIGKILL) };
    }
}

/// Whether the work of `origin` was cancelled ([`cancel_origin`]).
pub fn origin_cancelled(origin: NodeId) -> bool {
    running().cancelled.contains(&origin)
}

/// Lets the work of `origin` run here again after a [`cancel_origin`]:
/// for a node that was taken for dead and came back, whose later work must
/// not end unstarted. What the cancel killed stays killed. `false` if the
/// origin was not cancelled.
pub fn restore_origin(origin: NodeId) -> bool {
    let mut running = running();
    let before = running.cancelled.len();
    running.cancelled.retain(|&o| o != origin);
    running.cancelled.len() != before
}

/// How many activities of `origin`'s work this process holds now: commands
/// running, and activities waiting to retry. Activities queued but not
/// started are not known here.
pub fn running_from(origin: NodeId) -> usize {
    let running = running();
    let commands = (running.groups.values())
        .filter(|activity| activity.is_some_and(|a| a.origin() == origin))
        .count();
    let pausing = (running.pausing.iter())
        .filter(|a| a.origin() == origin)
        .count();
    commands + pausing
}

/// A node id as [`parse_origin`] reads it: the full UUID, since the short
/// form logs show could name two nodes.
pub fn origin_text(origin: NodeId) -> String {
    origin.uuid().to_string()
}

/// Reads a node id written by [`origin_text`] (a UUID, with or without its
/// hyphens).
pub fn parse_origin(text: &str) -> Result<NodeId, String> {
    let digits: String = text.trim().chars().filter(|&c| c != '-').collect();
    if digits.len() != 32 || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(format!(
            "{text:?} is not a node id (a UUID of 32 hex digits, e.g. {})",
            origin_text(NodeId::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef))
        ));
    }
    u128::from_str_radix(&digits, 16)
        .map(NodeId::from_u128)
        .map_err(|error| format!("{text:?} is not a node id: {error}"))
}

/// Waits `pause` before activity `activity` retries a failed attempt;
/// `false`, at once, if this process stopped starting commands or the
/// activity's origin was cancelled, before or meanwhile: then it must not
/// retry, and reports the failed attempt.
pub(crate) fn pause_before_retry(activity: ActivityId, pause: Duration) -> bool {
    let deadline = Instant::now() + pause;
    let mut running = running();
    running.pausing.insert(activity);
    while !running.refuses(Some(activity)) {
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
    !running.refuses(Some(activity))
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

/// The executors, as (node, index), where a shell activity has announced
/// an attempt to its parent and not started it yet. Few: one entry per
/// executor at most, for a call's length.
static ANNOUNCED: Mutex<Vec<(NodeId, usize)>> = Mutex::new(Vec::new());

fn announced() -> MutexGuard<'static, Vec<(NodeId, usize)>> {
    // Each change is one push or removal: consistent whatever panicked.
    ANNOUNCED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Claims `executor` for an attempt about to be announced: `false` if
/// another activity announced one there and has not started it, which
/// must start first. [`release_start`] ends the claim.
pub(crate) fn claim_start(executor: (NodeId, usize)) -> bool {
    let mut announced = announced();
    if announced.contains(&executor) {
        return false;
    }
    announced.push(executor);
    true
}

/// Ends a [`claim_start`]: the announced attempt starts now, or never.
pub(crate) fn release_start(executor: (NodeId, usize)) {
    announced().retain(|&e| e != executor);
}

/// How many commands run now.
pub fn running_count() -> usize {
    running().groups.len()
}

/// How many activities wait to retry a failed attempt now.
pub fn waiting_to_retry() -> usize {
    running().pausing.len()
}

/// Why `activity` may not start a command now, if it may not: this process
/// stopped starting commands, or the activity's origin was cancelled. One
/// look, under one lock, for both.
pub(crate) fn refusal(activity: Option<ActivityId>) -> Option<Refusal> {
    running().refusal(activity)
}

/// Registers the just-started command whose process group is `group`.
/// `false` if this process stopped starting commands, or the activity's
/// origin was cancelled, meanwhile: the caller must kill the group, which
/// is then not registered.
pub(crate) fn register(group: libc::pid_t, activity: Option<ActivityId>) -> bool {
    let mut running = running();
    if running.refuses(activity) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_cancelled_origin_is_forgotten_first_and_none_twice() {
        let first = NodeId::random();
        assert_eq!(cancel_origin(first, Duration::ZERO), Cancelled::default());
        assert_eq!(cancel_origin(first, Duration::ZERO), Cancelled::default());
        let remembered = |origin| running().cancelled.iter().filter(|&&o| o == origin).count();
        assert_eq!(
            remembered(first),
            1,
            "an origin cancelled twice is kept once"
        );
        let later: Vec<NodeId> = (0..CANCELLED_ORIGINS).map(|_| NodeId::random()).collect();
        for &origin in &later {
            cancel_origin(origin, Duration::ZERO);
        }
        assert!(!origin_cancelled(first), "the oldest is forgotten");
        assert!(later.iter().all(|&o| origin_cancelled(o)));
        assert!(running().cancelled.len() <= CANCELLED_ORIGINS);
        assert!(restore_origin(later[0]));
        assert!(!origin_cancelled(later[0]));
        assert!(!restore_origin(later[0]), "restored once");
        assert!(origin_cancelled(later[1]));
    }
}
