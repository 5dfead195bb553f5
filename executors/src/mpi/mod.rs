//! One activity, many processors: the M-task of TGrid, on an MPI partition.
//!
//! A normal activity runs on one executor thread. An *M-task* runs on every
//! rank of an MPI communicator at once and uses collectives between them.
//! This module makes such a partition look like one executor to a
//! Constellation [`Pool`](constellation::Pool):
//!
//! - Every rank of a program started with `mpiexec -n N` calls
//!   [`run_ranks`] (or [`MpiExecutor::init`] and [`MpiExecutor::run`]).
//!   Rank 0 runs the application's main program on a thread of its own, with
//!   an [`MpiRoot`] that adds the MPI executor (context `mpi` and
//!   `mpi:ranks=N`) to the pool. Rank 0's main thread and the main threads of
//!   all other ranks then serve M-tasks until the main program returns.
//! - An M-task is an [`MpiActivity`]. Wrap it in [`OnMpi`] and submit that:
//!   the MPI executor broadcasts the work to all ranks, every rank runs it,
//!   and rank 0's result goes to the parent as an [`MpiOutcome`] event.
//!
//! ```no_run
//! use constellation::collect::SingleEventCollector;
//! use constellation::Pool;
//! use executors::mpi::{run_ranks, DotProduct, MpiOutcome, OnMpi};
//!
//! type Error = Box<dyn std::error::Error + Send + Sync>;
//!
//! // Under `mpiexec -n 4 this-program`: `Some` on rank 0, `None` elsewhere.
//! let answer = run_ranks(|mpi| -> Result<u64, Error> {
//!     let pool = mpi.add_executor(Pool::builder().executors(2)).start()?;
//!     let (collector, result) = SingleEventCollector::new();
//!     let parent = pool.submit(collector)?;
//!     pool.submit(OnMpi::new(parent, DotProduct { n: 1_000_000 }))?;
//!     let report = result.wait_one()?.take::<MpiOutcome>()??;
//!     let dot = report.value.decode::<executors::mpi::DotProductResult>()?;
//!     pool.done()?;
//!     Ok(dot.dot)
//! })?;
//! if let Some(answer) = answer {
//!     println!("x·y = {}", answer?);
//! }
//! # Ok::<(), Error>(())
//! ```
//!
//! # What is guaranteed when things go wrong
//!
//! Collectives block until every rank joins them, so one rank that stops
//! early can leave the others waiting forever. The executor therefore agrees
//! on every step with all ranks before it moves on:
//!
//! - **Decoding.** Every rank, rank 0 included, decodes the broadcast work,
//!   then all ranks exchange whether that worked. If any rank failed, no rank
//!   runs the work, and the parent gets [`MpiError::Decode`] naming the ranks.
//! - **Errors.** `run` returning `Err` on any rank is reported as
//!   [`MpiError::Failed`] with every failing rank's message; the executor
//!   stays up. An activity must still make the same collective calls on every
//!   rank, so check inputs *before* the first collective: all ranks see the
//!   same decoded value, so they all refuse it alike.
//! - **Panics.** A panic in `run` is caught and reported like an error when
//!   all ranks reach the end of the M-task, e.g. when every rank panicked at
//!   the same check. If the other ranks do not arrive within the panic grace
//!   ([`MpiExecutor::with_panic_grace`], 30 s by default), they are most
//!   likely blocked in a collective the panicking rank will never join. MPI
//!   cannot cancel that, so the panicking rank aborts the whole MPI job
//!   (`MPI_Abort`): `mpiexec` then exits with an error instead of hanging.
//! - **No MPI executor.** [`OnMpi`] that lands on an executor without an
//!   [`MpiLink`] sends [`MpiError::NoMpiLink`]; after the main program has
//!   returned, [`MpiError::ShutDown`].
//! - **Shutdown.** When rank 0's main program returns (or panics), rank 0
//!   broadcasts a shutdown after the M-task in progress; every rank then
//!   frees its communicators and finalizes MPI, and [`run_ranks`] returns.
//!
//! An M-task that hangs on its own (e.g. a collective only some ranks call
//! without panicking) still hangs the partition: a collective cannot be
//! interrupted from outside.
//!
//! # Threads
//!
//! MPI is initialized with [`Threading::Funneled`](::mpi::Threading): only
//! the thread that called [`MpiExecutor::init`] makes MPI calls, so call
//! [`MpiExecutor::run`] on that same thread (best: the process's main
//! thread, through [`run_ranks`]). On rank 0 the pool's MPI executor thread
//! hands work to it through a channel held by the [`MpiLink`], and waits for
//! the answer.

