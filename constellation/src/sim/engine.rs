//! The discrete-event loop: virtual time, one real [`Scheduler`] per node,
//! and the net driver's stealing and custody rules with modelled messages.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::SeedableRng;
use rustc_hash::FxHashMap;

use super::model::{nanos, Link, Model};
use super::report::{
    AttemptEnd, AttemptRecord, ExecutorSummary, MessageCounts, NodeSummary, SimReport,
};
use super::workload::{Placement, Workload};
use super::SimError;
use crate::context::{ContextList, ExecutorContext};
use crate::core::{
    Action, Call, DeliveryError, MatchTable, Origin, Outcome, Place, Scheduler, Stolen, Submission,
    Ticket, Work,
};
use crate::event::Event;
use crate::id::{ActivityId, IdIssuer, NodeId};
use crate::protocol::custody::{self, Custody};
use crate::protocol::steal::{Candidate, Throttle, Victims};
use crate::protocol::steal::Strategy;

/// Virtual time in nanoseconds since the start.
type Time = u64;

/// An activity as the simulated application holds it: the scheduler core
/// stores these, steals them and hands them to executors.
#[derive(Debug)]
struct Body {
    /// Its template.
    spec: u32,
    /// 0 for the first attempt.
    attempt: u32,
    /// Whom to tell when it finishes.
    parent: Option<ActivityId>,
    /// The stage of children it waits for, once it has started.
    children: Option<Box<Children>>,
}

/// The children of one stage, which an activity waits for. Children of a
/// stage get consecutive ids from their node's issuer, so a range names
/// them; the bit set ignores a child that reports twice.
#[derive(Debug)]
struct Children {
    stage: usize,
    origin: NodeId,
    first: u64,
    count: u64,
    remaining: u64,
    seen: Vec<u64>,
}

impl Children {
    /// Notes that `child` finished; returns whether the stage is complete.
    /// Events from other activities (children of an earlier attempt of
    /// this one) change nothing.
    fn report(&mut self, child: ActivityId) -> bool {
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

/// What an exporter keeps of an activity it handed to another node: enough
/// to queue it again, as it was, if that node dies.
#[derive(Debug)]
struct Copy {
    spec: u32,
    attempt: u32,
    parent: Option<ActivityId>,
    contexts: ContextList,
    /// Sources of the events that travelled with it.
    pending: Vec<ActivityId>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Life {
    Waiting,
    Alive,
    Dead,
}

/// A call in progress on an executor.
struct Running {
    ticket: Ticket,
    body: Body,
    /// `None` for `initialize`, the event's source for `process`.
    event_from: Option<ActivityId>,
    start: Time,
}

struct Exec {
    group: u32,
    /// Index into [`Engine::contexts`].
    context: u32,
    cores: u32,
    speed: f64,
    /// Asked the core for work and got none.
    idle: bool,
    call: Option<Running>,
    busy: Time,
}

/// The executors of a node that offer the same context: they steal as
/// one, as the net driver does.
struct Group {
    context: u32,
    members: Vec<u32>,
    idle: u32,
    throttle: Throttle,
    /// The victim of the request in flight.
    victim: Option<Candidate<u32>>,
    /// When a retry after a backoff is scheduled.
    retry: Option<Time>,
}

/// The trace of an attempt that has started and not ended.
struct Started {
    spec: u32,
    attempt: u32,
    executor: u32,
    start: Time,
    transfer: Time,
    busy: Time,
}

struct SimNode {
    id: NodeId,
    site: u32,
    life: Life,
    core: Scheduler<Body>,
    /// What this node's executors offer, for work that may not leave it.
    local: MatchTable,
    executors: Vec<Exec>,
    groups: Vec<Group>,
    outside_ids: IdIssuer,
    own_ids: IdIssuer,
    custody: Custody<u32, Copy>,
    /// Events that arrived before their activity, with their arrival time.
    early: FxHashMap<ActivityId, (Time, Vec<Event>)>,
    started: FxHashMap<ActivityId, Started>,
    requests_handled: u64,
    /// Until when it is busy answering a steal request (its answer cost).
    answering_until: Time,
    /// Steal requests that arrived while it was busy answering, in order:
    /// thief, its group, how many it asked for.
    waiting: VecDeque<(u32, u32, u32)>,
    /// Time spent answering steal requests, in all.
    answering: Time,
}

enum Msg {
    Steal {
        group: u32,
        max: u32,
    },
    /// The request reached a dead node: the transport says so.
    StealFailed {
        group: u32,
    },
    Loot {
        group: u32,
        loot: Vec<Stolen<Body>>,
    },
    Finished(ActivityId),
    GaveUp(ActivityId),
    Declined(ActivityId),
    Event(Event),
}

enum Ev {
    Join(u32),
    Die(u32),
    Detect(u32),
    CallDone {
        node: u32,
        executor: u32,
    },
    StealRetry {
        node: u32,
        group: u32,
    },
    Msg {
        to: u32,
        from: u32,
        msg: Msg,
    },
    EarlyExpire {
        node: u32,
        id: ActivityId,
    },
    /// A node finished answering a steal request and may take the next.
    Answered(u32),
}

/// A link with its latency in nanoseconds.
#[derive(Clone, Copy)]
struct LinkNs {
    latency: Time,
    bandwidth: Option<f64>,
    per_transfer: Option<f64>,
}

impl From<Link> for LinkNs {
    fn from(link: Link) -> Self {
        LinkNs {
            latency: nanos(link.latency),
            bandwidth: link.bandwidth,
            per_transfer: link.per_transfer,
        }
    }
}

/// `bytes` at `rate` bytes per second, in nanoseconds (saturating: a
/// transfer too long to count never ends).
fn at_rate(bytes: u64, rate: f64) -> Time {
    (bytes as f64 / rate * 1e9).round() as Time
}

/// The members of the pool, sorted by site so that each node's own site is
/// one range: victim choice is then constant-time for any pool size.
struct Membership {
    site_of: Vec<u32>,
    member: Vec<bool>,
    order: Vec<u32>,
    position: Vec<u32>,
    ranges: Vec<(u32, u32)>,
    dirty: bool,
}

impl Membership {
    fn new(site_of: Vec<u32>, sites: usize) -> Self {
        let nodes = site_of.len();
        Membership {
            site_of,
            member: vec![false; nodes],
            order: Vec::new(),
            position: vec![u32::MAX; nodes],
            ranges: vec![(0, 0); sites],
            dirty: false,
        }
    }

    fn set(&mut self, node: u32, member: bool) {
        self.member[node as usize] = member;
        self.dirty = true;
    }

    /// Sorts the members again after joins and deaths; cheap when nothing changed.
    fn refresh(&mut self) {
        if !self.dirty {
            return;
        }
        self.dirty = false;
        let mut counts = vec![0u32; self.ranges.len() + 1];
        for (node, &member) in self.member.iter().enumerate() {
            if member {
                counts[self.site_of[node] as usize + 1] += 1;
            }
        }
        for site in 0..self.ranges.len() {
            counts[site + 1] += counts[site];
            self.ranges[site] = (counts[site], counts[site + 1]);
        }
        self.order.clear();
        self.order.resize(counts[self.ranges.len()] as usize, 0);
        let mut next: Vec<u32> = self.ranges.iter().map(|range| range.0).collect();
        for (node, &member) in self.member.iter().enumerate() {
            self.position[node] = u32::MAX;
            if member {
                let site = self.site_of[node] as usize;
                self.order[next[site] as usize] = node as u32;
                self.position[node] = next[site];
                next[site] += 1;
            }
        }
    }
}

/// The pool as node `me` sees it when it chooses a victim.
struct View<'a> {
    members: &'a Membership,
    me: u32,
    master: Option<u32>,
}

impl View<'_> {
    fn range(&self) -> (usize, usize) {
        let (lo, hi) = self.members.ranges[self.members.site_of[self.me as usize] as usize];
        (lo as usize, hi as usize)
    }

    fn candidate(&self, index: usize, same_site: bool) -> Candidate<u32> {
        let peer = self.members.order[index];
        Candidate {
            peer,
            same_site,
            master: Some(peer) == self.master,
        }
    }
}

impl Victims<u32> for View<'_> {
    fn on_site_count(&self) -> usize {
        let (lo, hi) = self.range();
        hi - lo - usize::from(self.members.member[self.me as usize])
    }

