//! The scheduler core: a deterministic state machine with no threads, no
//! clocks and no I/O.
//!
//! Drivers (the local thread pool, later the network and the simulator) feed
//! it inputs — submissions, events, requests for work, completions — and
//! carry out the [`Action`]s it asks for. Everything that decides *what runs
//! where* lives here, so every driver schedules the same way and the logic is
//! tested message by message.
//!
//! The core is generic over the activity body `T`: drivers store boxed
//! activities, tests store plain numbers.
//!
//! # Where work waits
//! - Work submitted from outside waits in the node's shared queues.
//! - Work an executor submits waits in that executor's own queues; it serves
//!   them newest-first (depth-first), and other executors steal oldest-first.
//! - Work that may not be stolen waits in the submitting executor's pinned
//!   queues, and only that executor runs it.
//! - An activity that has started stays on its executor: when an event wakes
//!   it, it goes to that executor's ready queue.

mod matching;
mod queue;
pub mod shards;

use std::collections::VecDeque;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::context::{ContextList, ExecutorContext, Label};
use crate::event::Event;
use crate::id::{ActivityId, NodeId};

pub use matching::{describe_executors, MatchTable};
use queue::{End, EntryRef, QueueSet};

/// Index of an executor within its node.
pub type ExecutorIndex = usize;

/// Where an activity went when it was stolen. The driver gives places their
/// meaning (an executor's shard, later a node); the core only remembers them
/// so that events can follow the activity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Place(pub u64);

/// An activity taken out of one scheduler by [`Scheduler::steal`], to be
/// handed to another with [`Scheduler::accept`].
#[derive(Debug)]
pub struct Stolen<T> {
    /// The activity's id; it keeps it wherever it goes.
    pub id: ActivityId,
    /// The activity, never started.
    pub body: T,
    /// Where it may run.
    pub contexts: ContextList,
    /// Whether it may leave its node.
    pub stealable: bool,
    /// Events that arrived before it started; they travel with it.
    pub pending: VecDeque<Event>,
    /// Places that keep a forwarding pointer to it, oldest first. The
    /// thief's driver appends the place it stole from.
    pub trail: Vec<Place>,
}

/// Why [`Scheduler::deliver`] did not deliver an event here.
#[derive(Debug)]
pub enum DeliveryError {
    /// The activity was stolen; send the event on to `to`.
    Moved {
        /// The event, to pass on.
        event: Event,
        /// Where the activity went.
        to: Place,
    },
    /// The activity does not exist.
    Undeliverable(Box<Undeliverable>),
}

/// What a finished call hands back to the core.
#[derive(Debug)]
pub enum Outcome<T> {
    /// The activity waits for events; the core keeps it until one arrives.
    Suspend(T),
    /// The activity is done (the driver has already run its cleanup).
    Finish,
}

/// Who submitted an activity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The main program or another node: the work goes to the shared queues.
    Outside,
    /// An activity running on this executor.
    Executor(ExecutorIndex),
}

/// An activity handed to the core.
#[derive(Debug)]
pub struct Submission<T> {
    /// Its id, issued by the submitter.
    pub id: ActivityId,
    /// The activity itself; the core only stores it.
    pub body: T,
    /// Where it may run.
    pub contexts: ContextList,
    /// Whether it may leave the executor (or node) that submitted it.
    pub stealable: bool,
}

/// A call an executor should make now.
#[derive(Debug)]
pub struct Work<T> {
    /// Names the activity; hand it back to [`Scheduler::complete`].
    pub ticket: Ticket,
    /// The activity, lent to the executor until [`Scheduler::complete`].
    pub body: T,
    /// Which call to make.
    pub call: Call,
}

/// Names a running activity when its call completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket {
    slot: u32,
    id: ActivityId,
}

impl Ticket {
    /// The running activity's id.
    pub fn id(&self) -> ActivityId {
        self.id
    }
}

/// The call to make on an activity.
#[derive(Debug)]
pub enum Call {
    /// The first call, `initialize`.
    Initialize,
    /// `process` with this event.
    Process(Event),
}

