//! The driver thread: a libp2p swarm on a single-threaded tokio runtime,
//! between the local pool and the other members.
//!
//! Executor threads reach it through [`ChannelUplink`]; everything the
//! driver learns from the network it hands to the pool through the pool's
//! driver API (`export`, `import`, `deliver_from_network`, ...).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use libp2p::multiaddr::Protocol;
use libp2p::request_response::{self, OutboundRequestId, ProtocolSupport, ResponseChannel};
use libp2p::swarm::{NetworkBehaviour, SwarmEvent};
use libp2p::{identify, identity, ping, Multiaddr, PeerId, StreamProtocol, Swarm, SwarmBuilder};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use tokio::sync::mpsc;

use super::codec::{FrameCodec, PROTOCOL};
use crate::protocol::custody::{self, Custody};
use super::message::{
    Member, MemberStatus, Notice, RelabelRequest, Request, Response, StealRequest, WireActivity,
    WireEvent,
};
use crate::protocol::steal::{Candidate, Strategy, Throttle};
use super::{MemberView, Node, NodeConfig, NodeError, Shared};
use crate::activity::Activity;
use crate::context::ExecutorContext;
use crate::core::{MatchTable, Place, Stolen};
use crate::event::{Event, Payload};
use crate::id::{ActivityId, NodeId};
use crate::local::{Arrival, Outgoing, Pool, PoolBuilder, Uplink, OFF_NODE};
use crate::wire::{decode_activity, encode_activity, WireError};

/// What the driver counts; [`Node::stats`] returns a copy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Steal requests sent.
    pub steal_requests: u64,
    /// Steal replies that carried no work.
    pub empty_replies: u64,
    /// Activities taken in from other nodes.
    pub imported: u64,
    /// Activities handed to other nodes.
    pub exported: u64,
    /// Events sent to other nodes (forwarded ones included).
    pub events_sent: u64,
    /// Events received from other nodes.
    pub events_received: u64,
    /// Events that reached no activity; each was logged.
    pub undeliverable: u64,
    /// Activities queued again because the node running them died.
    pub requeued: u64,
    /// Activities given up.
    pub lost: u64,
    /// Members declared dead.
    pub dead_members: u64,
    /// Connections or frames refused: wrong key, garbage, oversized frames.
    pub refused: u64,
}

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

#[derive(NetworkBehaviour)]
struct Behaviour {
    rpc: request_response::Behaviour<FrameCodec>,
    identify: identify::Behaviour,
    ping: ping::Behaviour,
}