mod examples;
mod executor;

use std::fmt;
use std::sync::mpsc;
use std::time::Duration;

use constellation::PayloadValue;
use constellation::{
    Activity, ActivityCx, ActivityId, Context, ContextList, Event, Payload, PayloadError, Step,
};
use serde::{Deserialize, Serialize};

pub use self::examples::{DotProduct, DotProductResult, MonteCarloPi, PiEstimate};
pub use self::executor::{run_ranks, MpiExecutor, MpiRoot, MpiStartError};
/// rsmpi itself, for the collective and point-to-point traits
/// (`use executors::mpi::rsmpi::traits::*`).
pub use ::mpi as rsmpi;
/// The communicator type M-tasks receive, re-exported so that implementing
/// [`MpiActivity`] needs no direct dependency on rsmpi.
pub use ::mpi::topology::SimpleCommunicator;

/// The label of the MPI executor; [`OnMpi`] asks for it by default.
pub const MPI_LABEL: &str = "mpi";

/// The ranked label that says how many ranks the MPI executor spans, so
/// that work can ask for a size: `mpi:ranks=4..=64`.
pub const RANKS_LABEL: &str = "mpi:ranks";

/// Work that runs on every rank of an MPI partition at once: an M-task.
///
/// Every rank receives the same encoded value, decodes it and calls
/// [`run`](MpiActivity::run) with a communicator over all ranks, so rank
/// `world.rank()` knows its share. Only rank 0's result travels on; the other
/// ranks' values are dropped, and an `Err` on any rank makes the whole M-task
/// fail (see the [module docs](self) for what is guaranteed).
///
/// Like activities, M-tasks travel as MessagePack under their registered
/// type name: put `#[typetag::serde]` on each `impl MpiActivity for …`.
///
/// The communicator is the executor's own duplicate of the world
/// communicator, so messages an M-task sends can never be mistaken for the
/// executor's. An M-task should receive every point-to-point message it
/// causes: leftovers would reach the next M-task.
#[typetag::serde(tag = "mpi_activity")]
pub trait MpiActivity: Send + 'static {
    /// Does this rank's part of the work. Rank 0's `Ok` value becomes the
    /// M-task's result; `Err` on any rank fails it, with this message.
    fn run(&mut self, world: &SimpleCommunicator) -> Result<MpiValue, String>;
}

/// A result as it travels from rank 0 to the parent: MessagePack bytes of any
/// serde type, so that [`MpiActivity`] stays object-safe and results of
/// every M-task fit one event type.
#[derive(Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MpiValue {
    bytes: Vec<u8>,
}

impl MpiValue {
    /// Encodes `value`. Fails only for types serde cannot encode as
    /// MessagePack (e.g. maps with non-string keys in some shapes).
    pub fn encode<T: PayloadValue>(value: T) -> Result<Self, String> {
        Payload::new(value)
            .encode()
            .map(|bytes| MpiValue { bytes })
            .map_err(|error| error.to_string())
    }

    /// Decodes the value as a `T`; fails, naming `T`, if the bytes are not one.
    pub fn decode<T: PayloadValue>(&self) -> Result<T, PayloadError> {
        Payload::from_encoded(self.bytes.clone()).take()
    }

    /// The encoded bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl fmt::Debug for MpiValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MpiValue({} bytes)", self.bytes.len())
    }
}

/// What a successful M-task reports to its parent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MpiReport {
    /// How many ranks ran the M-task.
    pub ranks: usize,
    /// Rank 0's result.
    pub value: MpiValue,
    /// Wall-clock time on rank 0 from the broadcast of the work to the
    /// agreement that all ranks finished.
    pub elapsed: Duration,
}

/// The event [`OnMpi`] sends to its parent: take it with
/// `event.take::<MpiOutcome>()`.
pub type MpiOutcome = Result<MpiReport, MpiError>;