/// Something the driver must do.
#[derive(Debug)]
pub enum Action<T> {
    /// Hand this call to this executor, which was idle. The core has already
    /// marked the activity running there, so the executor thread can start
    /// it without asking the core again.
    Run {
        /// The idle executor that gets the work.
        executor: ExecutorIndex,
        /// The call to make.
        work: Work<T>,
    },
    /// The target of an event was stolen from here: deliver it at `to`.
    Forward {
        /// The event.
        event: Event,
        /// Where its target went.
        to: Place,
    },
    /// A stolen activity finished: the places that kept forwarding pointers
    /// to it can forget them ([`Scheduler::forget_forward`]).
    ForgetForwards {
        /// The finished activity.
        id: ActivityId,
        /// The places holding pointers to it.
        places: Vec<Place>,
    },
    /// An event could not be delivered; report it (log it, count it).
    Undeliverable(Undeliverable),
    /// Nothing runs and nothing is runnable. If `live` is zero all work is
    /// done; otherwise `live` activities wait for events that only the
    /// outside world could still send.
    Quiescent {
        /// Activities that still exist (all suspended).
        live: usize,
    },
}

/// An event that reached no activity, and why.
#[derive(Debug, thiserror::Error)]
#[error("event from {} to {} was not delivered: {reason}", event.source, event.target)]
pub struct Undeliverable {
    /// The event, returned so that nothing is silently lost.
    pub event: Event,
    /// Why it was not delivered.
    pub reason: UndeliverableReason,
}

/// Why an event was not delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UndeliverableReason {
    /// No activity with that id exists here: it finished, or never existed.
    #[error("no such activity (it finished, or never existed)")]
    NoSuchActivity,
    /// The activity finished while the event waited in its buffer.
    #[error("the activity finished before it processed the event")]
    FinishedFirst,
}

/// Why an executor could not be relabelled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RelabelError {
    /// There is no executor with that index.
    #[error("there is no executor {executor}: this node has {executors} (numbered from 0)")]
    NoSuchExecutor {
        /// The index asked for.
        executor: ExecutorIndex,
        /// How many executors there are.
        executors: usize,
    },
    /// Queued work pinned to the executor would never run under the new labels.
    #[error("executor {executor} holds {count} queued activities that may run only there (e.g. {example}) and that the new labels do not match; relabel it once they have run")]
    PinnedWork {
        /// The executor.
        executor: ExecutorIndex,
        /// How many pinned activities the new labels do not match.
        count: usize,
        /// One of them.
        example: ActivityId,
    },
}

/// Why a submission was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// No executor in the pool matches the activity's contexts.
    #[error("no executor can run activity {id}: it needs [{contexts}], executors offer {offered}")]
    NoSuitableExecutor {
        /// The refused activity.
        id: ActivityId,
        /// What it asked for.
        contexts: ContextList,
        /// What the executors offer, for the message.
        offered: String,
    },
    /// An activity with this id already exists (a duplicate from the network).
    #[error("activity {0} already exists")]
    DuplicateId(ActivityId),
}

/// Where a live activity is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Waiting in a queue, never started.
    Queued,
    /// A call is in progress on this executor.
    Running(ExecutorIndex),
    /// Waiting for events, kept for this executor.
    Suspended(ExecutorIndex),
    /// Has events and waits in this executor's ready queue.
    Ready(ExecutorIndex),
}

struct Record<T> {
    id: ActivityId,
    body: Option<T>,
    contexts: ContextList,
    state: State,
    stealable: bool,
    pending: VecDeque<Event>,
    /// Places with forwarding pointers to this activity, if it was stolen.
    /// A thin pointer, not a `Vec`: most activities are never stolen, and
    /// every queued activity pays for this field (see `queued_bytes`).
    #[allow(clippy::box_collection)]
    trail: Option<Box<Vec<Place>>>,
}

struct SlotEntry<T> {
    generation: u32,
    record: Option<Record<T>>,
}

#[derive(Default)]
struct ExecutorState {
    context: ExecutorContext,
    own: QueueSet,
    pinned: QueueSet,
    ready: VecDeque<u32>,
    idle: bool,
}

