//! The simulator: a deterministic discrete-event driver of the real
//! scheduler core and the real node protocol, with virtual time and a
//! modelled network.
//!
//! Only time and the network are simulated. Each simulated node runs the
//! same [`Scheduler`](crate::core::Scheduler) as the local and net drivers,
//! with all its executors, under the same node protocol,
//! [`protocol::StateMachine`](crate::protocol::StateMachine): it decides whom to ask for
//! work and how much (master-worker, random, hierarchical), hands over up
//! to half of its queued work per reply, keeps custody of what it handed
//! out and queues it again (with a higher attempt number, up to
//! [`Model::max_attempts`]) when the thief is declared dead, routes events
//! to their activity in at most two hops, and keeps membership by SWIM.
//! The simulator carries its messages over the modelled network and feeds
//! it virtual time; it makes no decision between nodes itself.
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
//! - Messages: every protocol message (steal requests and replies,
//!   notices, membership) takes the link's latency plus its size over the
//!   link's bandwidth.
//!
//! The same [`Model::seed`] gives the same run, event for event: virtual
//! time is in whole nanoseconds, ties are broken by the order events were
//! scheduled, and all randomness comes from the seed (each node draws its
//! own from it).
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
//! Membership is the protocol's own: a joining node introduces itself to
//! the master (or, if the master is not there, to the first live node),
//! and SWIM spreads the news; a dead node is found out by a failed probe
//! and declared dead [`Model::failure_timeout`] later, while messages
//! sent to it fail after a round trip, as over a refused connection.
//!
//! Not modelled: CPU time of the scheduler and the protocol, except for
//! answering steal requests when [`Model::answer_cost`] gives that a cost.

mod compare;
mod engine;
mod model;
mod report;
mod workload;

pub use crate::protocol::strategy::WideSteal;
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
