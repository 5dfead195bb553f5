//! The local driver: executor threads inside one process.
//!
//! This is the embedded default. It needs no network: build a [`Pool`],
//! submit activities, wait for their results with a collector, and call
//! [`Pool::done`].
//!
//! ```
//! use constellation::collect::SingleEventCollector;
//! use constellation::{Activity, ActivityCx, Event, Pool, Step};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Square { x: u64, reply_to: constellation::ActivityId }
//!
//! #[typetag::serde]
//! impl Activity for Square {
//!     fn initialize(&mut self, cx: &mut ActivityCx<'_>) -> Step {
//!         cx.send(self.reply_to, self.x * self.x);
//!         Step::Finish
//!     }
//!     fn process(&mut self, _cx: &mut ActivityCx<'_>, _event: Event) -> Step {
//!         Step::Finish
//!     }
//! }
//!
//! let pool = Pool::builder().executors(2).start()?;
//! let (collector, result) = SingleEventCollector::new();
//! let reply_to = pool.submit(collector)?;
//! pool.submit(Square { x: 12, reply_to })?;
//! assert_eq!(result.wait_one()?.take::<u64>()?, 144);
//! pool.done()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Threads and schedulers
//! Each executor thread owns one [`Scheduler`] shard behind its own mutex.
//! An executor takes its own lock once per call, almost always uncontended:
//! it hands back the activity it just ran, with the children it submitted
//! and the events it sent, and receives its next call in the same critical
//! section. Other threads touch a shard only to steal from it, to deliver an
//! event to one of its activities, or to submit from outside.
//!
//! - An idle executor steals the oldest matching work of another shard. The
//!   shard keeps a forwarding pointer, so events still find the activity.
//! - An event goes to the shard named by its target's id, and follows
//!   forwarding pointers from there.
//! - Work submitted from outside goes to an idle executor that can run it,
//!   or else round-robin to the executors that can.
//! - Within a shard, executor priority and rank preference hold exactly; an
//!   executor looks at other shards only when its own has nothing it can
//!   run, as Constellation's executors do.
//!
//! All work not yet finished is counted in one atomic, incremented before
//! it is decremented, so `done()` sees zero only when nothing is left.

mod park;

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use parking_lot::{Condvar, Mutex};
use rustc_hash::FxHashMap;

use crate::activity::{panic_message, Activity, ActivityCx, Outbox, Step};
use crate::context::{ContextList, ExecutorContext};
use crate::core::{
    Action, Call, Counts, DeliveryError, MatchTable, Origin, Outcome, Place, RelabelError,
    Scheduler, Stolen, Submission, SubmitError, Ticket, Undeliverable, UndeliverableReason, Work,
};
use crate::event::{Event, PayloadValue};
use crate::id::{ActivityId, IdIssuer, NodeId};
use crate::resources::Resources;
use crate::trace::{CallEnd, CallKind, TraceRecord};
use park::{CachePadded, Parker, Spin};

/// An activity as the local driver stores it.
type Boxed = Box<dyn Activity>;

/// What scheduler sessions asked for, each with the shard that asked, and
/// what must leave this node through the [`Uplink`].
#[derive(Default)]
struct Effects {
    actions: Vec<(usize, Action<Boxed>)>,
    remote: Vec<Outgoing>,
}

/// The place of anything off this node, for a pool with an [`Uplink`].
///
/// As a forwarding pointer it means "moved to another node: ask the uplink
/// where". In the trail of an activity it means "came from another node: tell
/// the uplink when it finishes", so the exporter can drop its copy.
pub const OFF_NODE: Place = Place(u64::MAX);

/// Where a pool hands over what must leave its process: the network driver.
///
/// A pool started with [`PoolBuilder::start_with_uplink`] is one node of a
/// networked pool. Executor threads call the uplink; it must not block.
pub trait Uplink: Send + Sync + 'static {
    /// Things for other nodes, in the order they happened. One call carries
    /// everything one executor call produced, so an activity's last events
    /// and the news that it finished travel together.
    fn send(&self, outgoing: Vec<Outgoing>);

    /// An executor found no work on this node and is going to sleep: time to
    /// ask other nodes for some ([`Pool::idle_executors`] says which).
    fn idle(&self);
}

/// Something a pool sends off its node through its [`Uplink`].
#[derive(Debug)]
pub enum Outgoing {
    /// An event for an activity on another node, or of unknown whereabouts.
    Event(Event),
    /// An activity that came from another node finished here.
    Finished(ActivityId),
}

/// What became of an event handed to [`Pool::deliver_from_network`].
#[derive(Debug)]
pub enum Arrival {
    /// It reached its activity, or waits in the activity's buffer.
    Delivered,
    /// Its activity left for another node; the uplink knows where.
    Away(Event),
    /// No activity with that id is known here: it may not have arrived yet,
    /// it finished here, or it lives elsewhere.
    Unknown(Event),
    /// Its activity was here and is gone (finished, or never existed).
    Gone(Box<Undeliverable>),
}

/// Executors one pool supports: each uses two of the 65,536 id issuer slots.
const MAX_EXECUTORS: usize = 32_767;

/// The id issuer slot for activities that executor `k` submits.
fn own_slot(executor: usize) -> u16 {
    (2 * executor + 1) as u16
}

/// The id issuer slot for outside submissions that executor `k` receives.
fn outside_slot(executor: usize) -> u16 {
    (2 * executor + 2) as u16
}