/// Counts that describe the core at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Activities that exist: queued, running, suspended or ready.
    pub live: usize,
    /// Activities that were never started.
    pub queued: usize,
    /// Activities inside a call.
    pub running: usize,
    /// Started activities with events waiting to be processed.
    pub ready: usize,
    /// Activities submitted since the core started.
    pub submitted: u64,
    /// Activities that finished.
    pub finished: u64,
    /// Events delivered to an activity.
    pub delivered: u64,
    /// Events that reached no activity.
    pub undeliverable: u64,
    /// Activities that one executor took from another executor's queue.
    pub stolen: u64,
}

impl Counts {
    /// The sum of two schedulers' counts, for a node made of several.
    pub fn merge(self, other: Counts) -> Counts {
        Counts {
            live: self.live + other.live,
            queued: self.queued + other.queued,
            running: self.running + other.running,
            ready: self.ready + other.ready,
            submitted: self.submitted + other.submitted,
            finished: self.finished + other.finished,
            delivered: self.delivered + other.delivered,
            undeliverable: self.undeliverable + other.undeliverable,
            stolen: self.stolen + other.stolen,
        }
    }
}

/// The scheduler of one node.
pub struct Scheduler<T> {
    node: NodeId,
    executors: Vec<ExecutorState>,
    /// What this scheduler's own executors offer: whom to hand work to.
    matcher: Arc<MatchTable>,
    /// What every executor of the pool offers: which work to accept at all,
    /// since work only another scheduler's executors can run waits here
    /// until one of them steals it.
    pool: Arc<MatchTable>,
    shared: QueueSet,
    slots: Vec<SlotEntry<T>>,
    free_slots: Vec<u32>,
    index: FxHashMap<ActivityId, u32>,
    /// Activities stolen from here that have not finished yet.
    forwarded: FxHashMap<ActivityId, Place>,
    next_order: u64,
    /// Queued activities that may leave the node: a thief from another
    /// node finds nothing when there are none, however much node-bound
    /// work waits, and is told so without a search.
    stealable_queued: usize,
    idle_executors: usize,
    counts: Counts,
    quiescence_reported: bool,
    actions: VecDeque<Action<T>>,
}

impl<T> Scheduler<T> {
    /// A scheduler for `node` whose executors offer `executors`, indexed as
    /// given, and which accepts only work those executors can run.
    pub fn new(node: NodeId, executors: Vec<ExecutorContext>) -> Self {
        let matcher = Arc::new(MatchTable::new(&executors));
        Self::in_pool(node, executors, matcher)
    }

    /// A scheduler for some of a pool's executors, which accepts any work
    /// that some executor of the pool (as `pool` describes it) can run.
    pub fn in_pool(node: NodeId, executors: Vec<ExecutorContext>, pool: Arc<MatchTable>) -> Self {
        let matcher = Arc::new(MatchTable::new(&executors));
        Scheduler {
            node,
            executors: executors
                .into_iter()
                .map(|context| ExecutorState {
                    context,
                    ..ExecutorState::default()
                })
                .collect(),
            matcher,
            pool,
            shared: QueueSet::default(),
            slots: Vec::new(),
            free_slots: Vec::new(),
            index: FxHashMap::default(),
            forwarded: FxHashMap::default(),
            next_order: 0,
            stealable_queued: 0,
            idle_executors: 0,
            counts: Counts::default(),
            quiescence_reported: true,
            actions: VecDeque::new(),
        }
    }

    /// The node this core schedules for.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// Current counts.
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// The next action for the driver, if any.
    pub fn poll_action(&mut self) -> Option<Action<T>> {
        self.actions.pop_front()
    }

    /// Accepts an activity. Refuses it if no executor could ever run it, so
    /// nothing waits forever.
    pub fn submit(&mut self, origin: Origin, submission: Submission<T>) -> Result<(), SubmitError> {
        let pinned_to = match origin {
            Origin::Executor(executor) if !submission.stealable => Some(executor),
            _ => None,
        };
        match pinned_to {
            Some(_) => self
                .matcher
                .check(submission.id, &submission.contexts, pinned_to)?,
            None => self.pool.check(submission.id, &submission.contexts, None)?,
        }
        if self.index.contains_key(&submission.id) {
            return Err(SubmitError::DuplicateId(submission.id));
        }
        let owner = match (origin, pinned_to) {
            (_, Some(executor)) => QueueOwner::Pinned(executor),
            (Origin::Executor(executor), None) => QueueOwner::Own(executor),
            (Origin::Outside, None) => QueueOwner::Shared,
        };
        let contexts = submission.contexts.clone();
        let slot = self.insert_queued(
            Record {
                id: submission.id,
                body: Some(submission.body),
                contexts: submission.contexts,
                state: State::Queued,
                stealable: submission.stealable,
                pending: VecDeque::new(),
                trail: None,
            },
            owner,
        );
        self.counts.submitted += 1;
        self.assign_to_idle(slot, &contexts, pinned_to);
        Ok(())
    }

