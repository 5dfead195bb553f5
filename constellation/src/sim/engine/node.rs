//! A simulated node: its protocol node, its executors, its life; and the
//! protocol's inputs and outputs, which the engine turns into events.
//!
//! After every input to a node's [`StateMachine`] the engine [`settle`]s it, as a
//! production driver does after every input: it starts the calls the core
//! handed out, sends what [`StateMachine::poll_output`] gives, and keeps one timer
//! event at its last [`Output::Timeout`].
//!
//! [`settle`]: Engine::settle

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use super::executors::Running;
use super::host::SimHost;
use super::records::Started;
use super::{Engine, Ev, SimEnvelope, Time};
use crate::core::MatchTable;
use crate::id::{ActivityId, NodeId};
use crate::protocol::{MemberInfo, NodeEvent, Output, SendToken, Settings, StateMachine};
use crate::sim::model::{Model, NodeSpec};
use crate::sim::SimError;

/// The steal pool every simulated node belongs to and steals from.
const STEAL_POOL: &str = "default";

/// Where a node is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Life {
    /// Not joined yet: messages to it fail, as to a closed port.
    Waiting,
    Alive,
    /// Stopped for good: messages to it fail.
    Dead,
}

/// One executor of a simulated node: how fast it runs, and what it runs.
pub(super) struct Exec {
    /// Index into [`Engine::contexts`].
    pub(super) context: u32,
    pub(super) cores: u32,
    pub(super) speed: f64,
    pub(super) call: Option<Running>,
    /// Virtual time spent in calls.
    pub(super) busy: Time,
}

pub(super) struct SimNode {
    pub(super) id: NodeId,
    pub(super) site: u32,
    pub(super) life: Life,
    /// Its side of the node protocol, from its join to its death.
    pub(super) protocol: Option<StateMachine<u32, SimHost>>,
    pub(super) host: SimHost,
    pub(super) executors: Vec<Exec>,
    pub(super) started: FxHashMap<ActivityId, Started>,
    /// Steal requests it answered.
    pub(super) requests_handled: u64,
    /// Until when it is busy answering a steal request (its answer cost).
    pub(super) answering_until: Time,
    /// Steal requests that arrived while it was busy answering, in order.
    pub(super) waiting: VecDeque<(u32, Box<SimEnvelope>)>,
    /// Time spent answering steal requests, in all.
    pub(super) answering: Time,
    /// When its protocol timer event is set for, if it is.
    timer: Option<Time>,
    /// Whether its SWIM lists every other live node as up.
    knows_all: bool,
}

impl SimNode {
    /// Node `index` of the model, not joined yet; `contexts` indexes each
    /// executor's context in the engine's list.
    pub(super) fn new(
        index: u32,
        spec: &NodeSpec,
        contexts: Vec<u32>,
        pool: Arc<MatchTable>,
    ) -> Self {
        let id = NodeId::from_u128(u128::from(index) + 1);
        let offered = spec.executors.iter().map(|e| e.context.clone()).collect();
        let executors = (spec.executors.iter().zip(contexts))
            .map(|(executor, context)| Exec {
                context,
                cores: executor.cores,
                speed: executor.speed,
                call: None,
                busy: 0,
            })
            .collect();
        SimNode {
            id,
            site: spec.site as u32,
            life: Life::Waiting,
            protocol: None,
            host: SimHost::new(id, offered, pool),
            executors,
            started: FxHashMap::default(),
            requests_handled: 0,
            answering_until: 0,
            waiting: VecDeque::new(),
            answering: 0,
            timer: None,
            knows_all: false,
        }
    }
}

/// How node `index` of `model` runs the protocol: the model's knobs, the
/// same for every node, and a seed of its own.
fn settings(model: &Model, index: u32, id: NodeId) -> Settings {
    let spec = &model.nodes[index as usize];
    Settings {
        node: id,
        site: Some(site_name(spec.site)),
        strategy: model.strategy,
        master: index as usize == model.master,
        steal_pool: STEAL_POOL.into(),
        steal_from: STEAL_POOL.into(),
        max_steal: model.max_steal,
        wide_steal: model.wide_steal,
        failure_timeout: Duration::from_secs_f64(model.failure_timeout),
        probe_period: Duration::from_secs_f64(model.probe_period),
        max_attempts: model.max_attempts,
        early_event_wait: Duration::from_secs_f64(model.early_event_wait),
        backoff: (
            Duration::from_secs_f64(model.steal_backoff.0),
            Duration::from_secs_f64(model.steal_backoff.1),
        ),
        seed: node_seed(model.seed, index),
    }
}

