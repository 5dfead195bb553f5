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
//!   them newest-first (depth-first). Other executors take it oldest-first
//!   only by stealing ([`Scheduler::steal`], and [`shards::steal_for`] for a
//!   node of one scheduler per executor).
//! - Work that may not be stolen waits in the submitting executor's pinned
//!   queues, and only that executor runs it.
//! - An activity that has started stays on its executor: when an event wakes
//!   it, it goes to that executor's ready queue.

mod errors;
mod matching;
mod messages;
mod queue;
mod scheduler;
pub mod shards;

pub use errors::{DeliveryError, RelabelError, SubmitError, Undeliverable, UndeliverableReason};
pub use matching::{describe_executors, MatchTable};
pub use messages::{
    Action, Call, Counts, Origin, Outcome, Place, Stolen, Submission, Ticket, Work,
};
pub use scheduler::Scheduler;

/// Index of an executor within its node.
pub type ExecutorIndex = usize;

#[cfg(test)]
mod tests;
