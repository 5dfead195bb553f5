//! The [`Activity`] trait and the [`ActivityCx`] it is called with.

use crate::context::{ContextList, ExecutorContext};
use crate::core::{MatchTable, Submission, SubmitError};
use crate::event::{Event, PayloadValue};
use crate::id::{ActivityId, IdIssuer};
use crate::resources::Resources;

/// A unit of work that holds its own state.
///
/// The runtime calls [`initialize`](Activity::initialize) once, then
/// [`process`](Activity::process) for every event the activity receives, as
/// long as the calls return [`Step::Suspend`]; after [`Step::Finish`] it calls
/// [`cleanup`](Activity::cleanup) and drops the activity. It never runs two
/// calls of one activity at the same time.
///
/// Activities travel between nodes, so they are serde types registered by
/// name: put `#[typetag::serde]` on each `impl Activity for …`. A node then
/// decodes an activity type it has never seen in this run. State that must
/// not travel (handles, buffers on a device) is `#[serde(skip)]`, and such an
/// activity returns `false` from [`may_be_stolen`](Activity::may_be_stolen).
///
/// Activity code is ordinary blocking Rust on an executor thread: compute,
/// run a child process, wait for a device.
#[typetag::serde]
pub trait Activity: Send + 'static {
    /// Where the activity may run. The default is `anywhere`.
    fn context(&self) -> ContextList {
        ContextList::anywhere()
    }

    /// Whether the activity may move to another executor or node before it
    /// starts. Constellation's `mayBeStolen`; `false` keeps it where it was
    /// submitted (e.g. it owns a GPU buffer).
    fn may_be_stolen(&self) -> bool {
        true
    }

    /// Whether the activity may be started again from the beginning on
    /// another node if the node running it dies, so that execution is
    /// at-least-once. `false` means the work must not be repeated (it has
    /// side effects outside its outputs); such an activity is reported as
    /// failed instead. Only the network driver can lose a node; the local
    /// driver never asks.
    fn restartable(&self) -> bool {
        true
    }

    /// The first call. Submit children, send events, or do the work.
    fn initialize(&mut self, cx: &mut ActivityCx<'_>) -> Step;

    /// Called once per event while the activity is suspended.
    fn process(&mut self, cx: &mut ActivityCx<'_>, event: Event) -> Step;

    /// Called once after the activity finishes.
    fn cleanup(&mut self, _cx: &mut ActivityCx<'_>) {}
}

/// What an activity asks for when a call returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Keep the activity and call `process` when an event arrives.
    Suspend,
    /// The activity is done; call `cleanup` and forget it.
    Finish,
}

/// The text of a caught panic's payload, for reports: the message of a
/// `panic!` with one, else a placeholder.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-text panic payload".to_string())
}

/// Submissions and events an activity produced during one call. The driver
/// hands them to the scheduler when the call returns, in one step.
#[derive(Default)]
pub struct Outbox {
    /// Activities submitted, in order.
    pub submitted: Vec<Submission<Box<dyn Activity>>>,
    /// Events sent, in order.
    pub sent: Vec<Event>,
}

/// What an activity can do and see during a call.
pub struct ActivityCx<'a> {
    id: ActivityId,
    executor: usize,
    executor_context: &'a ExecutorContext,
    resources: &'a Resources,
    ids: &'a mut IdIssuer,
    matcher: &'a MatchTable,
    outbox: &'a mut Outbox,
}

impl<'a> ActivityCx<'a> {
    /// The context for one call of activity `id` on executor `executor`.
    /// Drivers build it; activities only receive it.
    pub fn new(
        id: ActivityId,
        executor: usize,
        executor_context: &'a ExecutorContext,
        resources: &'a Resources,
        ids: &'a mut IdIssuer,
        matcher: &'a MatchTable,
        outbox: &'a mut Outbox,
    ) -> Self {
        ActivityCx {
            id,
            executor,
            executor_context,
            resources,
            ids,
            matcher,
            outbox,
        }
    }

    /// The running activity's id; children use it to send results back.
    pub fn id(&self) -> ActivityId {
        self.id
    }

    /// The context of the executor running this call.
    pub fn executor_context(&self) -> &ExecutorContext {
        self.executor_context
    }

    /// What the executor running this call was given: environment for
    /// child processes, and typed handles.
    pub fn resources(&self) -> &Resources {
        self.resources
    }

    /// The executor's handle of type `T`, e.g. a GPU device; `None` if this
    /// executor has none.
    pub fn resource<T: std::any::Any + Send + Sync>(&self) -> Option<&T> {
        self.resources.handle()
    }

    /// The node running this call (not necessarily the activity's origin:
    /// it may have been stolen).
    pub fn node(&self) -> crate::id::NodeId {
        self.ids.node()
    }

    /// The index of the executor running this call within its node.
    pub fn executor_index(&self) -> usize {
        self.executor
    }

    /// Submits a new activity and returns its id at once. Fails if no
    /// executor can ever run it.
    pub fn submit<A: Activity>(&mut self, activity: A) -> Result<ActivityId, SubmitError> {
        self.submit_boxed(Box::new(activity))
    }

    /// [`submit`](Self::submit) for an activity that is already boxed.
    pub fn submit_boxed(&mut self, activity: Box<dyn Activity>) -> Result<ActivityId, SubmitError> {
        let id = self.ids.issue();
        let contexts = activity.context();
        let stealable = activity.may_be_stolen();
        let pinned_to = (!stealable).then_some(self.executor);
        self.matcher.check(id, &contexts, pinned_to)?;
        self.outbox.submitted.push(Submission {
            id,
            body: activity,
            contexts,
            stealable,
        });
        Ok(id)
    }

    /// Sends `value` to activity `target`. Delivery happens when this call
    /// returns; an event for an activity that no longer exists is reported
    /// (logged and counted), never silently dropped.
    pub fn send<T: PayloadValue>(&mut self, target: ActivityId, value: T) {
        self.outbox.sent.push(Event::new(self.id, target, value));
    }
}
