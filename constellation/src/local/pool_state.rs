//! What every thread of a pool shares, its [`PoolState`]: the shards (one
//! scheduler per executor behind its own lock), sessions on a shard with
//! their credit accounting, routing of events between shards, stealing
//! between them, waking idle executors, and the pool-wide count of
//! unfinished work.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use arc_swap::ArcSwap;
use parking_lot::{Condvar, Mutex};
use rustc_hash::FxHashMap;

use super::park::{CachePadded, Parker};
use super::uplink::{Outgoing, Uplink, OFF_NODE};
use super::Boxed;
use crate::context::{ContextList, ExecutorContext};
use crate::core::shards::{self, Shards};
use crate::core::{
    Action, Counts, MatchTable, Origin, Place, Scheduler, Submission, Undeliverable,
    UndeliverableReason, Work,
};
use crate::event::Event;
use crate::id::{ActivityId, NodeId};

/// What scheduler sessions asked for, each with the shard that asked, and
/// what must leave this node through the [`Uplink`].
#[derive(Default)]
pub(super) struct Effects {
    pub(super) actions: Vec<(usize, Action<Boxed>)>,
    pub(super) remote: Vec<Outgoing>,
}

/// Executors one pool supports: each uses two of the 65,536 id issuer slots.
pub(super) const MAX_EXECUTORS: usize = 32_767;

/// The id issuer slot for activities that executor `k` submits.
pub(super) fn own_slot(executor: usize) -> u16 {
    (2 * executor + 1) as u16
}

/// The id issuer slot for outside submissions that executor `k` receives.
pub(super) fn outside_slot(executor: usize) -> u16 {
    (2 * executor + 2) as u16
}

/// One executor's scheduler and what other threads may read without its lock.
pub(super) struct Shard {
    pub(super) core: CachePadded<Mutex<Scheduler<Boxed>>>,
    /// Outside submissions not yet in `core`; every session drains it first,
    /// so a main program that submits in a loop never waits for `core`.
    pub(super) inbox: CachePadded<Mutex<Vec<Submission<Boxed>>>>,
    pub(super) inbox_pending: CachePadded<AtomicBool>,
    /// Never-started activities in the shard, for thieves deciding where to look.
    pub(super) queued: CachePadded<AtomicUsize>,
    /// Counter for ids of outside submissions this shard receives.
    pub(super) outside_ids: CachePadded<AtomicU64>,
}

/// How work reaches an idle executor thread: a scheduler picks the call, the
/// driver leaves it in the mailbox and wakes the thread.
pub(super) struct Handoff {
    pub(super) parker: CachePadded<Parker>,
    /// Holds at most one call by the scheduler's contract; a queue, so that
    /// a broken contract could never drop an activity.
    pub(super) mailbox: CachePadded<Mutex<VecDeque<Work<Boxed>>>>,
    /// Set while the executor has nothing to do and waits to be woken.
    pub(super) idle: CachePadded<AtomicBool>,
}

/// The state every thread of one pool shares: the user's [`Pool`] handle,
/// each executor thread and the network driver's calls all hold it.
///
/// [`Pool`]: super::Pool
pub(super) struct PoolState {
    pub(super) node: NodeId,
    pub(super) started: Instant,
    /// Which executors could run what, over the whole pool. Swapped, not
    /// locked, when an executor is relabelled: readers are on every
    /// submission's path and relabelling is rare.
    pub(super) matcher: ArcSwap<MatchTable>,
    /// Which work the pool accepts: `matcher`, or an open table on a node
    /// of a networked pool.
    pub(super) admission: ArcSwap<MatchTable>,
    /// What each executor offers.
    pub(super) contexts: ArcSwap<Vec<ExecutorContext>>,
    /// Bumped by each relabelling; executor threads compare it with the
    /// one they saw to know their context changed.
    pub(super) relabels: CachePadded<AtomicU64>,
    /// Serialises relabellings, which replace the three tables above.
    pub(super) relabelling: Mutex<()>,
    pub(super) shards: Vec<Shard>,
    /// Set once by `start`, after the threads exist.
    pub(super) handoffs: OnceLock<Vec<Handoff>>,
    /// The network driver, for a node of a networked pool.
    pub(super) uplink: Option<Arc<dyn Uplink>>,
    /// The shards that took in activities from other nodes, whose ids name
    /// no shard here. Entries leave when the activity finishes here or its
    /// exporter hears it finished elsewhere.
    pub(super) remote_homes: Mutex<FxHashMap<ActivityId, usize>>,
    /// Activities queued, running or ready, plus events in transit.
    pub(super) outstanding: CachePadded<AtomicI64>,
    /// Executors with `Handoff::idle` set.
    pub(super) idle_count: CachePadded<AtomicUsize>,
    /// Spreads outside submissions over the executors that can run them.
    pub(super) round_robin: CachePadded<AtomicUsize>,
    pub(super) quiescence: Mutex<()>,
    pub(super) quiescent: Condvar,
    pub(super) shutdown: AtomicBool,
    /// Events whose target id names no shard of this pool.
    pub(super) undeliverable: AtomicU64,
    pub(super) failed: AtomicU64,
    /// The longest activity call so far, in nanoseconds; kept only on a
    /// node of a networked pool (an agent plans its leaving with it), so
    /// the local pool's calls read no clock.
    pub(super) longest_call_ns: AtomicU64,
    pub(super) trace: bool,
}

