//! A cluster of [`StateMachine`]s on a virtual clock, wired by a fake network: the
//! shape of quinn-proto's `Pair`, for many nodes.
//!
//! Everything happens in one thread, in the order of a queue of timed
//! happenings (a message arrives, a send fails, a timer fires, a job
//! ends), so a run with the same seed replays exactly. The network delays
//! each message by its link's latency plus a seeded jitter (so messages on
//! one link may overtake each other, as requests on separate streams do),
//! drops what crosses a cut link, and answers a message to a dead node
//! with a send failure after the way back, as a refused connection would
//! (the sender hears [`StateMachine::handle_send_failed`] and
//! [`StateMachine::handle_unreachable`]).
//!
//! After every input to a node, the harness does what a driver does:
//! drains [`StateMachine::poll_output`], re-arms the node's timer at its last
//! [`Output::Timeout`], starts queued work on idle
//! executors and, when an executor runs out of work, says so once with
//! [`StateMachine::handle_idle`] (as the local pool does).

use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap, HashSet};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::fake_host::{FakeEvent, FakeHost, Job};
use super::{node_id, settings, swim};
use crate::id::{ActivityId, IdIssuer};
use crate::protocol::{
    Delivery, Envelope, MemberInfo, Message, NodeEvent, Notice, Output, SendToken, Settings,
    StateMachine,
};

/// The node under test, as the harness runs it.
pub(super) type TestNode = StateMachine<u32, FakeHost>;
/// A message as the harness carries it.
pub(super) type TestEnvelope = Envelope<u32, Job, FakeEvent>;

/// Whether a node runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Life {
    Up,
    /// Starved of CPU: it takes nothing in until `until`, then catches up.
    Paused {
        until: Duration,
    },
    Dead,
}

/// One node of the cluster with its host and what the harness keeps for it.
pub(super) struct Slot {
    pub(super) node: TestNode,
    pub(super) host: FakeHost,
    pub(super) life: Life,
    /// What the node said to its driver, and when.
    pub(super) events: Vec<(Duration, NodeEvent)>,
    /// The timer the harness holds for it.
    armed: Option<Duration>,
    /// Which executors were idle when the harness last looked.
    idle_seen: Vec<bool>,
    ids: IdIssuer,
}

/// Something that happens at a moment of virtual time.
enum Happening {
    Arrive {
        from: u32,
        to: u32,
        envelope: TestEnvelope,
    },
    SendFailed {
        node: u32,
        to: u32,
        token: SendToken,
    },
    Timer {
        node: u32,
        at: Duration,
    },
    Finish {
        node: u32,
        executor: usize,
        id: ActivityId,
    },
    Resume {
        node: u32,
    },
}

impl Happening {
    /// The node it happens to.
    fn node(&self) -> u32 {
        match self {
            Happening::Arrive { to, .. } => *to,
            Happening::SendFailed { node, .. }
            | Happening::Timer { node, .. }
            | Happening::Finish { node, .. }
            | Happening::Resume { node } => *node,
        }
    }
}

