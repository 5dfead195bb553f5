//! An executor thread: it hands back the call it made and takes its next
//! in one session on its own shard, and when its shard has nothing it
//! steals, spins, and at last parks.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::park::Spin;
use super::pool_state::{own_slot, Effects, PoolState};
use super::Boxed;
use crate::activity::{panic_message, ActivityCx, Outbox, Step};
use crate::context::{ContextList, ExecutorContext};
use crate::core::{Call, Origin, Outcome, Ticket, Work};
use crate::id::IdIssuer;
use crate::resources::Resources;
use crate::trace::{CallEnd, CallKind, TraceRecord};

pub(super) fn executor_main(
    shared: Arc<PoolState>,
    index: usize,
    mut context: ExecutorContext,
    resources: Arc<Resources>,
) -> Vec<TraceRecord> {
    let mut relabels_seen = 0;
    let mut ids = IdIssuer::new(shared.node, own_slot(index));
    let mut outbox = Outbox::default();
    let mut effects = Effects::default();
    let mut away = Vec::new();
    let mut children: Vec<ContextList> = Vec::new();
    let mut finished: Option<FinishedCall> = None;
    let mut trace = Vec::new();
    loop {
        let relabels = shared.relabels.load(Ordering::Acquire);
        if relabels != relabels_seen {
            relabels_seen = relabels;
            if let Some(new) = shared.contexts.load().get(index) {
                context = new.clone();
            }
        }
        // Events for other shards are delivered after this shard's session,
        // so the unit of the call that just completed can pay for the
        // activity they ready (see `PoolState::session`).
        away.extend(
            outbox
                .sent
                .extract_if(.., |event| shared.home_of(event.target) != Some(index)),
        );
        // Their contexts, to wake idle executors for them once they are
        // published; the buffer is reused, so this costs no allocation.
        children.extend(outbox.submitted.iter().map(|s| s.contexts.clone()));
        // Work handed over while this executor was busy comes first.
        let handed = shared.handoffs()[index].mailbox.lock().pop_front();
        let mut credit = 0;
        let work = shared.session(index, &mut credit, &mut effects, |core| {
            for submission in outbox.submitted.drain(..) {
                let id = submission.id;
                // `ActivityCx::submit` already refused unmatchable work, so
                // this only fails on an id collision, which is a bug.
                if let Err(error) = core.submit(Origin::Executor(0), submission) {
                    tracing::error!(%id, %error, "submission refused by the scheduler");
                }
            }
            for event in outbox.sent.drain(..) {
                core.deliver_or_report(event);
            }
            if let Some((ticket, outcome, record)) = finished.take() {
                // The activity may be gone after `complete`: read its labels first.
                if let Some(mut record) = record {
                    if let Some(contexts) = core.contexts_of(&ticket) {
                        record.contexts = contexts.clone();
                    }
                    trace.push(record);
                }
                core.complete(ticket, outcome);
            }
            if handed.is_some() {
                return handed;
            }
            core.next_work(0)
        });
        for event in away.drain(..) {
            shared.route(event, &mut effects, &mut credit);
        }
        shared.perform(&mut effects, &mut credit);
        shared.settle(&mut credit);
        // Only now, with the children visible to thieves: an executor that
        // announced itself idle before this point is woken here, and one that
        // announces later finds them when it looks again (`wait_for_work`).
        // Checking for idle executors before the session lost children to an
        // executor that parked in between.
        for contexts in children.drain(..) {
            shared.wake_idle_for(&contexts, index);
        }
        let work = match work {
            Some(work) => work,
            None => match wait_for_work(&shared, index, &context, relabels_seen, &mut effects) {
                Found::Work(work) => work,
                Found::OwnInbox | Found::Relabelled => continue,
                Found::Shutdown => return trace,
            },
        };
        finished = Some(run_call(
            &shared,
            index,
            &context,
            &resources,
            &mut ids,
            &mut outbox,
            work,
        ));
    }
}

/// A call that returned, with its trace record (labels still to be filled
/// in), to hand back to the scheduler.
type FinishedCall = (Ticket, Outcome<Boxed>, Option<TraceRecord>);

/// What an idle executor found.
enum Found {
    /// A call to make.
    Work(Work<Boxed>),
    /// Outside submissions arrived in its own shard's inbox.
    OwnInbox,
    /// Its context changed: it must look for work with the new one.
    Relabelled,
    /// The pool is shutting down.
    Shutdown,
}