/// Starts the pool and the driver thread; returns once the node listens.
pub(super) fn start(config: NodeConfig, builder: PoolBuilder) -> Result<Node, NodeError> {
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
    let keypair = identity::Keypair::generate_ed25519();
    let peer = keypair.public().to_peer_id();
    let shared = Arc::new(Shared {
        members: Mutex::new(Vec::new()),
        offered: Mutex::new(pool.matcher()),
        stats: Mutex::new(NetStats::default()),
        lost: Mutex::new(Vec::new()),
        master_seen: AtomicBool::new(false),
        changed: parking_lot::Condvar::new(),
    });
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let thread = {
        let pool = pool.clone();
        let shared = shared.clone();
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
                        match Driver::new(config, keypair, pool, shared, idle_pending).await {
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

/// A known member.
struct MemberState {
    info: Member,
    peer: PeerId,
    /// Since when it has been unreachable, if it is.
    unreachable_since: Option<Instant>,
    /// When it was last dialled, to retry unreachable members now and then.
    last_dial: Instant,
    /// It said it leaves: no more stealing from it.
    leaving: bool,
}

/// What this node keeps of an activity it handed to another, until it
/// finishes there ([`Custody`] holds it, per hand-over).
struct Kept {
    copy: WireActivity,
    /// Where pointers to it are kept on this node, as `Pool::export` said.
    trail: Vec<Place>,
    restartable: bool,
}

struct Driver {
    config: NodeConfig,
    swarm: Swarm<Behaviour>,
    pool: Arc<Pool>,
    shared: Arc<Shared>,
    idle_pending: Arc<AtomicBool>,
    /// `Deliver` requests not yet acknowledged. A leaving node waits for
    /// them: they carry its last `Finished` notices, and an exporter that
    /// never hears them runs the work again.
    deliveries: HashSet<OutboundRequestId>,
    me: Member,
    node: NodeId,
    members: HashMap<NodeId, MemberState>,
    by_peer: HashMap<PeerId, NodeId>,
    /// Requests from connected peers this node does not know yet, answered
    /// once it does (see [`Driver::stranger`]).
    strangers: HashMap<PeerId, Vec<(Request, ResponseChannel<Response>)>>,
    /// The hellos said to those strangers.
    stranger_hellos: HashMap<OutboundRequestId, PeerId>,
    /// Copies of activities handed to other nodes, and whom to tell when
    /// an activity taken in finishes: the chain of custody (shared with
    /// the simulator, see [`Custody`]).
    custody: Custody<NodeId, Kept>,
    /// Attempts of activities here that were handed out before.
    attempts: HashMap<ActivityId, u32>,
    /// Where activities that left this node, or that originated here, are now.
    location: HashMap<ActivityId, NodeId>,
    /// Events that came before their activity.
    early: HashMap<ActivityId, (Instant, Vec<Event>)>,
    /// Steal state per distinct executor context.
    throttles: HashMap<ExecutorContext, Throttle>,
    steals: HashMap<OutboundRequestId, (ExecutorContext, Candidate<NodeId>)>,
    /// Notices waiting to go out, per destination.
    outbox: HashMap<NodeId, Vec<Notice>>,
    /// Requests the node handle asked for, and where their answers go.
    queries: HashMap<OutboundRequestId, std::sync::mpsc::Sender<Result<Response, String>>>,
    started: Instant,
    rng: StdRng,
    stats: NetStats,
    /// Whether idle executors may ask other nodes for work.
    stealing: bool,
    leaving: bool,
    last_report: Instant,
    last_bootstrap: Instant,
    /// When this node last said hello to a member it knows, to compare
    /// member lists (see [`Driver::compare_members`]).
    last_gossip: Instant,
}

impl Driver {
    async fn new(
        config: NodeConfig,
        keypair: identity::Keypair,
        pool: Arc<Pool>,
        shared: Arc<Shared>,
        idle_pending: Arc<AtomicBool>,
    ) -> Result<Driver, NodeError> {
        let psk = config.key.as_ref().map(|key| key.psk());
        let max_frame = config.max_frame;
        let transport_error =
            |error: &dyn std::fmt::Display| NodeError::Transport(error.to_string());
        let transport =
            super::transport::build_transport(&keypair, psk).map_err(|e| transport_error(&e))?;
        let mut swarm = SwarmBuilder::with_existing_identity(keypair)
            .with_tokio()
            .with_other_transport(|_| transport)
            .map_err(|e| transport_error(&e))?
            .with_behaviour(|keypair| Behaviour {
                rpc: request_response::Behaviour::with_codec(
                    FrameCodec::new(max_frame),
                    [(StreamProtocol::new(PROTOCOL), ProtocolSupport::Full)],
                    request_response::Config::default()
                        .with_request_timeout(Duration::from_secs(60))
                        .with_max_concurrent_streams(1024),
                ),
                identify: identify::Behaviour::new(identify::Config::new(
                    PROTOCOL.to_string(),
                    keypair.public(),
                )),
                ping: ping::Behaviour::new(
                    ping::Config::new()
                        .with_interval(Duration::from_secs(1))
                        .with_timeout(Duration::from_secs(2)),
                ),
            })
            .map_err(|e| transport_error(&e))?
            .with_swarm_config(|c| {
                c.with_idle_connection_timeout(Duration::from_secs(3600))
                    // Every request opens a substream; lazy negotiation sends
                    // the protocol name and the request together instead of
                    // waiting a round trip for the protocol to be confirmed.
                    .with_substream_upgrade_protocol_override(
                        libp2p::core::upgrade::Version::V1Lazy,
                    )
            })
            .build();
        swarm
            .listen_on(config.listen.clone())
            .map_err(|e| transport_error(&e))?;
        // Wait for the listener's real address (the OS picks the port).
        let mut addrs = Vec::new();
        while addrs.is_empty() {
            match swarm.select_next_some().await {
                SwarmEvent::NewListenAddr { address, .. } => addrs.push(address),
                SwarmEvent::ListenerError { error, .. } => return Err(transport_error(&error)),
                SwarmEvent::ListenerClosed {
                    reason: Err(error), ..
                } => return Err(transport_error(&error)),
                _ => {}
            }
        }
        let node = pool.node();
        let me = Member {
            node,
            peer: swarm.local_peer_id().to_string(),
            addrs: addrs.iter().map(ToString::to_string).collect(),
            site: config.site.clone(),
            steal_pool: config.steal_pool.clone(),
            master: config.master,
            executors: pool.executor_contexts().to_vec(),
        };
        for address in &config.bootstrap {
            if let Err(error) = swarm.dial(address.clone()) {
                tracing::warn!(%address, %error, "cannot dial bootstrap address");
            }
        }
        if let Some(key) = &config.key {
            tracing::info!(fingerprint = %key.fingerprint(), "pool key in use");
        }
        Ok(Driver {
            config,
            swarm,
            pool,
            shared,
            idle_pending,
            deliveries: HashSet::new(),
            me,
            node,
            members: HashMap::new(),
            by_peer: HashMap::new(),
            strangers: HashMap::new(),
            stranger_hellos: HashMap::new(),
            custody: Custody::new(),
            attempts: HashMap::new(),
            location: HashMap::new(),
            early: HashMap::new(),
            throttles: HashMap::new(),
            steals: HashMap::new(),
            outbox: HashMap::new(),
            queries: HashMap::new(),
            started: Instant::now(),
            rng: StdRng::from_entropy(),
            stats: NetStats::default(),
            stealing: true,
            leaving: false,
            last_report: Instant::now(),
            last_bootstrap: Instant::now(),
            last_gossip: Instant::now(),
        })
    }

    fn listening(&self) -> Vec<Multiaddr> {
        let peer = *self.swarm.local_peer_id();
        (self.me.addrs.iter())
            .filter_map(|a| a.parse::<Multiaddr>().ok())
            .map(|a| a.with(Protocol::P2p(peer)))
            .collect()
    }

    async fn run(mut self, mut inbox: mpsc::UnboundedReceiver<Command>) {
        let mut housekeeping = tokio::time::interval(Duration::from_millis(100));
        'run: loop {
            let retry = self.next_retry();
            tokio::select! {
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
                _ = sleep_until(retry) => self.try_steal(),
                _ = housekeeping.tick() => self.housekeeping(),
            }
            self.flush();
        }
        self.leave().await;
    }

    /// The next moment a paused steal may go out. Pauses already over are
    /// left to the next idle notice or housekeeping tick, so a pause that
    /// ended while nothing was idle does not wake the loop again and again.
    fn next_retry(&self) -> Option<Instant> {
        if !self.stealing || self.leaving {
            return None;
        }
        let now = Instant::now();
        (self.throttles.values())
            .filter_map(Throttle::retry_at)
            .filter(|&at| at > now)
            .min()
    }

    fn on_command(&mut self, command: Command) {
        match command {
            Command::Outgoing(items) => {
                for item in items {
                    match item {
                        Outgoing::Event(event) => self.route(event),
                        Outgoing::Finished(id) => self.finished_here(id),
                    }
                }
            }
            Command::Idle => {
                self.idle_pending.store(false, Ordering::SeqCst);
                self.try_steal();
            }
            Command::StopStealing => self.stealing = false,
            // `run` stops at a leave before it gets here.
            Command::Leave => {}
            Command::Ask {
                node,
                request,
                reply,
            } => match self.members.get(&node).filter(|m| !m.leaving) {
                Some(member) => {
                    let id = self.request(member.peer, request);
                    self.queries.insert(id, reply);
                }
                None => {
                    let _ = reply.send(Err(format!("{node} is not a member of the pool")));
                }
            },
            Command::Relabel { request, reply } => {
                let _ = reply.send(self.relabel(request));
            }
            Command::Status { reply } => {
                let _ = reply.send(self.status());
            }
        }
    }

    // ----- membership -------------------------------------------------

    fn on_swarm_event(&mut self, event: SwarmEvent<BehaviourEvent>) {
        match event {
            SwarmEvent::ConnectionEstablished {
                peer_id, endpoint, ..
            } => {
                if let Some(node) = self.by_peer.get(&peer_id) {
                    if let Some(member) = self.members.get_mut(node) {
                        member.unreachable_since = None;
                    }
                }
                if endpoint.is_dialer() {
                    self.say_hello(peer_id);
                }
            }
            SwarmEvent::ConnectionClosed {
                peer_id,
                num_established: 0,
                cause,
                ..
            } => {
                // Their senders hear the connection fail.
                self.strangers.remove(&peer_id);
                if let Some(node) = self.by_peer.get(&peer_id).copied() {
                    tracing::debug!(%node, ?cause, "lost the connection to a member");
                    self.unreachable(node);
                    // Try to get it back before the timeout declares it dead.
                    if let Some(member) = self.members.get(&node).filter(|m| !m.leaving) {
                        let _ = dial(&mut self.swarm, member.peer, &member.info);
                    }
                }
            }
            SwarmEvent::IncomingConnectionError {
                send_back_addr,
                error,
                ..
            } => {
                let text = format!("{error:?}");
                if text.contains("Timeout") {
                    tracing::debug!(from = %send_back_addr, "an incoming connection timed out while coming up");
                } else {
                    self.stats.refused += 1;
                    let why = if text.contains("different pool key") {
                        "the peer has a different pool key"
                    } else {
                        "not a constellation node with this pool's key"
                    };
                    tracing::warn!(from = %send_back_addr, reason = why, "refused a connection");
                }
            }
            SwarmEvent::OutgoingConnectionError { peer_id, error, .. } => {
                let member = peer_id.and_then(|peer| self.by_peer.get(&peer).copied());
                match member {
                    Some(node) => {
                        tracing::debug!(%node, %error, "could not connect to a member");
                        self.unreachable(node);
                    }
                    None => tracing::warn!(?peer_id, %error, "could not connect"),
                }
            }
            SwarmEvent::Behaviour(BehaviourEvent::Ping(ping::Event { peer, result, .. })) => {
                if let Some(node) = self.by_peer.get(&peer).copied() {
                    match result {
                        Ok(_) => {
                            if let Some(member) = self.members.get_mut(&node) {
                                member.unreachable_since = None;
                            }
                        }
                        Err(_) => self.unreachable(node),
                    }
                }
            }
            SwarmEvent::Behaviour(BehaviourEvent::Rpc(event)) => self.on_rpc(event),
            _ => {}
        }
    }

    /// Dials members without a connection again, and the bootstrap nodes
    /// while no member is known, at most once a second each.
    fn redial(&mut self, now: Instant) {
        const EVERY: Duration = Duration::from_secs(1);
        if self.members.is_empty() && now - self.last_bootstrap >= EVERY {
            self.last_bootstrap = now;
            for address in self.config.bootstrap.clone() {
                let _ = self.swarm.dial(address);
            }
        }
        for member in self.members.values_mut() {
            if member.leaving
                || now - member.last_dial < EVERY
                || self.swarm.is_connected(&member.peer)
            {
                continue;
            }
            member.last_dial = now;
            let _ = dial(&mut self.swarm, member.peer, &member.info);
        }
    }

    /// Says hello again to one connected member, at random, every two
    /// seconds: its welcome lists the members it knows, and this node
    /// learns those it lacks; the hello makes it known there if it was not.
    ///
    /// Joins alone spread membership only once. Two live nodes that
    /// declared each other dead (a starved node misses its handshakes)
    /// would otherwise stay strangers: 50 nodes on 2 busy cores took 54 s
    /// to converge once, against 8 s usually.
    fn compare_members(&mut self, now: Instant) {
        const EVERY: Duration = Duration::from_secs(2);
        if self.leaving || now - self.last_gossip < EVERY {
            return;
        }
        self.last_gossip = now;
        let connected: Vec<PeerId> = (self.members.values())
            .filter(|m| !m.leaving && self.swarm.is_connected(&m.peer))
            .map(|m| m.peer)
            .collect();
        if let Some(&peer) = connected.choose(&mut self.rng) {
            self.say_hello(peer);
        }
    }

    fn unreachable(&mut self, node: NodeId) {
        if let Some(member) = self.members.get_mut(&node) {
            member.unreachable_since.get_or_insert_with(Instant::now);
        }
    }

    /// Adds a member this node did not know; `dial_now` connects to it now
    /// (otherwise it is expected to dial here). Returns whether it was new.
    fn learn(&mut self, info: Member, dial_now: bool) -> bool {
        if info.node == self.node {
            return false;
        }
        let Ok(peer) = info.peer.parse::<PeerId>() else {
            tracing::warn!(peer = %info.peer, "a member sent an unreadable peer id");
            return false;
        };
        if self.members.contains_key(&info.node) {
            return false;
        }
        if dial_now && !self.swarm.is_connected(&peer) {
            if let Err(error) = dial(&mut self.swarm, peer, &info) {
                tracing::warn!(node = %info.node, %error, "cannot dial a member");
            }
        }
        tracing::debug!(node = %info.node, site = ?info.site, "member joined");
        self.by_peer.insert(peer, info.node);
        self.members.insert(
            info.node,
            MemberState {
                info,
                peer,
                // Until a connection stands it is no steal target; it is
                // declared dead only if a dial fails or a connection is lost.
                unreachable_since: None,
                last_dial: Instant::now(),
                leaving: false,
            },
        );
        self.publish_members();
        for (request, channel) in self.strangers.remove(&peer).unwrap_or_default() {
            self.on_request(peer, request, channel);
        }
        // A new member may have work for executors that wait.
        self.try_steal();
        true
    }

    fn publish_members(&self) {
        let views: Vec<MemberView> = (self.members.values())
            .filter(|m| !m.leaving)
            .map(|m| MemberView {
                node: m.info.node,
                peer: m.peer,
                site: m.info.site.clone(),
                master: m.info.master,
                executors: m.info.executors.clone(),
            })
            .collect();
        let master_present = views.iter().any(|m| m.master);
        let mut offered: Vec<ExecutorContext> = self.pool.executor_contexts().to_vec();
        for member in &views {
            offered.extend(member.executors.iter().cloned());
        }
        *self.shared.offered.lock() = Arc::new(MatchTable::new(&offered));
        let mut members = self.shared.members.lock();
        *members = views;
        if master_present {
            self.shared.master_seen.store(true, Ordering::SeqCst);
        }
        self.shared.changed.notify_all();
    }

    /// Removes a member that left or died; what it held for this node is
    /// queued again, or given up.
    fn remove_member(&mut self, node: NodeId, died: bool) {
        let Some(member) = self.members.remove(&node) else {
            return;
        };
        self.by_peer.remove(&member.peer);
        if died {
            self.stats.dead_members += 1;
            tracing::warn!(%node, "member declared dead");
        } else {
            tracing::info!(%node, "member left");
        }
        for id in self.custody.held_by(node) {
            while let Some(export) = self.take_export(id, node) {
                self.requeue(id, export);
            }
        }
        self.outbox.remove(&node);
        let stale: Vec<_> = (self.steals.iter())
            .filter(|(_, (_, victim))| victim.peer == node)
            .map(|(request, _)| *request)
            .collect();
        for request in stale {
            if let Some((context, _)) = self.steals.remove(&request) {
                if let Some(throttle) = self.throttles.get_mut(&context) {
                    throttle.abandon();
                }
            }
        }
        self.publish_members();
    }

    fn housekeeping(&mut self) {
        let now = Instant::now();
        self.redial(now);
        self.compare_members(now);
        let timeout = self.config.failure_timeout;
        let gone: Vec<(NodeId, bool)> = (self.members.values())
            .filter(|m| {
                m.unreachable_since
                    .is_some_and(|since| now - since >= timeout)
            })
            .map(|m| (m.info.node, !m.leaving))
            .collect();
        for (node, died) in gone {
            self.remove_member(node, died);
        }
        let wait = self.config.early_event_wait;
        let expired: Vec<ActivityId> = (self.early.iter())
            .filter(|(_, (since, _))| now - *since >= wait)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            let (_, events) = self.early.remove(&id).expect("listed above");
            for event in events {
                self.undeliverable(event, "its activity never arrived here");
            }
        }
        *self.shared.stats.lock() = self.stats.clone();
        if self.last_report.elapsed() >= Duration::from_secs(5) {
            self.last_report = now;
            let counts = self.pool.counts();
            tracing::debug!(
                outstanding = self.pool.outstanding(),
                queued = counts.queued,
                running = counts.running,
                live = counts.live,
                exported = self.custody.exported_count(),
                imported = self.custody.imported_count(),
                early = self.early.len(),
                members = self.members.len(),
                "node state"
            );
        }
        // Idle executors whose notice found nothing to steal then.
        self.try_steal();
    }

    // ----- requests -----------------------------------------------------

    fn request(&mut self, peer: PeerId, request: Request) -> OutboundRequestId {
        self.swarm.behaviour_mut().rpc.send_request(&peer, request)
    }

    /// Introduces this node to `peer`; the answer is a welcome naming it
    /// and the members it knows.
    fn say_hello(&mut self, peer: PeerId) -> OutboundRequestId {
        self.request(peer, Request::Hello(self.me.clone()))
    }

    fn respond(&mut self, channel: ResponseChannel<Response>, response: Response) {
        if self
            .swarm
            .behaviour_mut()
            .rpc
            .send_response(channel, response)
            .is_err()
        {
            tracing::debug!("a peer went away before its answer");
        }
    }

    fn on_rpc(&mut self, event: request_response::Event<Request, Response>) {
        match event {
            request_response::Event::Message { peer, message, .. } => match message {
                request_response::Message::Request {
                    request, channel, ..
                } => self.on_request(peer, request, channel),
                request_response::Message::Response {
                    request_id,
                    response,
                } => {
                    let stranger = self.stranger_hellos.remove(&request_id);
                    self.on_response(peer, request_id, response);
                    if let Some(stranger) = stranger {
                        self.stranger_answered(stranger);
                    }
                }
            },
            request_response::Event::OutboundFailure {
                peer,
                request_id,
                error,
                ..
            } => {
                tracing::debug!(%peer, %error, "request failed");
                self.deliveries.remove(&request_id);
                if let Some(stranger) = self.stranger_hellos.remove(&request_id) {
                    self.stranger_answered(stranger);
                }
                if let Some(reply) = self.queries.remove(&request_id) {
                    let _ = reply.send(Err(error.to_string()));
                }
                if let Some((context, victim)) = self.steals.remove(&request_id) {
                    let round = self.steal_round();
                    if let Some(throttle) = self.throttles.get_mut(&context) {
                        throttle.replied(&victim, 0, round, Instant::now());
                    }
                }
            }
            request_response::Event::InboundFailure { peer, error, .. } => {
                // A frame we could not read: garbage, too large, or a codec
                // mismatch. The peer is cut off; this node carries on.
                if matches!(error, request_response::InboundFailure::Io(_)) {
                    self.stats.refused += 1;
                    tracing::warn!(%peer, %error, "refused a malformed or oversized frame; disconnecting the peer");
                    let _ = self.swarm.disconnect_peer_id(peer);
                } else {
                    tracing::debug!(%peer, %error, "inbound request failed");
                }
            }
            request_response::Event::ResponseSent { .. } => {}
        }
    }

    fn on_request(&mut self, peer: PeerId, request: Request, channel: ResponseChannel<Response>) {
        let known = self.by_peer.get(&peer).copied();
        match request {
            Request::Malformed(reason) => {
                self.stats.refused += 1;
                tracing::warn!(%peer, %reason, "refused a frame; disconnecting the peer");
                self.respond(channel, Response::Refused(reason));
                let _ = self.swarm.disconnect_peer_id(peer);
            }
            Request::Hello(member) => {
                // Not those that said they leave: the newcomer would dial
                // them in vain, or find them gone a moment later.
                let members = (self.members.values())
                    .filter(|m| !m.leaving)
                    .map(|m| m.info.clone())
                    .collect();
                let member_peer = member.peer.clone();
                if member_peer != peer.to_string() {
                    self.respond(
                        channel,
                        Response::Refused("hello from a different peer id".into()),
                    );
                    return;
                }
                if self.learn(member.clone(), true) {
                    let others: Vec<NodeId> = (self.members.keys())
                        .copied()
                        .filter(|&node| node != member.node)
                        .collect();
                    for node in others {
                        self.notify(node, Notice::Joined(member.clone()));
                    }
                }
                let me = self.me.clone();
                self.respond(channel, Response::Welcome { me, members });
            }
            _ if known.is_none() => self.stranger(peer, request, channel),
            Request::Steal(steal) => {
                let thief = known.expect("checked");
                let loot = self.export(thief, &steal);
                self.respond(channel, Response::Loot(loot));
            }
            Request::Deliver(notices) => {
                let from = known.expect("checked");
                self.respond(channel, Response::Ack);
                for notice in notices {
                    self.on_notice(from, notice);
                }
            }
            Request::Status => {
                let status = self.status();
                self.respond(channel, Response::Status(Box::new(status)));
            }
            Request::Relabel(request) => {
                let from = known.expect("checked");
                tracing::info!(%from, context = %request.context, "relabelling on request");
                let response = match self.relabel(request) {
                    Ok(()) => Response::Ack,
                    Err(reason) => Response::Refused(reason),
                };
                self.respond(channel, response);
            }
            Request::Leave => {
                let node = known.expect("checked");
                self.respond(channel, Response::Ack);
                if let Some(member) = self.members.get_mut(&node) {
                    // Its last notices may still be on their way: what it
                    // holds is queued again only if it stays silent for
                    // the failure timeout, as for a death.
                    member.leaving = true;
                    member.unreachable_since = Some(Instant::now());
                }
                self.publish_members();
            }
        }
    }

    /// Holds a request from a peer this node does not know and says hello
    /// to it; its welcome names it, and the request is then answered.
    ///
    /// Refusing instead made one-sided membership permanent. A node the
    /// others had declared dead while it was too starved to finish its
    /// handshakes in time, or whose `Joined` notice reached a member
    /// before that member's own welcome did, went on asking members that
    /// did not know it, and was refused each time: 50 nodes on 2 busy
    /// cores failed to converge in 3 runs of 6.
    fn stranger(&mut self, peer: PeerId, request: Request, channel: ResponseChannel<Response>) {
        /// Enough for the notices of a burst; more from someone who never
        /// says who they are is refused.
        const MOST_HELD: usize = 256;
        let held = self.strangers.entry(peer).or_default();
        if held.len() >= MOST_HELD {
            self.respond(channel, Response::Refused("say hello first".into()));
            return;
        }
        held.push((request, channel));
        if held.len() == 1 {
            let hello = self.say_hello(peer);
            self.stranger_hellos.insert(hello, peer);
        }
    }

    /// The hello said to a stranger was answered, or failed: whatever it
    /// sent is refused if it is still unknown (a welcome naming it has
    /// answered its requests already).
    fn stranger_answered(&mut self, peer: PeerId) {
        for (_, channel) in self.strangers.remove(&peer).unwrap_or_default() {
            self.respond(channel, Response::Refused("say hello first".into()));
        }
    }

    fn on_response(&mut self, peer: PeerId, request: OutboundRequestId, response: Response) {
        if let Some(reply) = self.queries.remove(&request) {
            let _ = reply.send(Ok(response));
            return;
        }
        match response {
            Response::Welcome { me, members } => {
                self.learn(me, true);
                for member in members {
                    self.learn(member, true);
                }
            }
            Response::Loot(loot) => {
                let Some((context, victim)) = self.steals.remove(&request) else {
                    return;
                };
                let taken = loot.len();
                if taken == 0 {
                    self.stats.empty_replies += 1;
                }
                let home_work = loot.iter().any(|a| self.on_my_site(a.id.origin()));
                let exporter = victim.peer;
                for activity in loot {
                    if self.leaving {
                        // Too late to run it here: straight back.
                        self.notify(exporter, Notice::Declined(activity.id));
                    } else {
                        self.import(exporter, activity);
                    }
                }
                let round = self.steal_round();
                if let Some(throttle) = self.throttles.get_mut(&context) {
                    throttle.replied(&victim, taken, round, Instant::now());
                    if home_work {
                        throttle.found_home_work();
                    }
                }
                self.try_steal();
            }
            Response::Ack => {
                self.deliveries.remove(&request);
            }
            Response::Status(_) => {}
            Response::Refused(reason) => {
                tracing::debug!(%peer, %reason, "a member refused a request");
                if let Some((context, _)) = self.steals.remove(&request) {
                    if let Some(throttle) = self.throttles.get_mut(&context) {
                        throttle.abandon();
                    }
                }
            }
        }
    }

    // ----- administration ---------------------------------------------

    /// Gives the executors `request` names a new context, then tells every
    /// member what this node offers now. Says why if any executor kept
    /// its old context.
    fn relabel(&mut self, request: RelabelRequest) -> Result<(), String> {
        let count = self.pool.executor_contexts().len();
        let indices: Vec<usize> = match request.executors {
            None => (0..count).collect(),
            Some(list) => list.into_iter().map(|index| index as usize).collect(),
        };
        if let Some(&bad) = indices.iter().find(|&&index| index >= count) {
            return Err(format!(
                "there is no executor {bad}: this node has {count} (numbered from 0)"
            ));
        }
        let mut refused = Vec::new();
        let mut changed = false;
        for index in indices {
            match self.pool.relabel(index, request.context.clone()) {
                Ok(()) => changed = true,
                Err(error) => refused.push(error.to_string()),
            }
        }
        if changed {
            self.me.executors = self.pool.executor_contexts().to_vec();
            let members: Vec<NodeId> = self.members.keys().copied().collect();
            for node in members {
                self.notify(node, Notice::Relabelled(self.me.executors.clone()));
            }
            self.publish_members();
            self.try_steal();
        }
        match refused.is_empty() {
            true => Ok(()),
            false => Err(refused.join("; ")),
        }
    }

    /// What this node says about itself to `constellation status`.
    fn status(&self) -> MemberStatus {
        let counts = self.pool.counts();
        let mut member = self.me.clone();
        member.executors = self.pool.executor_contexts().to_vec();
        let now = Instant::now();
        MemberStatus {
            member,
            role: self.config.role.clone(),
            host: self.config.host.clone(),
            pid: std::process::id(),
            uptime_s: now.duration_since(self.started).as_secs_f64(),
            busy: self.pool.busy_executors(),
            queued: (self.pool.queued_by_label().into_iter())
                .map(|(label, count)| (label, count as u64))
                .collect(),
            running: counts.running as u64,
            waiting: counts.live.saturating_sub(counts.queued + counts.running) as u64,
            finished: counts.finished,
            walltime_left_s: (self.config.deadline)
                .map(|deadline| deadline.saturating_duration_since(now).as_secs_f64()),
            longest_call_s: self.pool.longest_call().as_secs_f64(),
            draining: !self.stealing || self.leaving,
            members_known: self.members.len() as u32,
        }
    }

    // ----- stealing ---------------------------------------------------

    fn candidates(&self) -> Vec<Candidate<NodeId>> {
        (self.members.values())
            .filter(|m| m.unreachable_since.is_none() && !m.leaving)
            .filter(|m| self.swarm.is_connected(&m.peer))
            .filter(|m| m.info.steal_pool == self.config.steal_from)
            .map(|m| Candidate {
                peer: m.info.node,
                same_site: self.config.site.is_some() && m.info.site == self.config.site,
                master: m.info.master,
            })
            .collect()
    }

    /// Whether `node` is this node or a member on its site.
    fn on_my_site(&self, node: NodeId) -> bool {
        node == self.node
            || (self.config.site.is_some()
                && self.members.get(&node).map(|m| &m.info.site) == Some(&self.config.site))
    }

    /// How many victims a full round of empty replies takes.
    fn steal_round(&self) -> usize {
        match self.config.strategy {
            Strategy::MasterWorker => 1,
            _ => self.candidates().len(),
        }
    }

    /// Asks other nodes for work for every idle executor context that may ask now.
    fn try_steal(&mut self) {
        if !self.stealing
            || self.leaving
            || (self.config.strategy == Strategy::MasterWorker && self.config.master)
        {
            return;
        }
        let idle = self.pool.idle_executors();
        if idle.is_empty() {
            return;
        }
        let candidates = self.candidates();
        if candidates.is_empty() {
            return;
        }
        let now = Instant::now();
        // Each distinct context, with how many idle executors offer it.
        let mut contexts: Vec<(ExecutorContext, usize)> = Vec::new();
        for executor in idle {
            if let Some(context) = self.pool.executor_context(executor) {
                match contexts.iter_mut().find(|(c, _)| *c == context) {
                    Some((_, count)) => *count += 1,
                    None => contexts.push((context.clone(), 1)),
                }
            }
        }
        for (context, idle) in contexts {
            let throttle = self.throttles.entry(context.clone()).or_default();
            if !throttle.may_steal(now) {
                continue;
            }
            let Some(victim) = throttle.choose(self.config.strategy, &candidates, &mut self.rng)
            else {
                continue;
            };
            let Some(peer) = self.members.get(&victim.peer).map(|m| m.peer) else {
                throttle.abandon();
                continue;
            };
            let max = throttle.ask(
                self.config.strategy,
                self.config.wide_steal,
                &victim,
                idle,
                self.config.max_steal,
            );
            let request = Request::Steal(StealRequest {
                thief: context.clone(),
                steal_from: self.config.steal_from.clone(),
                max: max.min(u32::MAX as usize) as u32,
            });
            let id = self.request(peer, request);
            self.stats.steal_requests += 1;
            self.steals.insert(id, (context, victim));
        }
    }

    /// Answers a steal request: up to half of the queued work, at most
    /// what the thief and this node allow.
    fn export(&mut self, thief: NodeId, steal: &StealRequest) -> Vec<WireActivity> {
        if steal.steal_from != self.config.steal_pool || self.leaving {
            return Vec::new();
        }
        let queued = self.pool.queued();
        if queued == 0 {
            return Vec::new();
        }
        let max = (steal.max as usize)
            .min(self.config.max_steal)
            .min(queued.div_ceil(2))
            .max(1);
        let stolen = self.pool.export(&steal.thief, max);
        let mut loot = Vec::with_capacity(stolen.len());
        let mut bytes = 0usize;
        let limit = self.config.max_frame / 2;
        for activity in stolen {
            let id = activity.id;
            let (body, pending) = match pack(&activity) {
                Ok((body, pending)) if bytes + body.len() < limit => (body, pending),
                Ok(_) if bytes > 0 => {
                    // Too big for this reply; the next one can carry it.
                    self.keep(activity, true);
                    continue;
                }
                Ok(_) => {
                    tracing::error!(%id, limit, "an activity is too large to travel in a frame; it stays here");
                    self.keep(activity, false);
                    continue;
                }
                Err(error) => {
                    tracing::error!(%id, %error, "an activity cannot be encoded; it stays here");
                    self.keep(activity, false);
                    continue;
                }
            };
            bytes += body.len();
            let attempt = self.attempts.get(&id).copied().unwrap_or(0);
            let copy = WireActivity {
                id,
                body,
                contexts: activity.contexts.clone(),
                attempt,
                pending,
            };
            self.custody.exported(
                id,
                thief,
                Kept {
                    copy: copy.clone(),
                    trail: activity.trail,
                    restartable: activity.body.restartable(),
                },
            );
            self.location.insert(id, thief);
            loot.push(copy);
        }
        self.stats.exported += loot.len() as u64;
        loot
    }

    /// Queues an activity taken for export here again; `stealable: false`
    /// keeps it on this node from now on.
    fn keep(&mut self, mut activity: Stolen<Box<dyn Activity>>, stealable: bool) {
        let id = activity.id;
        let trail = std::mem::take(&mut activity.trail);
        activity.stealable &= stealable;
        if let Err(error) = self.pool.reclaim(activity, &trail) {
            tracing::error!(%id, %error, "could not keep an activity that did not leave");
        }
    }

    /// Takes in one activity from a steal reply.
    fn import(&mut self, exporter: NodeId, wire: WireActivity) {
        let id = wire.id;
        let mut stolen = match unpack(&wire, true) {
            Ok(stolen) => stolen,
            Err(error) => {
                tracing::error!(%id, from = %exporter, %error, "refused an activity; it goes back to its exporter");
                self.stats.refused += 1;
                let reason = error.to_string();
                self.notify(exporter, Notice::Returned { id, reason });
                return;
            }
        };
        // Who handed it over waits to hear that it finished.
        stolen.trail = vec![OFF_NODE];
        if wire.attempt > 0 {
            self.attempts.insert(id, wire.attempt);
        }
        self.custody.imported(id, exporter);
        if let Err(error) = self.pool.import(stolen) {
            tracing::error!(%id, %error, "could not take in a stolen activity");
            self.pop_import(id);
            let reason = error.to_string();
            self.notify(exporter, Notice::Returned { id, reason });
            return;
        }
        self.stats.imported += 1;
        if id.origin() != exporter && id.origin() != self.node {
            let at = self.node;
            self.notify(id.origin(), Notice::Moved { id, at });
        }
        self.location.remove(&id);
        if let Some((_, events)) = self.early.remove(&id) {
            for event in events {
                self.deliver(event);
            }
        }
    }

    // ----- events and bookkeeping ------------------------------------

    fn on_notice(&mut self, from: NodeId, notice: Notice) {
        match notice {
            Notice::Event(wire) => {
                self.stats.events_received += 1;
                self.deliver(local_event(wire));
            }
            Notice::Finished(id) => {
                if let Some(export) = self.take_export(id, from) {
                    if !self.custody.is_exported(id) {
                        self.location.remove(&id);
                        self.attempts.remove(&id);
                    }
                    self.settle_export(id, &export);
                    if let Some(exporter) = self.pop_import(id) {
                        self.notify(exporter, Notice::Finished(id));
                    }
                }
            }
            Notice::GaveUp { id, reason } => {
                if let Some(export) = self.take_export(id, from) {
                    self.location.remove(&id);
                    self.settle_export(id, &export);
                    self.give_up_upstream(id, reason);
                }
            }
            Notice::Joined(member) => {
                // Of each pair, the node with the smaller peer id dials, so
                // two nodes that hear of each other at once connect once.
                let dial = member.peer.as_str() > self.me.peer.as_str();
                self.learn(member, dial);
            }
            Notice::Relabelled(executors) => {
                if let Some(member) = self.members.get_mut(&from) {
                    member.info.executors = executors;
                    self.publish_members();
                }
            }
            Notice::Moved { id, at } => {
                if id.origin() == self.node && at != self.node {
                    self.location.insert(id, at);
                }
            }
            Notice::Returned { id, reason } => {
                if let Some(export) = self.take_export(id, from) {
                    tracing::error!(%id, thief = %from, %reason, "a member could not take an activity; it stays on this node (are all nodes running the same build?)");
                    self.take_back(id, export, false);
                }
            }
            Notice::Declined(id) => {
                if let Some(export) = self.take_export(id, from) {
                    self.take_back(id, export, true);
                }
            }
        }
    }

    /// Queues an exported activity here again, as it was when it left;
    /// `stealable: false` keeps it on this node from now on.
    fn take_back(&mut self, id: ActivityId, export: Kept, stealable: bool) {
        self.location.remove(&id);
        match unpack(&export.copy, stealable) {
            Ok(stolen) => {
                if let Err(error) = self.pool.reclaim(stolen, &export.trail) {
                    tracing::error!(%id, %error, "could not queue a returned activity again");
                }
            }
            Err(error) => {
                self.settle_export(id, &export);
                self.give_up_upstream(id, format!("its copy no longer decodes: {error}"));
            }
        }
    }

    /// The local pool forgets an exported activity: pointers and its count.
    /// Who upstream hears about it is the caller's decision.
    fn settle_export(&mut self, id: ActivityId, export: &Kept) {
        let trail: Vec<Place> = (export.trail.iter())
            .copied()
            .filter(|&place| place != OFF_NODE)
            .collect();
        self.pool.exported_finished(id, &trail);
    }

    /// The link of `id`'s chain of custody that handed it to `thief`.
    fn take_export(&mut self, id: ActivityId, thief: NodeId) -> Option<Kept> {
        self.custody
            .take_export(id, thief)
            .map(|export| export.copy)
    }

    /// The node that handed `id` here last, which waits to hear of its end.
    fn pop_import(&mut self, id: ActivityId) -> Option<NodeId> {
        self.custody.pop_import(id)
    }

    fn give_up_upstream(&mut self, id: ActivityId, reason: String) {
        self.attempts.remove(&id);
        match self.pop_import(id) {
            Some(exporter) => self.notify(exporter, Notice::GaveUp { id, reason }),
            None => {
                self.stats.lost += 1;
                tracing::error!(%id, %reason, "activity given up");
                self.shared.lost.lock().push((id, reason));
            }
        }
    }

    /// An activity that came from elsewhere finished on this node.
    fn finished_here(&mut self, id: ActivityId) {
        self.attempts.remove(&id);
        if let Some(exporter) = self.pop_import(id) {
            if self.members.contains_key(&exporter) {
                self.notify(exporter, Notice::Finished(id));
            }
        }
    }

    /// Queues an activity again whose thief died, or gives it up.
    fn requeue(&mut self, id: ActivityId, export: Kept) {
        self.location.remove(&id);
        let attempt = match custody::retry(
            export.copy.attempt,
            export.restartable,
            self.config.max_attempts,
        ) {
            Ok(attempt) => attempt,
            Err(give_up) => {
                self.settle_export(id, &export);
                self.give_up_upstream(id, give_up.to_string());
                return;
            }
        };
        let stolen = match unpack(&export.copy, true) {
            Ok(stolen) => stolen,
            Err(error) => {
                self.settle_export(id, &export);
                self.give_up_upstream(id, format!("its copy no longer decodes: {error}"));
                return;
            }
        };
        self.attempts.insert(id, attempt);
        match self.pool.reclaim(stolen, &export.trail) {
            Ok(()) => {
                self.stats.requeued += 1;
                tracing::warn!(%id, attempt, "queued again: the node running it died");
                if id.origin() != self.node {
                    let at = self.node;
                    self.notify(id.origin(), Notice::Moved { id, at });
                }
            }
            Err(error) => {
                tracing::error!(%id, %error, "could not queue an activity again");
            }
        }
    }

    /// An event from the network, or one the pool sent off: deliver it here
    /// or pass it on.
    fn deliver(&mut self, event: Event) {
        match self.pool.deliver_from_network(event) {
            Arrival::Delivered => {}
            Arrival::Gone(undeliverable) => {
                self.stats.undeliverable += 1;
                tracing::warn!(%undeliverable, "event lost: its target is gone");
            }
            Arrival::Away(event) => self.route(event),
            Arrival::Unknown(event) => {
                let target = event.target;
                if target.origin() == self.node && !self.location.contains_key(&target) {
                    self.undeliverable(event, "no such activity (it finished, or never existed)");
                } else if self.location.contains_key(&target) {
                    self.route(event);
                } else {
                    // Its activity is on its way here (a steal reply racing
                    // the event), or it finished here moments ago.
                    self.early
                        .entry(target)
                        .or_insert_with(|| (Instant::now(), Vec::new()))
                        .1
                        .push(event);
                }
            }
        }
    }

    /// Sends an event towards its target: where this node last knew it to
    /// be, else its origin.
    fn route(&mut self, event: Event) {
        let target = event.target;
        let destination = match self.location.get(&target) {
            Some(&at) => at,
            None if target.origin() != self.node => target.origin(),
            None => {
                self.undeliverable(event, "its activity left this node and nobody knows where");
                return;
            }
        };
        if destination == self.node {
            self.deliver(event);
            return;
        }
        if !self.members.contains_key(&destination) {
            self.undeliverable(
                event,
                "the node holding its activity is not a member (it died or left)",
            );
            return;
        }
        match wire_event(&event) {
            Ok(wire) => {
                self.stats.events_sent += 1;
                self.notify(destination, Notice::Event(wire));
            }
            Err(error) => {
                self.undeliverable(event, &format!("its payload cannot be encoded: {error}"))
            }
        }
    }

    fn undeliverable(&mut self, event: Event, why: &str) {
        self.stats.undeliverable += 1;
        tracing::warn!(source = %event.source, target = %event.target, reason = why, "event not delivered");
    }

    fn notify(&mut self, node: NodeId, notice: Notice) {
        self.outbox.entry(node).or_default().push(notice);
    }

    /// Sends what waits in the outbox, one request per destination.
    fn flush(&mut self) {
        if self.outbox.is_empty() {
            return;
        }
        let outbox = std::mem::take(&mut self.outbox);
        for (node, notices) in outbox {
            match self.members.get(&node).map(|m| m.peer) {
                Some(peer) => {
                    let id = self.request(peer, Request::Deliver(notices));
                    self.deliveries.insert(id);
                }
                None => {
                    for notice in notices {
                        if let Notice::Event(wire) = notice {
                            self.undeliverable(local_event(wire), "its node is gone");
                        }
                    }
                }
            }
        }
    }

    async fn leave(&mut self) {
        self.leaving = true;
        self.flush();
        let peers: Vec<PeerId> = (self.members.values())
            .map(|m| m.peer)
            .filter(|peer| self.swarm.is_connected(peer))
            .collect();
        let mut waiting: VecDeque<OutboundRequestId> = peers
            .iter()
            .map(|peer| self.request(*peer, Request::Leave))
            .collect();
        // Wait for the goodbyes and for every notice still unacknowledged
        // (a member that left stays a member, for the failure timeout, so
        // these still arrive), but not forever: a peer may be gone.
        let deadline = tokio::time::Instant::now() + LEAVE_WAIT;
        while !(waiting.is_empty() && self.deliveries.is_empty()) {
            tokio::select! {
                event = self.swarm.select_next_some() => {
                    if let SwarmEvent::Behaviour(BehaviourEvent::Rpc(
                        request_response::Event::Message { message: request_response::Message::Response { request_id, .. }, .. }
                        | request_response::Event::OutboundFailure { request_id, .. },
                    )) = &event {
                        waiting.retain(|r| r != request_id);
                    }
                    // Steal replies still on their way are declined here.
                    self.on_swarm_event(event);
                    self.flush();
                }
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
        *self.shared.stats.lock() = self.stats.clone();
    }
}

/// The longest a leaving node waits for its goodbyes and last notices to
/// be acknowledged.
const LEAVE_WAIT: Duration = Duration::from_secs(2);

/// Dials a member at the addresses it announced.
fn dial(
    swarm: &mut Swarm<Behaviour>,
    peer: PeerId,
    member: &Member,
) -> Result<(), libp2p::swarm::DialError> {
    let addrs = member.addrs.iter().filter_map(|a| a.parse().ok()).collect();
    let opts = libp2p::swarm::dial_opts::DialOpts::peer_id(peer)
        .addresses(addrs)
        .build();
    swarm.dial(opts)
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// An activity's state and buffered events, encoded for the wire.
fn pack(activity: &Stolen<Box<dyn Activity>>) -> Result<(Vec<u8>, Vec<WireEvent>), String> {
    let body = encode_activity(&*activity.body).map_err(|error| error.to_string())?;
    let pending = (activity.pending.iter())
        .map(wire_event)
        .collect::<Result<_, _>>()
        .map_err(|error| format!("an event waiting for it: {error}"))?;
    Ok((body, pending))
}

/// An activity off the wire, ready for the pool, with an empty trail.
fn unpack(wire: &WireActivity, stealable: bool) -> Result<Stolen<Box<dyn Activity>>, WireError> {
    Ok(Stolen {
        id: wire.id,
        body: decode_activity(&wire.body)?,
        contexts: wire.contexts.clone(),
        stealable,
        pending: wire.pending.iter().cloned().map(local_event).collect(),
        trail: Vec::new(),
    })
}

fn wire_event(event: &Event) -> Result<WireEvent, crate::event::PayloadError> {
    Ok(WireEvent {
        source: event.source,
        target: event.target,
        payload: event.payload.encode()?,
    })
}

fn local_event(wire: WireEvent) -> Event {
    Event {
        source: wire.source,
        target: wire.target,
        payload: Payload::from_encoded(wire.payload),
    }
}