/// A happening in the queue, ordered by time, then by when it was queued.
struct Scheduled {
    at: Duration,
    seq: u64,
    what: Happening,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: the heap pops the earliest first.
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// An event notice that crossed a link.
#[derive(Debug, Clone)]
pub(super) struct Hop {
    pub(super) arrived: Duration,
    pub(super) from: u32,
    pub(super) to: u32,
    pub(super) event: FakeEvent,
}

/// A loot that reached its thief.
#[derive(Debug, Clone)]
pub(super) struct LootSeen {
    pub(super) arrived: Duration,
    pub(super) from: u32,
    pub(super) to: u32,
    /// The activities it carried, with their attempt.
    pub(super) activities: Vec<(ActivityId, u32)>,
}

/// A SWIM update about the watched node, seen in a packet.
#[derive(Debug, Clone)]
pub(super) struct Sighting {
    pub(super) at: Duration,
    pub(super) state: foca::State,
    pub(super) incarnation: u16,
}

/// What crossed the network.
#[derive(Debug, Default)]
pub(super) struct NetLog {
    /// Messages sent, by kind.
    pub(super) sent: BTreeMap<&'static str, u64>,
    /// Messages that crossed a cut link and were lost.
    pub(super) dropped: u64,
    /// Send failures reported to nodes: when, who sent, to whom, the steal.
    pub(super) send_failures: Vec<(Duration, u32, u32, Option<u64>)>,
    /// Steal requests sent: when, thief, victim, request.
    pub(super) steals: Vec<(Duration, u32, u32, u64)>,
    /// Event notices that arrived at a live node.
    pub(super) hops: Vec<Hop>,
    /// Loots that arrived at a live node.
    pub(super) loots: Vec<LootSeen>,
    /// Notices that arrived at a live node: when, from, to, the notice
    /// (events are in `hops`).
    pub(super) notices: Vec<(Duration, u32, u32, Notice<FakeEvent>)>,
    /// `Leaving` messages that arrived: when, from, to.
    pub(super) leaving: Vec<(Duration, u32, u32)>,
    /// The node whose SWIM state the harness reads out of packets.
    pub(super) watched: Option<u32>,
    pub(super) sightings: Vec<Sighting>,
}

/// The cluster. See the [module docs](self).
pub(super) struct Cluster {
    base: Instant,
    now: Duration,
    pub(super) slots: Vec<Slot>,
    queue: BinaryHeap<Scheduled>,
    seq: u64,
    rng: StdRng,
    /// Latency of a link unless `links` says otherwise.
    pub(super) latency: Duration,
    /// The most a message is delayed beyond its link's latency.
    pub(super) jitter: Duration,
    links: BTreeMap<(u32, u32), Duration>,
    /// Latencies of one kind of message on a link, over `links`.
    kind_links: BTreeMap<(u32, u32, &'static str), Duration>,
    /// Directed links that lose everything.
    cut: HashSet<(u32, u32)>,
    /// Directed links that lose messages of one kind (see [`kind`]).
    lossy: HashSet<(u32, u32, &'static str)>,
    pub(super) log: NetLog,
    /// Contract breaches the harness saw; a run stops at the first.
    violations: Vec<String>,
    /// Steps taken at the current instant, to catch a node that asks to
    /// be woken at once, forever.
    steps_now: u64,
    /// Steps taken in all.
    pub(super) steps: u64,
}

/// The most steps at one instant before the harness calls it a livelock.
const MAX_STEPS_AT_ONE_INSTANT: u64 = 1_000_000;

impl Cluster {
    /// `count` nodes, each with one executor (off) and the default test
    /// settings; none knows another yet.
    pub(super) fn new(count: u32) -> Self {
        Cluster::with(count, |_| 1, |_, _| {})
    }

    /// `count` nodes; node `i` has `executors(i)` executors (off) and the
    /// default test settings changed by `tweak`.
    pub(super) fn with(
        count: u32,
        executors: impl Fn(u32) -> usize,
        tweak: impl Fn(u32, &mut Settings),
    ) -> Self {
        let base = Instant::now();
        let slots = (0..count)
            .map(|index| {
                let mut settings = settings(index);
                tweak(index, &mut settings);
                let host = FakeHost::new(executors(index));
                let info = MemberInfo {
                    site: settings.site.clone(),
                    steal_pool: settings.steal_pool.clone(),
                    master: settings.master,
                    executors: crate::protocol::Host::executor_contexts(&host),
                };
                let idle_seen = host.idle_executors();
                Slot {
                    node: StateMachine::new(settings, index, info, base),
                    host,
                    life: Life::Up,
                    events: Vec::new(),
                    armed: None,
                    idle_seen,
                    ids: IdIssuer::new(node_id(index), 1),
                }
            })
            .collect();
        let mut cluster = Cluster {
            base,
            now: Duration::ZERO,
            slots,
            queue: BinaryHeap::new(),
            seq: 0,
            rng: StdRng::seed_from_u64(0xC0FFEE ^ u64::from(count)),
            latency: Duration::from_millis(1),
            jitter: Duration::from_micros(200),
            links: BTreeMap::new(),
            kind_links: BTreeMap::new(),
            cut: HashSet::new(),
            lossy: HashSet::new(),
            log: NetLog::default(),
            violations: Vec::new(),
            steps_now: 0,
            steps: 0,
        };
        for index in 0..count {
            cluster.settle(index);
        }
        cluster
    }

    // ----- time and inspection ----------------------------------------

    /// Virtual time since the cluster was made.
    pub(super) fn now(&self) -> Duration {
        self.now
    }

    fn instant(&self) -> Instant {
        self.base + self.now
    }

    pub(super) fn node(&self, index: u32) -> &TestNode {
        &self.slots[index as usize].node
    }

    pub(super) fn host(&self, index: u32) -> &FakeHost {
        &self.slots[index as usize].host
    }

    /// The usable members `index` lists, by index, in order.
    pub(super) fn members_of(&self, index: u32) -> Vec<u32> {
        let mut members: Vec<u32> = self.node(index).members().map(|(id, _)| id.peer).collect();
        members.sort_unstable();
        members
    }

    /// Whether every live node lists every other live node, and nothing
    /// else, as a usable member.
    pub(super) fn converged(&self) -> bool {
        let live = self.live();
        live.iter().all(|&index| {
            let others = live.iter().copied().filter(|&other| other != index);
            self.members_of(index).into_iter().eq(others)
        })
    }

    /// The nodes not dead.
    pub(super) fn live(&self) -> Vec<u32> {
        (0..self.slots.len() as u32)
            .filter(|&i| self.slots[i as usize].life != Life::Dead)
            .collect()
    }

    /// Each node's state in a few lines, for a failing test to show.
    pub(super) fn describe(&self) -> String {
        let mut text = String::new();
        for (index, slot) in self.slots.iter().enumerate().take(12) {
            let node = &slot.node;
            let host = &slot.host;
            text += &format!(
                "node {index} ({:?}, bump {}): members {:?} ({} known), backlog {:?}, {:?}\n    \
                 host: {} queued, running {:?}, imports {:?}, exports {}, reclaims {:?}, settles {}, finished {}, delivered {}\n",
                slot.life,
                node.id().bump,
                self.members_of(index as u32),
                node.members_known(),
                node.backlog(),
                node.stats(),
                host.queue_len(),
                host.running(),
                host.imports,
                host.exports.len(),
                host.reclaims,
                host.settles.len(),
                host.finished.len(),
                host.delivered.len(),
            );
        }
        text += &format!(
            "messages sent: {:?}, dropped {}\n",
            self.log.sent, self.log.dropped
        );
        text
    }

    /// What node `index` told its driver, in order.
    pub(super) fn events_of(&self, index: u32) -> impl Iterator<Item = &NodeEvent> {
        self.slots[index as usize].events.iter().map(|(_, e)| e)
    }

    /// Whether a message in flight from `from` to `to` passes `test`.
    pub(super) fn in_flight(
        &self,
        from: u32,
        to: u32,
        test: impl Fn(&Message<Job, FakeEvent>) -> bool,
    ) -> bool {
        self.queue.iter().any(|s| match &s.what {
            Happening::Arrive {
                from: f,
                to: t,
                envelope,
                ..
            } => *f == from && *t == to && test(&envelope.message),
            _ => false,
        })
    }

    /// Every finished job on every node: id -> how many times it finished
    /// and the attempts it finished with.
    pub(super) fn all_finished(&self) -> BTreeMap<ActivityId, Vec<u32>> {
        let mut all: BTreeMap<ActivityId, Vec<u32>> = BTreeMap::new();
        for slot in &self.slots {
            for (id, attempt) in &slot.host.finished {
                all.entry(*id).or_default().push(*attempt);
            }
        }
        all
    }

    // ----- the network --------------------------------------------------

    /// Sets the latency of the link `from` -> `to`; messages already in
    /// flight keep theirs.
    pub(super) fn set_latency(&mut self, from: u32, to: u32, latency: Duration) {
        self.links.insert((from, to), latency);
    }

    /// Loses every message between `a` and `b`, both ways.
    pub(super) fn cut(&mut self, a: u32, b: u32) {
        self.cut.insert((a, b));
        self.cut.insert((b, a));
    }

    /// Cuts every link between the two groups.
    pub(super) fn partition(&mut self, left: &[u32], right: &[u32]) {
        for &a in left {
            for &b in right {
                self.cut(a, b);
            }
        }
    }

    /// Mends every cut link, and every link that lost one kind of message.
    pub(super) fn heal(&mut self) {
        self.cut.clear();
        self.lossy.clear();
    }

    /// Messages of one kind (see [`kind`]) between `a` and `b`, both ways,
    /// are lost until [`heal`](Self::heal); the others go through.
    pub(super) fn lose_kind(&mut self, a: u32, b: u32, kind: &'static str) {
        self.lossy.insert((a, b, kind));
        self.lossy.insert((b, a, kind));
    }

    /// Sets the latency of messages of one kind (see [`kind`]) on the link
    /// `from` -> `to`, so that they fall behind or overtake the others.
    pub(super) fn set_kind_latency(
        &mut self,
        from: u32,
        to: u32,
        kind: &'static str,
        latency: Duration,
    ) {
        self.kind_links.insert((from, to, kind), latency);
    }

    fn link_delay(&mut self, from: u32, to: u32) -> Duration {
        self.message_delay(from, to, "")
    }

    fn message_delay(&mut self, from: u32, to: u32, kind: &'static str) -> Duration {
        let latency = (self.kind_links.get(&(from, to, kind)).copied())
            .or_else(|| self.links.get(&(from, to)).copied())
            .unwrap_or(self.latency);
        let jitter = self.jitter.as_nanos() as u64;
        let extra = if jitter == 0 {
            0
        } else {
            self.rng.gen_range(0..=jitter)
        };
        latency + Duration::from_nanos(extra)
    }

    // ----- what tests do to nodes --------------------------------------

    /// Node `index` is told of node `peer`, as of a bootstrap address.
    pub(super) fn contact(&mut self, index: u32, peer: u32) {
        self.input(index, |node, _, now| node.contact(peer, now));
    }

    /// Every node but 0 contacts node 0; runs until all know all.
    pub(super) fn form(&mut self, limit: Duration) -> Result<Duration, String> {
        for index in 1..self.slots.len() as u32 {
            self.contact(index, 0);
        }
        self.run_until(limit, "every node lists every other", |c| c.converged())
    }

    /// Queues a job on node `index` that runs for `run_for` once started.
    pub(super) fn submit(&mut self, index: u32, run_for: Duration) -> ActivityId {
        self.submit_job(index, run_for, |_| {})
    }

    /// [`submit`](Self::submit), with the job changed by `shape` first.
    pub(super) fn submit_job(
        &mut self,
        index: u32,
        run_for: Duration,
        shape: impl FnOnce(&mut Job),
    ) -> ActivityId {
        let slot = &mut self.slots[index as usize];
        let id = slot.ids.issue();
        let mut job = Job {
            id,
            payload: id.seq() as u32,
            run_for,
            restartable: true,
            early: Vec::new(),
        };
        shape(&mut job);
        slot.host.submit(job);
        self.settle(index);
        id
    }

    /// Turns node `index`'s executors on or off.
    pub(super) fn executors_on(&mut self, index: u32, on: bool) {
        self.slots[index as usize].host.set_executors_on(on);
        self.settle(index);
    }

    /// Whether node `index`'s idle executors leave queued work alone.
    pub(super) fn hold_queued(&mut self, index: u32, hold: bool) {
        self.slots[index as usize].host.hold_queued = hold;
        self.settle(index);
    }

    /// An activity on node `from` sends an event to `target`: the host
    /// delivers it, or the node routes it.
    pub(super) fn send_event(&mut self, from: u32, target: ActivityId, value: u32) -> FakeEvent {
        let source = self.slots[from as usize].ids.issue();
        let event = FakeEvent {
            source,
            target,
            value,
        };
        let sent = event.clone();
        self.input(
            from,
            move |node, host, now| match crate::protocol::Host::deliver(host, event) {
                Delivery::Delivered | Delivery::Gone => {}
                Delivery::Away(event) | Delivery::Unknown(event) => node.route(event, now, host),
            },
        );
        sent
    }

    /// Node `index` leaves the pool.
    pub(super) fn leave(&mut self, index: u32) {
        self.input(index, |node, host, now| node.leave(now, host));
    }

    /// Node `index` stops stealing.
    pub(super) fn stop_stealing(&mut self, index: u32) {
        self.input(index, |node, _, _| node.stop_stealing());
    }

    /// Node `index` dies: it does nothing more, and messages to it fail.
    pub(super) fn kill(&mut self, index: u32) {
        let slot = &mut self.slots[index as usize];
        slot.life = Life::Dead;
        slot.armed = None;
    }

    /// Node `index` gets no CPU for `span`: messages to it, its timers and
    /// its work wait, and it catches up afterwards.
    pub(super) fn pause(&mut self, index: u32, span: Duration) {
        let until = self.now + span;
        self.slots[index as usize].life = Life::Paused { until };
        self.schedule(until, Happening::Resume { node: index });
    }

    /// Watches SWIM's view of node `index` in every packet that crosses.
    pub(super) fn watch(&mut self, index: u32) {
        self.log.watched = Some(index);
    }

    // ----- running --------------------------------------------------------

    /// Runs until `done` holds, at most `limit` of virtual time from now;
    /// returns the virtual time it took, or says what did not happen.
    pub(super) fn run_until(
        &mut self,
        limit: Duration,
        what: &str,
        mut done: impl FnMut(&Cluster) -> bool,
    ) -> Result<Duration, String> {
        let start = self.now;
        let deadline = self.now + limit;
        loop {
            if let Some(violation) = self.violations.first() {
                return Err(format!(
                    "{what}: the harness saw a contract breach: {violation}"
                ));
            }
            if done(self) {
                return Ok(self.now - start);
            }
            match self.queue.peek() {
                Some(next) if next.at <= deadline => self.step()?,
                _ => {
                    self.now = deadline;
                    return Err(format!(
                        "{what}: not within {limit:?} of virtual time (now {:?}, {} steps)\n{}",
                        self.now,
                        self.steps,
                        self.describe()
                    ));
                }
            }
        }
    }

    /// [`run_until`](Self::run_until) for a costly `done`: asks it only
    /// when `every` of virtual time has passed since it last asked.
    pub(super) fn run_until_every(
        &mut self,
        limit: Duration,
        every: Duration,
        what: &str,
        mut done: impl FnMut(&Cluster) -> bool,
    ) -> Result<Duration, String> {
        let start = self.now;
        let mut next_look = self.now;
        self.run_until(limit, what, |cluster| {
            if cluster.now < next_look {
                return false;
            }
            next_look = cluster.now + every;
            done(cluster)
        })?;
        Ok(self.now - start)
    }

    /// Runs for `span` of virtual time.
    pub(super) fn run_for(&mut self, span: Duration) -> Result<(), String> {
        let deadline = self.now + span;
        while self.queue.peek().is_some_and(|next| next.at <= deadline) {
            self.step()?;
            if let Some(violation) = self.violations.first() {
                return Err(format!("the harness saw a contract breach: {violation}"));
            }
        }
        self.now = deadline;
        Ok(())
    }

    /// Takes the next happening off the queue and feeds it to its node.
    fn step(&mut self) -> Result<(), String> {
        let Some(Scheduled { at, what, .. }) = self.queue.pop() else {
            return Ok(());
        };
        if at > self.now {
            self.now = at;
            self.steps_now = 0;
        }
        self.steps += 1;
        self.steps_now += 1;
        if self.steps_now > MAX_STEPS_AT_ONE_INSTANT {
            return Err(format!(
                "{MAX_STEPS_AT_ONE_INSTANT} steps at {:?} without time moving: a livelock",
                self.now
            ));
        }
        let index = what.node();
        match self.slots[index as usize].life {
            Life::Dead => {
                if let Happening::Arrive {
                    from, to, envelope, ..
                } = what
                {
                    // As a reset connection would tell the sender.
                    let back = self.link_delay(to, from);
                    let token = SendToken::of(&envelope.message);
                    self.schedule(
                        self.now + back,
                        Happening::SendFailed {
                            node: from,
                            to,
                            token,
                        },
                    );
                }
                return Ok(());
            }
            Life::Paused { until } if !matches!(what, Happening::Resume { .. }) => {
                // Kept in order for when it wakes.
                self.schedule(until, what);
                return Ok(());
            }
            _ => {}
        }
        match what {
            Happening::Arrive { from, to, envelope } => {
                self.record_arrival(from, to, &envelope);
                self.input(to, move |node, host, now| {
                    node.handle_message(envelope, now, host)
                });
            }
            Happening::SendFailed { node, to, token } => {
                let steal = token.steal_request();
                self.log.send_failures.push((self.now, node, to, steal));
                // Only a dead node's messages fail here, as a refused
                // connection tells its sender.
                self.input(node, move |n, host, now| {
                    n.handle_send_failed(&to, token, now, host);
                    n.handle_unreachable(&to, now);
                });
            }
            Happening::Timer { node, at } => {
                let slot = &mut self.slots[node as usize];
                if slot.armed == Some(at) {
                    slot.armed = None;
                    self.input(node, |n, host, now| n.handle_timeout(now, host));
                }
            }
            Happening::Finish { node, executor, id } => {
                let now = self.now;
                if self.slots[node as usize].host.finish(executor, id, now) {
                    self.input(node, move |n, host, now| n.handle_finished(id, now, host));
                }
            }
            Happening::Resume { node } => {
                let slot = &mut self.slots[node as usize];
                if matches!(slot.life, Life::Paused { until } if until <= self.now) {
                    // What came while it slept, its timer included, was
                    // queued again for this moment, after this wake-up.
                    slot.life = Life::Up;
                    self.settle(node);
                }
            }
        }
        Ok(())
    }

    fn schedule(&mut self, at: Duration, what: Happening) {
        self.seq += 1;
        self.queue.push(Scheduled {
            at,
            seq: self.seq,
            what,
        });
    }

    /// Feeds node `index` one input, then does the driver's duties.
    fn input(&mut self, index: u32, feed: impl FnOnce(&mut TestNode, &mut FakeHost, Instant)) {
        if self.slots[index as usize].life == Life::Dead {
            return;
        }
        let now = self.instant();
        let slot = &mut self.slots[index as usize];
        feed(&mut slot.node, &mut slot.host, now);
        self.settle(index);
    }

    /// The driver's duties after an input: send what the node wants sent,
    /// keep its events, start work, say when executors run dry, re-arm.
    fn settle(&mut self, index: u32) {
        if self.slots[index as usize].life == Life::Dead {
            return;
        }
        let wanted = loop {
            let wake = self.drain(index);
            let now = self.now;
            let slot = &mut self.slots[index as usize];
            let started = slot.host.start_ready(now);
            let idle = slot.host.idle_executors();
            let newly_idle = idle
                .iter()
                .zip(&slot.idle_seen)
                .any(|(now, before)| *now && !before);
            slot.idle_seen = idle;
            for (executor, id, until) in started {
                self.schedule(
                    until,
                    Happening::Finish {
                        node: index,
                        executor,
                        id,
                    },
                );
            }
            if !newly_idle {
                break wake;
            }
            let instant = self.instant();
            let slot = &mut self.slots[index as usize];
            slot.node.handle_idle(instant, &mut slot.host);
        };
        let slot = &mut self.slots[index as usize];
        if let Some(complaint) = slot.host.complaints.first() {
            self.violations
                .push(format!("node {index}'s host: {complaint}"));
        }
        let wanted = wanted.map(|at| at.saturating_duration_since(self.base));
        if wanted != slot.armed {
            slot.armed = wanted;
            if let Some(at) = wanted {
                let fire_at = at.max(self.now);
                self.schedule(fire_at, Happening::Timer { node: index, at });
            }
        }
    }

    /// Takes what node `index` wants sent and told, and sends it; returns
    /// when it wants to be woken.
    fn drain(&mut self, index: u32) -> Option<Instant> {
        let now = self.now;
        let slot = &mut self.slots[index as usize];
        let mut outgoing = Vec::new();
        let mut wake = None;
        while let Some(output) = slot.node.poll_output() {
            match output {
                Output::Transmit(transmit) => outgoing.push(transmit),
                Output::Event(event) => slot.events.push((now, event)),
                Output::Timeout(at) => wake = Some(at),
            }
        }
        for transmit in outgoing {
            let to = transmit.to;
            let envelope = transmit.envelope;
            if envelope.from.peer != index || envelope.from.node != node_id(index) {
                self.violations.push(format!(
                    "node {index} sent a message as {:?}",
                    envelope.from
                ));
            }
            if to == index {
                self.violations
                    .push(format!("node {index} sent itself {:?}", envelope.message));
                continue;
            }
            if to as usize >= self.slots.len() {
                self.violations.push(format!(
                    "node {index} sent to node {to}, which does not exist"
                ));
                continue;
            }
            *self.log.sent.entry(kind(&envelope.message)).or_default() += 1;
            if let Message::Steal { request, .. } = &envelope.message {
                self.log.steals.push((now, index, to, *request));
            }
            if self.cut.contains(&(index, to))
                || (self.lossy).contains(&(index, to, kind(&envelope.message)))
            {
                self.log.dropped += 1;
                continue;
            }
            let delay = self.message_delay(index, to, kind(&envelope.message));
            self.schedule(
                now + delay,
                Happening::Arrive {
                    from: index,
                    to,
                    envelope,
                },
            );
        }
        wake
    }

    fn record_arrival(&mut self, from: u32, to: u32, envelope: &TestEnvelope) {
        let arrived = self.now;
        match &envelope.message {
            Message::Notices(notices) => {
                for notice in notices {
                    match notice {
                        Notice::Event(event) => self.log.hops.push(Hop {
                            arrived,
                            from,
                            to,
                            event: event.clone(),
                        }),
                        other => self.log.notices.push((arrived, from, to, other.clone())),
                    }
                }
            }
            Message::Loot { activities, .. } => self.log.loots.push(LootSeen {
                arrived,
                from,
                to,
                activities: activities.iter().map(|a| (a.id, a.attempt)).collect(),
            }),
            Message::Leaving => self.log.leaving.push((arrived, from, to)),
            Message::Swim(bytes) => {
                if let Some(watched) = self.log.watched {
                    match swim::updates(bytes) {
                        Ok(updates) => {
                            for member in updates.iter().filter(|m| m.id().peer == watched) {
                                self.log.sightings.push(Sighting {
                                    at: arrived,
                                    state: member.state(),
                                    incarnation: member.incarnation(),
                                });
                            }
                        }
                        Err(error) => self.violations.push(format!(
                            "a SWIM packet from node {from} does not decode: {error}"
                        )),
                    }
                }
            }
            Message::Hello { .. } | Message::Steal { .. } => {}
        }
    }
}

/// A message's kind, for counting.
pub(super) fn kind<B, E>(message: &Message<B, E>) -> &'static str {
    match message {
        Message::Swim(_) => "swim",
        Message::Hello { .. } => "hello",
        Message::Steal { .. } => "steal",
        Message::Loot { .. } => "loot",
        Message::Notices(_) => "notices",
        Message::Leaving => "leaving",
    }
}
