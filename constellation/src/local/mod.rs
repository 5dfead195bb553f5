//! The local driver: executor threads inside one process.
//!
//! This is the embedded default. It needs no network: build a [`Pool`],
//! submit activities, wait for their results with a collector, and call
//! [`Pool::done`].
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
//!
//! # Threads and the scheduler
//! All executors share one [`Scheduler`] behind a mutex. An executor takes the
//! lock once per call: it hands back the activity it just ran, with the
//! children it submitted and the events it sent, and receives its next call
//! in the same critical section.
//!
//! Submissions from outside go to an inbox instead, so a main program that
//! submits in a loop does not fight the executors for the scheduler: busy
//! executors move the inbox into the scheduler when they next hold it, and
//! the submitter moves it itself only when some executor is idle.

mod park;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::activity::{Activity, ActivityCx, Outbox};
use crate::context::ExecutorContext;
use crate::core::{
    Action, Call, Counts, MatchTable, Origin, Outcome, Scheduler, Step, Submission, SubmitError,
    Ticket, Undeliverable, Work,
};
use crate::event::{Event, PayloadValue};
use crate::id::{ActivityId, IdIssuer, NodeId};
use crate::trace::{CallEnd, CallKind, TraceRecord};
use park::{CachePadded, Parker, Spin};

/// Configures and starts a [`Pool`].
#[derive(Debug, Clone, Default)]
pub struct PoolBuilder {
    executors: Vec<ExecutorContext>,
    trace: bool,
}

impl PoolBuilder {
    /// Adds `count` executors that run `anywhere` work.
    pub fn executors(self, count: usize) -> Self {
        self.executors_with(count, ExecutorContext::anywhere())
    }

    /// Adds `count` executors offering `context`.
    pub fn executors_with(mut self, count: usize, context: ExecutorContext) -> Self {
        self.executors.extend(std::iter::repeat_n(context, count));
        self
    }

    /// Adds one executor offering `context`.
    pub fn executor(self, context: ExecutorContext) -> Self {
        self.executors_with(1, context)
    }

    /// Records a [`TraceRecord`] for every activity call; they come back in
    /// [`RunSummary::trace`].
    pub fn trace(mut self, enabled: bool) -> Self {
        self.trace = enabled;
        self
    }

    /// Starts the executor threads.
    pub fn start(self) -> Result<Pool, PoolError> {
        if self.executors.is_empty() {
            return Err(PoolError::NoExecutors);
        }
        if self.executors.len() >= usize::from(u16::MAX) {
            return Err(PoolError::TooManyExecutors(self.executors.len()));
        }
        let node = NodeId::random();
        let core = Scheduler::new(node, self.executors.clone());
        let matcher = core.match_table();
        let shared = Arc::new(Shared {
            node,
            started: Instant::now(),
            core: CachePadded(Mutex::new(core)),
            matcher,
            parkers: OnceLock::new(),
            inbox: CachePadded(Mutex::new(Vec::new())),
            inbox_pending: CachePadded(AtomicBool::new(false)),
            idle_executors: CachePadded(AtomicUsize::new(0)),
            outside_ids: CachePadded(AtomicU64::new(0)),
            quiescence: Mutex::new(()),
            quiescent: Condvar::new(),
            shutdown: AtomicBool::new(false),
            undeliverable: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            trace: self.trace,
        });
        let mut threads = Vec::with_capacity(self.executors.len());
        for (index, context) in self.executors.into_iter().enumerate() {
            let shared = shared.clone();
            let thread = std::thread::Builder::new()
                .name(format!("executor-{index}"))
                .spawn(move || executor_main(shared, index, context))
                .map_err(PoolError::Spawn)?;
            threads.push(thread);
        }
        let parkers = threads
            .iter()
            .map(|t| Handoff {
                parker: CachePadded(Parker::new(t.thread().clone())),
                mailbox: CachePadded(Mutex::new(None)),
            })
            .collect();
        if shared.parkers.set(parkers).is_err() {
            unreachable!("parkers are set once, here");
        }
        Ok(Pool {
            address: shared.issue_outside_id(),
            shared,
            threads,
        })
    }
}

/// Why a pool could not start.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// A pool needs at least one executor.
    #[error("a pool needs at least one executor")]
    NoExecutors,
    /// More executors than one node can address.
    #[error("{0} executors is more than one node supports (65534)")]
    TooManyExecutors(usize),
    /// The operating system refused a thread.
    #[error("could not start an executor thread: {0}")]
    Spawn(std::io::Error),
}

