//! The driver thread: glue between a libp2p swarm and the node protocol.
//!
//! Every decision between nodes (whom to ask for work, what to hand over,
//! custody, where an event goes, who is a member) is made by a
//! [`protocol::StateMachine`]. The driver only carries:
//! messages from the swarm and happenings from the executor threads go in,
//! what the node wants sent goes out as requests, and a timer wakes the
//! node when it asked to be woken. The local pool is the node's
//! [`Host`](crate::protocol::Host) ([`host`]).
//!
//! - [`swarm`]: the libp2p side, from swarm events to node inputs and from
//!   transmits to requests;
//! - [`host`]: the pool, as the protocol sees it;
//! - [`admin`]: what is not protocol: status, relabelling, questions for
//!   other members, and what the node handle reads ([`Shared`]).

mod admin;
mod host;
mod swarm;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use libp2p::request_response::{InboundRequestId, OutboundRequestId};
use libp2p::{identity, Multiaddr};
use parking_lot::Mutex;
use tokio::sync::mpsc;

use super::message::{
    MemberStatus, NetPeer, PackedActivity, RelabelRequest, Request, Response, WireEvent,
};
use super::{NetStats, Node, NodeConfig, NodeError, Shared};
use crate::id::NodeId;
use crate::local::{Outgoing, Pool, PoolBuilder, Uplink};
use crate::protocol::strategy::{MAX_BACKOFF, MIN_BACKOFF};
use crate::protocol::{self, MemberInfo, NodeEvent, Output, SendToken, Settings, Transmit};
use host::PoolHost;

/// What executor threads and the node handle ask of the driver.
pub(crate) enum Command {
    /// Things for other nodes, from one executor call.
    Outgoing(Vec<Outgoing>),
    /// An executor went to sleep for want of work.
    Idle,
    /// Ask other nodes for no more work: this node is finishing.
    StopStealing,
    /// Leave the pool and stop.
    Leave,
    /// Send `request` to member `node`; its answer, or why there is none,
    /// goes to `reply`.
    Ask {
        node: NodeId,
        request: Request,
        reply: std::sync::mpsc::Sender<Result<Response, String>>,
    },
    /// Relabel this node's executors and tell the other members.
    Relabel {
        request: RelabelRequest,
        reply: std::sync::mpsc::Sender<Result<(), String>>,
    },
    /// Describe this node.
    Status {
        reply: std::sync::mpsc::Sender<MemberStatus>,
    },
    /// The application answered an app request (on a blocking thread);
    /// the answer goes back on the request's stream.
    AppAnswered {
        channel: libp2p::request_response::ResponseChannel<Response>,
        answer: Result<Vec<u8>, String>,
    },
}

/// The pool's [`Uplink`]: a channel into the driver.
struct ChannelUplink {
    commands: mpsc::UnboundedSender<Command>,
    /// Coalesces idle notices: one is enough until the driver looks.
    idle_pending: Arc<AtomicBool>,
}

impl Uplink for ChannelUplink {
    fn send(&self, outgoing: Vec<Outgoing>) {
        // A closed channel means the node is stopping; nothing can leave now.
        let _ = self.commands.send(Command::Outgoing(outgoing));
    }

    fn idle(&self) {
        if !self.idle_pending.swap(true, Ordering::SeqCst) {
            let _ = self.commands.send(Command::Idle);
        }
    }
}

