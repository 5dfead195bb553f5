//! What a driver and the [`Scheduler`](super::Scheduler) hand each other:
//! what goes in ([`Submission`], [`Origin`], [`Outcome`], [`Stolen`]), what
//! comes out ([`Work`], [`Ticket`], [`Call`], [`Action`]), where stolen
//! work went ([`Place`]), and the [`Counts`] a driver reads.

use std::collections::VecDeque;

use super::{ExecutorIndex, Undeliverable};
use crate::context::ContextList;
use crate::event::Event;
use crate::id::ActivityId;

/// Where an activity went when it was stolen. The driver gives places their
/// meaning (an executor's shard, later a node); the core only remembers them
/// so that events can follow the activity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Place(pub u64);

/// An activity taken out of one scheduler by [`Scheduler::steal`](crate::core::Scheduler::steal), to be
/// handed to another with [`Scheduler::accept`](crate::core::Scheduler::accept).
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
    /// Names the activity; hand it back to [`Scheduler::complete`](crate::core::Scheduler::complete).
    pub ticket: Ticket,
    /// The activity, lent to the executor until [`Scheduler::complete`](crate::core::Scheduler::complete).
    pub body: T,
    /// Which call to make.
    pub call: Call,
}

/// Names a running activity when its call completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket {
    pub(super) slot: u32,
    pub(super) id: ActivityId,
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
    /// to it can forget them ([`Scheduler::forget_forward`](crate::core::Scheduler::forget_forward)).
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
    /// Activities taken out of this scheduler by [`Scheduler::steal`](crate::core::Scheduler::steal) or
    /// [`Scheduler::steal_off_node`](crate::core::Scheduler::steal_off_node).
    ///
    /// [`Scheduler::steal`](crate::core::Scheduler::steal): super::Scheduler::steal
    /// [`Scheduler::steal_off_node`](crate::core::Scheduler::steal_off_node): super::Scheduler::steal_off_node
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