    fn on_site(&self, index: usize) -> Candidate<u32> {
        let (lo, _) = self.range();
        let mut at = lo + index;
        let own = self.members.position[self.me as usize] as usize;
        if self.members.member[self.me as usize] && at >= own {
            at += 1;
        }
        self.candidate(at, true)
    }

    fn away_count(&self) -> usize {
        let (lo, hi) = self.range();
        self.members.order.len() - (hi - lo)
    }

    fn away(&self, index: usize) -> Candidate<u32> {
        let (lo, hi) = self.range();
        let at = if index < lo { index } else { index + (hi - lo) };
        self.candidate(at, false)
    }

    fn master(&self) -> Option<Candidate<u32>> {
        let master = self.master?;
        (master != self.me && self.members.member[master as usize]).then(|| Candidate {
            peer: master,
            same_site: self.members.site_of[master as usize]
                == self.members.site_of[self.me as usize],
            master: true,
        })
    }
}

/// The simulator's state. Built by [`Engine::new`], consumed by [`Engine::run`].
pub(super) struct Engine<'a> {
    model: &'a Model,
    workload: &'a Workload,
    now: Time,
    seq: u64,
    /// Pending events by (time, order scheduled, slot in `slab`): small
    /// keys, so the heap moves 24 bytes per step, not whole events.
    heap: BinaryHeap<Reverse<(Time, u64, u32)>>,
    slab: Vec<Option<Ev>>,
    free: Vec<u32>,
    nodes: Vec<SimNode>,
    /// Distinct executor contexts, so that a steal request names one by index.
    contexts: Vec<ExecutorContext>,
    sites: usize,
    links: Vec<LinkNs>,
    link_busy: Vec<Time>,
    members: Membership,
    rng: StdRng,
    /// The instant virtual time 0 stands for, for the throttle's clock.
    base: Instant,
    /// When input `data` is (or will be) on `node`: key `node << 32 | data`.
    cache: FxHashMap<u64, Time>,
    /// Per template: its context list's index in `context_texts`.
    spec_contexts: Vec<u32>,
    context_texts: Vec<String>,
    /// Per kind: event processing time.
    event_ns: Vec<Time>,
    messages: MessageCounts,
    records: Vec<AttemptRecord>,
    /// Roots by their sequence number on the master: finished yet?
    root_done: Vec<bool>,
    roots_left: usize,
    roots_submitted: bool,
    running: usize,
    last_progress: Time,
    /// Joins, deaths and detections still to come: they can bring progress.
    lifecycle_pending: usize,
    requeued: u64,
    lost: u64,
    undeliverable: u64,
    events: u64,
}

/// Issuer slots: outside submissions and executors' submissions.
const OUTSIDE_SLOT: u16 = 0;
const OWN_SLOT: u16 = 1;

