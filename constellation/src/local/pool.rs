//! The user's side of a pool: submitting, sending, relabelling, and
//! waiting for the end of the run.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::builder::PoolBuilder;
use super::pool_state::{outside_slot, Effects, PoolState};
use super::uplink::Arrival;
use super::Boxed;
use crate::activity::Activity;
use crate::context::ExecutorContext;
use crate::core::{
    Counts, MatchTable, Origin, RelabelError, Submission, SubmitError, Undeliverable,
    UndeliverableReason,
};
use crate::event::{Event, PayloadValue};
use crate::id::{ActivityId, NodeId};
use crate::trace::TraceRecord;

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
    /// The schedulers' final counts, summed over executors.
    pub counts: Counts,
    /// Activity calls that panicked; their activities were dropped.
    pub failed_calls: u64,
    /// Wall-clock time from pool start to the end of `done`.
    pub elapsed: Duration,
    /// One record per call, if tracing was on; in per-executor order.
    pub trace: Vec<TraceRecord>,
}

/// A pool of executor threads in this process.
pub struct Pool {
    pub(super) shared: Arc<PoolState>,
    pub(super) threads: Vec<JoinHandle<Vec<TraceRecord>>>,
    pub(super) address: ActivityId,
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
    pub fn submit_boxed(&self, activity: Boxed) -> Result<ActivityId, SubmitError> {
        let shared = &self.shared;
        let contexts = activity.context();
        let runs_here = shared.next_in_turn(&contexts);
        let target = match runs_here {
            Some(executor) => executor,
            None => {
                // A networked pool keeps it for executors on other nodes.
                (shared.admission.load()).check(self.address, &contexts, None)?;
                shared.holding_shard()
            }
        };
        let shard = &shared.shards[target];
        let counter = shard.outside_ids.fetch_add(1, Ordering::Relaxed);
        let id = ActivityId::in_slot(shared.node, outside_slot(target), counter);
        let submission = Submission {
            id,
            contexts: contexts.clone(),
            stealable: activity.may_be_stolen(),
            body: activity,
        };
        if runs_here.is_none() {
            // No executor here will drain an inbox for it: queue it now,
            // where thieves from other nodes find it.
            let mut effects = Effects::default();
            let mut credit = 0;
            let queued = shared.session(target, &mut credit, &mut effects, |core| {
                core.submit(Origin::Outside, submission)
            });
            shared.perform(&mut effects, &mut credit);
            shared.settle(&mut credit);
            queued?;
            return Ok(id);
        }
        // Counted before anyone can see it, let alone finish it.
        shared.add_outstanding(1);
        shard.inbox.lock().push(submission);
        shard.inbox_pending.store(true, Ordering::SeqCst);
        // Spinning executors watch inboxes; parked ones must be woken. Pairs
        // with the announce-then-look-again in `wait_for_work`.
        if shared.claim_idle(target) {
            shared.handoffs()[target].parker.notify();
        } else {
            shared.wake_idle_for(&contexts, target);
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
        let shared = &self.shared;
        let event = Event::new(self.address, target, value);
        match self.deliver_from_network(event) {
            Arrival::Delivered => Ok(()),
            Arrival::Gone(undeliverable) => Err(undeliverable),
            // Moved off the node (only a networked pool has such pointers),
            // or living on another node: the uplink sends it on.
            Arrival::Away(event) => {
                shared.send_off_node(event);
                Ok(())
            }
            Arrival::Unknown(event)
                if shared.uplink.is_some() && target.origin() != shared.node =>
            {
                shared.send_off_node(event);
                Ok(())
            }
            Arrival::Unknown(event) => {
                shared.undeliverable.fetch_add(1, Ordering::Relaxed);
                Err(Box::new(Undeliverable {
                    event,
                    reason: UndeliverableReason::NoSuchActivity,
                }))
            }
        }
    }

    /// What executor `index` offers now; `None` past the last executor.
    pub fn executor_context(&self, index: usize) -> Option<ExecutorContext> {
        self.shared.contexts.load().get(index).cloned()
    }

    /// What all executors offer now, in index order.
    pub fn executor_contexts(&self) -> Arc<Vec<ExecutorContext>> {
        self.shared.contexts.load_full()
    }

    /// Which work this pool's own executors can run, as they are labelled now.
    pub fn matcher(&self) -> Arc<MatchTable> {
        self.shared.matcher.load_full()
    }

    /// Gives executor `index` a new context while the pool runs, without
    /// stopping anything. The call it is making goes on; from its next
    /// call on it takes only work that matches `context`. Queued work it
    /// can no longer run stays for executors that can, here or (on a node
    /// of a networked pool) on other nodes.
    ///
    /// On a pool without a network, work that no executor matches any
    /// more waits until one is relabelled back, and [`done`](Self::done)
    /// reports it as stalled.
    pub fn relabel(&self, index: usize, context: ExecutorContext) -> Result<(), RelabelError> {
        let shared = &self.shared;
        let _one_at_a_time = shared.relabelling.lock();
        let mut contexts = Vec::clone(&shared.contexts.load());
        if index >= contexts.len() {
            return Err(RelabelError::NoSuchExecutor {
                executor: index,
                executors: contexts.len(),
            });
        }
        (shared.shards[index].core.lock()).relabel(0, context.clone())?;
        contexts[index] = context;
        let matcher = Arc::new(MatchTable::new(&contexts));
        let admission = match shared.uplink {
            Some(_) => Arc::new(MatchTable::open(&contexts)),
            None => matcher.clone(),
        };
        for shard in &shared.shards {
            shard.core.lock().set_pool(admission.clone());
        }
        shared.matcher.store(matcher);
        shared.admission.store(admission);
        shared.contexts.store(Arc::new(contexts));
        shared.relabels.fetch_add(1, Ordering::SeqCst);
        // Asleep, it would go on waiting for work of its old labels.
        shared.claim_idle(index);
        shared.handoffs()[index].parker.notify();
        Ok(())
    }

    /// How many never-started activities on this node wait for each label,
    /// by label name. An activity that names several labels counts once
    /// under each.
    pub fn queued_by_label(&self) -> Vec<(String, usize)> {
        let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
        for shard in &self.shared.shards {
            for (label, count) in shard.core.lock().queued_by_label() {
                *counts.entry(label.to_string()).or_default() += count;
            }
        }
        counts.into_iter().collect()
    }

    /// Which executors are inside an activity call right now, by index.
    pub fn busy_executors(&self) -> Vec<bool> {
        (self.shared.shards.iter())
            .map(|shard| shard.core.lock().counts().running > 0)
            .collect()
    }

    /// Never-started activities waiting on this node.
    pub fn queued(&self) -> usize {
        (self.shared.shards.iter())
            .map(|shard| shard.queued.load(Ordering::Relaxed))
            .sum()
    }

    /// The schedulers' counts right now, summed over executors.
    pub fn counts(&self) -> Counts {
        self.shared.counts()
    }

    /// Work this pool counts as unfinished: queued, running and ready
    /// activities, activities exported and not yet finished elsewhere, and
    /// events in transit inside the node. [`done`](Self::done) waits for zero.
    pub fn outstanding(&self) -> i64 {
        self.shared.outstanding.load(Ordering::SeqCst)
    }

    /// Waits until nothing is queued, running or ready, and no event is in
    /// transit: the moment [`done`](Self::done) would stop the executors.
    pub fn wait_quiescent(&self) {
        let mut guard = self.shared.quiescence.lock();
        while self.shared.outstanding.load(Ordering::SeqCst) != 0 {
            self.shared.quiescent.wait(&mut guard);
        }
    }

    /// Waits until all work is finished, then stops the executors.
    ///
    /// If activities remain that wait for events no running activity can
    /// send, waiting longer cannot help: the pool stops and reports them.
    pub fn done(mut self) -> Result<RunSummary, DoneError> {
        self.wait_quiescent();
        let counts = self.shared.counts();
        let examples: Vec<ActivityId> = self
            .shared
            .shards
            .iter()
            .flat_map(|shard| shard.core.lock().suspended_ids(5))
            .take(5)
            .collect();
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
        self.shared.shutdown.store(true, Ordering::SeqCst);
        for handoff in self.shared.handoffs() {
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
