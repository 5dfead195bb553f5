//! [`SimHost`]: a simulated node's executors as the node protocol sees
//! them, over the node's one scheduler core.
//!
//! The protocol decides what leaves the node, what comes in and where
//! events go; this host only carries it out on the core, as the local pool
//! does for the network driver. Calls the core hands out while the
//! protocol holds the host are kept in [`SimHost::runs`]: the engine
//! starts them once the protocol's input is done, because starting a call
//! needs the engine (virtual time, input transfers).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::context::{ContextList, ExecutorContext};
use crate::core::{
    Action, DeliveryError, MatchTable, Origin, Place, Scheduler, Stolen, Submission, Work,
};
use crate::event::Event;
use crate::id::{ActivityId, NodeId};
use crate::protocol::{Delivery, Export, Host, Routed, Travelling};

/// Where the core's forwarding pointer says an activity went when it left
/// the node: the protocol, not the core, knows which node it went to.
const OFF_NODE: Place = Place(u64::MAX);

/// An activity as the simulated application holds it: the scheduler core
/// stores these, hands them to executors, and the host packs them.
#[derive(Debug)]
pub(super) struct Body {
    /// Its template.
    pub(super) spec: u32,
    /// 0 for the first attempt.
    pub(super) attempt: u32,
    /// Whom to tell when it finishes.
    pub(super) parent: Option<ActivityId>,
    /// The stage of children it waits for, once it has started.
    pub(super) children: Option<Box<Children>>,
}

/// The children of one stage, which an activity waits for. Children of a
/// stage get consecutive ids from their node's issuer, so a range names
/// them; the bit set ignores a child that reports twice.
#[derive(Debug)]
pub(super) struct Children {
    pub(super) stage: usize,
    pub(super) origin: NodeId,
    pub(super) first: u64,
    pub(super) count: u64,
    pub(super) remaining: u64,
    pub(super) seen: Vec<u64>,
}

impl Children {
    /// Notes that `child` finished; returns whether the stage is complete.
    /// Events from other activities (children of an earlier attempt of
    /// this one) change nothing.
    pub(super) fn report(&mut self, child: ActivityId) -> bool {
        if child.origin() != self.origin
            || child.seq() < self.first
            || child.seq() - self.first >= self.count
        {
            return false;
        }
        let bit = child.seq() - self.first;
        let (word, mask) = ((bit / 64) as usize, 1u64 << (bit % 64));
        if self.seen[word] & mask == 0 {
            self.seen[word] |= mask;
            self.remaining -= 1;
            return self.remaining == 0;
        }
        false
    }
}

/// A never-started activity packed for another node: what a thief rebuilds
/// it from, and what its exporter keeps to queue it again. The attempt
/// travels beside it ([`Travelling::attempt`]); the protocol keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Packed {
    /// Its template.
    pub(super) spec: u32,
    /// Whom to tell when it finishes.
    pub(super) parent: Option<ActivityId>,
    /// Sources of the events that reached it before it started: simulated
    /// events carry nothing else.
    pub(super) pending: Vec<ActivityId>,
}

/// A simulated event: the sim's activities only say "I finished", so an
/// event is its two ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SimEvent {
    /// The activity that sent it.
    pub(super) source: ActivityId,
    /// The activity it is for.
    pub(super) target: ActivityId,
}

impl Routed for SimEvent {
    fn source(&self) -> ActivityId {
        self.source
    }
    fn target(&self) -> ActivityId {
        self.target
    }
}

impl SimEvent {
    fn from_core(event: &Event) -> Self {
        SimEvent {
            source: event.source,
            target: event.target,
        }
    }

    fn to_core(self) -> Event {
        Event::new(self.source, self.target, ())
    }
}

/// One simulated node's executors, as [`Host`] for its protocol node.
pub(crate) struct SimHost {
    /// All the node's executors in one scheduler: work moves between them
    /// by the core's own executor-to-executor stealing.
    pub(super) core: Scheduler<Body>,
    /// What this node's executors offer: where work may run here.
    pub(super) local: MatchTable,
    /// What each executor offers, by index.
    contexts: Vec<ExecutorContext>,
    /// Executors that asked the core for work and got none.
    idle: Vec<bool>,
    /// Calls the core handed to idle executors, for the engine to start.
    pub(super) runs: VecDeque<(usize, Work<Body>)>,
    /// Events the core reported undeliverable (their activity finished
    /// with them still buffered).
    pub(super) undeliverable: u64,
}

impl SimHost {
    /// The executors of a node offering `contexts`; `pool` is what every
    /// executor of the pool offers, so work only others can run is
    /// admitted here and waits to be stolen.
    pub(super) fn new(
        node: NodeId,
        contexts: Vec<ExecutorContext>,
        pool: std::sync::Arc<MatchTable>,
    ) -> Self {
        SimHost {
            core: Scheduler::in_pool(node, contexts.clone(), pool),
            local: MatchTable::new(&contexts),
            idle: vec![false; contexts.len()],
            contexts,
            runs: VecDeque::new(),
            undeliverable: 0,
        }
    }

    /// A host with nothing in it, for a node that died: nothing of it is
    /// used again, so its memory goes.
    pub(super) fn emptied(node: NodeId) -> Self {
        SimHost {
            core: Scheduler::new(node, Vec::new()),
            local: MatchTable::new(&[]),
            contexts: Vec::new(),
            idle: Vec::new(),
            runs: VecDeque::new(),
            undeliverable: 0,
        }
    }

    /// Marks `executor` as waiting for work: the core had none for it.
    pub(super) fn set_idle(&mut self, executor: usize) {
        self.idle[executor] = true;
    }