impl PoolState {
    pub(super) fn handoffs(&self) -> &[Handoff] {
        // Executor threads may ask before `start` has stored the handoffs.
        loop {
            if let Some(handoffs) = self.handoffs.get() {
                return handoffs;
            }
            std::thread::yield_now();
        }
    }

    /// The shard that issued `id`, which holds the activity or knows where it went.
    pub(super) fn home_of(&self, id: ActivityId) -> Option<usize> {
        let slot = usize::from(id.issuer_slot());
        let shard = slot.checked_sub(1)? / 2;
        (id.origin() == self.node && shard < self.shards.len()).then_some(shard)
    }

    /// Runs `operate` on shard `index`'s scheduler, after moving the shard's
    /// inbox into it, and collects what it asks for into `effects`.
    ///
    /// A session counts new work before it releases the shard: new
    /// work must be counted before another thread can see it, finish it and
    /// count it down. Work that went away is not counted down yet: it
    /// becomes `credit`, which pays for new work in later sessions of the
    /// same operation, and whatever is left is released by [`settle`]. Only
    /// over-counting happens in between, so the count never reaches zero
    /// early, and an event hop that readies one activity as another
    /// suspends touches the shared count not at all.
    ///
    /// [`settle`]: PoolState::settle
    pub(super) fn session<R>(
        &self,
        index: usize,
        credit: &mut i64,
        effects: &mut Effects,
        operate: impl FnOnce(&mut Scheduler<Boxed>) -> R,
    ) -> R {
        let shard = &self.shards[index];
        let mut core = shard.core.lock();
        let before = outstanding_in(&core);
        // Outside submissions were counted when they entered the inbox.
        let drained = self.drain_inbox(shard, &mut core) as i64;
        let result = operate(&mut core);
        let after = outstanding_in(&core);
        let mut in_transit = 0;
        while let Some(action) = core.poll_action() {
            if matches!(action, Action::Forward { .. }) {
                in_transit += 1;
            }
            effects.actions.push((index, action));
        }
        let queued = core.counts().queued;
        if shard.queued.load(Ordering::Relaxed) != queued {
            shard.queued.store(queued, Ordering::SeqCst);
        }
        let delta = after as i64 - before as i64 - drained + in_transit;
        if delta < 0 {
            *credit -= delta;
        } else {
            let paid = delta.min(*credit);
            *credit -= paid;
            self.add_outstanding(delta - paid);
        }
        drop(core);
        result
    }

    /// Counts down the work that went away during an operation.
    pub(super) fn settle(&self, credit: &mut i64) {
        self.add_outstanding(-std::mem::take(credit));
    }

    fn drain_inbox(&self, shard: &Shard, core: &mut Scheduler<Boxed>) -> usize {
        // Load first: a swap would write the shared line on every session.
        if !shard.inbox_pending.load(Ordering::SeqCst)
            || !shard.inbox_pending.swap(false, Ordering::SeqCst)
        {
            return 0;
        }
        let batch = std::mem::take(&mut *shard.inbox.lock());
        let drained = batch.len();
        for submission in batch {
            let id = submission.id;
            // Matchability was checked at `Pool::submit`; ids are fresh.
            if let Err(error) = core.submit(Origin::Outside, submission) {
                tracing::error!(%id, %error, "submission refused by the scheduler");
            }
        }
        drained
    }

