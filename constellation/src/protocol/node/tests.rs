//! Unit tests of [`StateMachine`]: a few nodes with a tiny fake host, wired by a
//! small harness on virtual time. (The protocol's full message-level
//! tests live in `protocol/tests`.)

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::{NodeEvent, Output, SendToken, Settings, StateMachine};
use crate::context::{ContextList, ExecutorContext};
use crate::id::{ActivityId, IdIssuer, NodeId};
use crate::protocol::host::{Delivery, Export, Host, Routed};
use crate::protocol::message::{Envelope, MemberInfo, Travelling};
use crate::protocol::strategy::{Strategy, WideSteal};

#[derive(Debug, Clone, PartialEq)]
struct Ping {
    source: ActivityId,
    target: ActivityId,
}

impl Routed for Ping {
    fn source(&self) -> ActivityId {
        self.source
    }
    fn target(&self) -> ActivityId {
        self.target
    }
}

/// A node's executors, reduced to lists.
#[derive(Debug, Default)]
struct FakeHost {
    idle: usize,
    queued: Vec<ActivityId>,
    imported: Vec<(ActivityId, u32)>,
    reclaimed: Vec<(ActivityId, u32)>,
    settled: Vec<ActivityId>,
    delivered: Vec<Ping>,
}

impl Host for FakeHost {
    type Body = String;
    type Event = Ping;

    fn executor_contexts(&self) -> Vec<ExecutorContext> {
        vec![ExecutorContext::anywhere()]
    }
    fn idle_contexts(&self) -> Vec<(ExecutorContext, usize)> {
        match self.idle {
            0 => Vec::new(),
            idle => vec![(ExecutorContext::anywhere(), idle)],
        }
    }
    fn queued(&self) -> usize {
        self.queued.len()
    }
    fn export(&mut self, _thief: &ExecutorContext, max: usize) -> Vec<Export<String>> {
        let take = max.min(self.queued.len());
        (self.queued.drain(..take))
            .map(|id| Export {
                id,
                body: id.to_string(),
                contexts: ContextList::anywhere(),
                trail: Vec::new(),
                restartable: true,
            })
            .collect()
    }
    fn import(&mut self, activity: Travelling<String>) -> Result<(), String> {
        self.imported.push((activity.id, activity.attempt));
        // An idle executor takes it up.
        self.idle = self.idle.saturating_sub(1);
        Ok(())
    }
    fn reclaim(
        &mut self,
        export: &Export<String>,
        attempt: u32,
        _stealable: bool,
    ) -> Result<(), String> {
        self.reclaimed.push((export.id, attempt));
        self.queued.push(export.id);
        Ok(())
    }
    fn settle(&mut self, id: ActivityId, _trail: &[crate::core::Place]) {
        self.settled.push(id);
    }
    fn deliver(&mut self, event: Ping) -> Delivery<Ping> {
        let here = self.queued.contains(&event.target)
            || self.imported.iter().any(|(id, _)| *id == event.target);
        match here {
            true => {
                self.delivered.push(event);
                Delivery::Delivered
            }
            false => Delivery::Unknown(event),
        }
    }
}

type TestNode = StateMachine<u32, FakeHost>;

fn settings(index: u32) -> Settings {
    Settings {
        node: NodeId::from_u128(index as u128 + 1),
        site: None,
        strategy: Strategy::Random,
        master: false,
        steal_pool: "pool".into(),
        steal_from: "pool".into(),
        max_steal: 8,
        wide_steal: WideSteal::default(),
        failure_timeout: Duration::from_secs(1),
        probe_period: Duration::from_millis(200),
        max_attempts: 3,
        early_event_wait: Duration::from_millis(500),
        backoff: (Duration::from_millis(1), Duration::from_millis(50)),
        seed: index as u64,
    }
}

fn info() -> MemberInfo {
    MemberInfo {
        site: None,
        steal_pool: "pool".into(),
        master: false,
        executors: vec![ExecutorContext::anywhere()],
    }
}

