//! The simulator: a deterministic discrete-event driver of the real
//! scheduler core, with virtual time and a modelled network.
//!
//! Only time and the network are simulated. Each simulated node runs the
//! same [`Scheduler`](crate::core::Scheduler) as the local and net drivers,
//! with all its executors; between nodes the simulator follows the net
//! driver's rules: victim choice and steal throttling from
//! [`net::steal`](crate::protocol::steal) (master-worker, random, hierarchical),
//! up to half of the victim's queued work per reply, and the chain of
//! custody from [`net::custody`](crate::protocol::custody): an exporter keeps a
//! copy of each activity it hands out until the thief says it finished,
//! and queues it again (with a higher attempt number, up to
//! [`Model::max_attempts`]) when the thief is declared dead. Events go to
//! their target's origin node and follow the core's forwarding pointers.
//!
//! What is modelled:
//! - [`Site`]s, with a [`Link`] within each and between each pair (latency,
//!   shared bandwidth, a per-transfer limit).
//! - [`NodeSpec`]s with their [`ExecutorSpec`]s (contexts, cores, speed),
//!   joining and dying at given times.
//! - A [`Workload`]: activity templates with contexts, work in seconds
//!   (scaled by the executor's cores, speed and label speedups, see
//!   [`Kind`]), input [`Data`] fetched from the nearest replica when the
//!   activity starts off its sites, and stages of children the activity
//!   submits through the core and waits for through the core's events.
//! - Messages: steal requests and replies, finished notices and events
//!   take the link's latency plus their size over its bandwidth.
//!
//! The same [`Model::seed`] gives the same run, event for event: virtual
//! time is in whole nanoseconds, ties are broken by the order events were
//! scheduled, and all randomness comes from one seeded generator.
//!
//! ```
//! use constellation::sim::{simulate, Model, NodeSpec, Site, Workload};
//! use constellation::{ContextList, ExecutorContext};
//!
//! let model = Model::new(
//!     vec![Site::new("vu")],
//!     vec![NodeSpec::uniform("node0", 0, 4, ExecutorContext::anywhere())],
//! );
//! let report = simulate(&model, &Workload::bag(100, 1.0, ContextList::anywhere()))?;
//! assert_eq!(report.makespan, 25.0);
//! # Ok::<(), constellation::sim::SimError>(())
//! ```
//!
//! Not modelled: CPU time of the scheduler itself, and the membership
//! protocol (nodes know each other at once when they join; a dead node is
//! declared dead by everyone at the same moment, [`Model::failure_timeout`]
//! after it died, while requests sent to it fail at once, as over a broken
//! connection). The origin of an activity is not told where it moved (the
//! net driver's `Moved` notice), so events to it follow the forwarding
//! pointers hop by hop.

mod compare;
mod engine;
mod model;
mod report;
mod workload;

pub use crate::protocol::steal::WideSteal;
pub use compare::{
    compare_one, compare_strategies, compare_wide_steal, ComparisonRow, ComparisonSetup,
};
pub use model::{AnswerCost, ExecutorSpec, Link, Model, NodeSpec, Site, SiteLink};
pub use report::{
    AttemptEnd, AttemptRecord, ExecutorSummary, MessageCounts, NodeSummary, SimReport,
};
pub use workload::{ActivitySpec, Data, Kind, Placement, Workload};

use crate::core::SubmitError;

/// Why a simulation could not run to the end.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    /// The model is inconsistent: an index out of range, a negative time...
    #[error("bad simulation model: {0}")]
    Model(String),
    /// The workload is inconsistent, or a template contains itself.
    #[error("bad workload: {0}")]
    Workload(String),
    /// An activity asks for contexts that no executor of the pool offers.
    #[error("the workload cannot run on this pool: {0}")]
    Unrunnable(#[from] SubmitError),
    /// Roots remain unfinished at [`Model::horizon`].
    #[error("the simulation passed its horizon of {horizon} virtual seconds with {unfinished} of {roots} roots unfinished")]
    Horizon {
        /// The horizon, in seconds.
        horizon: f64,
        /// Roots not finished.
        unfinished: usize,
        /// Roots in all.
        roots: usize,
    },
    /// Roots remain unfinished and nothing more can happen.
    #[error("the simulation stalled at {at:.3} s with {unfinished} of {roots} roots unfinished: {reason}")]
    Stalled {
        /// Virtual seconds since the start.
        at: f64,
        /// Roots not finished.
        unfinished: usize,
        /// Roots in all.
        roots: usize,
        /// What the pool looked like.
        reason: String,
    },
}

/// Runs `workload` on `model` until all its roots have finished.
///
/// Fails without running anything if the model or workload is
/// inconsistent or asks for contexts nobody offers, and stops with
/// [`SimError::Stalled`] when roots remain but nothing runs any more (for
/// example when every node that could run some work has died).
pub fn simulate(model: &Model, workload: &Workload) -> Result<SimReport, SimError> {
    model.validate()?;
    workload.validate(model.sites.len())?;
    engine::Engine::new(model, workload).run()
}

#[cfg(test)]
mod tests;