/// One rank's failure in an M-task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankFailure {
    /// The rank in the MPI communicator.
    pub rank: usize,
    /// Whether the rank panicked rather than returning an error.
    pub panicked: bool,
    /// The error or panic message, cut to a few kilobytes.
    pub message: String,
}

impl fmt::Display for RankFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.panicked { " panicked" } else { "" };
        write!(f, "rank {}{what}: {}", self.rank, self.message)
    }
}

/// Joins failures into one line for error messages.
fn list(failures: &[RankFailure]) -> String {
    let parts: Vec<String> = failures.iter().map(ToString::to_string).collect();
    parts.join("; ")
}

/// Why an M-task produced no result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum MpiError {
    /// [`OnMpi`] ran on an executor that has no MPI partition behind it.
    #[error("OnMpi ran on executor `{executor}`, which has no MPI link; MPI executors offer `mpi` (see executors::mpi::MpiRoot)")]
    NoMpiLink {
        /// The context of the executor it ran on.
        executor: String,
    },
    /// The MPI executor stopped serving: rank 0's main program had returned.
    #[error("the MPI executor has shut down")]
    ShutDown,
    /// The work could not be encoded for the broadcast.
    #[error("the MPI activity cannot be encoded: {0}")]
    Encode(String),
    /// The encoded work is more than one MPI message can carry.
    #[error("the encoded MPI activity is {bytes} bytes; at most {max} can be broadcast")]
    TooLarge {
        /// Its encoded size.
        bytes: usize,
        /// The limit, `i32::MAX` (an MPI count).
        max: usize,
    },
    /// Some ranks could not decode the work, so no rank ran it.
    #[error("MPI activity not run: {}", list(.0))]
    Decode(Vec<RankFailure>),
    /// Some ranks returned an error or panicked.
    #[error("MPI activity failed: {}", list(.0))]
    Failed(Vec<RankFailure>),
    /// The [`OnMpi`] was asked to run twice; its work was already spent.
    #[error("OnMpi has no work left: it already ran")]
    NoWork,
}

/// A request from rank 0's pool to rank 0's MPI thread.
enum Request {
    /// Broadcast and run this encoded [`MpiActivity`], answer on `reply`.
    Run {
        bytes: Vec<u8>,
        reply: mpsc::SyncSender<MpiOutcome>,
    },
    /// The main program returned: tell every rank to stop.
    Shutdown,
}

/// Rank 0's way into its MPI partition: the handle the MPI executor carries
/// in its [`Resources`](constellation::Resources), which [`OnMpi`] finds with
/// `cx.resource::<MpiLink>()`.
///
/// MPI calls may only come from rank 0's main thread, so the link holds a
/// channel to that thread rather than a communicator. Cloning it is cheap;
/// M-tasks from several clones run one after the other.
#[derive(Clone)]
pub struct MpiLink {
    requests: mpsc::Sender<Request>,
    ranks: usize,
}

impl MpiLink {
    /// How many ranks the partition has.
    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// Runs `work` on every rank and waits for rank 0's result. Blocks the
    /// calling thread for the whole M-task, and behind M-tasks already queued.
    pub fn run(&self, work: Box<dyn MpiActivity>) -> MpiOutcome {
        let bytes = Payload::new(work)
            .encode()
            .map_err(|error| MpiError::Encode(error.to_string()))?;
        let max = i32::MAX as usize;
        if bytes.len() > max {
            return Err(MpiError::TooLarge {
                bytes: bytes.len(),
                max,
            });
        }
        let (reply, answer) = mpsc::sync_channel(1);
        self.requests
            .send(Request::Run { bytes, reply })
            .map_err(|_| MpiError::ShutDown)?;
        // The MPI thread drops `reply` unanswered only when it stops serving.
        answer.recv().unwrap_or(Err(MpiError::ShutDown))
    }
}

impl fmt::Debug for MpiLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MpiLink")
            .field("ranks", &self.ranks)
            .finish()
    }
}

