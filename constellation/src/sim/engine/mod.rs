//! The discrete-event loop: virtual time, and per simulated node the real
//! scheduler core under the real node protocol ([`protocol::StateMachine`]),
//! with messages carried over the modelled network.
//!
//! The engine decides nothing between nodes. Each node's
//! [`protocol::StateMachine`] chooses whom to ask for work, what to hand over,
//! keeps custody of exports, routes events and runs SWIM membership,
//! exactly as in production; the engine feeds it the virtual time, the
//! messages its network delivers and what its executors do, and carries
//! out what it asks: messages to send, a timer to set.
//!
//! - [`node`]: a simulated node, its joining and dying, and the protocol's
//!   inputs and outputs.
//! - [`host`]: the node's executors as the protocol sees them.
//! - [`messages`]: carrying protocol messages, and a victim's answer cost.
//! - [`executors`]: calls on executors: their length, stages of children.
//! - [`network`]: link delays and input transfers.
//! - [`records`]: attempt records and the final report.
//!
//! [`protocol::StateMachine`]: crate::protocol::StateMachine

mod executors;
mod host;
mod messages;
mod network;
mod node;
mod records;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use super::model::{nanos, Model};
use super::report::{AttemptRecord, MessageCounts, SimReport};
use super::workload::Workload;
use super::SimError;
use crate::context::{ContextList, ExecutorContext};
use crate::core::MatchTable;
use crate::id::ActivityId;
use crate::protocol::{Envelope, SendToken, Stats};

use host::{Packed, SimEvent};
use network::Network;
use node::{Life, SimNode};

/// Virtual time in nanoseconds since the start.
type Time = u64;

/// A protocol message between simulated nodes.
type SimEnvelope = Envelope<u32, Packed, SimEvent>;

/// What happens at a moment of virtual time.
enum Ev {
    /// A node joins the pool.
    Join(u32),
    /// A node dies: it stops at once.
    Die(u32),
    /// An executor's call ends.
    CallDone { node: u32, executor: u32 },
    /// A message arrives, or finds its destination gone.
    Deliver {
        to: u32,
        from: u32,
        envelope: Box<SimEnvelope>,
    },
    /// The transport tells `node` that a message to `to` did not arrive.
    SendFailed {
        node: u32,
        to: u32,
        token: SendToken,
    },
    /// A node's protocol timer, as it was set for `at`.
    Timer { node: u32, at: Time },
    /// A node finished answering a steal request and may take the next.
    Answered(u32),
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
    /// Distinct executor contexts, so that an executor names its own by index.
    contexts: Vec<ExecutorContext>,
    network: Network,
    /// The instant virtual time 0 stands for: the protocol takes
    /// `Instant`s, and never reads a clock of its own.
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
    /// Joins and deaths still to come: they can bring progress.
    lifecycle_pending: usize,
    /// Joins still to come.
    joins_left: usize,
    /// Nodes alive now.
    live: usize,
    /// Live nodes whose SWIM lists every other live node as up.
    knowing_all: usize,
    /// When, after the last join, every live node first knew every other.
    converged: Option<Time>,
    /// What the protocol nodes of dead nodes counted, summed.
    dead_stats: Stats,
    /// Events the engine found no activity for on their own node.
    undeliverable: u64,
    events: u64,
}

impl<'a> Engine<'a> {
    /// Sets up nodes, links and schedules; the model and workload are valid.
    pub(super) fn new(model: &'a Model, workload: &'a Workload) -> Self {
        let all: Vec<ExecutorContext> = (model.nodes.iter())
            .flat_map(|node| node.executors.iter().map(|e| e.context.clone()))
            .collect();
        // Admission: work some executor of the pool (now or later) can run.
        let pool = Arc::new(MatchTable::new(&all));
        let mut contexts: Vec<ExecutorContext> = Vec::new();
        let mut context_index: FxHashMap<ExecutorContext, u32> = FxHashMap::default();
        let nodes = (model.nodes.iter().enumerate())
            .map(|(index, spec)| {
                let executor_contexts = (spec.executors.iter())
                    .map(|executor| {
                        *context_index
                            .entry(executor.context.clone())
                            .or_insert_with(|| {
                                contexts.push(executor.context.clone());
                                (contexts.len() - 1) as u32
                            })
                    })
                    .collect();
                SimNode::new(index as u32, spec, executor_contexts, pool.clone())
            })
            .collect();
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
            network: Network::new(model),
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
            joins_left: model.nodes.len(),
            live: 0,
            knowing_all: 0,
            converged: None,
            dead_stats: Stats::default(),
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
            // Checked on every event rather than by a periodic timer: the
            // protocol's own timers (membership probes, idle executors
            // asking for work) keep ticking while the pool is stuck.
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

    /// The protocol's clock reading for the current virtual time.
    fn instant(&self) -> Instant {
        self.base + Duration::from_nanos(self.now)
    }

    /// Virtual time for a protocol `Instant` (never before the start).
    fn time_of(&self, at: Instant) -> Time {
        let since = at.saturating_duration_since(self.base).as_nanos();
        since.min(u128::from(Time::MAX)) as Time
    }

    fn handle(&mut self, ev: Ev) -> Result<(), SimError> {
        match ev {
            Ev::Join(node) => self.join(node)?,
            Ev::Die(node) => self.die(node),
            Ev::CallDone { node, executor } => self.call_done(node, executor)?,
            Ev::Deliver { to, from, envelope } => self.deliver(to, from, envelope),
            Ev::SendFailed { node, to, token } => self.send_failed(node, to, token),
            Ev::Timer { node, at } => self.timer(node, at),
            Ev::Answered(node) => self.answer_waiting(node),
        }
        Ok(())
    }

    fn stalled(&self, why: &str) -> SimError {
        let live: Vec<&SimNode> = (self.nodes.iter())
            .filter(|node| node.life == Life::Alive)
            .collect();
        let counts = (live.iter())
            .map(|node| node.host.counts())
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
                self.protocol_stats().lost,
                if counts.queued > 0 {
                    " (queued work that no live executor can run waits forever: did the nodes that could run it die?)"
                } else {
                    ""
                }
            ),
        }
    }
}

fn seconds(time: Time) -> f64 {
    time as f64 / 1e9
}

/// The id of the root with sequence number `seq` on the master, if `id`
/// is one: roots are issued first, from the master's outside slot.
fn root_index(id: ActivityId) -> usize {
    (id.seq() & ((1 << 48) - 1)) as usize
}