type InFlight = (Instant, u32, u32, Envelope<u32, String, Ping>);

/// Nodes wired by a network with a fixed latency, on virtual time.
struct Cluster {
    now: Instant,
    nodes: Vec<TestNode>,
    hosts: Vec<FakeHost>,
    /// Dead nodes drop what reaches them; senders hear of it.
    dead: Vec<bool>,
    /// Starved nodes take nothing in until then; messages wait for them.
    starved_until: Vec<Option<Instant>>,
    in_flight: VecDeque<InFlight>,
    events: Vec<Vec<NodeEvent>>,
    latency: Duration,
}

impl Cluster {
    fn new(count: u32) -> Self {
        Cluster::with(count, |_| {})
    }

    /// Nodes whose settings `adjust` changes.
    fn with(count: u32, adjust: impl Fn(&mut Settings)) -> Self {
        let now = Instant::now();
        let settings = |i| {
            let mut settings = settings(i);
            adjust(&mut settings);
            settings
        };
        Cluster {
            now,
            nodes: (0..count)
                .map(|i| TestNode::new(settings(i), i, info(), now))
                .collect(),
            hosts: (0..count).map(|_| FakeHost::default()).collect(),
            dead: vec![false; count as usize],
            starved_until: vec![None; count as usize],
            in_flight: VecDeque::new(),
            events: vec![Vec::new(); count as usize],
            latency: Duration::from_millis(1),
        }
    }

    /// Every node contacts node 0, and the cluster runs for `time`.
    fn joined(count: u32, time: Duration) -> Self {
        Cluster::new(count).contacted(time)
    }

    fn contacted(self, time: Duration) -> Self {
        let count = self.nodes.len() as u32;
        let mut cluster = self;
        for i in 1..count {
            let now = cluster.now;
            cluster.nodes[i as usize].contact(0, now);
        }
        cluster.run_for(time);
        cluster
    }

    fn awake(&self, index: usize) -> bool {
        !self.dead[index] && self.starved_until[index].is_none_or(|until| until <= self.now)
    }

    /// Carries what every node wants sent.
    fn pump(&mut self) {
        for from in 0..self.nodes.len() {
            // The timer is read where it is needed, with `next_timeout`.
            while let Some(output) = self.nodes[from].poll_output() {
                match output {
                    Output::Transmit(transmit) => {
                        let at = self.now + self.latency;
                        let message = (at, from as u32, transmit.to, transmit.envelope);
                        self.in_flight.push_back(message);
                    }
                    Output::Event(event) => self.events[from].push(event),
                    Output::Timeout(_) => {}
                }
            }
        }
    }

    fn run_for(&mut self, time: Duration) {
        let end = self.now + time;
        loop {
            self.pump();
            let message_at = (self.in_flight.iter())
                .map(|m| self.starved_until[m.2 as usize].map_or(m.0, |until| m.0.max(until)))
                .min();
            let timer_at = (0..self.nodes.len())
                .filter(|&i| !self.dead[i])
                .filter_map(|i| {
                    let at = self.nodes[i].next_timeout()?;
                    Some(self.starved_until[i].map_or(at, |until| at.max(until)))
                })
                .min();
            let Some(next) = [message_at, timer_at].into_iter().flatten().min() else {
                break;
            };
            if next > end {
                break;
            }
            self.now = self.now.max(next);
            let now = self.now;
            // Messages due, to awake nodes, in the order sent.
            let mut waiting = VecDeque::new();
            while let Some((at, from, to, envelope)) = self.in_flight.pop_front() {
                let to_index = to as usize;
                if at > now || (!self.dead[to_index] && !self.awake(to_index)) {
                    waiting.push_back((at, from, to, envelope));
                } else if self.dead[to_index] {
                    let token = SendToken::of(&envelope.message);
                    if !self.dead[from as usize] {
                        let (node, host) = (
                            &mut self.nodes[from as usize],
                            &mut self.hosts[from as usize],
                        );
                        node.handle_send_failed(&to, token, now, host);
                    }
                } else {
                    let (node, host) = (&mut self.nodes[to_index], &mut self.hosts[to_index]);
                    node.handle_message(envelope, now, host);
                }
            }
            self.in_flight = waiting;
            for i in 0..self.nodes.len() {
                if self.awake(i) && self.nodes[i].next_timeout().is_some_and(|at| at <= now) {
                    self.nodes[i].handle_timeout(now, &mut self.hosts[i]);
                }
            }
        }
        self.now = end;
    }

