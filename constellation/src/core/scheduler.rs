//! The [`Scheduler`]: one node's (or one shard's) activities, their queues
//! and their executors, and the calls that submit work, deliver events and
//! hand out the next call. Stealing between schedulers is in [`stealing`],
//! relabelling executors in [`relabel`].

mod relabel;
mod stealing;

use std::collections::VecDeque;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::queue::{End, EntryRef, QueueSet};
use super::{
    Action, Call, Counts, DeliveryError, ExecutorIndex, MatchTable, Origin, Outcome, Place,
    Submission, SubmitError, Ticket, Undeliverable, UndeliverableReason, Work,
};
use crate::context::{ContextList, ExecutorContext, Label};
use crate::event::Event;
use crate::id::{ActivityId, NodeId};

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

    /// The next call for `executor`, or `None` when it has nothing to do; it
    /// is then idle, and an [`Action::Run`] brings it work when some arrives.
    ///
    /// It takes, for each context it offers in priority order, its pinned
    /// work, then its own newest, then the shared queues' oldest. It never
    /// looks in another executor's own queues: work moves between executors
    /// only through [`steal`](Self::steal) and [`accept`](Self::accept), as
    /// [`shards::steal_for`](crate::core::shards::steal_for) does for a node
    /// of one scheduler per executor.
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