    /// Whether shard `index` may have work a thief could take.
    pub(super) fn may_have_work(&self, index: usize) -> bool {
        let shard = &self.shards[index];
        shard.queued.load(Ordering::SeqCst) > 0 || shard.inbox_pending.load(Ordering::SeqCst)
    }

    pub(super) fn add_outstanding(&self, delta: i64) {
        if delta == 0 {
            return;
        }
        if self.outstanding.fetch_add(delta, Ordering::SeqCst) + delta == 0 {
            let _guard = self.quiescence.lock();
            self.quiescent.notify_all();
        }
    }

    /// Carries out what schedulers asked for. Forwarded events may ask for more.
    pub(super) fn perform(&self, effects: &mut Effects, credit: &mut i64) {
        while let Some((shard, action)) = effects.actions.pop() {
            match action {
                Action::Run { work, .. } => {
                    // Each shard has one executor: the shard's owner.
                    let handoff = &self.handoffs()[shard];
                    let mut mailbox = handoff.mailbox.lock();
                    mailbox.push_back(work);
                    debug_assert_eq!(mailbox.len(), 1, "an idle executor holds no other call");
                    drop(mailbox);
                    // It has work now, though it has not woken yet: off the
                    // idle list at once, or a network driver looking for
                    // idle executors in between steals a second activity
                    // for it, which then waits in its queue.
                    self.claim_idle(shard);
                    handoff.parker.notify();
                }
                Action::Forward { event, to } => {
                    if to == OFF_NODE {
                        effects.remote.push(Outgoing::Event(event));
                    } else {
                        self.session(to.0 as usize, credit, effects, |core| {
                            core.deliver_or_report(event)
                        });
                    }
                    // Delivered, reported or sent away: no longer in transit here.
                    *credit += 1;
                }
                Action::ForgetForwards { id, places } => {
                    self.forget_forwards(id, &places, credit, effects)
                }
                Action::Undeliverable(undeliverable) => self.report(undeliverable, false),
                // Quiescence is pool-wide here: `outstanding` tracks it.
                Action::Quiescent { .. } => {}
            }
        }
        self.flush(effects);
    }

    /// Drops the forwarding pointers to a stolen activity that finished.
    /// [`OFF_NODE`] in its trail means it came from another node, which
    /// must hear that it finished.
    pub(super) fn forget_forwards(
        &self,
        id: ActivityId,
        places: &[Place],
        credit: &mut i64,
        effects: &mut Effects,
    ) {
        for &place in places {
            if place == OFF_NODE {
                self.remote_homes.lock().remove(&id);
                effects.remote.push(Outgoing::Finished(id));
            } else {
                self.session(place.0 as usize, credit, effects, |core| {
                    core.forget_forward(id)
                });
            }
        }
    }

    /// The executor next in turn among those that can run `contexts`, which
    /// spreads outside work over them; `None` if none here can.
    pub(super) fn next_in_turn(&self, contexts: &ContextList) -> Option<usize> {
        let matcher = self.matcher.load();
        let count = matcher.executors_for(contexts).count();
        if count == 0 {
            return None;
        }
        let turn = self.round_robin.fetch_add(1, Ordering::Relaxed);
        let chosen = matcher.executors_for(contexts).nth(turn % count);
        chosen
    }

    /// The shard, in turn, that keeps work none of this node's executors
    /// can run until a thief from another node takes it.
    pub(super) fn holding_shard(&self) -> usize {
        self.round_robin.fetch_add(1, Ordering::Relaxed) % self.shards.len()
    }

    /// Hands one event for another node to the uplink.
    pub(super) fn send_off_node(&self, event: Event) {
        self.flush(&mut Effects {
            remote: vec![Outgoing::Event(event)],
            ..Effects::default()
        });
    }

    /// Hands what must leave the node to the uplink, in one call.
    fn flush(&self, effects: &mut Effects) {
        if effects.remote.is_empty() {
            return;
        }
        let outgoing = std::mem::take(&mut effects.remote);
        match &self.uplink {
            Some(uplink) => uplink.send(outgoing),
            // Only a pool with an uplink has places off its node.
            None => {
                for item in outgoing {
                    if let Outgoing::Event(event) = item {
                        let reason = UndeliverableReason::NoSuchActivity;
                        self.report(Undeliverable { event, reason }, true);
                    }
                }
            }
        }
    }