    fn usable_members(&self, index: usize) -> Vec<NodeId> {
        let mut members: Vec<NodeId> = self.nodes[index].members().map(|(id, _)| id.node).collect();
        members.sort();
        members
    }
}

#[test]
fn two_nodes_that_contact_become_members_of_each_other() {
    let cluster = Cluster::joined(2, Duration::from_millis(100));
    assert_eq!(cluster.usable_members(0), vec![settings(1).node]);
    assert_eq!(cluster.usable_members(1), vec![settings(0).node]);
    assert!(cluster.events[0].contains(&NodeEvent::MembersChanged));
    assert_eq!(cluster.nodes[0].members_known(), 1);
}

#[test]
fn members_met_through_one_learn_each_other_by_swim() {
    let cluster = Cluster::joined(5, Duration::from_secs(3));
    for i in 0..5 {
        assert_eq!(
            cluster.usable_members(i).len(),
            4,
            "node {i} knows all others"
        );
    }
}

/// Node 0 holds `count` queued activities; node 1 has an idle executor.
fn with_work(count: usize) -> (Cluster, Vec<ActivityId>) {
    stolen_from(Cluster::joined(2, Duration::from_millis(100)), count)
}

/// Node 0 of `cluster` holds `count` queued activities, and node 1 steals.
fn stolen_from(mut cluster: Cluster, count: usize) -> (Cluster, Vec<ActivityId>) {
    let mut ids = IdIssuer::new(settings(0).node, 0);
    let work: Vec<ActivityId> = (0..count).map(|_| ids.issue()).collect();
    cluster.hosts[0].queued = work.clone();
    cluster.hosts[1].idle = 1;
    let now = cluster.now;
    cluster.nodes[1].handle_idle(now, &mut cluster.hosts[1]);
    cluster.run_for(Duration::from_millis(10));
    cluster.hosts[1].idle = 0;
    (cluster, work)
}

#[test]
fn an_idle_node_steals_half_of_what_a_member_has_queued() {
    let (cluster, work) = with_work(6);
    let taken: Vec<ActivityId> = cluster.hosts[1]
        .imported
        .iter()
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(
        taken,
        work[..3].to_vec(),
        "half of the queue, in queue order"
    );
    assert_eq!(cluster.hosts[0].queued, work[3..].to_vec());
    assert_eq!(cluster.nodes[0].stats().exported, 3);
    assert_eq!(cluster.nodes[1].stats().imported, 3);
    assert_eq!(cluster.nodes[0].backlog().0, 3, "the victim keeps copies");
}

#[test]
fn a_finished_import_settles_the_exporters_copy() {
    let (mut cluster, work) = with_work(2);
    let now = cluster.now;
    cluster.nodes[1].handle_finished(work[0], now, &mut cluster.hosts[1]);
    cluster.run_for(Duration::from_millis(10));
    assert_eq!(cluster.hosts[0].settled, vec![work[0]]);
    assert_eq!(cluster.nodes[0].backlog().0, 0);
}

#[test]
fn work_held_by_a_thief_that_dies_is_queued_again_with_attempt_one() {
    let (mut cluster, work) = with_work(2);
    assert_eq!(cluster.hosts[1].imported, vec![(work[0], 0)]);
    cluster.dead[1] = true;
    cluster.run_for(Duration::from_secs(4));
    assert_eq!(cluster.hosts[0].reclaimed, vec![(work[0], 1)]);
    assert_eq!(cluster.nodes[0].stats().dead_members, 1);
    assert_eq!(cluster.nodes[0].stats().requeued, 1);
    assert!(cluster.usable_members(0).is_empty());
}