    /// Takes what the core asked for into the host's own lists. Called
    /// after every change to the core, so an executor the core just gave
    /// work to no longer counts as idle when the protocol asks.
    pub(super) fn drain(&mut self) {
        while let Some(action) = self.core.poll_action() {
            match action {
                Action::Run { executor, work } => {
                    self.idle[executor] = false;
                    self.runs.push_back((executor, work));
                }
                // One core per node: its only forwarding pointers lead off
                // the node, and `deliver` reports those as `Away`.
                Action::Forward { .. } | Action::ForgetForwards { .. } => {}
                Action::Undeliverable(_) => self.undeliverable += 1,
                Action::Quiescent { .. } => {}
            }
        }
    }

    /// Takes the next call the core handed out, if any.
    pub(super) fn next_run(&mut self) -> Option<(usize, Work<Body>)> {
        self.runs.pop_front()
    }

    /// Puts an activity into the core as one that arrived from elsewhere
    /// (a thief's import, or an exporter taking it back), onto an executor
    /// that can run it, an idle one first. A node without executors (a
    /// pure master) keeps it in its shared queue, as it keeps the roots,
    /// until someone steals it. `Ok(false)` if it is here already.
    fn queue_arrival(
        &mut self,
        id: ActivityId,
        body: Body,
        contexts: ContextList,
        stealable: bool,
        pending: &[ActivityId],
    ) -> Result<bool, String> {
        let pending = pending.iter().map(|&source| Event::new(source, id, ()));
        let accepted = if self.contexts.is_empty() {
            let submission = Submission {
                id,
                body,
                contexts,
                stealable,
            };
            match self.core.submit(Origin::Outside, submission) {
                Ok(()) => {
                    // A pointer left when it was exported must not shadow
                    // it now that it is back.
                    self.core.forget_forward(id);
                    for event in pending {
                        // Queued here just now, so it takes the event.
                        let _ = self.core.deliver(event);
                    }
                    Ok(true)
                }
                Err(crate::core::SubmitError::DuplicateId(_)) => Ok(false),
                Err(error) => Err(error.to_string()),
            }
        } else {
            let executor = (self.local.executors_for(&contexts))
                .find(|&e| self.idle[e])
                .or_else(|| self.local.executors_for(&contexts).next())
                // None of this node's executors can run it (it was taken
                // for another context, or came back here): it waits in an
                // executor's queue for a thief that can.
                .unwrap_or(0);
            let stolen = Stolen {
                id,
                body,
                contexts,
                stealable,
                pending: pending.collect(),
                trail: Vec::new(),
            };
            // A duplicate means it is here already.
            Ok(self.core.accept(executor, stolen).is_ok())
        };
        self.drain();
        accepted
    }
}

impl Host for SimHost {
    type Body = Packed;
    type Event = SimEvent;

    fn executor_contexts(&self) -> Vec<ExecutorContext> {
        self.contexts.clone()
    }

    fn idle_contexts(&self) -> Vec<(ExecutorContext, usize)> {
        let mut contexts: Vec<(ExecutorContext, usize)> = Vec::new();
        for (executor, _) in self.idle.iter().enumerate().filter(|(_, &idle)| idle) {
            let context = &self.contexts[executor];
            match contexts.iter_mut().find(|(c, _)| c == context) {
                Some((_, count)) => *count += 1,
                None => contexts.push((context.clone(), 1)),
            }
        }
        contexts
    }

    fn queued(&self) -> usize {
        self.core.counts().queued
    }

    fn export(&mut self, thief: &ExecutorContext, max: usize) -> Vec<Export<Packed>> {
        let stolen = self.core.steal_off_node(thief, max, OFF_NODE);
        self.drain();
        (stolen.into_iter())
            .map(|stolen| Export {
                id: stolen.id,
                body: Packed {
                    spec: stolen.body.spec,
                    parent: stolen.body.parent,
                    pending: stolen.pending.iter().map(|event| event.source).collect(),
                },
                contexts: stolen.contexts,
                // The core's pointer is the only one, and `settle` drops it.
                trail: Vec::new(),
                // Simulated activities have no side effects to fear.
                restartable: true,
            })
            .collect()
    }

    fn import(&mut self, activity: Travelling<Packed>) -> Result<(), String> {
        let body = Body {
            spec: activity.body.spec,
            attempt: activity.attempt,
            parent: activity.body.parent,
            children: None,
        };
        match self.queue_arrival(
            activity.id,
            body,
            activity.contexts,
            true,
            &activity.body.pending,
        )? {
            true => Ok(()),
            false => Err(format!("activity {} is here already", activity.id)),
        }
    }

    fn reclaim(
        &mut self,
        export: &Export<Packed>,
        attempt: u32,
        stealable: bool,
    ) -> Result<(), String> {
        let body = Body {
            spec: export.body.spec,
            attempt,
            parent: export.body.parent,
            children: None,
        };
        // Already here (it came back another way): nothing to do.
        self.queue_arrival(
            export.id,
            body,
            export.contexts.clone(),
            stealable,
            &export.body.pending,
        )
        .map(|_| ())
    }

    fn settle(&mut self, id: ActivityId, _trail: &[crate::core::Place]) {
        self.core.forget_forward(id);
    }

    fn deliver(&mut self, event: SimEvent) -> Delivery<SimEvent> {
        let delivery = match self.core.deliver(event.to_core()) {
            Ok(()) => Delivery::Delivered,
            Err(DeliveryError::Moved { event, .. }) => Delivery::Away(SimEvent::from_core(&event)),
            // One core per node: an activity unknown to it may be on its
            // way here, have finished here, or live elsewhere; the protocol
            // tells these apart.
            Err(DeliveryError::Undeliverable(undeliverable)) => {
                Delivery::Unknown(SimEvent::from_core(&undeliverable.event))
            }
        };
        self.drain();
        delivery
    }
}