/// Starts the pool and the driver thread; returns once the node listens.
pub(crate) fn start(config: NodeConfig, builder: PoolBuilder) -> Result<Node, NodeError> {
    if !super::transport::is_loopback(&config.listen) && config.key.is_none() {
        return Err(NodeError::KeyRequired(config.listen.clone()));
    }
    let (commands, inbox) = mpsc::unbounded_channel();
    let idle_pending = Arc::new(AtomicBool::new(false));
    let uplink = Arc::new(ChannelUplink {
        commands: commands.clone(),
        idle_pending: idle_pending.clone(),
    });
    let pool = Arc::new(builder.start_with_uplink(uplink)?);
    let keypair = (config.identity.clone()).unwrap_or_else(identity::Keypair::generate_ed25519);
    let peer = keypair.public().to_peer_id();
    let shared = Arc::new(Shared {
        members: Mutex::new(Vec::new()),
        offered: Mutex::new(pool.matcher()),
        stats: Mutex::new(NetStats::default()),
        lost: Mutex::new(Vec::new()),
        master_seen: AtomicBool::new(false),
        master_left: AtomicBool::new(false),
        join_problems: Mutex::new(Vec::new()),
        changed: parking_lot::Condvar::new(),
    });
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let thread = {
        let pool = pool.clone();
        let shared = shared.clone();
        let to_itself = commands.clone();
        std::thread::Builder::new()
            .name("constellation-net".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(error) => {
                        let _ = ready_tx.send(Err(NodeError::Transport(error.to_string())));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let driver =
                        match Driver::new(config, keypair, pool, shared, idle_pending, to_itself)
                            .await
                        {
                            Ok(driver) => driver,
                            Err(error) => {
                                let _ = ready_tx.send(Err(error));
                                return;
                            }
                        };
                    let _ = ready_tx.send(Ok(driver.listening()));
                    driver.run(inbox).await;
                })
            })
            .map_err(|error| NodeError::Transport(error.to_string()))?
    };
    let listening = ready_rx
        .recv()
        .map_err(|_| NodeError::Transport("the network driver thread ended".into()))??;
    Ok(Node {
        pool: Some(pool),
        commands,
        thread: Some(thread),
        shared,
        peer,
        listening,
    })
}

/// A request this driver sent and waits on.
enum InFlight {
    /// A node protocol message; if it fails, the node hears so.
    Protocol {
        to: NetPeer,
        /// What the node needs back if it fails.
        token: SendToken,
        /// Whether a leaving node waits for it
        /// ([`Transmit::must_arrive`]).
        awaited: bool,
    },
    /// A question from the node handle ([`Command::Ask`]).
    Query(std::sync::mpsc::Sender<Result<Response, String>>),
}

/// The driver: a [`protocol::StateMachine`], the pool it hosts, and the swarm.
pub(crate) struct Driver {
    node: protocol::StateMachine<NetPeer, PoolHost>,
    host: PoolHost,
    swarm: swarm::Swarm,
    shared: Arc<Shared>,
    idle_pending: Arc<AtomicBool>,
    /// Who this node is to others.
    me: NetPeer,
    config: NodeConfig,
    in_flight: HashMap<OutboundRequestId, InFlight>,
    /// Messages that ride on answers not yet sent, per request answered:
    /// if the answer is lost, the node hears that they failed.
    replies: HashMap<InboundRequestId, Vec<(NetPeer, SendToken)>>,
    bootstrap: swarm::Bootstrap,
    /// When the node wants to be woken, as its last output said.
    wake: Option<Instant>,
    /// The node said its members changed since the last [`Driver::drain`].
    members_changed: bool,
    peers: swarm::PeerIds,
    /// The driver's own inbox, for answers that app handlers give on other
    /// threads ([`Command::AppAnswered`]).
    to_itself: mpsc::UnboundedSender<Command>,
    /// Events from this node's executors that could not be encoded for
    /// the wire; counted with the undeliverable ones.
    unencodable: u64,
    started: Instant,
    last_report: Instant,
}

impl Driver {
    async fn new(
        config: NodeConfig,
        keypair: identity::Keypair,
        pool: Arc<Pool>,
        shared: Arc<Shared>,
        idle_pending: Arc<AtomicBool>,
        to_itself: mpsc::UnboundedSender<Command>,
    ) -> Result<Driver, NodeError> {
        let (mut swarm, addrs) = swarm::build(&config, keypair).await?;
        let me = NetPeer {
            id: swarm.local_peer_id().to_string(),
            addrs: addrs.iter().map(ToString::to_string).collect(),
        };
        let now = Instant::now();
        let info = MemberInfo {
            site: config.site.clone(),
            steal_pool: config.steal_pool.clone(),
            master: config.master,
            executors: pool.executor_contexts().to_vec(),
        };
        let node =
            protocol::StateMachine::new(settings(&config, pool.node()), me.clone(), info, now);
        let bootstrap = swarm::Bootstrap::dial(
            &mut swarm,
            config.bootstrap.clone(),
            now,
            &shared.join_problems,
        );
        if let Some(key) = &config.key {
            tracing::info!(fingerprint = %key.fingerprint(), "pool key in use");
        }
        Ok(Driver {
            node,
            host: PoolHost::new(pool, config.largest_activity()),
            swarm,
            shared,
            idle_pending,
            me,
            config,
            in_flight: HashMap::new(),
            replies: HashMap::new(),
            bootstrap,
            wake: None,
            members_changed: false,
            peers: swarm::PeerIds::default(),
            to_itself,
            unencodable: 0,
            started: now,
            last_report: now,
        })
    }