impl<'a> Engine<'a> {
    /// Sets up nodes, links and schedules; the model and workload are valid.
    pub(super) fn new(model: &'a Model, workload: &'a Workload) -> Self {
        let sites = model.sites.len();
        let mut links = vec![LinkNs::from(model.wide_area); sites * sites];
        for (index, site) in model.sites.iter().enumerate() {
            links[index * sites + index] = site.within.into();
        }
        for link in &model.site_links {
            links[link.a * sites + link.b] = link.link.into();
            links[link.b * sites + link.a] = link.link.into();
        }
        let all: Vec<ExecutorContext> = (model.nodes.iter())
            .flat_map(|node| node.executors.iter().map(|e| e.context.clone()))
            .collect();
        // Admission: work some executor of the pool (now or later) can run.
        let pool = Arc::new(MatchTable::new(&all));
        let mut contexts: Vec<ExecutorContext> = Vec::new();
        let mut context_index: FxHashMap<ExecutorContext, u32> = FxHashMap::default();
        let mut nodes = Vec::with_capacity(model.nodes.len());
        for (index, spec) in model.nodes.iter().enumerate() {
            let id = NodeId::from_u128(index as u128 + 1);
            let offered: Vec<ExecutorContext> =
                spec.executors.iter().map(|e| e.context.clone()).collect();
            let mut groups: Vec<Group> = Vec::new();
            let mut executors = Vec::with_capacity(spec.executors.len());
            for (e, executor) in spec.executors.iter().enumerate() {
                let context = *context_index
                    .entry(executor.context.clone())
                    .or_insert_with(|| {
                        contexts.push(executor.context.clone());
                        (contexts.len() - 1) as u32
                    });
                let group = match groups.iter().position(|g| g.context == context) {
                    Some(group) => group,
                    None => {
                        groups.push(Group {
                            context,
                            members: Vec::new(),
                            idle: 0,
                            throttle: Throttle::with_backoff(
                                Duration::from_secs_f64(model.steal_backoff.0),
                                Duration::from_secs_f64(model.steal_backoff.1),
                            ),
                            victim: None,
                            retry: None,
                        });
                        groups.len() - 1
                    }
                };
                groups[group].members.push(e as u32);
                executors.push(Exec {
                    group: group as u32,
                    context,
                    cores: executor.cores,
                    speed: executor.speed,
                    idle: false,
                    call: None,
                    busy: 0,
                });
            }
            nodes.push(SimNode {
                id,
                site: spec.site as u32,
                life: Life::Waiting,
                local: MatchTable::new(&offered),
                core: Scheduler::in_pool(id, offered, pool.clone()),
                executors,
                groups,
                outside_ids: IdIssuer::new(id, OUTSIDE_SLOT),
                own_ids: IdIssuer::new(id, OWN_SLOT),
                custody: Custody::new(),
                early: FxHashMap::default(),
                started: FxHashMap::default(),
                requests_handled: 0,
                answering_until: 0,
                waiting: VecDeque::new(),
                answering: 0,
            });
        }
        let mut text_index: FxHashMap<ContextList, u32> = FxHashMap::default();
        let mut context_texts = Vec::new();
        let spec_contexts = (workload.activities.iter())
            .map(|spec| {
                *text_index.entry(spec.contexts.clone()).or_insert_with(|| {
                    context_texts.push(spec.contexts.to_string());
                    (context_texts.len() - 1) as u32
                })
            })
            .collect();
        let site_of = model.nodes.iter().map(|node| node.site as u32).collect();
        Engine {
            model,
            workload,
            now: 0,
            seq: 0,
            heap: BinaryHeap::new(),
            slab: Vec::new(),
            free: Vec::new(),
            nodes,
            contexts,
            sites,
            links,
            link_busy: vec![0; sites * sites],
            members: Membership::new(site_of, sites),
            rng: StdRng::seed_from_u64(model.seed),
            base: Instant::now(),
            cache: FxHashMap::default(),
            spec_contexts,
            context_texts,
            event_ns: (workload.kinds.iter())
                .map(|kind| nanos(kind.event_seconds))
                .collect(),
            messages: MessageCounts::default(),
            records: Vec::new(),
            root_done: vec![false; workload.roots.len()],
            roots_left: workload.roots.len(),
            roots_submitted: false,
            running: 0,
            last_progress: 0,
            lifecycle_pending: 0,
            requeued: 0,
            lost: 0,
            undeliverable: 0,
            events: 0,
        }
    }

    /// Runs until every root has finished, or fails with the reason it cannot.
    pub(super) fn run(mut self) -> Result<SimReport, SimError> {
        for (index, node) in self.model.nodes.iter().enumerate() {
            let joins = nanos(node.joins_at);
            self.schedule(joins, Ev::Join(index as u32));
            self.lifecycle_pending += 1;
            if let Some(dies) = node.dies_at {
                // A node that joins and dies at the same moment joins first.
                self.schedule(nanos(dies).max(joins), Ev::Die(index as u32));
                self.lifecycle_pending += 1;
            }
        }
        let stall = nanos(self.model.stall_timeout);
        let horizon = nanos(self.model.horizon);
        while let Some(Reverse((at, _, slot))) = self.heap.pop() {
            if at > horizon {
                return Err(SimError::Horizon {
                    horizon: self.model.horizon,
                    unfinished: self.roots_left,
                    roots: self.workload.roots.len(),
                });
            }
            self.now = at;
            self.events += 1;
            let ev = self.slab[slot as usize]
                .take()
                .expect("a scheduled slot is full");
            self.free.push(slot);
            self.handle(ev)?;
            if self.roots_submitted && self.roots_left == 0 {
                return Ok(self.report());
            }
            // Checked on every event rather than by a periodic timer: idle
            // executors keep asking for work while the pool is stuck, and a
            // timer would tick forever beside a call that runs for years.
            if self.running == 0
                && self.lifecycle_pending == 0
                && self.now - self.last_progress >= stall
            {
                return Err(self.stalled(&format!(
                    "no call started or ended for {} s and nothing runs",
                    self.model.stall_timeout
                )));
            }
        }
        Err(self.stalled("nothing is left to happen"))
    }