/// A site as members see it. Its index, not its name: two sites of a
/// model may share a name, and hierarchical stealing compares these.
fn site_name(site: usize) -> String {
    site.to_string()
}

/// Node `index`'s own seed, drawn from the model's (splitmix64), so nodes
/// make different random choices and a run still replays exactly.
fn node_seed(seed: u64, index: u32) -> u64 {
    let mut z = seed.wrapping_add((u64::from(index) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Engine<'_> {
    /// Node `node` joins: it starts its protocol node, introduces itself to
    /// the master (or, with the master not there, to the first live node),
    /// and its executors ask for work.
    pub(super) fn join(&mut self, node: u32) -> Result<(), SimError> {
        self.lifecycle_pending -= 1;
        let now = self.instant();
        let master = self.model.master as u32;
        let alive = |index: u32| index != node && self.nodes[index as usize].life == Life::Alive;
        let contact = if alive(master) {
            Some(master)
        } else {
            (0..self.nodes.len() as u32).find(|&index| alive(index))
        };
        let spec = &self.model.nodes[node as usize];
        let info = MemberInfo {
            site: Some(site_name(spec.site)),
            steal_pool: STEAL_POOL.into(),
            master: node == master,
            executors: spec.executors.iter().map(|e| e.context.clone()).collect(),
        };
        let id = self.nodes[node as usize].id;
        let mut protocol = StateMachine::new(settings(self.model, node, id), node, info, now);
        if let Some(contact) = contact {
            protocol.contact(contact, now);
        }
        let state = &mut self.nodes[node as usize];
        state.life = Life::Alive;
        state.protocol = Some(protocol);
        self.live += 1;
        self.joins_left -= 1;
        self.recount_membership();
        self.last_progress = self.now;
        if node == master && !self.roots_submitted {
            self.submit_roots(node)?;
        }
        for executor in 0..self.nodes[node as usize].executors.len() {
            self.ask_for_work(node, executor);
        }
        self.settle(node);
        Ok(())
    }

    /// Node `node` dies: its calls end, its protocol node is gone, and
    /// messages to it fail from now on. The others find out by SWIM.
    pub(super) fn die(&mut self, node: u32) {
        self.lifecycle_pending -= 1;
        let now = self.now;
        let state = &mut self.nodes[node as usize];
        if state.life != Life::Alive {
            return;
        }
        state.life = Life::Dead;
        self.live -= 1;
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
        let mut killed: Vec<(ActivityId, Started)> = state.started.drain().collect();
        killed.sort_unstable_by_key(|(id, _)| *id);
        for (id, started) in killed {
            self.record(node, id, started, super::records::AttemptEnd::Killed);
        }
        // Nothing of the dead node is used again: keep its counters, free
        // its memory.
        let state = &mut self.nodes[node as usize];
        if let Some(protocol) = state.protocol.take() {
            add_stats(&mut self.dead_stats, protocol.stats());
        }
        self.undeliverable += state.host.undeliverable;
        state.host = SimHost::emptied(state.id);
        state.timer = None;
        // Requests waiting for an answer fail as the connection drops.
        let waiting = std::mem::take(&mut state.waiting);
        self.recount_membership();
        for (thief, envelope) in waiting {
            self.refuse(thief, node, SendToken::of(&envelope.message));
        }
    }

    /// Feeds one input to `node`'s protocol node, then settles it. Nodes
    /// that are not alive take no input.
    pub(super) fn input(
        &mut self,
        node: u32,
        input: impl FnOnce(&mut StateMachine<u32, SimHost>, Instant, &mut SimHost),
    ) {
        let now = self.instant();
        let state = &mut self.nodes[node as usize];
        let Some(protocol) = state.protocol.as_mut() else {
            return;
        };
        input(protocol, now, &mut state.host);
        self.settle(node);
    }

    /// Carries out everything `node` asked for after an input: calls the
    /// core handed out and messages to send; then sets its timer.
    ///
    /// News of members ([`NodeEvent::MembersChanged`]) needs nothing here:
    /// the node itself lets idle executors ask a new member, and the
    /// simulator reads members only to report when membership converged.
    pub(super) fn settle(&mut self, node: u32) {
        let now = self.instant();
        loop {
            self.start_runs(node);
            let state = &mut self.nodes[node as usize];
            let Some(protocol) = state.protocol.as_mut() else {
                return;
            };
            // Events a shard sent off the node go where the protocol says.
            let away = std::mem::take(&mut state.host.away);
            if away.is_empty() {
                break;
            }
            for event in away {
                protocol.route(event, now, &mut state.host);
            }
        }
        let state = &mut self.nodes[node as usize];
        let Some(protocol) = state.protocol.as_mut() else {
            return;
        };
        let mut transmits = Vec::new();
        let mut wake = None;
        while let Some(output) = protocol.poll_output() {
            match output {
                Output::Transmit(transmit) => transmits.push(transmit),
                // Members: see above. A master's leaving matters to a
                // user's handle only. Losses are counted by the protocol
                // node (`Stats::lost`).
                Output::Event(NodeEvent::MembersChanged | NodeEvent::MasterLeft) => {}
                Output::Event(NodeEvent::Lost { .. }) => {}
                Output::Timeout(at) => wake = Some(at),
            }
        }
        for transmit in transmits {
            self.transmit(node, transmit);
        }
        self.arm_timer(node, wake);
        self.note_membership(node);
    }

    /// Keeps one timer event for `node`, at its protocol's next timeout
    /// `wake`.
    fn arm_timer(&mut self, node: u32, wake: Option<Instant>) {
        let state = &self.nodes[node as usize];
        let Some(at) = wake else {
            self.nodes[node as usize].timer = None;
            return;
        };
        let at = self.time_of(at);
        if state.timer == Some(at) {
            return;
        }
        self.nodes[node as usize].timer = Some(at);
        // A timeout already past fires now; its event remembers the time it
        // was set for, so that a timer set again since is not fired twice.
        self.schedule(at.max(self.now), Ev::Timer { node, at });
    }

    /// A timer event: fires if it is still the one `node` wants.
    pub(super) fn timer(&mut self, node: u32, at: Time) {
        let state = &mut self.nodes[node as usize];
        if state.timer != Some(at) {
            return;
        }
        state.timer = None;
        self.input(node, |protocol, now, host| {
            protocol.handle_timeout(now, host)
        });
    }

    /// Whether `node`'s SWIM lists exactly the other live nodes as up.
    fn knows_all(&self, node: u32) -> bool {
        let state = &self.nodes[node as usize];
        (state.protocol.as_ref()).is_some_and(|p| p.members_known() + 1 == self.live)
    }

    /// Notes whether `node` knows every other live node now, and when all
    /// first did. SWIM's count is cheap to read, so this runs after every
    /// input; a member becomes a steal target once its hello follows, a
    /// round trip later.
    fn note_membership(&mut self, node: u32) {
        let knows = self.knows_all(node);
        let state = &mut self.nodes[node as usize];
        if knows != state.knows_all {
            state.knows_all = knows;
            match knows {
                true => self.knowing_all += 1,
                false => self.knowing_all -= 1,
            }
        }
        if self.converged.is_none() && self.joins_left == 0 && self.knowing_all == self.live {
            self.converged = Some(self.now);
        }
    }

    /// Counts again who knows everyone: a join or a death changed how
    /// many everyone should know.
    fn recount_membership(&mut self) {
        self.knowing_all = 0;
        for node in 0..self.nodes.len() as u32 {
            let knows = self.knows_all(node);
            self.nodes[node as usize].knows_all = knows;
            self.knowing_all += usize::from(knows);
        }
    }

    /// What all protocol nodes counted, the dead ones included.
    pub(super) fn protocol_stats(&self) -> crate::protocol::Stats {
        let mut total = self.dead_stats.clone();
        for state in &self.nodes {
            if let Some(protocol) = &state.protocol {
                add_stats(&mut total, protocol.stats());
            }
        }
        total
    }
}

fn add_stats(total: &mut crate::protocol::Stats, stats: &crate::protocol::Stats) {
    total.steal_requests += stats.steal_requests;
    total.empty_replies += stats.empty_replies;
    total.imported += stats.imported;
    total.exported += stats.exported;
    total.events_sent += stats.events_sent;
    total.events_received += stats.events_received;
    total.undeliverable += stats.undeliverable;
    total.requeued += stats.requeued;
    total.lost += stats.lost;
    total.dead_members += stats.dead_members;
    total.refused += stats.refused;
}