    /// Delivers an event to its activity, buffering it if the activity is
    /// not started or busy. Says where to send it instead if the activity
    /// was stolen, and returns it if no such activity exists.
    pub fn deliver(&mut self, event: Event) -> Result<(), DeliveryError> {
        let Some(&slot) = self.index.get(&event.target) else {
            if let Some(&to) = self.forwarded.get(&event.target) {
                return Err(DeliveryError::Moved { event, to });
            }
            self.counts.undeliverable += 1;
            return Err(DeliveryError::Undeliverable(Box::new(Undeliverable {
                event,
                reason: UndeliverableReason::NoSuchActivity,
            })));
        };
        self.counts.delivered += 1;
        let record = self.slots[slot as usize]
            .record
            .as_mut()
            .expect("indexed slot is occupied");
        record.pending.push_back(event);
        if let State::Suspended(executor) = record.state {
            record.state = State::Ready(executor);
            self.counts.ready += 1;
            self.executors[executor].ready.push_back(slot);
            self.quiescence_reported = false;
            self.assign(executor);
        }
        Ok(())
    }

    /// Delivers an event sent from inside an activity; what cannot be
    /// delivered here becomes an [`Action::Forward`] or an
    /// [`Action::Undeliverable`] for the driver.
    pub fn deliver_or_report(&mut self, event: Event) {
        match self.deliver(event) {
            Ok(()) => {}
            Err(DeliveryError::Moved { event, to }) => {
                self.actions.push_back(Action::Forward { event, to })
            }
            Err(DeliveryError::Undeliverable(undeliverable)) => self
                .actions
                .push_back(Action::Undeliverable(*undeliverable)),
        }
    }

    /// Takes up to `max` queued, never-started activities that an executor
    /// offering `thief` could run, oldest first, in the thief's priority and
    /// preference order. The core keeps a forwarding pointer to `to` for each.
    ///
    /// This moves work within a node: activities pinned to an executor never
    /// move, but unpinned ones move even if they may not leave the node.
    pub fn steal(&mut self, thief: &ExecutorContext, max: usize, to: Place) -> Vec<Stolen<T>> {
        self.steal_where(thief, max, to, false)
    }

    /// [`steal`](Self::steal) for a thief on another node: activities that
    /// may not leave their node ([`Submission::stealable`] is `false`) stay.
    pub fn steal_off_node(
        &mut self,
        thief: &ExecutorContext,
        max: usize,
        to: Place,
    ) -> Vec<Stolen<T>> {
        self.steal_where(thief, max, to, true)
    }

    fn steal_where(
        &mut self,
        thief: &ExecutorContext,
        max: usize,
        to: Place,
        off_node: bool,
    ) -> Vec<Stolen<T>> {
        let mut stolen = Vec::new();
        // Taken from a queue but bound to this node: queued again afterwards,
        // so the search does not find them twice.
        let mut staying = Vec::new();
        for offered in &thief.contexts {
            // Off the node only stealable work may go; once none is left,
            // the rest of the search would only shuffle node-bound work.
            while stolen.len() < max && (!off_node || self.stealable_queued > 0) {
                let mut found = self
                    .take_from(QueueOwner::Shared, offered, thief.preference, End::Oldest)
                    .map(|slot| (slot, QueueOwner::Shared));
                for victim in 0..self.executors.len() {
                    if found.is_some() {
                        break;
                    }
                    found = self
                        .take_from(
                            QueueOwner::Own(victim),
                            offered,
                            thief.preference,
                            End::Oldest,
                        )
                        .map(|slot| (slot, QueueOwner::Own(victim)));
                }
                let Some((slot, owner)) = found else { break };
                let record = self.slots[slot as usize]
                    .record
                    .as_ref()
                    .expect("a taken slot is occupied");
                if off_node && !record.stealable {
                    staying.push((slot, owner));
                    continue;
                }
                stolen.push(self.remove_for_theft(slot, to));
            }
        }
        for (slot, owner) in staying {
            self.requeue(slot, owner);
        }
        self.counts.stolen += stolen.len() as u64;
        self.check_quiescence();
        stolen
    }

