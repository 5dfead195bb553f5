//! [`SimHost`]: a simulated node's executors as the node protocol sees
//! them, over the node's shards (one scheduler per executor).
//!
//! The protocol decides what leaves the node, what comes in and where
//! events go; this host only carries it out on the shards, as the local
//! pool does for the network driver, with the same placement rules (work
//! from outside goes to executors in turn, work from elsewhere to an idle
//! executor first, an idle executor wakes to steal what it can run) and
//! the core's own steal loops between shards. Calls a shard hands out
//! while the protocol holds the host are kept aside: the engine starts them
//! once the protocol's input is done, because starting a call needs the
//! engine (virtual time, input transfers).

use std::collections::VecDeque;
use std::sync::Arc;

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::context::{ContextList, ExecutorContext};
use crate::core::shards;
use crate::core::{
    Action, Counts, DeliveryError, MatchTable, Origin, Outcome, Place, Scheduler, Stolen,
    Submission, SubmitError, Ticket, Work,
};
use crate::event::Event;
use crate::id::{ActivityId, IdIssuer, NodeId};
use crate::protocol::{Delivery, Export, Host, Routed, Travelling};
use crate::sim::workload::Placement;

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
///
/// The node has the local pool's shape: one single-executor scheduler per
/// executor (a *shard*), with the core's own steal loops between them
/// ([`core::shards`](crate::core::shards)). A node without executors (a
/// pure master) has one shard with no executor, which holds work until
/// other nodes take it.
pub(crate) struct SimHost {
    node: NodeId,
    /// One scheduler per executor, by executor index.
    shards: Vec<Scheduler<Body>>,
    /// What this node's executors offer: where work may run here.
    local: MatchTable,
    /// What each executor offers, by index.
    contexts: Vec<ExecutorContext>,
    /// Executors that found no work, on their shard or by stealing.
    idle: Vec<bool>,
    /// Each executor's issuer for the activities it submits.
    issuers: Vec<IdIssuer>,
    /// The shards of activities that came from other nodes: their ids
    /// name no shard of this node.
    arrived: FxHashMap<ActivityId, usize>,
    /// Turns round the shards, to spread outside work and exports.
    turn: usize,
    /// Calls the core handed to idle executors, for the engine to start.
    runs: VecDeque<(usize, Work<Body>)>,
    /// Events a shard sent off the node, for the protocol to route.
    pub(super) away: Vec<SimEvent>,
    /// Events the core reported undeliverable (their activity finished
    /// with them still buffered).
    pub(super) undeliverable: u64,
}

/// The issuer slot of executor `executor`'s own submissions, as the local
/// pool numbers them; slot 0 is never used.
fn own_slot(executor: usize) -> u16 {
    (2 * executor + 1) as u16
}

/// The issuer slot of submissions from outside that shard `shard` holds.
fn outside_slot(shard: usize) -> u16 {
    (2 * shard + 2) as u16
}

impl SimHost {
    /// The executors of a node offering `contexts`; `pool` is what every
    /// executor of the pool offers, so work only others can run is
    /// admitted here and waits to be stolen.
    pub(super) fn new(node: NodeId, contexts: Vec<ExecutorContext>, pool: Arc<MatchTable>) -> Self {
        let mut shards: Vec<Scheduler<Body>> = (contexts.iter())
            .map(|context| Scheduler::in_pool(node, vec![context.clone()], pool.clone()))
            .collect();
        if shards.is_empty() {
            shards.push(Scheduler::in_pool(node, Vec::new(), pool));
        }
        SimHost {
            node,
            shards,
            local: MatchTable::new(&contexts),
            idle: vec![false; contexts.len()],
            issuers: (0..contexts.len())
                .map(|executor| IdIssuer::new(node, own_slot(executor)))
                .collect(),
            contexts,
            arrived: FxHashMap::default(),
            turn: 0,
            runs: VecDeque::new(),
            away: Vec::new(),
            undeliverable: 0,
        }
    }

    /// A host with nothing in it, for a node that died: nothing of it is
    /// used again, so its memory goes.
    pub(super) fn emptied(node: NodeId) -> Self {
        SimHost::new(node, Vec::new(), Arc::new(MatchTable::new(&[])))
    }

    /// The shards' counts, summed.
    pub(super) fn counts(&self) -> Counts {
        (self.shards.iter())
            .map(Scheduler::counts)
            .fold(Counts::default(), Counts::merge)
    }