/// Why [`Pool::done`] could not finish cleanly.
#[derive(Debug, thiserror::Error)]
pub enum DoneError {
    /// Work remains that can never run: activities wait for events nobody
    /// will send. The pool was shut down anyway.
    #[error("{live} activities were still suspended, waiting for events that no running activity can send (e.g. {examples:?})")]
    Stalled {
        /// How many activities were left.
        live: usize,
        /// Some of their ids.
        examples: Vec<ActivityId>,
        /// What the run did before it stalled.
        summary: Box<RunSummary>,
    },
}

/// What a finished run did.
#[derive(Debug, Clone, Default)]
pub struct RunSummary {
    /// The scheduler's final counts.
    pub counts: Counts,
    /// Activity calls that panicked; their activities were dropped.
    pub failed_calls: u64,
    /// Wall-clock time from pool start to the end of `done`.
    pub elapsed: Duration,
    /// One record per call, if tracing was on; in per-executor order.
    pub trace: Vec<TraceRecord>,
}

/// How work reaches an idle executor thread: the core picks the call, the
/// driver leaves it in the mailbox and wakes the thread.
struct Handoff {
    parker: CachePadded<Parker>,
    mailbox: CachePadded<Mutex<Option<Work<Box<dyn Activity>>>>>,
}

struct Shared {
    node: NodeId,
    started: Instant,
    core: CachePadded<Mutex<Scheduler<Box<dyn Activity>>>>,
    matcher: Arc<MatchTable>,
    /// Set once by `start`, after the threads exist.
    parkers: OnceLock<Vec<Handoff>>,
    /// Submissions from outside that the scheduler has not seen yet.
    inbox: CachePadded<Mutex<Vec<Submission<Box<dyn Activity>>>>>,
    inbox_pending: CachePadded<AtomicBool>,
    /// Executors that found no work and wait (or are about to).
    idle_executors: CachePadded<AtomicUsize>,
    /// Sequence numbers of ids issued from outside (issuer slot 0).
    outside_ids: CachePadded<AtomicU64>,
    quiescence: Mutex<()>,
    quiescent: Condvar,
    shutdown: AtomicBool,
    undeliverable: AtomicU64,
    failed: AtomicU64,
    trace: bool,
}

impl Shared {
    fn parkers(&self) -> &[Handoff] {
        // Executor threads may ask before `start` has stored the parkers.
        loop {
            if let Some(parkers) = self.parkers.get() {
                return parkers;
            }
            std::thread::yield_now();
        }
    }

    fn issue_outside_id(&self) -> ActivityId {
        // Slot 0 of the id space: sequence numbers below 2^48.
        ActivityId::new(self.node, self.outside_ids.fetch_add(1, Ordering::Relaxed))
    }

    /// Moves outside submissions into the scheduler. Called with the core held.
    fn drain_inbox(&self, core: &mut Scheduler<Box<dyn Activity>>) {
        // Load first: a swap would write the shared line on every call.
        if !self.inbox_pending.load(Ordering::SeqCst) || !self.inbox_pending.swap(false, Ordering::SeqCst) {
            return;
        }
        let batch = std::mem::take(&mut *self.inbox.lock());
        for submission in batch {
            let id = submission.id;
            // Matchability was checked at `Pool::submit`; ids are fresh.
            if let Err(error) = core.submit(Origin::Outside, submission) {
                tracing::error!(%id, %error, "submission refused by the scheduler");
            }
        }
    }

    /// Carries out what the scheduler asked for. Called without the core lock.
    fn perform(&self, actions: &mut Vec<Action<Box<dyn Activity>>>) {
        for action in actions.drain(..) {
            match action {
                Action::Run { executor, work } => {
                    let handoff = &self.parkers()[executor];
                    let previous = handoff.mailbox.lock().replace(work);
                    debug_assert!(previous.is_none(), "an idle executor holds no work");
                    handoff.parker.notify();
                }
                Action::Undeliverable(undeliverable) => {
                    self.undeliverable.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%undeliverable, "event lost: its target is gone");
                }
                Action::Quiescent { .. } => {
                    let _guard = self.quiescence.lock();
                    self.quiescent.notify_all();
                }
            }
        }
    }

    fn now_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }
}

/// A pool of executor threads in this process.
pub struct Pool {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<Vec<TraceRecord>>>,
    address: ActivityId,
}

