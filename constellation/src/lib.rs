//! The Constellation model and runtime.
//!
//! Applications are graphs of [activities](Activity) that talk through
//! [events](Event). Activities and executors carry [contexts](Context):
//! labels such as `GPU` or `site:vu`, with optional ranks. An idle executor
//! takes work whose context matches its own — from its own queue, from the
//! node's shared queue, or by stealing from another executor. This is
//! context-aware work stealing, after Maassen et al., "Towards Jungle
//! Computing with Ibis/Constellation" (2011).
//!
//! The scheduling logic is one deterministic state machine,
//! [`core::Scheduler`], with no threads or I/O. Drivers feed it: the local driver
//! ([`Pool`]) runs executor threads inside one process; `net` joins processes into one
//! pool over the network, each process one node of the node [`protocol`];
//! and [`sim`] runs that protocol on a modelled network in virtual time.
//!
//! # Features
//! - `net` (on by default): the network driver, `constellation::net`, on
//!   libp2p and tokio. Without it (`default-features = false`) the crate
//!   builds the model, the core, the local driver, the node protocol and
//!   the simulator, and pulls in no async runtime or network stack.
//! - `fuzzing` (off): `constellation::fuzz`, the stable fuzzer that the fuzz tests of
//!   other crates use (this crate's own tests have it anyway).
//!
//! Start with [`Pool`]: build one, submit activities, wait for their
//! results with a collector, and call [`Pool::done`].
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

#![warn(missing_docs, unreachable_pub)]

mod activity;
pub mod collect;
mod context;
pub mod core;
mod event;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzz;
mod id;
mod local;
#[cfg(feature = "net")]
pub mod net;
pub mod protocol;
mod resources;
pub mod sim;
pub mod trace;
pub mod wire;

pub use activity::{panic_message, Activity, ActivityCx, Outbox, Step};
pub use context::{Context, ContextList, ExecutorContext, Label, ListMode, Preference};
pub use core::{MatchTable, RelabelError, SubmitError};
pub use event::{Event, Payload, PayloadError, PayloadValue, WireEvent};
pub use id::{ActivityId, IdIssuer, NodeId};
pub use local::{DoneError, Pool, PoolBuilder, PoolError, RunSummary};
pub use resources::Resources;