/// Configures and starts a [`Pool`].
#[derive(Debug, Clone, Default)]
pub struct PoolBuilder {
    executors: Vec<ExecutorContext>,
    resources: Vec<Arc<Resources>>,
    trace: bool,
}

impl PoolBuilder {
    /// Adds `count` executors that run `anywhere` work.
    pub fn executors(self, count: usize) -> Self {
        self.executors_with(count, ExecutorContext::anywhere())
    }

    /// Adds `count` executors offering `context`.
    pub fn executors_with(mut self, count: usize, context: ExecutorContext) -> Self {
        let plain = Arc::new(Resources::new());
        self.executors.extend(std::iter::repeat_n(context, count));
        self.resources.extend(std::iter::repeat_n(plain, count));
        self
    }

    /// Adds one executor offering `context` with `resources`: environment
    /// for the programs it starts and handles its activities look up, e.g.
    /// one GPU.
    pub fn executor_with_resources(
        mut self,
        context: ExecutorContext,
        resources: Resources,
    ) -> Self {
        self.executors.push(context);
        self.resources.push(Arc::new(resources));
        self
    }

    /// Adds one executor offering `context`.
    pub fn executor(self, context: ExecutorContext) -> Self {
        self.executors_with(1, context)
    }

    /// Records a [`TraceRecord`] for every activity call; they come back in
    /// [`RunSummary::trace`].
    pub fn trace(mut self, enabled: bool) -> Self {
        self.trace = enabled;
        self
    }

    /// Starts the executor threads.
    pub fn start(self) -> Result<Pool, PoolError> {
        self.start_inner(None)
    }

    /// Starts the executor threads as one node of a networked pool: events
    /// and news for other nodes go to `uplink`, and work that no executor
    /// here can run is accepted, to wait for a thief from another node.
    pub fn start_with_uplink(self, uplink: Arc<dyn Uplink>) -> Result<Pool, PoolError> {
        self.start_inner(Some(uplink))
    }

    fn start_inner(self, uplink: Option<Arc<dyn Uplink>>) -> Result<Pool, PoolError> {
        if self.executors.is_empty() {
            return Err(PoolError::NoExecutors);
        }
        if self.executors.len() > MAX_EXECUTORS {
            return Err(PoolError::TooManyExecutors(self.executors.len()));
        }
        let node = NodeId::random();
        let matcher = Arc::new(MatchTable::new(&self.executors));
        let admission = match uplink {
            Some(_) => Arc::new(MatchTable::open(&self.executors)),
            None => matcher.clone(),
        };
        let shards = self
            .executors
            .iter()
            .map(|context| Shard {
                core: CachePadded(Mutex::new(Scheduler::in_pool(
                    node,
                    vec![context.clone()],
                    admission.clone(),
                ))),
                inbox: CachePadded(Mutex::new(Vec::new())),
                inbox_pending: CachePadded(AtomicBool::new(false)),
                queued: CachePadded(AtomicUsize::new(0)),
                outside_ids: CachePadded(AtomicU64::new(0)),
            })
            .collect();
        let shared = Arc::new(Shared {
            node,
            started: Instant::now(),
            matcher: ArcSwap::new(matcher),
            admission: ArcSwap::new(admission),
            contexts: ArcSwap::from_pointee(self.executors.clone()),
            relabels: CachePadded(AtomicU64::new(0)),
            relabelling: Mutex::new(()),
            shards,
            handoffs: OnceLock::new(),
            uplink,
            remote_homes: Mutex::new(FxHashMap::default()),
            outstanding: CachePadded(AtomicI64::new(0)),
            idle_count: CachePadded(AtomicUsize::new(0)),
            round_robin: CachePadded(AtomicUsize::new(0)),
            quiescence: Mutex::new(()),
            quiescent: Condvar::new(),
            shutdown: AtomicBool::new(false),
            undeliverable: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            longest_call_ns: AtomicU64::new(0),
            trace: self.trace,
        });
        let mut threads = Vec::with_capacity(self.executors.len());
        let setups = self.executors.into_iter().zip(self.resources);
        for (index, (context, resources)) in setups.enumerate() {
            let shared = shared.clone();
            let thread = std::thread::Builder::new()
                .name(format!("executor-{index}"))
                .spawn(move || executor_main(shared, index, context, resources))
                .map_err(PoolError::Spawn)?;
            threads.push(thread);
        }
        let handoffs = threads
            .iter()
            .map(|t| Handoff {
                parker: CachePadded(Parker::new(t.thread().clone())),
                mailbox: CachePadded(Mutex::new(VecDeque::new())),
                idle: CachePadded(AtomicBool::new(false)),
            })
            .collect();
        if shared.handoffs.set(handoffs).is_err() {
            unreachable!("handoffs are set once, here");
        }
        Ok(Pool {
            address: ActivityId::in_slot(node, 0, 0),
            shared,
            threads,
        })
    }
}

/// Why a pool could not start.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// A pool needs at least one executor.
    #[error("a pool needs at least one executor")]
    NoExecutors,
    /// More executors than one node can address.
    #[error("{0} executors is more than one pool supports ({MAX_EXECUTORS})")]
    TooManyExecutors(usize),
    /// The operating system refused a thread.
    #[error("could not start an executor thread: {0}")]
    Spawn(std::io::Error),
}