    /// The shard that holds (or points the way to) activity `id`, if this
    /// node knows: its id names the shard, or it came from elsewhere.
    fn home_of(&self, id: ActivityId) -> Option<usize> {
        self.named_shard(id)
            .or_else(|| self.arrived.get(&id).copied())
    }

    /// The shard `id` names, if this node issued it.
    fn named_shard(&self, id: ActivityId) -> Option<usize> {
        if id.origin() != self.node {
            return None;
        }
        let shard = usize::from(id.issuer_slot()).checked_sub(1)? / 2;
        (shard < self.shards.len()).then_some(shard)
    }

    /// The executor next in turn among those that can run `contexts`.
    fn next_in_turn(&mut self, contexts: &ContextList) -> Option<usize> {
        let count = self.local.executors_for(contexts).count();
        if count == 0 {
            return None;
        }
        self.turn = self.turn.wrapping_add(1);
        self.local.executors_for(contexts).nth(self.turn % count)
    }

    /// The shard, in turn, that keeps work none of this node's executors
    /// can run until a thief from another node takes it.
    fn holding_shard(&mut self) -> usize {
        self.turn = self.turn.wrapping_add(1);
        self.turn % self.shards.len()
    }

    /// Takes what the shards asked for into the host's own lists. Called
    /// after every change to a shard, so an executor a shard just gave work
    /// to no longer counts as idle when the protocol asks.
    fn drain(&mut self) {
        for shard in 0..self.shards.len() {
            while let Some(action) = self.shards[shard].poll_action() {
                match action {
                    // Each shard's one executor is the node's executor of
                    // the same index.
                    Action::Run { work, .. } => {
                        self.idle[shard] = false;
                        self.runs.push_back((shard, work));
                    }
                    Action::Forward { event, to } if to == OFF_NODE => {
                        self.away.push(SimEvent::from_core(&event))
                    }
                    Action::Forward { event, to } => {
                        match self.deliver_from(to.0 as usize, SimEvent::from_core(&event)) {
                            Delivery::Delivered => {}
                            Delivery::Gone => self.undeliverable += 1,
                            Delivery::Away(event) | Delivery::Unknown(event) => {
                                self.away.push(event)
                            }
                        }
                    }
                    Action::ForgetForwards { id, places } => self.forget_forwards(id, &places),
                    Action::Undeliverable(_) => self.undeliverable += 1,
                    Action::Quiescent { .. } => {}
                }
            }
        }
    }

    /// Drops the pointers to `id` that its trail names: the shards it was
    /// stolen from, and (for [`OFF_NODE`]) its record as having come from
    /// another node.
    fn forget_forwards(&mut self, id: ActivityId, trail: &[Place]) {
        for &place in trail {
            if place == OFF_NODE {
                self.arrived.remove(&id);
            } else if let Some(shard) = self.shards.get_mut(place.0 as usize) {
                shard.forget_forward(id);
            }
        }
    }

    /// Takes the next call a shard handed out, if any.
    pub(super) fn next_run(&mut self) -> Option<(usize, Work<Body>)> {
        self.runs.pop_front()
    }

    /// `executor`'s next call: from its own shard, else stolen from
    /// another; `None` marks it idle.
    pub(super) fn next_work(&mut self, executor: usize) -> Option<Work<Body>> {
        let work = self.shards[executor].next_work(0).or_else(|| {
            let context = &self.contexts[executor];
            shards::steal_for(&mut self.shards[..], executor, context)
        });
        self.idle[executor] = work.is_none();
        self.drain();
        work
    }

    /// Hands back an activity after `executor`'s call.
    pub(super) fn complete(&mut self, executor: usize, ticket: Ticket, outcome: Outcome<Body>) {
        self.shards[executor].complete(ticket, outcome);
        self.drain();
    }

    /// A fresh id for an activity `executor` submits.
    pub(super) fn issue(&mut self, executor: usize) -> ActivityId {
        self.issuers[executor].issue()
    }