    /// The addresses this node listens on, each ending in `/p2p/<peer id>`.
    fn listening(&self) -> Vec<Multiaddr> {
        let peer = *self.swarm.local_peer_id();
        (self.me.addrs.iter())
            .filter_map(|a| a.parse::<Multiaddr>().ok())
            .map(|a| a.with(libp2p::multiaddr::Protocol::P2p(peer)))
            .collect()
    }

    async fn run(mut self, mut inbox: mpsc::UnboundedReceiver<Command>) {
        let mut housekeeping = tokio::time::interval(HOUSEKEEPING);
        self.drain();
        'run: loop {
            let wake = self.wake;
            tokio::select! {
                // Inbound first: on a starved node, the acks and refutations
                // waiting for it must count before its own suspicion timers
                // fire.
                biased;
                event = self.swarm.select_next_some() => self.on_swarm_event(event),
                command = inbox.recv() => {
                    // The node handle is gone: leave as for `Leave`.
                    let Some(first) = command else { break };
                    // Take whatever else is waiting too, so notices batch.
                    let mut next = Some(first);
                    while let Some(command) = next {
                        if matches!(command, Command::Leave) {
                            break 'run;
                        }
                        self.on_command(command);
                        next = inbox.try_recv().ok();
                    }
                }
                _ = sleep_until(wake) => self.node.handle_timeout(Instant::now(), &mut self.host),
                _ = housekeeping.tick() => self.housekeeping(),
            }
            self.drain();
        }
        self.leave().await;
    }

    fn on_command(&mut self, command: Command) {
        let now = Instant::now();
        match command {
            Command::Outgoing(items) => {
                for item in items {
                    match item {
                        Outgoing::Event(event) => match WireEvent::try_from(&event) {
                            Ok(event) => self.node.route(event, now, &mut self.host),
                            Err(error) => {
                                self.unencodable += 1;
                                tracing::warn!(source = %event.source, target = %event.target, %error, "event not delivered: its payload cannot be encoded");
                            }
                        },
                        Outgoing::Finished(id) => {
                            self.node.handle_finished(id, now, &mut self.host)
                        }
                    }
                }
            }
            Command::Idle => {
                self.idle_pending.store(false, Ordering::SeqCst);
                self.node.handle_idle(now, &mut self.host);
            }
            Command::StopStealing => self.node.stop_stealing(),
            // `run` stops at a leave before it gets here.
            Command::Leave => {}
            Command::Ask {
                node,
                request,
                reply,
            } => self.ask(node, request, reply),
            Command::AppAnswered { channel, answer } => {
                let response = match answer {
                    Ok(bytes) => Response::App(bytes),
                    Err(reason) => Response::Refused(reason),
                };
                self.respond(channel, response);
            }
            Command::Relabel { request, reply } => {
                let _ = reply.send(self.relabel(request));
            }
            Command::Status { reply } => {
                let _ = reply.send(self.status());
            }
        }
    }

    /// Sends what the node wants sent and passes on what it says; after
    /// every input.
    fn drain(&mut self) {
        // A round of polling ends with the timeout, if one is set.
        self.wake = None;
        while let Some(output) = self.node.poll_output() {
            self.on_output(output);
        }
        // Given up by the host itself: it logged them.
        let given_up = self.host.take_given_up();
        if !given_up.is_empty() {
            self.shared.lost.lock().extend(given_up);
        }
        if std::mem::take(&mut self.members_changed) {
            // A master left, and one is a member again: a pool node
            // restarted.
            if self.master_known() {
                self.shared.master_left.store(false, Ordering::SeqCst);
            }
            self.publish_members();
        }
        self.publish_stats();
    }

    /// Carries out one output of the node.
    fn on_output(&mut self, output: Output<NetPeer, PackedActivity, WireEvent>) {
        match output {
            Output::Transmit(transmit) => self.transmit(transmit),
            Output::Event(NodeEvent::MembersChanged) => self.members_changed = true,
            Output::Event(NodeEvent::MasterLeft) => {
                self.shared.master_left.store(true, Ordering::SeqCst);
            }
            // The node has logged it.
            Output::Event(NodeEvent::Lost { id, reason }) => {
                self.shared.lost.lock().push((id, reason))
            }
            Output::Timeout(at) => self.wake = Some(at),
        }
    }

    /// Whether a master is a usable member now.
    fn master_known(&self) -> bool {
        self.node.members().any(|(_, info)| info.master)
    }

    /// Whether this node should dial its bootstrap addresses again: it
    /// knows no member (yet, or any more), or it is a worker whose master
    /// is gone. A pool node restarted with the same identity and address
    /// is so found again, even by a worker that still knows other workers
    /// (SWIM's own recontact stops at the first member known).
    fn should_redial(&self) -> bool {
        if self.node.members_known() == 0 {
            return true;
        }
        let master_seen = self.shared.master_seen.load(Ordering::SeqCst);
        !self.config.master && master_seen && !self.master_known()
    }

    fn housekeeping(&mut self) {
        let now = Instant::now();
        if self.should_redial() {
            let problems = &self.shared.join_problems;
            for peer in self.bootstrap.redial(&mut self.swarm, now, problems) {
                // Already connected: a hello over that connection is what
                // a new dial would have led to.
                self.node.contact(peer, now);
            }
        }
        if now - self.last_report >= REPORT_EVERY {
            self.last_report = now;
            let pool = self.host.pool();
            let counts = pool.counts();
            let (exported, imported, early) = self.node.backlog();
            tracing::debug!(
                outstanding = pool.outstanding(),
                queued = counts.queued,
                running = counts.running,
                live = counts.live,
                exported,
                imported,
                early,
                members = self.node.members_known(),
                in_flight = self.in_flight.len(),
                "node state"
            );
        }
    }

    /// Leaves the pool: goodbyes to every member, then a bounded wait for
    /// them and for every message still unacknowledged (a member that left
    /// stays a member for the failure timeout, so these still arrive).
    async fn leave(&mut self) {
        self.node.leave(Instant::now(), &mut self.host);
        self.drain();
        let deadline = tokio::time::Instant::now() + LEAVE_WAIT;
        while self.in_flight.values().any(InFlight::awaited) {
            tokio::select! {
                event = self.swarm.select_next_some() => {
                    // Loot still on its way is declined by the node.
                    self.on_swarm_event(event);
                    self.drain();
                }
                _ = tokio::time::sleep_until(deadline) => {
                    tracing::debug!("left without an answer to every goodbye");
                    break;
                }
            }
        }
        self.publish_stats();
    }
}

