//! The local driver: executor threads inside one process.
//!
//! This is the embedded default. It needs no network: build a [`Pool`],
//! submit activities, wait for their results with a collector, and call
//! [`Pool::done`]; the crate's documentation has an example.
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
//!
//! [`Scheduler`]: crate::core::Scheduler

// The user's API (builder, pool) and a network driver's (uplink) over the
// machinery beneath them: the shards and the executor threads.
mod builder;
mod executor;
mod export;
mod park;
mod pool;
mod pool_state;
mod uplink;

use crate::activity::Activity;

pub use builder::{PoolBuilder, PoolError};
pub use pool::{DoneError, Pool, RunSummary};
#[cfg(feature = "net")]
pub(crate) use uplink::{Arrival, Outgoing};
pub(crate) use uplink::{Uplink, OFF_NODE};

/// An activity as the local driver stores it.
type Boxed = Box<dyn Activity>;