/// What an executor does when its own shard has nothing: take work handed
/// to it, steal, spin a little, and at last announce itself idle and park.
fn wait_for_work(
    shared: &PoolState,
    index: usize,
    context: &ExecutorContext,
    relabels_seen: u64,
    effects: &mut Effects,
) -> Found {
    let handoff = &shared.handoffs()[index];
    let own = &shared.shards[index];
    let mut announced = false;
    let found = loop {
        if let Some(work) = handoff.mailbox.lock().pop_front() {
            break Found::Work(work);
        }
        if own.inbox_pending.load(Ordering::SeqCst) {
            break Found::OwnInbox;
        }
        if shared.relabels.load(Ordering::Acquire) != relabels_seen {
            break Found::Relabelled;
        }
        let mut credit = 0;
        let stolen = shared.steal_for(index, context, &mut credit, effects);
        shared.perform(effects, &mut credit);
        shared.settle(&mut credit);
        if let Some(work) = stolen {
            break Found::Work(work);
        }
        if shared.shutdown.load(Ordering::SeqCst) {
            break Found::Shutdown;
        }
        if announced {
            handoff.parker.park();
            // A waker that claimed this executor took it off the idle list.
            announced = handoff.idle.load(Ordering::SeqCst);
            continue;
        }
        // Queued work elsewhere, summed: it grows when a shard gets work
        // this executor has not tried to steal yet.
        let queued_elsewhere = || -> usize {
            (shared.shards.iter().enumerate())
                .filter(|&(victim, _)| victim != index)
                .map(|(_, shard)| shard.queued.load(Ordering::Relaxed))
                .sum()
        };
        let seen = queued_elsewhere();
        let news = || {
            own.inbox_pending.load(Ordering::Relaxed)
                || queued_elsewhere() > seen
                || (shared.shards.iter().enumerate()).any(|(victim, shard)| {
                    victim != index && shard.inbox_pending.load(Ordering::Relaxed)
                })
        };
        // On a node of a networked pool, work comes from the driver thread,
        // which needs the core a spinning executor would hold: park at once.
        let networked = shared.uplink.is_some();
        if networked || handoff.parker.spin(news) == Spin::TimedOut {
            // Announce, then look once more before parking: pairs with
            // `Pool::submit_boxed` and `wake_idle_for`, so either this thread
            // sees new work or whoever made it sees this one idle.
            handoff.idle.store(true, Ordering::SeqCst);
            shared.idle_count.fetch_add(1, Ordering::SeqCst);
            announced = true;
            if let Some(uplink) = &shared.uplink {
                uplink.idle();
            }
        }
    };
    if announced {
        shared.claim_idle(index);
    }
    found
}

fn run_call(
    shared: &PoolState,
    index: usize,
    context: &ExecutorContext,
    resources: &Resources,
    ids: &mut IdIssuer,
    outbox: &mut Outbox,
    work: Work<Boxed>,
) -> FinishedCall {
    let Work {
        ticket,
        mut body,
        call,
    } = work;
    let timed = shared.trace || shared.uplink.is_some();
    let start_ns = if timed { shared.now_ns() } else { 0 };
    let kind = match call {
        Call::Initialize => CallKind::Initialize,
        Call::Process(_) => CallKind::Process,
    };
    let admission = shared.admission.load();
    let mut cx = ActivityCx::new(
        ticket.id(),
        index,
        context,
        resources,
        ids,
        &admission,
        outbox,
    );
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
            let message = panic_message(&*panic);
            shared.failed.fetch_add(1, Ordering::Relaxed);
            tracing::error!(activity = %ticket.id(), executor = index, %message, "activity panicked; it is dropped");
            (Outcome::Finish, CallEnd::Failed)
        }
    };
    let end_ns = if timed { shared.now_ns() } else { 0 };
    if shared.uplink.is_some() {
        shared
            .longest_call_ns
            .fetch_max(end_ns - start_ns, Ordering::Relaxed);
    }
    let record = shared.trace.then(|| TraceRecord {
        activity: ticket.id(),
        executor: index,
        // Filled in from the scheduler when the call is handed back.
        contexts: ContextList::anywhere(),
        call: kind,
        end,
        start_ns,
        end_ns,
    });
    (ticket, outcome, record)
}