    /// Puts a queued activity that was taken off its queues back on them,
    /// as the newest entry. Entries it still has under other labels are
    /// stale now and skipped when met.
    fn requeue(&mut self, slot: u32, owner: QueueOwner) {
        let entry = &mut self.slots[slot as usize];
        entry.generation = entry.generation.wrapping_add(1);
        self.enqueue(slot, owner);
    }

    /// Puts the queued activity in `slot` on `owner`'s queue for each label
    /// it names, as the newest entry.
    fn enqueue(&mut self, slot: u32, owner: QueueOwner) {
        let entry = self.entry_ref(slot);
        let order = self.next_order;
        self.next_order += 1;
        let record = self.slots[slot as usize]
            .record
            .as_ref()
            .expect("a queued slot is occupied");
        let queues = match owner {
            QueueOwner::Shared => &mut self.shared,
            QueueOwner::Own(executor) => &mut self.executors[executor].own,
            QueueOwner::Pinned(executor) => &mut self.executors[executor].pinned,
        };
        for wanted in record.contexts.items() {
            queues.push(wanted.label, wanted.sort_rank(), order, entry);
        }
    }

    fn remove_for_theft(&mut self, slot: u32, to: Place) -> Stolen<T> {
        let entry = &mut self.slots[slot as usize];
        let record = entry.record.take().expect("queued slot is occupied");
        entry.generation = entry.generation.wrapping_add(1);
        self.free_slots.push(slot);
        self.index.remove(&record.id);
        self.forwarded.insert(record.id, to);
        self.counts.live -= 1;
        self.counts.queued -= 1;
        self.stealable_queued -= usize::from(record.stealable);
        Stolen {
            id: record.id,
            body: record.body.expect("a queued activity holds its body"),
            contexts: record.contexts,
            stealable: record.stealable,
            pending: record.pending,
            trail: record.trail.map(|trail| *trail).unwrap_or_default(),
        }
    }

    /// Takes in an activity stolen from another scheduler. It joins
    /// `executor`'s own queue, where that executor finds it first.
    pub fn accept(
        &mut self,
        executor: ExecutorIndex,
        stolen: Stolen<T>,
    ) -> Result<(), SubmitError> {
        if self.index.contains_key(&stolen.id) {
            return Err(SubmitError::DuplicateId(stolen.id));
        }
        // It may come back to a place it once left.
        self.forwarded.remove(&stolen.id);
        let id = stolen.id;
        let contexts = stolen.contexts.clone();
        self.insert_queued(
            Record {
                id: stolen.id,
                body: Some(stolen.body),
                contexts: stolen.contexts,
                state: State::Queued,
                stealable: stolen.stealable,
                pending: stolen.pending,
                trail: (!stolen.trail.is_empty()).then(|| Box::new(stolen.trail)),
            },
            QueueOwner::Own(executor),
        );
        // An idle executor here (it asked for work and got none) gets it now.
        let slot = self.index[&id];
        self.assign_to_idle(slot, &contexts, None);
        Ok(())
    }

    /// Puts a never-started activity into the table, and into `owner`'s
    /// queue for each label it names.
    fn insert_queued(&mut self, record: Record<T>, owner: QueueOwner) -> u32 {
        let id = record.id;
        let slot = self.allocate(record);
        self.index.insert(id, slot);
        self.counts.live += 1;
        self.counts.queued += 1;
        let stealable = (self.slots[slot as usize].record.as_ref()).is_some_and(|r| r.stealable);
        self.stealable_queued += usize::from(stealable);
        self.quiescence_reported = false;
        self.enqueue(slot, owner);
        slot
    }

    /// Drops the forwarding pointer for a stolen activity that finished.
    pub fn forget_forward(&mut self, id: ActivityId) {
        self.forwarded.remove(&id);
    }