impl Pool {
    /// A builder; add executors, then [`start`](PoolBuilder::start).
    pub fn builder() -> PoolBuilder {
        PoolBuilder::default()
    }

    /// This node's id.
    pub fn node(&self) -> NodeId {
        self.shared.node
    }

    /// The source id of events the main program sends with [`send`](Self::send).
    pub fn address(&self) -> ActivityId {
        self.address
    }

    /// Submits an activity from outside the pool. Fails with
    /// [`SubmitError::NoSuitableExecutor`] if no executor can ever run it.
    pub fn submit<A: Activity>(&self, activity: A) -> Result<ActivityId, SubmitError> {
        self.submit_boxed(Box::new(activity))
    }

    /// [`submit`](Self::submit) for an activity that is already boxed.
    pub fn submit_boxed(&self, activity: Box<dyn Activity>) -> Result<ActivityId, SubmitError> {
        let shared = &self.shared;
        let id = shared.issue_outside_id();
        let contexts = activity.context();
        shared.matcher.check(id, &contexts, None)?;
        let submission = Submission {
            id,
            contexts,
            stealable: activity.may_be_stolen(),
            body: activity,
        };
        shared.inbox.lock().push(submission);
        shared.inbox_pending.store(true, Ordering::SeqCst);
        // Spinning executors watch `inbox_pending`; parked ones announce
        // themselves first and look again (see `executor_main`), so either
        // an executor sees this submission or we see it idle and hand it over.
        if shared.idle_executors.load(Ordering::SeqCst) > 0 {
            let mut actions = Vec::new();
            {
                let mut core = shared.core.lock();
                shared.drain_inbox(&mut core);
                actions.extend(std::iter::from_fn(|| core.poll_action()));
            }
            shared.perform(&mut actions);
        }
        Ok(id)
    }

    /// Sends `value` to activity `target` from the main program. Fails,
    /// returning the event, if no such activity exists.
    pub fn send<T: PayloadValue>(
        &self,
        target: ActivityId,
        value: T,
    ) -> Result<(), Box<Undeliverable>> {
        let mut actions = Vec::new();
        let delivered = {
            let mut core = self.shared.core.lock();
            // The target may still be in the inbox.
            self.shared.drain_inbox(&mut core);
            let delivered = core.deliver(Event::new(self.address, target, value));
            actions.extend(std::iter::from_fn(|| core.poll_action()));
            delivered
        };
        self.shared.perform(&mut actions);
        delivered
    }

    /// The scheduler's counts right now.
    pub fn counts(&self) -> Counts {
        let mut core = self.shared.core.lock();
        self.shared.drain_inbox(&mut core);
        core.counts()
    }

    /// Waits until all work is finished, then stops the executors.
    ///
    /// If activities remain that wait for events no running activity can
    /// send, waiting longer cannot help: the pool stops and reports them.
    pub fn done(mut self) -> Result<RunSummary, DoneError> {
        {
            let mut guard = self.shared.quiescence.lock();
            loop {
                let mut actions = Vec::new();
                let quiescent = {
                    let mut core = self.shared.core.lock();
                    self.shared.drain_inbox(&mut core);
                    actions.extend(std::iter::from_fn(|| core.poll_action()));
                    core.is_quiescent()
                };
                if quiescent {
                    break;
                }
                // A quiescence notice would take the lock this loop holds,
                // and the loop checks quiescence itself.
                actions.retain(|action| !matches!(action, Action::Quiescent { .. }));
                self.shared.perform(&mut actions);
                self.shared.quiescent.wait(&mut guard);
            }
        }
        let (counts, examples) = {
            let core = self.shared.core.lock();
            (core.counts(), core.suspended_ids(5))
        };
        let trace = self.stop();
        let summary = RunSummary {
            counts,
            failed_calls: self.shared.failed.load(Ordering::Relaxed),
            elapsed: self.shared.started.elapsed(),
            trace,
        };
        if counts.live > 0 {
            return Err(DoneError::Stalled {
                live: counts.live,
                examples,
                summary: Box::new(summary),
            });
        }
        Ok(summary)
    }

    fn stop(&mut self) -> Vec<TraceRecord> {
        self.shared.shutdown.store(true, Ordering::Release);
        for handoff in self.shared.parkers() {
            handoff.parker.notify();
        }
        let mut trace = Vec::new();
        for thread in self.threads.drain(..) {
            match thread.join() {
                Ok(records) => trace.extend(records),
                Err(_) => tracing::error!("an executor thread panicked outside activity code"),
            }
        }
        trace
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.stop();
    }
}