#[test]
fn a_node_starved_for_less_than_the_failure_timeout_stays_a_member() {
    let (mut cluster, work) = with_work(2);
    cluster.starved_until[1] = Some(cluster.now + Duration::from_millis(700));
    cluster.run_for(Duration::from_secs(3));
    assert!(
        cluster.hosts[0].reclaimed.is_empty(),
        "{:?}",
        cluster.hosts[0].reclaimed
    );
    assert_eq!(cluster.nodes[0].stats().dead_members, 0);
    assert_eq!(cluster.usable_members(0), vec![settings(1).node]);
    let _ = work;
}

#[test]
fn a_node_declared_down_while_starved_rejoins_under_a_new_bump() {
    let mut cluster = Cluster::joined(3, Duration::from_secs(1));
    cluster.starved_until[2] = Some(cluster.now + Duration::from_secs(4));
    cluster.run_for(Duration::from_secs(3));
    assert!(
        !cluster.usable_members(0).contains(&settings(2).node),
        "declared down"
    );
    cluster.run_for(Duration::from_secs(5));
    assert_eq!(cluster.nodes[2].id().bump, 1, "renewed");
    for i in 0..3 {
        assert_eq!(
            cluster.usable_members(i).len(),
            2,
            "node {i} knows both others again"
        );
    }
}

#[test]
fn an_event_for_an_activity_that_moved_reaches_it_through_its_origin() {
    let mut cluster = Cluster::joined(3, Duration::from_secs(2));
    let mut ids = IdIssuer::new(settings(0).node, 0);
    let work = ids.issue();
    cluster.hosts[0].queued = vec![work];
    cluster.hosts[1].idle = 1;
    // Only node 1 may steal: node 2 has nothing idle.
    let now = cluster.now;
    cluster.nodes[1].handle_idle(now, &mut cluster.hosts[1]);
    cluster.run_for(Duration::from_millis(10));
    cluster.hosts[1].idle = 0;
    assert_eq!(cluster.hosts[1].imported.len(), 1);
    // Node 2 sends an event to it: to its origin, node 0, which forwards.
    let mut source = IdIssuer::new(settings(2).node, 0);
    let event = Ping {
        source: source.issue(),
        target: work,
    };
    let now = cluster.now;
    cluster.nodes[2].route(event.clone(), now, &mut cluster.hosts[2]);
    cluster.run_for(Duration::from_millis(10));
    assert_eq!(cluster.hosts[1].delivered, vec![event]);
    assert_eq!(cluster.nodes[2].stats().events_sent, 1);
    assert_eq!(cluster.nodes[0].stats().events_sent, 1, "one forward");
}

#[test]
fn an_early_event_waits_for_its_activity_then_gives_up() {
    let mut cluster = Cluster::joined(2, Duration::from_millis(100));
    let mut ids = IdIssuer::new(settings(0).node, 0);
    let target = ids.issue();
    let event = Ping {
        source: ids.issue(),
        target,
    };
    // Node 1 hears of an activity of node 0 it does not hold (yet).
    let now = cluster.now;
    cluster.nodes[1].route(event.clone(), now, &mut cluster.hosts[1]);
    cluster.run_for(Duration::from_millis(5));
    assert_eq!(
        cluster.nodes[0].stats().undeliverable,
        1,
        "node 0 knows no such activity"
    );
    let envelope = Envelope {
        from: cluster.nodes[0].id().clone(),
        message: crate::protocol::Message::Notices(vec![crate::protocol::Notice::Event(event)]),
    };
    let now = cluster.now;
    cluster.nodes[1].handle_message(envelope, now, &mut cluster.hosts[1]);
    assert_eq!(cluster.nodes[1].backlog().2, 1, "the event waits");
    cluster.run_for(Duration::from_secs(1));
    assert_eq!(cluster.nodes[1].backlog().2, 0);
    assert_eq!(
        cluster.nodes[1].stats().undeliverable,
        1,
        "dropped after the wait"
    );
}