    /// Points the forwarding pointer for `id`, if this scheduler holds one,
    /// at `to`: the activity was moved on by someone who knows better.
    pub fn redirect_forward(&mut self, id: ActivityId, to: Place) {
        if let Some(place) = self.forwarded.get_mut(&id) {
            *place = to;
        }
    }

    /// Forwarding pointers held, one per stolen activity still alive.
    pub fn forwarding_pointers(&self) -> usize {
        self.forwarded.len()
    }

    /// The next call for `executor`, or `None` when it has nothing to do; it
    /// is then idle, and an [`Action::Run`] brings it work when some arrives.
    pub fn next_work(&mut self, executor: ExecutorIndex) -> Option<Work<T>> {
        if self.executors[executor].idle {
            // Asking again means the executor is awake, however it was woken.
            self.executors[executor].idle = false;
            self.idle_executors -= 1;
        }
        // A call handed to this executor earlier in the same batch of inputs,
        // before the driver polled it, is its next call: taking it back here
        // keeps the executor from looking idle while that call is pending.
        if let Some(position) = self
            .actions
            .iter()
            .position(|action| matches!(action, Action::Run { executor: e, .. } if *e == executor))
        {
            if let Some(Action::Run { work, .. }) = self.actions.remove(position) {
                return Some(work);
            }
        }
        if let Some(work) = self.next_ready(executor) {
            return Some(work);
        }
        let preference = self.executors[executor].context.preference;
        for priority in 0..self.executors[executor].context.contexts.len() {
            let offered = self.executors[executor].context.contexts[priority];
            let mut taken = self.take_from(
                QueueOwner::Pinned(executor),
                &offered,
                preference,
                End::Newest,
            );
            if taken.is_none() {
                taken =
                    self.take_from(QueueOwner::Own(executor), &offered, preference, End::Newest);
            }
            if taken.is_none() {
                taken = self.take_from(QueueOwner::Shared, &offered, preference, End::Oldest);
            }
            let executors = self.executors.len();
            for step in 1..executors {
                if taken.is_some() {
                    break;
                }
                let victim = (executor + step) % executors;
                taken = self.take_from(QueueOwner::Own(victim), &offered, preference, End::Oldest);
                if taken.is_some() {
                    self.counts.stolen += 1;
                }
            }
            if let Some(slot) = taken {
                return Some(self.start(executor, slot));
            }
        }
        if !self.executors[executor].idle {
            self.executors[executor].idle = true;
            self.idle_executors += 1;
        }
        self.check_quiescence();
        None
    }

    /// Takes back an activity after a call.
    ///
    /// On [`Outcome::Finish`] the activity is forgotten and events still
    /// waiting for it are reported as undeliverable.
    pub fn complete(&mut self, ticket: Ticket, outcome: Outcome<T>) {
        let slot = ticket.slot;
        let entry = &mut self.slots[slot as usize];
        let record = entry
            .record
            .as_mut()
            .expect("completed activity is in the table");
        debug_assert_eq!(record.id, ticket.id);
        let State::Running(executor) = record.state else {
            panic!("activity {} completed while {:?}", record.id, record.state);
        };
        self.counts.running -= 1;
        match outcome {
            Outcome::Finish => {
                let record = entry.record.take().expect("checked above");
                entry.generation = entry.generation.wrapping_add(1);
                self.free_slots.push(slot);
                self.index.remove(&record.id);
                self.counts.live -= 1;
                self.counts.finished += 1;
                if let Some(trail) = record.trail {
                    self.actions.push_back(Action::ForgetForwards {
                        id: record.id,
                        places: *trail,
                    });
                }
                for event in record.pending {
                    self.counts.undeliverable += 1;
                    self.actions.push_back(Action::Undeliverable(Undeliverable {
                        event,
                        reason: UndeliverableReason::FinishedFirst,
                    }));
                }
            }
            Outcome::Suspend(body) => {
                record.body = Some(body);
                if record.pending.is_empty() {
                    record.state = State::Suspended(executor);
                } else {
                    record.state = State::Ready(executor);
                    self.counts.ready += 1;
                    self.executors[executor].ready.push_back(slot);
                }
            }
        }
        self.check_quiescence();
    }