    fn schedule(&mut self, at: Time, ev: Ev) {
        self.seq += 1;
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slab[slot as usize] = Some(ev);
                slot
            }
            None => {
                self.slab.push(Some(ev));
                u32::try_from(self.slab.len() - 1).expect("fewer than 2^32 pending events")
            }
        };
        self.heap.push(Reverse((at, self.seq, slot)));
    }

    fn instant(&self) -> Instant {
        self.base + Duration::from_nanos(self.now)
    }

    fn handle(&mut self, ev: Ev) -> Result<(), SimError> {
        match ev {
            Ev::Join(node) => self.join(node)?,
            Ev::Die(node) => self.die(node),
            Ev::Detect(node) => self.detect(node),
            Ev::CallDone { node, executor } => self.call_done(node, executor)?,
            Ev::StealRetry { node, group } => {
                let alive = self.nodes[node as usize].life == Life::Alive;
                let group_state = &mut self.nodes[node as usize].groups[group as usize];
                if alive && group_state.retry == Some(self.now) {
                    group_state.retry = None;
                    self.try_steal(node);
                }
            }
            Ev::Msg { to, from, msg } => self.receive(to, from, msg),
            Ev::Answered(node) => self.answer_waiting(node),
            Ev::EarlyExpire { node, id } => {
                let wait = nanos(self.model.early_event_wait);
                let state = &mut self.nodes[node as usize];
                if let Some((since, _)) = state.early.get(&id) {
                    if since.saturating_add(wait) <= self.now {
                        let (_, events) = state.early.remove(&id).expect("looked up above");
                        self.undeliverable += events.len() as u64;
                    }
                }
            }
        }
        Ok(())
    }

    // ----- membership -------------------------------------------------

    fn join(&mut self, node: u32) -> Result<(), SimError> {
        self.lifecycle_pending -= 1;
        self.nodes[node as usize].life = Life::Alive;
        self.members.set(node, true);
        self.last_progress = self.now;
        if node as usize == self.model.master && !self.roots_submitted {
            self.submit_roots(node)?;
        }
        for executor in 0..self.nodes[node as usize].executors.len() as u32 {
            self.ask_for_work(node, executor);
        }
        // Nodes that found nobody to ask may ask the newcomer.
        for other in 0..self.nodes.len() as u32 {
            self.try_steal(other);
        }
        Ok(())
    }

    fn submit_roots(&mut self, node: u32) -> Result<(), SimError> {
        self.roots_submitted = true;
        let workload = self.workload;
        for &spec in &workload.roots {
            let activity = &workload.activities[spec as usize];
            let state = &mut self.nodes[node as usize];
            let id = state.outside_ids.issue();
            if activity.placement != Placement::Anywhere {
                state.local.check(id, &activity.contexts, None)?;
            }
            state.core.submit(
                Origin::Outside,
                Submission {
                    id,
                    body: Body {
                        spec,
                        attempt: 0,
                        parent: None,
                        children: None,
                    },
                    contexts: activity.contexts.clone(),
                    stealable: activity.placement == Placement::Anywhere,
                },
            )?;
        }
        self.drain(node);
        Ok(())
    }

    fn die(&mut self, node: u32) {
        self.lifecycle_pending -= 1;
        let now = self.now;
        let state = &mut self.nodes[node as usize];
        if state.life != Life::Alive {
            return;
        }
        state.life = Life::Dead;
        for executor in &mut state.executors {
            if let Some(call) = executor.call.take() {
                let elapsed = now - call.start;
                executor.busy += elapsed;
                self.running -= 1;
                if let Some(started) = state.started.get_mut(&call.ticket.id()) {
                    started.busy += elapsed;
                }
            }
        }
        let mut lost: Vec<(ActivityId, Started)> = state.started.drain().collect();
        lost.sort_unstable_by_key(|(id, _)| *id);
        for (id, started) in lost {
            self.record(node, id, started, AttemptEnd::Killed);
        }
        // Nothing of the dead node is used again: free its memory.
        let state = &mut self.nodes[node as usize];
        state.core = Scheduler::new(state.id, Vec::new());
        state.custody = Custody::new();
        state.early.clear();
        // Requests waiting for an answer fail as the connection drops.
        let waiting = std::mem::take(&mut state.waiting);
        for (thief, group, _) in waiting {
            self.send(node, thief, Msg::StealFailed { group }, 0);
        }
        let detect = self.now.saturating_add(nanos(self.model.failure_timeout));
        self.schedule(detect, Ev::Detect(node));
        self.lifecycle_pending += 1;
    }

    /// The others declare `dead` dead: what they handed it is queued again.
    fn detect(&mut self, dead: u32) {
        self.lifecycle_pending -= 1;
        self.members.set(dead, false);
        for node in 0..self.nodes.len() as u32 {
            let state = &mut self.nodes[node as usize];
            if state.life != Life::Alive {
                continue;
            }
            for group in &mut state.groups {
                if group.victim.is_some_and(|victim| victim.peer == dead) {
                    group.victim = None;
                    group.throttle.abandon();
                }
            }
            for id in state.custody.held_by(dead) {
                while let Some(export) = self.nodes[node as usize].custody.take_export(id, dead) {
                    self.requeue(node, id, export.copy);
                }
            }
            self.try_steal(node);
        }
    }

    /// Queues again an activity whose thief died, or gives it up.
    fn requeue(&mut self, node: u32, id: ActivityId, mut copy: Copy) {
        match custody::retry(copy.attempt, true, self.model.max_attempts) {
            Ok(attempt) => {
                copy.attempt = attempt;
                self.requeued += 1;
                self.take_back(node, id, copy);
            }
            Err(_) => {
                self.nodes[node as usize].core.forget_forward(id);
                self.give_up_upstream(node, id);
            }
        }
    }

    /// Queues an exported activity here again, as it was when it left.
    fn take_back(&mut self, node: u32, id: ActivityId, copy: Copy) {
        let state = &mut self.nodes[node as usize];
        let body = Body {
            spec: copy.spec,
            attempt: copy.attempt,
            parent: copy.parent,
            children: None,
        };
        let pending = copy
            .pending
            .iter()
            .map(|&source| Event::new(source, id, ()));
        if state.executors.is_empty() {
            // A node without executors (a pure master) has no executor
            // queue to take it into: it waits in the shared queue, as the
            // roots do, until someone steals it. A duplicate id means it
            // is here already.
            let submission = Submission {
                id,
                body,
                contexts: copy.contexts,
                stealable: true,
            };
            if state.core.submit(Origin::Outside, submission).is_ok() {
                state.core.forget_forward(id);
                for event in pending {
                    // Queued here just now, so it takes the event.
                    let _ = state.core.deliver(event);
                }
            }
        } else {
            let executor = (state.local.executors_for(&copy.contexts))
                .find(|&e| state.executors[e].idle)
                .or_else(|| state.local.executors_for(&copy.contexts).next())
                .unwrap_or(0);
            let stolen = Stolen {
                id,
                body,
                contexts: copy.contexts,
                stealable: true,
                pending: pending.collect::<VecDeque<_>>(),
                trail: Vec::new(),
            };
            // A duplicate means the activity is here already: nothing to do.
            let _ = state.core.accept(executor, stolen);
        }
        self.drain(node);
    }

    fn give_up_upstream(&mut self, node: u32, id: ActivityId) {
        match self.nodes[node as usize].custody.pop_import(id) {
            Some(exporter) => self.send(node, exporter, Msg::GaveUp(id), 0),
            None => self.lost += 1,
        }
    }

    // ----- executors ----------------------------------------------------

    /// Gives `executor` its next call, or marks it idle and asks other nodes.
    fn ask_for_work(&mut self, node: u32, executor: u32) {
        let state = &mut self.nodes[node as usize];
        match state.core.next_work(executor as usize) {
            Some(work) => {
                self.start(node, executor, work);
                self.drain(node);
            }
            None => {
                let exec = &mut state.executors[executor as usize];
                if !exec.idle {
                    exec.idle = true;
                    state.groups[exec.group as usize].idle += 1;
                }
                self.drain(node);
                self.try_steal(node);
            }
        }
    }

    /// Carries out what the core asks for.
    fn drain(&mut self, node: u32) {
        while let Some(action) = self.nodes[node as usize].core.poll_action() {
            match action {
                Action::Run { executor, work } => self.start(node, executor as u32, work),
                Action::Forward { event, to } => self.send_event(node, to.0 as u32, event),
                // Trails stay empty: the Finished notice that runs back
                // along the chain of custody drops each pointer instead.
                Action::ForgetForwards { .. } => {}
                Action::Undeliverable(_) => self.undeliverable += 1,
                Action::Quiescent { .. } => {}
            }
        }
    }

    fn start(&mut self, node: u32, executor: u32, work: Work<Body>) {
        let now = self.now;
        let workload = self.workload;
        let spec_index = work.body.spec;
        let spec = &workload.activities[spec_index as usize];
        let kind = &workload.kinds[spec.kind as usize];
        let (duration, event_from) = match work.call {
            Call::Initialize => {
                let transfer = match spec.input {
                    Some(data) => self.fetch(node, data),
                    None => 0,
                };
                let exec = &self.nodes[node as usize].executors[executor as usize];
                let seconds = kind.seconds_on(
                    spec.seconds,
                    &self.contexts[exec.context as usize],
                    exec.cores,
                    exec.speed,
                );
                let started = Started {
                    spec: spec_index,
                    attempt: work.body.attempt,
                    executor,
                    start: now,
                    transfer,
                    busy: 0,
                };
                (self.nodes[node as usize].started).insert(work.ticket.id(), started);
                (transfer.saturating_add(nanos(seconds)), None)
            }
            Call::Process(event) => (self.event_ns[spec.kind as usize], Some(event.source)),
        };
        let state = &mut self.nodes[node as usize];
        let exec = &mut state.executors[executor as usize];
        if exec.idle {
            exec.idle = false;
            state.groups[exec.group as usize].idle -= 1;
        }
        debug_assert!(exec.call.is_none(), "an executor runs one call at a time");
        exec.call = Some(Running {
            ticket: work.ticket,
            body: work.body,
            event_from,
            start: now,
        });
        self.running += 1;
        self.last_progress = now;
        self.schedule(
            now.saturating_add(duration),
            Ev::CallDone { node, executor },
        );
    }

    fn call_done(&mut self, node: u32, executor: u32) -> Result<(), SimError> {
        let now = self.now;
        let state = &mut self.nodes[node as usize];
        if state.life != Life::Alive {
            return Ok(());
        }
        let exec = &mut state.executors[executor as usize];
        let Some(call) = exec.call.take() else {
            return Ok(());
        };
        let elapsed = now - call.start;
        exec.busy += elapsed;
        self.running -= 1;
        self.last_progress = now;
        let id = call.ticket.id();
        if let Some(started) = state.started.get_mut(&id) {
            started.busy += elapsed;
        }
        let mut body = call.body;
        let next_stage = match call.event_from {
            None => Some(0),
            Some(child) => match body.children.as_mut() {
                Some(children) => children.report(child).then_some(children.stage + 1),
                None => None,
            },
        };
        let finished = match next_stage {
            Some(stage) => !self.submit_stage(node, executor, id, &mut body, stage)?,
            None => false,
        };
        let state = &mut self.nodes[node as usize];
        if finished {
            state.core.complete(call.ticket, Outcome::Finish);
            self.finished(node, id, body);
        } else {
            state.core.complete(call.ticket, Outcome::Suspend(body));
        }
        self.ask_for_work(node, executor);
        Ok(())
    }

    /// Submits the first non-empty stage of children from `stage` on;
    /// returns whether there was one (the activity waits for it).
    fn submit_stage(
        &mut self,
        node: u32,
        executor: u32,
        parent: ActivityId,
        body: &mut Body,
        mut stage: usize,
    ) -> Result<bool, SimError> {
        let workload = self.workload;
        let stages = &workload.activities[body.spec as usize].stages;
        while stage < stages.len() && stages[stage].is_empty() {
            stage += 1;
        }
        let Some(children) = stages.get(stage) else {
            body.children = None;
            return Ok(false);
        };
        let state = &mut self.nodes[node as usize];
        let mut first = None;
        for &child in children {
            let spec = &workload.activities[child as usize];
            let id = state.own_ids.issue();
            first.get_or_insert(id.seq());
            let (origin, stealable) = match spec.placement {
                Placement::Anywhere => (Origin::Executor(executor as usize), true),
                Placement::Node => {
                    state.local.check(id, &spec.contexts, None)?;
                    (Origin::Outside, false)
                }
                Placement::Executor => (Origin::Executor(executor as usize), false),
            };
            state.core.submit(
                origin,
                Submission {
                    id,
                    body: Body {
                        spec: child,
                        attempt: 0,
                        parent: Some(parent),
                        children: None,
                    },
                    contexts: spec.contexts.clone(),
                    stealable,
                },
            )?;
        }
        let count = children.len() as u64;
        body.children = Some(Box::new(Children {
            stage,
            origin: state.id,
            first: first.expect("the stage is not empty"),
            count,
            remaining: count,
            seen: vec![0; count.div_ceil(64) as usize],
        }));
        Ok(true)
    }

    /// An activity finished on `node`: record it, tell its parent and whoever handed it here.
    fn finished(&mut self, node: u32, id: ActivityId, body: Body) {
        if let Some(started) = self.nodes[node as usize].started.remove(&id) {
            self.record(node, id, started, AttemptEnd::Completed);
        }
        match body.parent {
            Some(parent) => self.deliver(node, Event::new(id, parent, ()), false),
            None => {
                let seq = (id.seq() & ((1 << 48) - 1)) as usize;
                let master = self.nodes[self.model.master].id;
                if id.origin() == master && seq < self.root_done.len() && !self.root_done[seq] {
                    self.root_done[seq] = true;
                    self.roots_left -= 1;
                }
            }
        }
        if let Some(exporter) = self.nodes[node as usize].custody.pop_import(id) {
            self.messages.finished_notices += 1;
            self.send(node, exporter, Msg::Finished(id), 0);
        }
    }

    fn record(&mut self, node: u32, id: ActivityId, started: Started, outcome: AttemptEnd) {
        let workload = self.workload;
        let spec = &workload.activities[started.spec as usize];
        self.records.push(AttemptRecord {
            activity: id,
            spec: started.spec,
            kind: spec.kind,
            contexts: self.spec_contexts[started.spec as usize],
            node,
            executor: started.executor,
            site: self.nodes[node as usize].site,
            attempt: started.attempt + 1,
            start: seconds(started.start),
            end: seconds(self.now),
            transfer: seconds(started.transfer),
            busy: seconds(started.busy),
            outcome,
        });
    }

    // ----- data -----------------------------------------------------------

    /// How long until input `data` is on `node`, fetching it if need be.
    fn fetch(&mut self, node: u32, data: u32) -> Time {
        let key = (u64::from(node) << 32) | u64::from(data);
        if self.model.cache_inputs {
            if let Some(&ready) = self.cache.get(&key) {
                return ready.saturating_sub(self.now);
            }
        }
        let workload = self.workload;
        let spec = &workload.data[data as usize];
        let here = self.nodes[node as usize].site as usize;
        let source = if spec.replicas.contains(&here) {
            here
        } else {
            // The replica that would arrive first on an idle network.
            let estimate = |site: usize| {
                let link = self.links[site * self.sites + here];
                let rate = match (link.bandwidth, link.per_transfer) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                link.latency
                    .saturating_add(rate.map_or(0, |rate| at_rate(spec.bytes, rate)))
            };
            (spec.replicas.iter().copied())
                .min_by_key(|&site| (estimate(site), site))
                .expect("validated: data has a replica")
        };
        let duration = self.transfer(source, here, spec.bytes);
        if source == here {
            self.messages.local_transfers += 1;
            self.messages.local_bytes += spec.bytes;
        } else {
            self.messages.wide_area_transfers += 1;
            self.messages.wide_area_bytes += spec.bytes;
        }
        if self.model.cache_inputs {
            self.cache.insert(key, self.now.saturating_add(duration));
        }
        duration
    }

    /// The time a transfer of `bytes` from site `from` to `to` takes if it
    /// starts now, taking its share of the link.
    fn transfer(&mut self, from: usize, to: usize, bytes: u64) -> Time {
        let index = from * self.sites + to;
        let link = self.links[index];
        let capped = link.per_transfer.map_or(0, |rate| at_rate(bytes, rate));
        let queued = match link.bandwidth {
            Some(rate) => {
                // Both directions share one budget: the link is symmetric.
                let shared = from.min(to) * self.sites + from.max(to);
                let start = self.link_busy[shared].max(self.now);
                self.link_busy[shared] = start.saturating_add(at_rate(bytes, rate));
                self.link_busy[shared] - self.now
            }
            None => 0,
        };
        link.latency.saturating_add(capped.max(queued))
    }

    // ----- messages -------------------------------------------------------

    /// Sends `msg` carrying `payload` bytes besides its header.
    fn send(&mut self, from: u32, to: u32, msg: Msg, payload: u64) {
        self.send_after(from, to, msg, payload, 0);
    }

    /// [`send`](Self::send), `after` nanoseconds from now: the time the
    /// sender still needs to produce it.
    fn send_after(&mut self, from: u32, to: u32, msg: Msg, payload: u64, after: Time) {
        let (a, b) = (
            self.nodes[from as usize].site as usize,
            self.nodes[to as usize].site as usize,
        );
        if a != b {
            self.messages.wide_area += 1;
        }
        let link = self.links[a * self.sites + b];
        let bytes = self.model.message_bytes + payload;
        let delay =
            (link.latency).saturating_add(link.bandwidth.map_or(0, |rate| at_rate(bytes, rate)));
        let at = self.now.saturating_add(after).saturating_add(delay);
        self.schedule(at, Ev::Msg { to, from, msg });
    }

    fn send_event(&mut self, from: u32, to: u32, event: Event) {
        if to == from || to as usize >= self.nodes.len() {
            self.undeliverable += 1;
            return;
        }
        self.messages.events += 1;
        self.send(from, to, Msg::Event(event), 0);
    }

    fn receive(&mut self, to: u32, from: u32, msg: Msg) {
        if self.nodes[to as usize].life != Life::Alive {
            self.messages.dropped += 1;
            if let Msg::Steal { group, .. } = msg {
                // The connection is gone: the thief hears at once.
                self.send(to, from, Msg::StealFailed { group }, 0);
            }
            return;
        }
        match msg {
            Msg::Steal { group, max } => {
                let state = &mut self.nodes[to as usize];
                // Those that came earlier go first: while any wait, an
                // `Answered` is due that will take them in order.
                if state.answering_until > self.now || !state.waiting.is_empty() {
                    state.waiting.push_back((from, group, max));
                } else {
                    self.export(to, from, group, max);
                }
            }
            Msg::StealFailed { group } => self.loot(to, from, group, Vec::new()),
            Msg::Loot { group, loot } => self.loot(to, from, group, loot),
            Msg::Finished(id) => {
                let state = &mut self.nodes[to as usize];
                if state.custody.take_export(id, from).is_some() {
                    state.core.forget_forward(id);
                    if let Some(exporter) = state.custody.pop_import(id) {
                        self.messages.finished_notices += 1;
                        self.send(to, exporter, Msg::Finished(id), 0);
                    }
                }
            }
            Msg::GaveUp(id) => {
                let state = &mut self.nodes[to as usize];
                if state.custody.take_export(id, from).is_some() {
                    state.core.forget_forward(id);
                    self.give_up_upstream(to, id);
                }
            }
            Msg::Declined(id) => {
                if let Some(export) = self.nodes[to as usize].custody.take_export(id, from) {
                    self.take_back(to, id, export.copy);
                }
            }
            Msg::Event(event) => self.deliver(to, event, true),
        }
    }

    /// Delivers an event here or sends it on: to where the core says its
    /// target went, else to the target's origin. An event that came from
    /// the network for an activity not here (yet) waits for it a while.
    fn deliver(&mut self, node: u32, event: Event, from_network: bool) {
        let nodes = self.nodes.len();
        let state = &mut self.nodes[node as usize];
        match state.core.deliver(event) {
            Ok(()) => self.drain(node),
            Err(DeliveryError::Moved { event, to }) => self.send_event(node, to.0 as u32, event),
            Err(DeliveryError::Undeliverable(undeliverable)) => {
                let event = undeliverable.event;
                let target = event.target;
                let origin = node_of(nodes, target.origin());
                if origin == Some(node) {
                    self.undeliverable += 1;
                } else if from_network {
                    let now = self.now;
                    let entry = state
                        .early
                        .entry(target)
                        .or_insert_with(|| (now, Vec::new()));
                    entry.1.push(event);
                    if entry.1.len() == 1 {
                        let at = now.saturating_add(nanos(self.model.early_event_wait));
                        self.schedule(at, Ev::EarlyExpire { node, id: target });
                    }
                } else {
                    match origin {
                        Some(origin) => self.send_event(node, origin, event),
                        None => self.undeliverable += 1,
                    }
                }
            }
        }
    }

    // ----- stealing -------------------------------------------------------

    /// Asks other nodes for work for each group of `node` with idle
    /// executors that may ask now, as the net driver does.
    fn try_steal(&mut self, node: u32) {
        let master = self.model.master as u32;
        let strategy = self.model.strategy;
        let state = &self.nodes[node as usize];
        if state.life != Life::Alive
            || (strategy == Strategy::MasterWorker && node == master)
            || state.groups.iter().all(|group| group.idle == 0)
        {
            return;
        }
        self.members.refresh();
        let now = self.instant();
        let mut requests = Vec::new();
        let mut retries = Vec::new();
        let view = View {
            members: &self.members,
            me: node,
            master: (strategy == Strategy::MasterWorker).then_some(master),
        };
        let state = &mut self.nodes[node as usize];
        for (index, group) in state.groups.iter_mut().enumerate() {
            if group.idle == 0 {
                continue;
            }
            if !group.throttle.may_steal(now) {
                if let Some(at) = group.throttle.retry_at() {
                    let at = self.now + (at - now).as_nanos() as Time;
                    if group
                        .retry
                        .is_none_or(|pending| pending > at || pending < self.now)
                    {
                        group.retry = Some(at);
                        retries.push((at, index as u32));
                    }
                }
                continue;
            }
            let Some(victim) = group.throttle.choose_from(strategy, &view, &mut self.rng) else {
                continue;
            };
            let max = group.throttle.ask(
                strategy,
                self.model.wide_steal,
                &victim,
                group.idle as usize,
                self.model.max_steal,
            );
            group.victim = Some(victim);
            requests.push((victim.peer, index as u32, max.min(u32::MAX as usize) as u32));
        }
        for (at, group) in retries {
            self.schedule(at, Ev::StealRetry { node, group });
        }
        for (victim, group, max) in requests {
            self.messages.steal_requests += 1;
            if self.nodes[victim as usize].site != self.nodes[node as usize].site {
                self.messages.wide_area_steals += 1;
            }
            self.send(node, victim, Msg::Steal { group, max }, 0);
        }
    }

    /// Answers the requests that waited while `node` answered others, in
    /// the order they came, until one keeps it busy.
    fn answer_waiting(&mut self, node: u32) {
        loop {
            let state = &mut self.nodes[node as usize];
            if state.life != Life::Alive || state.answering_until > self.now {
                return;
            }
            let Some((thief, group, max)) = state.waiting.pop_front() else {
                return;
            };
            self.export(node, thief, group, max);
        }
    }

    /// Answers a steal request: up to half of the queued work, at most
    /// what the thief and this node allow (the net driver's rule).
    fn export(&mut self, node: u32, thief: u32, group: u32, max: u32) {
        let context = self.nodes[thief as usize].groups[group as usize].context;
        let context = &self.contexts[context as usize];
        let state = &mut self.nodes[node as usize];
        state.requests_handled += 1;
        let queued = state.core.counts().queued;
        let loot = if queued == 0 {
            Vec::new()
        } else {
            let max = (max as usize)
                .min(self.model.max_steal)
                .min(queued.div_ceil(2))
                .max(1);
            state
                .core
                .steal_off_node(context, max, Place(u64::from(thief)))
        };
        let mut bytes = 0;
        for stolen in &loot {
            let spec = &self.workload.activities[stolen.body.spec as usize];
            bytes += self.workload.kinds[spec.kind as usize].state_bytes;
            state.custody.exported(
                stolen.id,
                thief,
                Copy {
                    spec: stolen.body.spec,
                    attempt: stolen.body.attempt,
                    parent: stolen.body.parent,
                    contexts: stolen.contexts.clone(),
                    pending: stolen.pending.iter().map(|event| event.source).collect(),
                },
            );
        }
        self.messages.moved += loot.len() as u64;
        if self.nodes[thief as usize].site != self.nodes[node as usize].site {
            self.messages.wide_area_moved += loot.len() as u64;
        }
        let answer = nanos(self.model.answer_cost.seconds(loot.len()));
        let state = &mut self.nodes[node as usize];
        state.answering_until = self.now.saturating_add(answer);
        state.answering = state.answering.saturating_add(answer);
        if answer > 0 {
            let done = state.answering_until;
            self.schedule(done, Ev::Answered(node));
        }
        self.drain(node);
        self.send_after(node, thief, Msg::Loot { group, loot }, bytes, answer);
    }

    /// A steal reply from `from` (or news that the request failed) reached `node`.
    fn loot(&mut self, node: u32, from: u32, group: u32, loot: Vec<Stolen<Body>>) {
        let now = self.instant();
        let round = self.round(node);
        let nodes = self.nodes.len();
        let home_site = self.nodes[node as usize].site;
        let home_work = loot.iter().any(|stolen| {
            node_of(nodes, stolen.id.origin())
                .is_some_and(|origin| self.nodes[origin as usize].site == home_site)
        });
        let group_state = &mut self.nodes[node as usize].groups[group as usize];
        // No victim: the request was abandoned when its victim was declared
        // dead, and this reply left before it died.
        if let Some(victim) = group_state.victim.take() {
            group_state
                .throttle
                .replied(&victim, loot.len(), round, now);
            if home_work {
                group_state.throttle.found_home_work();
            }
        }
        if loot.is_empty() {
            self.messages.empty_replies += 1;
        }
        for stolen in loot {
            self.import(node, group, from, stolen);
        }
        self.drain(node);
        self.try_steal(node);
    }

    /// Takes in one stolen activity.
    fn import(&mut self, node: u32, group: u32, exporter: u32, stolen: Stolen<Body>) {
        let id = stolen.id;
        let state = &mut self.nodes[node as usize];
        let members = &state.groups[group as usize].members;
        let executor = (members.iter().copied())
            .find(|&e| state.executors[e as usize].idle)
            .unwrap_or(members[0]);
        state.custody.imported(id, exporter);
        if state.core.accept(executor as usize, stolen).is_err() {
            // It is here already (an earlier hand-over that came back).
            state.custody.pop_import(id);
            self.send(node, exporter, Msg::Declined(id), 0);
            return;
        }
        if let Some((_, events)) = self.nodes[node as usize].early.remove(&id) {
            for event in events {
                self.deliver(node, event, true);
            }
        }
    }

    /// How many victims a full round of empty replies takes.
    fn round(&self, node: u32) -> usize {
        match self.model.strategy {
            Strategy::MasterWorker => 1,
            _ => {
                let view = View {
                    members: &self.members,
                    me: node,
                    master: None,
                };
                view.on_site_count() + view.away_count()
            }
        }
    }

    // ----- the end ----------------------------------------------------------

    fn stalled(&self, why: &str) -> SimError {
        let live: Vec<&SimNode> = (self.nodes.iter())
            .filter(|node| node.life == Life::Alive)
            .collect();
        let counts = (live.iter())
            .map(|node| node.core.counts())
            .fold(Default::default(), crate::core::Counts::merge);
        SimError::Stalled {
            at: seconds(self.now),
            unfinished: self.roots_left,
            roots: self.workload.roots.len(),
            reason: format!(
                "{why}; {} live nodes hold {} queued and {} suspended activities, {} activities were given up{}",
                live.len(),
                counts.queued,
                counts.live - counts.queued - counts.running - counts.ready,
                self.lost,
                if counts.queued > 0 {
                    " (queued work that no live executor can run waits forever: did the nodes that could run it die?)"
                } else {
                    ""
                }
            ),
        }
    }

    fn report(mut self) -> SimReport {
        let makespan = self.now;
        let mut executors = Vec::new();
        let mut nodes = Vec::new();
        let mut capacity = 0.0;
        for (index, (state, spec)) in self.nodes.iter().zip(&self.model.nodes).enumerate() {
            let joined = nanos(spec.joins_at);
            let died = spec.dies_at.map(nanos).filter(|&died| died <= makespan);
            let until = died.unwrap_or(makespan);
            capacity += seconds(until.saturating_sub(joined)) * state.executors.len() as f64;
            nodes.push(NodeSummary {
                name: spec.name.clone(),
                site: state.site,
                joined: seconds(joined),
                died: died.map(seconds),
                requests_handled: state.requests_handled,
                answering: seconds(state.answering),
            });
            for (e, exec) in state.executors.iter().enumerate() {
                let running = exec.call.as_ref().map_or(0, |call| makespan - call.start);
                executors.push(ExecutorSummary {
                    node: index as u32,
                    index: e as u32,
                    labels: spec.executors[e].context.label_list(),
                    cores: exec.cores,
                    busy: seconds(exec.busy + running),
                });
            }
        }
        let mut completed: Vec<ActivityId> = (self.records.iter())
            .filter(|record| record.outcome == AttemptEnd::Completed)
            .map(|record| record.activity)
            .collect();
        let work: f64 = (self.records.iter())
            .filter(|record| record.outcome == AttemptEnd::Completed)
            .map(|record| record.busy - record.transfer)
            .sum();
        let total = completed.len() as u64;
        completed.sort_unstable();
        completed.dedup();
        let duplicates = total - completed.len() as u64;
        let master = self.model.master as u32;
        SimReport {
            strategy: self.model.strategy,
            seed: self.model.seed,
            makespan: seconds(makespan),
            sites: self.model.sites.iter().map(|s| s.name.clone()).collect(),
            master,
            master_load: nodes[master as usize].requests_handled,
            busiest_victim: (nodes.iter())
                .map(|node| node.requests_handled)
                .max()
                .unwrap_or(0),
            nodes,
            executors,
            kinds: self.workload.kinds.iter().map(|k| k.name.clone()).collect(),
            context_lists: std::mem::take(&mut self.context_texts),
            records: std::mem::take(&mut self.records),
            messages: std::mem::take(&mut self.messages),
            completed: completed.len() as u64,
            requeued: self.requeued,
            lost: self.lost,
            duplicates,
            undeliverable: self.undeliverable,
            work,
            capacity,
            efficiency: if capacity > 0.0 { work / capacity } else { 0.0 },
            events: self.events,
        }
    }
}

/// The index of the node with id `id` (node `i` has id `i + 1`), if any.
fn node_of(nodes: usize, id: NodeId) -> Option<u32> {
    let index = id.uuid().as_u128().checked_sub(1)?;
    (index < nodes as u128).then_some(index as u32)
}

fn seconds(time: Time) -> f64 {
    time as f64 / 1e9
}