#[test]
fn a_leaving_member_is_no_victim_and_is_removed_after_the_failure_timeout() {
    let (mut cluster, work) = with_work(2);
    let now = cluster.now;
    cluster.nodes[1].leave(now, &mut cluster.hosts[1]);
    cluster.run_for(Duration::from_millis(10));
    assert!(cluster.usable_members(0).is_empty(), "no longer usable");
    assert!(
        cluster.hosts[0].reclaimed.is_empty(),
        "not yet: its last notices may come"
    );
    cluster.dead[1] = true;
    cluster.run_for(Duration::from_secs(2));
    assert_eq!(cluster.hosts[0].reclaimed, vec![(work[0], 1)]);
    assert_eq!(
        cluster.nodes[0].stats().dead_members,
        0,
        "it left, it did not die"
    );
}

#[test]
fn work_whose_thieves_died_too_often_is_given_up_at_its_origin() {
    let cluster = Cluster::with(2, |s| s.max_attempts = 1).contacted(Duration::from_millis(100));
    let (mut cluster, work) = stolen_from(cluster, 2);
    cluster.dead[1] = true;
    cluster.run_for(Duration::from_secs(4));
    assert!(cluster.hosts[0].reclaimed.is_empty());
    assert_eq!(
        cluster.hosts[0].settled,
        vec![work[0]],
        "its pointers dropped"
    );
    let lost: Vec<&NodeEvent> = (cluster.events[0].iter())
        .filter(|event| matches!(event, NodeEvent::Lost { .. }))
        .collect();
    assert!(
        matches!(lost[..], [NodeEvent::Lost { id, .. }] if *id == work[0]),
        "{lost:?}"
    );
    assert_eq!(cluster.nodes[0].stats().lost, 1);
}

#[test]
fn loot_that_reaches_a_leaving_thief_goes_back_to_be_queued_again() {
    let mut cluster = Cluster::joined(2, Duration::from_millis(100));
    let mut ids = IdIssuer::new(settings(0).node, 0);
    let work = vec![ids.issue(), ids.issue()];
    cluster.hosts[0].queued = work.clone();
    cluster.hosts[1].idle = 1;
    let now = cluster.now;
    cluster.nodes[1].handle_idle(now, &mut cluster.hosts[1]);
    // The thief leaves while its request is on its way.
    cluster.nodes[1].leave(now, &mut cluster.hosts[1]);
    cluster.run_for(Duration::from_millis(10));
    assert!(cluster.hosts[1].imported.is_empty());
    assert_eq!(cluster.hosts[0].reclaimed, vec![(work[0], 0)], "as it left");
}

#[test]
fn a_full_round_of_empty_replies_pauses_the_thief() {
    let pause = Duration::from_millis(100);
    let cluster = Cluster::with(3, |s| s.backoff = (pause, pause));
    let mut cluster = cluster.contacted(Duration::from_secs(2));
    cluster.hosts[2].idle = 1;
    let now = cluster.now;
    cluster.nodes[2].handle_idle(now, &mut cluster.hosts[2]);
    cluster.run_for(Duration::from_millis(20));
    let stats = cluster.nodes[2].stats();
    assert_eq!(
        (stats.steal_requests, stats.empty_replies),
        (2, 2),
        "one request per member, then a pause"
    );
    cluster.run_for(pause);
    assert_eq!(cluster.nodes[2].stats().steal_requests, 4, "a new round");
}

#[test]
fn a_node_says_hello_again_until_its_bootstrap_peer_answers() {
    let mut cluster = Cluster::new(2);
    cluster.dead[0] = true;
    let now = cluster.now;
    cluster.nodes[1].contact(0, now);
    cluster.run_for(Duration::from_secs(1));
    assert!(cluster.usable_members(1).is_empty());
    cluster.dead[0] = false;
    cluster.run_for(Duration::from_millis(500));
    assert_eq!(cluster.usable_members(1), vec![settings(0).node]);
    assert_eq!(cluster.usable_members(0), vec![settings(1).node]);
}