/// An activity that runs an [`MpiActivity`] on the MPI partition of the
/// executor that picks it up, and sends the [`MpiOutcome`] to `parent`.
///
/// Its context is `mpi` unless set otherwise, so only MPI executors take it;
/// ask for a size with [`with_context`](OnMpi::with_context) and a context
/// such as `mpi:ranks=4..=64`. Submitting it fails at once if no executor of
/// the pool can run it.
#[derive(Serialize, Deserialize)]
pub struct OnMpi {
    parent: ActivityId,
    context: ContextList,
    /// Taken when the activity runs: the work is encoded for the broadcast.
    work: Option<Box<dyn MpiActivity>>,
}

impl OnMpi {
    /// `work` for any MPI executor; the outcome goes to `parent`.
    pub fn new(parent: ActivityId, work: impl MpiActivity) -> Self {
        Self::boxed(parent, Box::new(work))
    }

    /// [`new`](Self::new) for work that is already boxed.
    pub fn boxed(parent: ActivityId, work: Box<dyn MpiActivity>) -> Self {
        OnMpi {
            parent,
            context: ContextList::single(Context::new(MPI_LABEL)),
            work: Some(work),
        }
    }

    /// This activity with another context, e.g. `mpi:ranks=8..=64` parsed
    /// with `str::parse`.
    pub fn with_context(mut self, context: ContextList) -> Self {
        self.context = context;
        self
    }
}

#[typetag::serde]
impl Activity for OnMpi {
    fn context(&self) -> ContextList {
        self.context.clone()
    }

    fn initialize(&mut self, cx: &mut ActivityCx<'_>) -> Step {
        let outcome = match (cx.resource::<MpiLink>(), self.work.take()) {
            (None, _) => Err(MpiError::NoMpiLink {
                executor: cx.executor_context().to_string(),
            }),
            (Some(_), None) => Err(MpiError::NoWork),
            (Some(link), Some(work)) => link.run(work),
        };
        cx.send(self.parent, outcome);
        Step::Finish
    }

    fn process(&mut self, _cx: &mut ActivityCx<'_>, _event: Event) -> Step {
        // Nothing sends to an OnMpi; it has already finished in `initialize`.
        Step::Finish
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mpi_activities_survive_encoding_under_their_tag() {
        let work: Box<dyn MpiActivity> = Box::new(MonteCarloPi {
            samples_per_rank: 1000,
            seed: 7,
        });
        let bytes = Payload::new(work).encode().unwrap();
        let back = Payload::from_encoded(bytes)
            .take::<Box<dyn MpiActivity>>()
            .unwrap();
        let again = Payload::new(back).encode().unwrap();
        let text = String::from_utf8_lossy(&again);
        assert!(text.contains("MonteCarloPi"), "{text}");
    }

    #[test]
    fn garbage_work_is_a_decode_error_not_a_panic() {
        let decoded = Payload::from_encoded(vec![0x92, 0xc1, 0x00]).take::<Box<dyn MpiActivity>>();
        assert!(matches!(decoded, Err(PayloadError::Decode { .. })));
    }

    #[test]
    fn values_round_trip_and_name_the_wrong_type() {
        let value = MpiValue::encode((3_u64, String::from("pi"))).unwrap();
        assert_eq!(
            value.decode::<(u64, String)>().unwrap(),
            (3, "pi".to_string())
        );
        assert!(value.decode::<f64>().is_err());
    }

    #[test]
    fn on_mpi_travels_as_an_activity() {
        let mut ids = constellation::IdIssuer::new(constellation::NodeId::random(), 0);
        let on = OnMpi::new(ids.issue(), DotProduct { n: 10 })
            .with_context("mpi:ranks=2..=8".parse().unwrap());
        let bytes = constellation::wire::encode_activity(&on).unwrap();
        let back = constellation::wire::decode_activity(&bytes).unwrap();
        assert_eq!(back.context().to_string(), "mpi:ranks=2..=8");
    }

    #[test]
    fn errors_name_every_failing_rank() {
        let error = MpiError::Failed(vec![
            RankFailure {
                rank: 1,
                panicked: false,
                message: "bad n".into(),
            },
            RankFailure {
                rank: 2,
                panicked: true,
                message: "boom".into(),
            },
        ]);
        assert_eq!(
            error.to_string(),
            "MPI activity failed: rank 1: bad n; rank 2 panicked: boom"
        );
    }
}