/// Why [`Pool::done`] could not finish cleanly.
#[derive(Debug, thiserror::Error)]
pub enum DoneError {
    /// Work remains that can never run: activities wait for events nobody
    /// will send. The pool was shut down anyway.
    #[error("{live} activities were still suspended, waiting for events that no running activity can send (e.g. {examples:?})")]
    Stalled {
        /// How many activities were left.
        live: usize,
        /// Some of their ids.
        examples: Vec<ActivityId>,
        /// What the run did before it stalled.
        summary: Box<RunSummary>,
    },
}

/// What a finished run did.
#[derive(Debug, Clone, Default)]
pub struct RunSummary {
    /// The schedulers' final counts, summed over executors.
    pub counts: Counts,
    /// Activity calls that panicked; their activities were dropped.
    pub failed_calls: u64,
    /// Wall-clock time from pool start to the end of `done`.
    pub elapsed: Duration,
    /// One record per call, if tracing was on; in per-executor order.
    pub trace: Vec<TraceRecord>,
}

/// One executor's scheduler and what other threads may read without its lock.
struct Shard {
    core: CachePadded<Mutex<Scheduler<Boxed>>>,
    /// Outside submissions not yet in `core`; every session drains it first,
    /// so a main program that submits in a loop never waits for `core`.
    inbox: CachePadded<Mutex<Vec<Submission<Boxed>>>>,
    inbox_pending: CachePadded<AtomicBool>,
    /// Never-started activities in the shard, for thieves deciding where to look.
    queued: CachePadded<AtomicUsize>,
    /// Counter for ids of outside submissions this shard receives.
    outside_ids: CachePadded<AtomicU64>,
}

/// How work reaches an idle executor thread: a scheduler picks the call, the
/// driver leaves it in the mailbox and wakes the thread.
struct Handoff {
    parker: CachePadded<Parker>,
    /// Holds at most one call by the scheduler's contract; a queue, so that
    /// a broken contract could never drop an activity.
    mailbox: CachePadded<Mutex<VecDeque<Work<Boxed>>>>,
    /// Set while the executor has nothing to do and waits to be woken.
    idle: CachePadded<AtomicBool>,
}

struct Shared {
    node: NodeId,
    started: Instant,
    /// Which executors could run what, over the whole pool. Swapped, not
    /// locked, when an executor is relabelled: readers are on every
    /// submission's path and relabelling is rare.
    matcher: ArcSwap<MatchTable>,
    /// Which work the pool accepts: `matcher`, or an open table on a node
    /// of a networked pool.
    admission: ArcSwap<MatchTable>,
    /// What each executor offers.
    contexts: ArcSwap<Vec<ExecutorContext>>,
    /// Bumped by each relabelling; executor threads compare it with the
    /// one they saw to know their context changed.
    relabels: CachePadded<AtomicU64>,
    /// Serialises relabellings, which replace the three tables above.
    relabelling: Mutex<()>,
    shards: Vec<Shard>,
    /// Set once by `start`, after the threads exist.
    handoffs: OnceLock<Vec<Handoff>>,
    /// The network driver, for a node of a networked pool.
    uplink: Option<Arc<dyn Uplink>>,
    /// The shards that took in activities from other nodes, whose ids name
    /// no shard here. Entries leave when the activity finishes here or its
    /// exporter hears it finished elsewhere.
    remote_homes: Mutex<FxHashMap<ActivityId, usize>>,
    /// Activities queued, running or ready, plus events in transit.
    outstanding: CachePadded<AtomicI64>,
    /// Executors with `Handoff::idle` set.
    idle_count: CachePadded<AtomicUsize>,
    /// Spreads outside submissions over the executors that can run them.
    round_robin: CachePadded<AtomicUsize>,
    quiescence: Mutex<()>,
    quiescent: Condvar,
    shutdown: AtomicBool,
    /// Events whose target id names no shard of this pool.
    undeliverable: AtomicU64,
    failed: AtomicU64,
    /// The longest activity call so far, in nanoseconds; kept only on a
    /// node of a networked pool (an agent plans its leaving with it), so
    /// the local pool's calls read no clock.
    longest_call_ns: AtomicU64,
    trace: bool,
}

impl Shared {
    fn handoffs(&self) -> &[Handoff] {
        // Executor threads may ask before `start` has stored the handoffs.
        loop {
            if let Some(handoffs) = self.handoffs.get() {
                return handoffs;
            }
            std::thread::yield_now();
        }
    }