impl InFlight {
    fn awaited(&self) -> bool {
        matches!(self, InFlight::Protocol { awaited: true, .. })
    }
}

/// The longest a leaving node waits for its goodbyes and last notices to
/// be acknowledged.
const LEAVE_WAIT: Duration = Duration::from_secs(2);

/// How often the driver looks after what no input triggers: redialling
/// the bootstrap nodes, and the state line in the log.
const HOUSEKEEPING: Duration = Duration::from_millis(250);

/// How often the node's state is logged (at debug level).
const REPORT_EVERY: Duration = Duration::from_secs(5);

/// The node protocol's settings for a node configured as `config`.
fn settings(config: &NodeConfig, node: NodeId) -> Settings {
    Settings {
        node,
        site: config.site.clone(),
        strategy: config.strategy,
        master: config.master,
        steal_pool: config.steal_pool.clone(),
        steal_from: config.steal_from.clone(),
        max_steal: config.max_steal,
        wide_steal: config.wide_steal,
        failure_timeout: config.failure_timeout,
        probe_period: probe_period(config.failure_timeout),
        max_attempts: config.max_attempts,
        early_event_wait: config.early_event_wait,
        backoff: (MIN_BACKOFF, MAX_BACKOFF),
        seed: rand::random(),
    }
}

/// How often SWIM probes a member: half the failure timeout (1.5 s by
/// default), at least every 2 s and at most ten times a second.
///
/// A probe unanswered within the period makes its member a suspect, so the
/// period is also how slow an answer may be. A third of the failure
/// timeout (1 s) was too short where it matters most: 50 nodes meeting in
/// one process on two busy cores answered in seconds while they dialled
/// each other, and declared dozens of live members dead (none at 1.5 s, in
/// 3 runs of each). The price is detection: a dead member is given up
/// about `failure_timeout` + 3 periods after it died.
fn probe_period(failure_timeout: Duration) -> Duration {
    (failure_timeout / 2).clamp(Duration::from_millis(100), Duration::from_secs(2))
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// A message of the node for the network.
type NetTransmit = Transmit<NetPeer, PackedActivity, WireEvent>;