    fn next_ready(&mut self, executor: ExecutorIndex) -> Option<Work<T>> {
        let slot = self.executors[executor].ready.pop_front()?;
        let record = self.slots[slot as usize]
            .record
            .as_mut()
            .expect("ready slot is occupied");
        debug_assert_eq!(record.state, State::Ready(executor));
        let event = record
            .pending
            .pop_front()
            .expect("ready activities have an event");
        record.state = State::Running(executor);
        self.counts.ready -= 1;
        self.counts.running += 1;
        Some(Work {
            ticket: Ticket {
                slot,
                id: record.id,
            },
            body: record.body.take().expect("a ready activity is not running"),
            call: Call::Process(event),
        })
    }

    fn start(&mut self, executor: ExecutorIndex, slot: u32) -> Work<T> {
        let record = self.slots[slot as usize]
            .record
            .as_mut()
            .expect("queued slot is occupied");
        record.state = State::Running(executor);
        self.counts.queued -= 1;
        self.stealable_queued -= usize::from(record.stealable);
        self.counts.running += 1;
        Work {
            ticket: Ticket {
                slot,
                id: record.id,
            },
            body: record
                .body
                .take()
                .expect("a queued activity is not running"),
            call: Call::Initialize,
        }
    }

    fn take_from(
        &mut self,
        owner: QueueOwner,
        offered: &crate::context::Context,
        preference: crate::context::Preference,
        end: End,
    ) -> Option<u32> {
        let queues = match owner {
            QueueOwner::Shared => &mut self.shared,
            QueueOwner::Own(executor) => &mut self.executors[executor].own,
            QueueOwner::Pinned(executor) => &mut self.executors[executor].pinned,
        };
        let queue = queues.get_mut(offered.label)?;
        let slots = &self.slots;
        let live = |entry: EntryRef| {
            let (slot, generation) = split_entry(entry);
            let slot_entry = &slots[slot as usize];
            slot_entry.generation == generation
                && slot_entry
                    .record
                    .as_ref()
                    .is_some_and(|record| record.state == State::Queued)
        };
        queue
            .take(offered, preference, end, live)
            .map(|entry| split_entry(entry).0)
    }

    fn allocate(&mut self, record: Record<T>) -> u32 {
        match self.free_slots.pop() {
            Some(slot) => {
                self.slots[slot as usize].record = Some(record);
                slot
            }
            None => {
                let slot =
                    u32::try_from(self.slots.len()).expect("fewer than 2^32 live activities");
                self.slots.push(SlotEntry {
                    generation: 0,
                    record: Some(record),
                });
                slot
            }
        }
    }

    fn entry_ref(&self, slot: u32) -> EntryRef {
        (u64::from(slot) << 32) | u64::from(self.slots[slot as usize].generation)
    }

    /// Gives new work in `slot` to idle executors that can run it: the one it
    /// is pinned to, or else the best matches for its list, until it is taken.
    /// An executor may take other work of higher priority to it instead.
    fn assign_to_idle(
        &mut self,
        slot: u32,
        contexts: &ContextList,
        pinned_to: Option<ExecutorIndex>,
    ) {
        if self.idle_executors == 0 {
            return;
        }
        if let Some(executor) = pinned_to {
            self.assign(executor);
            return;
        }
        // `executors_for` walks the activity's contexts in order, so for a
        // priority list earlier contexts get the first offer.
        let matcher = self.matcher.clone();
        for executor in matcher.executors_for(contexts) {
            let still_queued = self.slots[slot as usize]
                .record
                .as_ref()
                .is_some_and(|record| record.state == State::Queued);
            if self.idle_executors == 0 || !still_queued {
                return;
            }
            self.assign(executor);
        }
    }

    /// If `executor` is idle, picks its next call now and hands it over.
    fn assign(&mut self, executor: ExecutorIndex) {
        if !self.executors[executor].idle {
            return;
        }
        if let Some(work) = self.next_work(executor) {
            self.actions.push_back(Action::Run { executor, work });
        }
    }

    fn check_quiescence(&mut self) {
        if !self.quiescence_reported && self.is_quiescent() {
            self.quiescence_reported = true;
            self.actions.push_back(Action::Quiescent {
                live: self.counts.live,
            });
        }
    }

    /// Where a running activity may run, for drivers that record it in
    /// traces; `None` if `ticket` names no running activity.
    pub fn contexts_of(&self, ticket: &Ticket) -> Option<&ContextList> {
        let record = self.slots.get(ticket.slot as usize)?.record.as_ref()?;
        (record.id == ticket.id).then_some(&record.contexts)
    }