    /// The shard that issued `id`, which holds the activity or knows where it went.
    fn home_of(&self, id: ActivityId) -> Option<usize> {
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
    /// [`settle`]: Shared::settle
    fn session<R>(
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
    fn settle(&self, credit: &mut i64) {
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
    fn may_have_work(&self, index: usize) -> bool {
        let shard = &self.shards[index];
        shard.queued.load(Ordering::SeqCst) > 0 || shard.inbox_pending.load(Ordering::SeqCst)
    }

    fn add_outstanding(&self, delta: i64) {
        if delta == 0 {
            return;
        }
        if self.outstanding.fetch_add(delta, Ordering::SeqCst) + delta == 0 {
            let _guard = self.quiescence.lock();
            self.quiescent.notify_all();
        }
    }

    /// Carries out what schedulers asked for. Forwarded events may ask for more.
    fn perform(&self, effects: &mut Effects, credit: &mut i64) {
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
    fn forget_forwards(
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
    fn next_in_turn(&self, contexts: &ContextList) -> Option<usize> {
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
    fn holding_shard(&self) -> usize {
        self.round_robin.fetch_add(1, Ordering::Relaxed) % self.shards.len()
    }

    /// Hands one event for another node to the uplink.
    fn send_off_node(&self, event: Event) {
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
    fn remote_home(&self, id: ActivityId) -> Option<usize> {
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
    fn route(&self, event: Event, effects: &mut Effects, credit: &mut i64) {
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
    fn wake_idle_for(&self, contexts: &ContextList, besides: usize) {
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
    fn claim_idle(&self, executor: usize) -> bool {
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
    fn steal_for(
        &self,
        thief: usize,
        context: &ExecutorContext,
        credit: &mut i64,
        effects: &mut Effects,
    ) -> Option<Work<Boxed>> {
        let shards = self.shards.len();
        for step in 1..shards {
            let victim = (thief + step) % shards;
            if !self.may_have_work(victim) {
                continue;
            }
            let mut stolen = self.session(victim, credit, effects, |core| {
                core.steal(context, 1, Place(thief as u64))
            });
            if stolen.is_empty() {
                continue;
            }
            for activity in &mut stolen {
                activity.trail.push(Place(victim as u64));
            }
            return self.session(thief, credit, effects, |core| {
                for activity in stolen {
                    let id = activity.id;
                    if let Err(error) = core.accept(0, activity) {
                        tracing::error!(%id, %error, "stolen activity refused");
                    }
                }
                core.next_work(0)
            });
        }
        None
    }

    fn now_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    fn counts(&self) -> Counts {
        let mut counts = self
            .shards
            .iter()
            .map(|shard| shard.core.lock().counts())
            .fold(Counts::default(), Counts::merge);
        counts.undeliverable += self.undeliverable.load(Ordering::Relaxed);
        counts
    }
}

fn outstanding_in(core: &Scheduler<Boxed>) -> usize {
    let counts = core.counts();
    counts.queued + counts.running + counts.ready
}

/// A pool of executor threads in this process.
pub struct Pool {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<Vec<TraceRecord>>>,
    address: ActivityId,
}

impl Pool {
    /// A builder; add executors, then [`start`](PoolBuilder::start).
    pub fn builder() -> PoolBuilder {
        PoolBuilder::default()
    }

    /// This node's id.
    pub fn node(&self) -> NodeId {
        self.shared.node
    }

    /// The source id of events the main program sends with [`send`](Self::send).
    pub fn address(&self) -> ActivityId {
        self.address
    }

    /// Submits an activity from outside the pool. Fails with
    /// [`SubmitError::NoSuitableExecutor`] if no executor can ever run it.
    pub fn submit<A: Activity>(&self, activity: A) -> Result<ActivityId, SubmitError> {
        self.submit_boxed(Box::new(activity))
    }

    /// [`submit`](Self::submit) for an activity that is already boxed.
    pub fn submit_boxed(&self, activity: Boxed) -> Result<ActivityId, SubmitError> {
        let shared = &self.shared;
        let contexts = activity.context();
        let runs_here = shared.next_in_turn(&contexts);
        let target = match runs_here {
            Some(executor) => executor,
            None => {
                // A networked pool keeps it for executors on other nodes.
                (shared.admission.load()).check(self.address, &contexts, None)?;
                shared.holding_shard()
            }
        };
        let shard = &shared.shards[target];
        let counter = shard.outside_ids.fetch_add(1, Ordering::Relaxed);
        let id = ActivityId::in_slot(shared.node, outside_slot(target), counter);
        let submission = Submission {
            id,
            contexts: contexts.clone(),
            stealable: activity.may_be_stolen(),
            body: activity,
        };
        if runs_here.is_none() {
            // No executor here will drain an inbox for it: queue it now,
            // where thieves from other nodes find it.
            let mut effects = Effects::default();
            let mut credit = 0;
            let queued = shared.session(target, &mut credit, &mut effects, |core| {
                core.submit(Origin::Outside, submission)
            });
            shared.perform(&mut effects, &mut credit);
            shared.settle(&mut credit);
            queued?;
            return Ok(id);
        }
        // Counted before anyone can see it, let alone finish it.
        shared.add_outstanding(1);
        shard.inbox.lock().push(submission);
        shard.inbox_pending.store(true, Ordering::SeqCst);
        // Spinning executors watch inboxes; parked ones must be woken. Pairs
        // with the announce-then-look-again in `wait_for_work`.
        if shared.claim_idle(target) {
            shared.handoffs()[target].parker.notify();
        } else {
            shared.wake_idle_for(&contexts, target);
        }
        Ok(id)
    }

    /// Sends `value` to activity `target` from the main program. Fails,
    /// returning the event, if no such activity exists.
    pub fn send<T: PayloadValue>(
        &self,
        target: ActivityId,
        value: T,
    ) -> Result<(), Box<Undeliverable>> {
        let shared = &self.shared;
        let event = Event::new(self.address, target, value);
        match self.deliver_from_network(event) {
            Arrival::Delivered => Ok(()),
            Arrival::Gone(undeliverable) => Err(undeliverable),
            // Moved off the node (only a networked pool has such pointers),
            // or living on another node: the uplink sends it on.
            Arrival::Away(event) => {
                shared.send_off_node(event);
                Ok(())
            }
            Arrival::Unknown(event)
                if shared.uplink.is_some() && target.origin() != shared.node =>
            {
                shared.send_off_node(event);
                Ok(())
            }
            Arrival::Unknown(event) => {
                shared.undeliverable.fetch_add(1, Ordering::Relaxed);
                Err(Box::new(Undeliverable {
                    event,
                    reason: UndeliverableReason::NoSuchActivity,
                }))
            }
        }
    }

    /// Delivers an event to an activity on this node, following forwarding
    /// pointers between executors. For network drivers, and for
    /// [`send`](Self::send).
    pub fn deliver_from_network(&self, mut event: Event) -> Arrival {
        let shared = &self.shared;
        let mut effects = Effects::default();
        let mut at = (shared.home_of(event.target)).or_else(|| shared.remote_home(event.target));
        // The event counts as outstanding work until it is delivered, and
        // pays for the activity it readies.
        shared.add_outstanding(1);
        let mut credit = 1;
        let arrival = loop {
            let Some(shard) = at else {
                break Arrival::Unknown(event);
            };
            match shared.session(shard, &mut credit, &mut effects, |core| core.deliver(event)) {
                Ok(()) => break Arrival::Delivered,
                Err(DeliveryError::Moved { event: moved, to }) if to == OFF_NODE => {
                    break Arrival::Away(moved)
                }
                Err(DeliveryError::Moved { event: moved, to }) => {
                    event = moved;
                    at = Some(to.0 as usize);
                }
                Err(DeliveryError::Undeliverable(undeliverable)) => {
                    break Arrival::Gone(undeliverable)
                }
            }
        };
        shared.perform(&mut effects, &mut credit);
        shared.settle(&mut credit);
        arrival
    }

    /// The executors of this pool that are asleep for want of work, for a
    /// network driver deciding what to steal from other nodes.
    pub fn idle_executors(&self) -> Vec<usize> {
        let handoffs = self.shared.handoffs();
        (0..handoffs.len())
            .filter(|&index| handoffs[index].idle.load(Ordering::SeqCst))
            .collect()
    }

    /// What executor `index` offers now; `None` past the last executor.
    pub fn executor_context(&self, index: usize) -> Option<ExecutorContext> {
        self.shared.contexts.load().get(index).cloned()
    }

    /// What all executors offer now, in index order.
    pub fn executor_contexts(&self) -> Arc<Vec<ExecutorContext>> {
        self.shared.contexts.load_full()
    }

    /// Which work this pool's own executors can run, as they are labelled now.
    pub fn matcher(&self) -> Arc<MatchTable> {
        self.shared.matcher.load_full()
    }

    /// Gives executor `index` a new context while the pool runs, without
    /// stopping anything. The call it is making goes on; from its next
    /// call on it takes only work that matches `context`. Queued work it
    /// can no longer run stays for executors that can, here or (on a node
    /// of a networked pool) on other nodes.
    ///
    /// On a pool without a network, work that no executor matches any
    /// more waits until one is relabelled back, and [`done`](Self::done)
    /// reports it as stalled.
    pub fn relabel(&self, index: usize, context: ExecutorContext) -> Result<(), RelabelError> {
        let shared = &self.shared;
        let _one_at_a_time = shared.relabelling.lock();
        let mut contexts = Vec::clone(&shared.contexts.load());
        if index >= contexts.len() {
            return Err(RelabelError::NoSuchExecutor {
                executor: index,
                executors: contexts.len(),
            });
        }
        (shared.shards[index].core.lock()).relabel(0, context.clone())?;
        contexts[index] = context;
        let matcher = Arc::new(MatchTable::new(&contexts));
        let admission = match shared.uplink {
            Some(_) => Arc::new(MatchTable::open(&contexts)),
            None => matcher.clone(),
        };
        for shard in &shared.shards {
            shard.core.lock().set_pool(admission.clone());
        }
        shared.matcher.store(matcher);
        shared.admission.store(admission);
        shared.contexts.store(Arc::new(contexts));
        shared.relabels.fetch_add(1, Ordering::SeqCst);
        // Asleep, it would go on waiting for work of its old labels.
        shared.claim_idle(index);
        shared.handoffs()[index].parker.notify();
        Ok(())
    }

    /// How many never-started activities on this node wait for each label,
    /// by label name. An activity that names several labels counts once
    /// under each.
    pub fn queued_by_label(&self) -> Vec<(String, usize)> {
        let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
        for shard in &self.shared.shards {
            for (label, count) in shard.core.lock().queued_by_label() {
                *counts.entry(label.to_string()).or_default() += count;
            }
        }
        counts.into_iter().collect()
    }

    /// Which executors are inside an activity call right now, by index.
    pub fn busy_executors(&self) -> Vec<bool> {
        (self.shared.shards.iter())
            .map(|shard| shard.core.lock().counts().running > 0)
            .collect()
    }

    /// Never-started activities waiting on this node.
    pub fn queued(&self) -> usize {
        (self.shared.shards.iter())
            .map(|shard| shard.queued.load(Ordering::Relaxed))
            .sum()
    }

    /// Takes up to `max` never-started activities that `thief` could run
    /// and that may leave this node, for an executor on another node.
    ///
    /// Each keeps a forwarding pointer ([`OFF_NODE`]) on the shard it left;
    /// its trail ends with that shard. Exported activities still count as
    /// this pool's work, so [`done`](Self::done) waits for them, until the
    /// driver calls [`exported_finished`](Self::exported_finished).
    pub fn export(&self, thief: &ExecutorContext, max: usize) -> Vec<Stolen<Boxed>> {
        let shared = &self.shared;
        let mut effects = Effects::default();
        let mut credit = 0;
        let mut loot = Vec::new();
        let shards = shared.shards.len();
        let start = shared.round_robin.fetch_add(1, Ordering::Relaxed);
        // The thief's contexts in its priority order, each over all shards:
        // one shard's work for a later context must not go while another
        // shard holds work for an earlier one (a thief's own site first).
        for offered in &thief.contexts {
            let single = ExecutorContext {
                contexts: vec![*offered],
                preference: thief.preference,
            };
            for step in 0..shards {
                if loot.len() >= max {
                    break;
                }
                let victim = (start + step) % shards;
                if !shared.may_have_work(victim) {
                    continue;
                }
                let wanted = max - loot.len();
                let mut stolen = shared.session(victim, &mut credit, &mut effects, |core| {
                    core.steal_off_node(&single, wanted, OFF_NODE)
                });
                for activity in &mut stolen {
                    activity.trail.push(Place(victim as u64));
                }
                loot.extend(stolen);
            }
        }
        credit -= loot.len() as i64;
        shared.perform(&mut effects, &mut credit);
        shared.settle(&mut credit);
        loot
    }

    /// An activity [`export`](Self::export)ed from here finished elsewhere,
    /// or is given up: drops the forwarding pointers in its `trail` (telling
    /// the uplink, if the trail says it came from another node) and stops
    /// counting it as outstanding.
    pub fn exported_finished(&self, id: ActivityId, trail: &[Place]) {
        let shared = &self.shared;
        let mut effects = Effects::default();
        let mut credit = 1;
        shared.forget_forwards(id, trail, &mut credit, &mut effects);
        shared.perform(&mut effects, &mut credit);
        shared.settle(&mut credit);
    }

    /// Takes back an activity [`export`](Self::export)ed from here that did
    /// not stay away (its thief died or returned it, or it could not be
    /// sent): queues it again, drops the pointers its old `trail` (as
    /// `export` returned it) left behind, and stops counting the export.
    pub fn reclaim(&self, mut stolen: Stolen<Boxed>, trail: &[Place]) -> Result<(), SubmitError> {
        let shared = &self.shared;
        let id = stolen.id;
        let home = shared.home_of(id).map(|home| Place(home as u64));
        stolen.trail = if trail.contains(&OFF_NODE) {
            vec![OFF_NODE]
        } else {
            Vec::new()
        };
        // Queued first, so the count cannot touch zero in between.
        let imported = self.import(stolen);
        let mut effects = Effects::default();
        let mut credit = 1;
        for &place in trail {
            if place != OFF_NODE && Some(place) != home {
                shared.session(place.0 as usize, &mut credit, &mut effects, |core| {
                    core.forget_forward(id)
                });
            }
        }
        if imported.is_err() {
            if let Some(home) = home {
                shared.session(home.0 as usize, &mut credit, &mut effects, |core| {
                    core.forget_forward(id)
                });
            }
        }
        shared.perform(&mut effects, &mut credit);
        shared.settle(&mut credit);
        imported
    }

    /// Takes in an activity from another node, or one queued again after
    /// the node it went to died. It goes to an executor that can run it,
    /// an idle one if there is one; a networked pool keeps work none of its
    /// executors can run until another node steals it. Its `trail` should
    /// hold [`OFF_NODE`] if another node waits to hear that it finished.
    pub fn import(&self, mut stolen: Stolen<Boxed>) -> Result<(), SubmitError> {
        let shared = &self.shared;
        let handoffs = shared.handoffs();
        let contexts = stolen.contexts.clone();
        let matcher = shared.matcher.load();
        let target = (matcher.executors_for(&contexts))
            .find(|&e| handoffs[e].idle.load(Ordering::Relaxed))
            .or_else(|| shared.next_in_turn(&contexts))
            .or_else(|| shared.uplink.is_some().then(|| shared.holding_shard()));
        let Some(target) = target else {
            return Err(matcher
                .check(stolen.id, &contexts, None)
                .expect_err("no executor matched, so the check refuses"));
        };
        let id = stolen.id;
        match shared.home_of(id) {
            // Back home after its thief died: the home shard's pointer,
            // which said "off the node", must lead here instead.
            Some(home) if home != target => {
                stolen.trail.push(Place(home as u64));
                let mut effects = Effects::default();
                let mut credit = 0;
                shared.session(home, &mut credit, &mut effects, |core| {
                    core.redirect_forward(id, Place(target as u64))
                });
                shared.perform(&mut effects, &mut credit);
                shared.settle(&mut credit);
            }
            Some(_) => {}
            None => {
                shared.remote_homes.lock().insert(id, target);
            }
        }
        let mut effects = Effects::default();
        let mut credit = 0;
        let accepted = shared.session(target, &mut credit, &mut effects, |core| {
            core.accept(0, stolen)
        });
        if accepted.is_err() && shared.home_of(id).is_none() {
            shared.remote_homes.lock().remove(&id);
        }
        shared.perform(&mut effects, &mut credit);
        shared.settle(&mut credit);
        shared.wake_idle_for(&contexts, target);
        accepted
    }

    /// The schedulers' counts right now, summed over executors.
    pub fn counts(&self) -> Counts {
        self.shared.counts()
    }

    /// The longest activity call this node has run so far (zero on a pool
    /// that is not a network node, which does not time its calls).
    pub fn longest_call(&self) -> Duration {
        Duration::from_nanos(self.shared.longest_call_ns.load(Ordering::Relaxed))
    }

    /// Work this pool counts as unfinished: queued, running and ready
    /// activities, activities exported and not yet finished elsewhere, and
    /// events in transit inside the node. [`done`](Self::done) waits for zero.
    pub fn outstanding(&self) -> i64 {
        self.shared.outstanding.load(Ordering::SeqCst)
    }

    /// Waits until nothing is queued, running or ready, and no event is in
    /// transit: the moment [`done`](Self::done) would stop the executors.
    pub fn wait_quiescent(&self) {
        let mut guard = self.shared.quiescence.lock();
        while self.shared.outstanding.load(Ordering::SeqCst) != 0 {
            self.shared.quiescent.wait(&mut guard);
        }
    }

    /// Waits until all work is finished, then stops the executors.
    ///
    /// If activities remain that wait for events no running activity can
    /// send, waiting longer cannot help: the pool stops and reports them.
    pub fn done(mut self) -> Result<RunSummary, DoneError> {
        self.wait_quiescent();
        let counts = self.shared.counts();
        let examples: Vec<ActivityId> = self
            .shared
            .shards
            .iter()
            .flat_map(|shard| shard.core.lock().suspended_ids(5))
            .take(5)
            .collect();
        let trace = self.stop();
        let summary = RunSummary {
            counts,
            failed_calls: self.shared.failed.load(Ordering::Relaxed),
            elapsed: self.shared.started.elapsed(),
            trace,
        };
        if counts.live > 0 {
            return Err(DoneError::Stalled {
                live: counts.live,
                examples,
                summary: Box::new(summary),
            });
        }
        Ok(summary)
    }

    fn stop(&mut self) -> Vec<TraceRecord> {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        for handoff in self.shared.handoffs() {
            handoff.parker.notify();
        }
        let mut trace = Vec::new();
        for thread in self.threads.drain(..) {
            match thread.join() {
                Ok(records) => trace.extend(records),
                Err(_) => tracing::error!("an executor thread panicked outside activity code"),
            }
        }
        trace
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.stop();
    }
}

fn executor_main(
    shared: Arc<Shared>,
    index: usize,
    mut context: ExecutorContext,
    resources: Arc<Resources>,
) -> Vec<TraceRecord> {
    let mut relabels_seen = 0;
    let mut ids = IdIssuer::new(shared.node, own_slot(index));
    let mut outbox = Outbox::default();
    let mut effects = Effects::default();
    let mut away = Vec::new();
    let mut children: Vec<ContextList> = Vec::new();
    let mut finished: Option<FinishedCall> = None;
    let mut trace = Vec::new();
    loop {
        let relabels = shared.relabels.load(Ordering::Acquire);
        if relabels != relabels_seen {
            relabels_seen = relabels;
            if let Some(new) = shared.contexts.load().get(index) {
                context = new.clone();
            }
        }
        // Events for other shards are delivered after this shard's session,
        // so the unit of the call that just completed can pay for the
        // activity they ready (see `Shared::session`).
        away.extend(
            outbox
                .sent
                .extract_if(.., |event| shared.home_of(event.target) != Some(index)),
        );
        // Their contexts, to wake idle executors for them once they are
        // published; the buffer is reused, so this costs no allocation.
        children.extend(outbox.submitted.iter().map(|s| s.contexts.clone()));
        // Work handed over while this executor was busy comes first.
        let handed = shared.handoffs()[index].mailbox.lock().pop_front();
        let mut credit = 0;
        let work = shared.session(index, &mut credit, &mut effects, |core| {
            for submission in outbox.submitted.drain(..) {
                let id = submission.id;
                // `ActivityCx::submit` already refused unmatchable work, so
                // this only fails on an id collision, which is a bug.
                if let Err(error) = core.submit(Origin::Executor(0), submission) {
                    tracing::error!(%id, %error, "submission refused by the scheduler");
                }
            }
            for event in outbox.sent.drain(..) {
                core.deliver_or_report(event);
            }
            if let Some((ticket, outcome, record)) = finished.take() {
                // The activity may be gone after `complete`: read its labels first.
                if let Some(mut record) = record {
                    if let Some(contexts) = core.contexts_of(&ticket) {
                        record.contexts = contexts.clone();
                    }
                    trace.push(record);
                }
                core.complete(ticket, outcome);
            }
            if handed.is_some() {
                return handed;
            }
            core.next_work(0)
        });
        for event in away.drain(..) {
            shared.route(event, &mut effects, &mut credit);
        }
        shared.perform(&mut effects, &mut credit);
        shared.settle(&mut credit);
        // Only now, with the children visible to thieves: an executor that
        // announced itself idle before this point is woken here, and one that
        // announces later finds them when it looks again (`wait_for_work`).
        // Checking for idle executors before the session lost children to an
        // executor that parked in between.
        for contexts in children.drain(..) {
            shared.wake_idle_for(&contexts, index);
        }
        let work = match work {
            Some(work) => work,
            None => match wait_for_work(&shared, index, &context, relabels_seen, &mut effects) {
                Found::Work(work) => work,
                Found::OwnInbox | Found::Relabelled => continue,
                Found::Shutdown => return trace,
            },
        };
        finished = Some(run_call(
            &shared,
            index,
            &context,
            &resources,
            &mut ids,
            &mut outbox,
            work,
        ));
    }
}

/// A call that returned, with its trace record (labels still to be filled
/// in), to hand back to the scheduler.
type FinishedCall = (Ticket, Outcome<Boxed>, Option<TraceRecord>);

/// What an idle executor found.
enum Found {
    /// A call to make.
    Work(Work<Boxed>),
    /// Outside submissions arrived in its own shard's inbox.
    OwnInbox,
    /// Its context changed: it must look for work with the new one.
    Relabelled,
    /// The pool is shutting down.
    Shutdown,
}

/// What an executor does when its own shard has nothing: take work handed
/// to it, steal, spin a little, and at last announce itself idle and park.
fn wait_for_work(
    shared: &Shared,
    index: usize,
    context: &ExecutorContext,
    relabels_seen: u64,
    effects: &mut Effects,
) -> Found {
    let handoff = &shared.handoffs()[index];
    let own = &shared.shards[index];
    let mut announced = false;
    let found = loop {
        if let Some(work) = handoff.mailbox.lock().pop_front() {
            break Found::Work(work);
        }
        if own.inbox_pending.load(Ordering::SeqCst) {
            break Found::OwnInbox;
        }
        if shared.relabels.load(Ordering::Acquire) != relabels_seen {
            break Found::Relabelled;
        }
        let mut credit = 0;
        let stolen = shared.steal_for(index, context, &mut credit, effects);
        shared.perform(effects, &mut credit);
        shared.settle(&mut credit);
        if let Some(work) = stolen {
            break Found::Work(work);
        }
        if shared.shutdown.load(Ordering::SeqCst) {
            break Found::Shutdown;
        }
        if announced {
            handoff.parker.park();
            // A waker that claimed this executor took it off the idle list.
            announced = handoff.idle.load(Ordering::SeqCst);
            continue;
        }
        // Queued work elsewhere, summed: it grows when a shard gets work
        // this executor has not tried to steal yet.
        let queued_elsewhere = || -> usize {
            (shared.shards.iter().enumerate())
                .filter(|&(victim, _)| victim != index)
                .map(|(_, shard)| shard.queued.load(Ordering::Relaxed))
                .sum()
        };
        let seen = queued_elsewhere();
        let news = || {
            own.inbox_pending.load(Ordering::Relaxed)
                || queued_elsewhere() > seen
                || (shared.shards.iter().enumerate()).any(|(victim, shard)| {
                    victim != index && shard.inbox_pending.load(Ordering::Relaxed)
                })
        };
        // On a node of a networked pool, work comes from the driver thread,
        // which needs the core a spinning executor would hold: park at once.
        let networked = shared.uplink.is_some();
        if networked || handoff.parker.spin(news) == Spin::TimedOut {
            // Announce, then look once more before parking: pairs with
            // `Pool::submit_boxed` and `wake_idle_for`, so either this thread
            // sees new work or whoever made it sees this one idle.
            handoff.idle.store(true, Ordering::SeqCst);
            shared.idle_count.fetch_add(1, Ordering::SeqCst);
            announced = true;
            if let Some(uplink) = &shared.uplink {
                uplink.idle();
            }
        }
    };
    if announced {
        shared.claim_idle(index);
    }
    found
}

fn run_call(
    shared: &Shared,
    index: usize,
    context: &ExecutorContext,
    resources: &Resources,
    ids: &mut IdIssuer,
    outbox: &mut Outbox,
    work: Work<Boxed>,
) -> FinishedCall {
    let Work {
        ticket,
        mut body,
        call,
    } = work;
    let timed = shared.trace || shared.uplink.is_some();
    let start_ns = if timed { shared.now_ns() } else { 0 };
    let kind = match call {
        Call::Initialize => CallKind::Initialize,
        Call::Process(_) => CallKind::Process,
    };
    let admission = shared.admission.load();
    let mut cx = ActivityCx::new(
        ticket.id(),
        index,
        context,
        resources,
        ids,
        &admission,
        outbox,
    );
    let result = catch_unwind(AssertUnwindSafe(|| {
        let step = match call {
            Call::Initialize => body.initialize(&mut cx),
            Call::Process(event) => body.process(&mut cx, event),
        };
        if step == Step::Finish {
            body.cleanup(&mut cx);
        }
        step
    }));
    let (outcome, end) = match result {
        Ok(Step::Suspend) => (Outcome::Suspend(body), CallEnd::Suspended),
        Ok(Step::Finish) => (Outcome::Finish, CallEnd::Finished),
        Err(panic) => {
            let message = panic_message(&*panic);
            shared.failed.fetch_add(1, Ordering::Relaxed);
            tracing::error!(activity = %ticket.id(), executor = index, %message, "activity panicked; it is dropped");
            (Outcome::Finish, CallEnd::Failed)
        }
    };
    let end_ns = if timed { shared.now_ns() } else { 0 };
    if shared.uplink.is_some() {
        shared
            .longest_call_ns
            .fetch_max(end_ns - start_ns, Ordering::Relaxed);
    }
    let record = shared.trace.then(|| TraceRecord {
        activity: ticket.id(),
        executor: index,
        // Filled in from the scheduler when the call is handed back.
        contexts: ContextList::anywhere(),
        call: kind,
        end,
        start_ns,
        end_ns,
    });
    (ticket, outcome, record)
}