    /// Queues an activity submitted from outside the pool (a root) on an
    /// executor that can run it, in turn, or on a holding shard; its id is
    /// `number` in that shard's outside slot. Idle executors that can run
    /// it come for it.
    pub(super) fn submit_outside(
        &mut self,
        number: u64,
        body: Body,
        contexts: ContextList,
        stealable: bool,
    ) -> Result<ActivityId, SubmitError> {
        let target = match self.next_in_turn(&contexts) {
            Some(executor) => executor,
            None => self.holding_shard(),
        };
        let id = ActivityId::in_slot(self.node, outside_slot(target), number);
        if !stealable {
            // It may not leave: an executor here must be able to run it.
            self.local.check(id, &contexts, None)?;
        }
        let submission = Submission {
            id,
            body,
            contexts: contexts.clone(),
            stealable,
        };
        self.shards[target].submit(Origin::Outside, submission)?;
        self.drain();
        self.wake_idle_for(&contexts, target);
        Ok(id)
    }

    /// Queues an activity that `executor`'s call submits, with `id` from
    /// [`issue`](Self::issue): on its own shard, pinned to it if it may run
    /// only there, else where other executors may steal it (off the node
    /// too, if `stealable`). Idle executors that can run it come for it.
    pub(super) fn submit_child(
        &mut self,
        executor: usize,
        id: ActivityId,
        body: Body,
        contexts: ContextList,
        placement: Placement,
    ) -> Result<(), SubmitError> {
        let (origin, stealable) = match placement {
            Placement::Anywhere => (Origin::Executor(0), true),
            // Any executor of the node may run it, none elsewhere: the
            // shard's shared queue, which thieves within the node search.
            Placement::Node => {
                self.local.check(id, &contexts, None)?;
                (Origin::Outside, false)
            }
            Placement::Executor => (Origin::Executor(0), false),
        };
        let submission = Submission {
            id,
            body,
            contexts: contexts.clone(),
            stealable,
        };
        self.shards[executor].submit(origin, submission)?;
        self.drain();
        if placement != Placement::Executor {
            self.wake_idle_for(&contexts, executor);
        }
        Ok(())
    }

    /// Wakes an idle executor (other than `besides`) that could run
    /// `contexts`: it steals, as a woken executor of the local pool does.
    fn wake_idle_for(&mut self, contexts: &ContextList, besides: usize) {
        let Some(executor) = (self.local.executors_for(contexts))
            .find(|&executor| executor != besides && self.idle[executor])
        else {
            return;
        };
        let context = &self.contexts[executor];
        if let Some(work) = shards::steal_for(&mut self.shards[..], executor, context) {
            self.idle[executor] = false;
            self.runs.push_back((executor, work));
        }
        self.drain();
    }

    /// Delivers `event` starting at shard `at`, following pointers between
    /// shards.
    fn deliver_from(&mut self, mut at: usize, event: SimEvent) -> Delivery<SimEvent> {
        let mut event = event.to_core();
        loop {
            match self.shards[at].deliver(event) {
                Ok(()) => return Delivery::Delivered,
                Err(DeliveryError::Moved { event, to }) if to == OFF_NODE => {
                    return Delivery::Away(SimEvent::from_core(&event))
                }
                Err(DeliveryError::Moved { event: moved, to }) => {
                    event = moved;
                    at = to.0 as usize;
                }
                Err(DeliveryError::Undeliverable(_)) => return Delivery::Gone,
            }
        }
    }

    /// Puts an activity from elsewhere (a thief's import, or an export
    /// coming back) on an executor that can run it, an idle one first, or
    /// on a holding shard; as the local pool's `Pool::import`.
    fn place(&mut self, mut stolen: Stolen<Body>) -> Result<(), SubmitError> {
        let contexts = stolen.contexts.clone();
        let idle = (self.local.executors_for(&contexts)).find(|&executor| self.idle[executor]);
        let target = match idle.or_else(|| self.next_in_turn(&contexts)) {
            Some(executor) => executor,
            None => self.holding_shard(),
        };
        let id = stolen.id;
        let home = self.named_shard(id);
        match home {
            // Back home after its thief died: the home shard's pointer,
            // which said "off the node", must lead here instead.
            Some(home) if home != target => {
                stolen.trail.push(Place(home as u64));
                self.shards[home].redirect_forward(id, Place(target as u64));
            }
            Some(_) => {}
            None => {
                self.arrived.insert(id, target);
            }
        }
        let accepted = match self.contexts.is_empty() {
            false => self.shards[target].accept(0, stolen),
            true => self.hold(target, stolen),
        };
        if accepted.is_err() && home.is_none() {
            self.arrived.remove(&id);
        }
        self.drain();
        self.wake_idle_for(&contexts, target);
        accepted
    }
}