    /// Whether nothing runs and nothing is runnable.
    pub fn is_quiescent(&self) -> bool {
        let counts = &self.counts;
        counts.running == 0 && counts.queued == 0 && counts.ready == 0
    }

    /// What `executor` offers now.
    pub fn executor_context(&self, executor: ExecutorIndex) -> Option<&ExecutorContext> {
        self.executors.get(executor).map(|state| &state.context)
    }

    /// Gives `executor` a new context while it runs. Activities it already
    /// started stay with it; queued work it can no longer run is left for
    /// executors that can (they steal it, here or from other nodes).
    ///
    /// Refused when the executor holds queued activities pinned to it that
    /// the new context cannot run: nobody else may take those, so they
    /// would wait forever.
    pub fn relabel(
        &mut self,
        executor: ExecutorIndex,
        context: ExecutorContext,
    ) -> Result<(), RelabelError> {
        let Some(state) = self.executors.get(executor) else {
            return Err(RelabelError::NoSuchExecutor {
                executor,
                executors: self.executors.len(),
            });
        };
        let slots = &self.slots;
        let mut stranded: Vec<u32> = (state.pinned.entries())
            .filter_map(|entry| {
                let (slot, generation) = split_entry(entry);
                let slot_entry = slots.get(slot as usize)?;
                let record = slot_entry.record.as_ref()?;
                let queued = slot_entry.generation == generation && record.state == State::Queued;
                (queued && context.priority_of(&record.contexts).is_none()).then_some(slot)
            })
            .collect();
        stranded.sort_unstable();
        stranded.dedup();
        if let Some(&first) = stranded.first() {
            let id = (self.slots[first as usize].record.as_ref()).map(|record| record.id);
            return Err(RelabelError::PinnedWork {
                executor,
                count: stranded.len(),
                example: id.expect("a stranded slot is occupied"),
            });
        }
        self.executors[executor].context = context;
        let contexts: Vec<ExecutorContext> = (self.executors.iter())
            .map(|state| state.context.clone())
            .collect();
        self.matcher = Arc::new(MatchTable::new(&contexts));
        // An idle executor may now match queued work: the driver wakes it,
        // and quiescence must be judged afresh.
        self.quiescence_reported = false;
        Ok(())
    }

    /// Replaces what this scheduler knows of the whole pool's executors,
    /// which decides the work it accepts; for drivers whose pool changed
    /// (an executor was relabelled, a node joined or left).
    pub fn set_pool(&mut self, pool: Arc<MatchTable>) {
        self.pool = pool;
    }

    /// How many never-started activities wait for each label. An activity
    /// that names several labels counts once under each.
    pub fn queued_by_label(&self) -> Vec<(Label, usize)> {
        let mut counts: FxHashMap<Label, usize> = FxHashMap::default();
        let queued = (self.slots.iter())
            .filter_map(|entry| entry.record.as_ref())
            .filter(|record| record.state == State::Queued);
        for record in queued {
            let items = record.contexts.items();
            for (position, context) in items.iter().enumerate() {
                let repeated = items[..position].iter().any(|c| c.label == context.label);
                if !repeated {
                    *counts.entry(context.label).or_default() += 1;
                }
            }
        }
        let mut counts: Vec<(Label, usize)> = counts.into_iter().collect();
        counts.sort_by_key(|(label, _)| label.name());
        counts
    }

    /// Ids of activities that are suspended, for reporting a stall. At most `limit`.
    pub fn suspended_ids(&self, limit: usize) -> Vec<ActivityId> {
        self.slots
            .iter()
            .filter_map(|entry| entry.record.as_ref())
            .filter(|record| matches!(record.state, State::Suspended(_)))
            .map(|record| record.id)
            .take(limit)
            .collect()
    }
}

#[derive(Clone, Copy)]
enum QueueOwner {
    Shared,
    Own(ExecutorIndex),
    Pinned(ExecutorIndex),
}

fn split_entry(entry: EntryRef) -> (u32, u32) {
    ((entry >> 32) as u32, entry as u32)
}

#[cfg(test)]
mod tests;
