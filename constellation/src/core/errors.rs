//! Why the scheduler refused something: an event it could not deliver, a
//! submission, or a relabelling.

use super::{ExecutorIndex, Place};
use crate::context::ContextList;
use crate::event::Event;
use crate::id::ActivityId;

/// Why [`Scheduler::deliver`](crate::core::Scheduler::deliver) did not deliver an event here.
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