fn executor_main(shared: Arc<Shared>, index: usize, context: ExecutorContext) -> Vec<TraceRecord> {
    let mut ids = IdIssuer::new(shared.node, (index + 1) as u16);
    let mut outbox = Outbox::default();
    let mut actions = Vec::new();
    let mut finished: Option<(Ticket, Outcome<Box<dyn Activity>>)> = None;
    let mut trace = Vec::new();
    loop {
        let work = {
            let mut core = shared.core.lock();
            shared.drain_inbox(&mut core);
            for submission in outbox.submitted.drain(..) {
                let id = submission.id;
                // `ActivityCx::submit` already refused unmatchable work, so
                // this only fails on an id collision, which is a bug.
                if let Err(error) = core.submit(Origin::Executor(index), submission) {
                    tracing::error!(%id, %error, "submission refused by the scheduler");
                }
            }
            for event in outbox.sent.drain(..) {
                core.deliver_or_report(event);
            }
            if let Some((ticket, outcome)) = finished.take() {
                core.complete(ticket, outcome);
            }
            let work = core.next_work(index);
            actions.extend(std::iter::from_fn(|| core.poll_action()));
            work
        };
        if !actions.is_empty() {
            shared.perform(&mut actions);
        }
        let work = match work {
            Some(work) => work,
            None => {
                if shared.shutdown.load(Ordering::Acquire) {
                    return trace;
                }
                let handoff = &shared.parkers()[index];
                let inbox_pending = || shared.inbox_pending.load(Ordering::Relaxed);
                match handoff.parker.spin(inbox_pending) {
                    Spin::Notified => {}
                    Spin::OtherWork => continue,
                    Spin::TimedOut => {
                        // Announce, then look at the inbox once more: pairs
                        // with `Pool::submit_boxed`, so either this thread
                        // sees the submission or the submitter sees it idle.
                        shared.idle_executors.fetch_add(1, Ordering::SeqCst);
                        if shared.inbox_pending.load(Ordering::SeqCst) {
                            shared.idle_executors.fetch_sub(1, Ordering::SeqCst);
                            continue;
                        }
                        handoff.parker.park();
                        shared.idle_executors.fetch_sub(1, Ordering::SeqCst);
                    }
                }
                let handed = handoff.mailbox.lock().take();
                match handed {
                    Some(work) => work,
                    None if shared.shutdown.load(Ordering::Acquire) => return trace,
                    None => continue,
                }
            }
        };
        finished = Some(run_call(
            &shared,
            index,
            &context,
            &mut ids,
            &mut outbox,
            work,
            &mut trace,
        ));
    }
}

fn run_call(
    shared: &Shared,
    index: usize,
    context: &ExecutorContext,
    ids: &mut IdIssuer,
    outbox: &mut Outbox,
    work: Work<Box<dyn Activity>>,
    trace: &mut Vec<TraceRecord>,
) -> (Ticket, Outcome<Box<dyn Activity>>) {
    let Work {
        ticket,
        mut body,
        call,
        contexts,
    } = work;
    let start_ns = if shared.trace { shared.now_ns() } else { 0 };
    let kind = match call {
        Call::Initialize => CallKind::Initialize,
        Call::Process(_) => CallKind::Process,
    };
    let mut cx = ActivityCx::new(ticket.id(), index, context, ids, &shared.matcher, outbox);
    let result = catch_unwind(AssertUnwindSafe(|| {
        let step = match call {
            Call::Initialize => body.initialize(&mut cx),
            Call::Process(event) => body.process(&mut cx, event),
        };
        if step == Step::Finish {
            body.cleanup(&mut cx);
        }
        step
    }));
    let (outcome, end) = match result {
        Ok(Step::Suspend) => (Outcome::Suspend(body), CallEnd::Suspended),
        Ok(Step::Finish) => (Outcome::Finish, CallEnd::Finished),
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-text panic payload".to_string());
            shared.failed.fetch_add(1, Ordering::Relaxed);
            tracing::error!(activity = %ticket.id(), executor = index, %message, "activity panicked; it is dropped");
            (Outcome::Finish, CallEnd::Failed)
        }
    };
    if shared.trace {
        trace.push(TraceRecord {
            activity: ticket.id(),
            executor: index,
            contexts,
            call: kind,
            end,
            start_ns,
            end_ns: shared.now_ns(),
        });
    }
    (ticket, outcome)
}