    /// The shard holding `id`, an activity from another node, if it is here.
    pub(super) fn remote_home(&self, id: ActivityId) -> Option<usize> {
        // Only a node of a networked pool takes in activities from elsewhere.
        self.uplink.as_ref()?;
        self.remote_homes.lock().get(&id).copied()
    }

    /// Logs an event that reached no activity. Schedulers count the ones
    /// they refuse; `counted_here` is for ids that name no shard at all.
    fn report(&self, undeliverable: Undeliverable, counted_here: bool) {
        if counted_here {
            self.undeliverable.fetch_add(1, Ordering::Relaxed);
        }
        tracing::warn!(%undeliverable, "event lost: its target is gone");
    }

    /// Sends an event towards its target's home shard.
    pub(super) fn route(&self, event: Event, effects: &mut Effects, credit: &mut i64) {
        let home = (self.home_of(event.target)).or_else(|| self.remote_home(event.target));
        match home {
            Some(home) => self.session(home, credit, effects, |core| core.deliver_or_report(event)),
            None if self.uplink.is_some() && event.target.origin() != self.node => {
                effects.remote.push(Outgoing::Event(event))
            }
            None => self.report(
                Undeliverable {
                    event,
                    reason: UndeliverableReason::NoSuchActivity,
                },
                true,
            ),
        }
    }

    /// Wakes an idle executor that could run `contexts`, so it comes to steal.
    pub(super) fn wake_idle_for(&self, contexts: &ContextList, besides: usize) {
        if self.idle_count.load(Ordering::SeqCst) == 0 {
            return;
        }
        if let Some(executor) = (self.matcher.load())
            .executors_for(contexts)
            .find(|&e| e != besides && self.claim_idle(e))
        {
            self.handoffs()[executor].parker.notify();
        }
    }

    /// Takes `executor` off the idle list if it is on it, so that the next
    /// wake-up goes to another one. Whoever claims it must notify it.
    pub(super) fn claim_idle(&self, executor: usize) -> bool {
        let claimed = self.handoffs()[executor]
            .idle
            .compare_exchange(true, false, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        if claimed {
            self.idle_count.fetch_sub(1, Ordering::SeqCst);
        }
        claimed
    }

    /// Steals one activity `context` can run from another shard into
    /// `thief`'s and returns the call to make, if any shard had one. The
    /// victim's session turns the stolen work into `credit`, which pays for
    /// it again in the thief's session.
    pub(super) fn steal_for(
        &self,
        thief: usize,
        context: &ExecutorContext,
        credit: &mut i64,
        effects: &mut Effects,
    ) -> Option<Work<Boxed>> {
        shards::steal_for(&mut self.sessions(credit, effects), thief, context)
    }

    /// The shards as the core's steal loops enter them: each entry is a
    /// [`session`](PoolState::session) of one operation, with its credit and
    /// effects.
    pub(super) fn sessions<'a>(
        &'a self,
        credit: &'a mut i64,
        effects: &'a mut Effects,
    ) -> Sessions<'a> {
        Sessions {
            shared: self,
            credit,
            effects,
        }
    }

    pub(super) fn now_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    pub(super) fn counts(&self) -> Counts {
        let mut counts = self
            .shards
            .iter()
            .map(|shard| shard.core.lock().counts())
            .fold(Counts::default(), Counts::merge);
        counts.undeliverable += self.undeliverable.load(Ordering::Relaxed);
        counts
    }
}

/// One operation's way into the shards, for [`shards::steal_for`] and
/// [`shards::export`].
pub(super) struct Sessions<'a> {
    shared: &'a PoolState,
    credit: &'a mut i64,
    effects: &'a mut Effects,
}

impl Shards<Boxed> for Sessions<'_> {
    fn count(&self) -> usize {
        self.shared.shards.len()
    }

    fn may_have_work(&self, shard: usize) -> bool {
        self.shared.may_have_work(shard)
    }

    fn enter<R>(&mut self, shard: usize, operate: impl FnOnce(&mut Scheduler<Boxed>) -> R) -> R {
        self.shared
            .session(shard, self.credit, self.effects, operate)
    }
}

fn outstanding_in(core: &Scheduler<Boxed>) -> usize {
    let counts = core.counts();
    counts.queued + counts.running + counts.ready
}