impl SimHost {
    /// Queues `stolen` in the shared queue of `shard`, a shard with no
    /// executor: a pure master keeps work there, as it keeps the roots,
    /// until another node steals it.
    fn hold(&mut self, shard: usize, stolen: Stolen<Body>) -> Result<(), SubmitError> {
        let id = stolen.id;
        let submission = Submission {
            id,
            body: stolen.body,
            contexts: stolen.contexts,
            stealable: stolen.stealable,
        };
        let core = &mut self.shards[shard];
        core.submit(Origin::Outside, submission)?;
        // `accept` would drop the pointer "off the node"; `submit` does not.
        core.forget_forward(id);
        for event in stolen.pending {
            // Queued here just now, so it takes the event.
            let _ = core.deliver(event);
        }
        Ok(())
    }
}

impl Host for SimHost {
    type Body = Packed;
    type Event = SimEvent;

    fn executor_contexts(&self) -> Vec<ExecutorContext> {
        self.contexts.clone()
    }

    fn idle_contexts(&self) -> Vec<(ExecutorContext, usize)> {
        let idle = self.idle.iter().zip(&self.contexts);
        crate::protocol::count_contexts(idle.filter(|(&idle, _)| idle).map(|(_, context)| context))
    }

    fn queued(&self) -> usize {
        self.shards.iter().map(|shard| shard.counts().queued).sum()
    }

    fn export(&mut self, thief: &ExecutorContext, max: usize) -> Vec<Export<Packed>> {
        self.turn = self.turn.wrapping_add(1);
        let first = self.turn % self.shards.len();
        let stolen = shards::export(&mut self.shards[..], thief, max, first, OFF_NODE);
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
                trail: stolen.trail,
                // Simulated activities have no side effects to fear.
                restartable: true,
            })
            .collect()
    }

    fn import(&mut self, activity: Travelling<Packed>) -> Result<(), String> {
        let id = activity.id;
        let stolen = Stolen {
            id,
            body: Body {
                spec: activity.body.spec,
                attempt: activity.attempt,
                parent: activity.body.parent,
                children: None,
            },
            contexts: activity.contexts,
            stealable: true,
            pending: pending_events(id, &activity.body.pending),
            // Its exporter waits to hear that it finished: when it does,
            // the shard's pointers go, and so does its record here.
            trail: vec![OFF_NODE],
        };
        self.place(stolen).map_err(|error| error.to_string())
    }

    fn reclaim(
        &mut self,
        export: &Export<Packed>,
        attempt: u32,
        stealable: bool,
    ) -> Result<(), String> {
        let id = export.id;
        let home = self.named_shard(id);
        let stolen = Stolen {
            id,
            body: Body {
                spec: export.body.spec,
                attempt,
                parent: export.body.parent,
                children: None,
            },
            contexts: export.contexts.clone(),
            stealable,
            pending: pending_events(id, &export.body.pending),
            trail: match export.trail.contains(&OFF_NODE) {
                true => vec![OFF_NODE],
                false => Vec::new(),
            },
        };
        let placed = self.place(stolen);
        // The shards it left keep pointers "off the node"; the one its id
        // names was redirected by `place`.
        for &place in &export.trail {
            if place != OFF_NODE && Some(place.0 as usize) != home {
                self.shards[place.0 as usize].forget_forward(id);
            }
        }
        match placed {
            Ok(()) => Ok(()),
            // It came back another way and is here already.
            Err(SubmitError::DuplicateId(_)) => Ok(()),
            Err(error) => {
                if let Some(home) = home {
                    self.shards[home].forget_forward(id);
                }
                Err(error.to_string())
            }
        }
    }

    fn settle(&mut self, id: ActivityId, trail: &[Place]) {
        self.forget_forwards(id, trail);
    }

    fn deliver(&mut self, event: SimEvent) -> Delivery<SimEvent> {
        let delivery = match self.home_of(event.target) {
            Some(shard) => self.deliver_from(shard, event),
            // Not known here: it may be on its way, have finished here, or
            // live elsewhere; the protocol tells these apart.
            None => Delivery::Unknown(event),
        };
        self.drain();
        delivery
    }
}

/// The events that reached an activity before it left its node, rebuilt
/// from their sources.
fn pending_events(id: ActivityId, sources: &[ActivityId]) -> VecDeque<Event> {
    (sources.iter())
        .map(|&source| Event::new(source, id, ()))
        .collect()
}
