//! The libp2p side of the driver: building the swarm, turning its events
//! into node inputs, and the node's transmits into requests.
//!
//! One request-response protocol carries everything. A node protocol
//! message is a request answered at once with [`Response::Ack`]: the
//! answer says only that the message arrived, and a request that fails
//! (no connection, a reset, a timeout) is reported to the node with
//! [`handle_send_failed`](crate::protocol::StateMachine::handle_send_failed),
//! with the transmit's token.
//! Liveness is SWIM's business, inside the node; the driver keeps no ping.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use libp2p::multiaddr::Protocol;
use libp2p::request_response::{self, InboundRequestId, ProtocolSupport, ResponseChannel};
use libp2p::swarm::dial_opts::DialOpts;
use libp2p::swarm::{ConnectionId, DialError, SwarmEvent};
use libp2p::{identity, Multiaddr, PeerId, StreamProtocol, SwarmBuilder};
use parking_lot::Mutex;

use super::{Driver, InFlight};
use crate::net::codec::{FrameCodec, PROTOCOL};
use crate::net::join::{classify, dial_failure, with_causes};
use crate::net::message::{Envelope, NetPeer, Request, Response};
use crate::net::{JoinFailure, JoinProblem, NodeConfig, NodeError};
use crate::protocol::{Output, Transmit};

/// The swarm: request-response with the frame codec, nothing else.
pub(crate) type Swarm = libp2p::Swarm<request_response::Behaviour<FrameCodec>>;

type Event = SwarmEvent<request_response::Event<Request, Response>>;

/// Builds the swarm and listens; returns once the listener's real address
/// is known (the OS picks the port).
pub(crate) async fn build(
    config: &NodeConfig,
    keypair: identity::Keypair,
) -> Result<(Swarm, Vec<Multiaddr>), NodeError> {
    let psk = config.key.as_ref().map(|key| key.psk());
    let transport_error = |error: &dyn std::error::Error| NodeError::Transport(with_causes(error));
    let transport =
        crate::net::transport::build_transport(&keypair, psk).map_err(|e| transport_error(&e))?;
    let codec = FrameCodec::new(config.max_frame);
    let mut swarm = SwarmBuilder::with_existing_identity(keypair)
        .with_tokio()
        .with_other_transport(|_| transport)
        .map_err(|e| transport_error(&e))?
        .with_behaviour(|_| {
            request_response::Behaviour::with_codec(
                codec,
                [(StreamProtocol::new(PROTOCOL), ProtocolSupport::Full)],
                request_response::Config::default()
                    .with_request_timeout(REQUEST_TIMEOUT)
                    .with_max_concurrent_streams(1024),
            )
        })
        .map_err(|e| transport_error(&e))?
        .with_swarm_config(|c| {
            c.with_idle_connection_timeout(Duration::from_secs(3600))
                // Every request opens a substream; lazy negotiation sends
                // the protocol name and the request together instead of
                // waiting a round trip for the protocol to be confirmed.
                .with_substream_upgrade_protocol_override(libp2p::core::upgrade::Version::V1Lazy)
        })
        .build();
    swarm
        .listen_on(config.listen.clone())
        .map_err(|e| transport_error(&e))?;
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
    Ok((swarm, addrs))
}

/// How long a request may go unanswered. Answers are immediate
/// acknowledgements, but a steal reply may carry many megabytes.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The addresses this node was told to join through, and the dials to
/// them: a connection to one is introduced to the node as a contact.
pub(crate) struct Bootstrap {
    addrs: Vec<Multiaddr>,
    dials: HashMap<ConnectionId, Multiaddr>,
    last_dial: Instant,
}

impl Bootstrap {
    /// Dials every bootstrap address. Dials that fail at once are
    /// recorded in `problems`, as the driver records those that fail later.
    pub(crate) fn dial(
        swarm: &mut Swarm,
        addrs: Vec<Multiaddr>,
        now: Instant,
        problems: &Mutex<Vec<JoinProblem>>,
    ) -> Self {
        let mut bootstrap = Bootstrap {
            addrs,
            dials: HashMap::new(),
            last_dial: now,
        };
        for address in bootstrap.addrs.clone() {
            bootstrap.dial_one(swarm, address, problems);
        }
        bootstrap
    }

    /// Dials the bootstrap addresses again, at most once a second: for a
    /// node that knows no member (yet, or any more), or whose master is
    /// gone. An address that names a peer this node is connected to is
    /// not dialled again (each dial would leave one more idle connection);
    /// those peers are returned instead, to be contacted over the
    /// connection there is.
    pub(crate) fn redial(
        &mut self,
        swarm: &mut Swarm,
        now: Instant,
        problems: &Mutex<Vec<JoinProblem>>,
    ) -> Vec<NetPeer> {
        if now - self.last_dial < REDIAL_EVERY {
            return Vec::new();
        }
        self.last_dial = now;
        let mut connected = Vec::new();
        for address in self.addrs.clone() {
            match named_peer(&address) {
                Some(peer) if swarm.is_connected(&peer) => connected.push(NetPeer {
                    id: peer.to_string(),
                    addrs: vec![without_peer(address).to_string()],
                }),
                _ => self.dial_one(swarm, address, problems),
            }
        }
        connected
    }

    fn dial_one(
        &mut self,
        swarm: &mut Swarm,
        address: Multiaddr,
        problems: &Mutex<Vec<JoinProblem>>,
    ) {
        let opts = DialOpts::unknown_peer_id().address(address.clone()).build();
        let connection = opts.connection_id();
        match swarm.dial(opts) {
            Ok(()) => {
                self.dials.insert(connection, address);
            }
            Err(error) => {
                record_problem(problems, JoinProblem::from_dial_error(address, &error));
            }
        }
    }
}

/// Peer ids as libp2p keeps them and as the node protocol names them
/// (text), converted once each: base58 on every message and every member
/// list costs more than the rest of the glue.
#[derive(Default)]
pub(crate) struct PeerIds {
    by_text: HashMap<String, PeerId>,
    texts: HashMap<PeerId, String>,
}

impl PeerIds {
    /// The peer id `text` names, if it names one.
    pub(crate) fn parse(&mut self, text: &str) -> Option<PeerId> {
        if let Some(peer) = self.by_text.get(text) {
            return Some(*peer);
        }
        let peer = text.parse::<PeerId>().ok()?;
        self.forget_if_full();
        self.by_text.insert(text.to_string(), peer);
        Some(peer)
    }

    /// `peer` as text.
    pub(crate) fn text(&mut self, peer: PeerId) -> &str {
        self.forget_if_full();
        self.texts.entry(peer).or_insert_with(|| peer.to_string())
    }

    /// Peers come and go over a long life; the cache must not grow with them.
    fn forget_if_full(&mut self) {
        const MOST: usize = 16 * 1024;
        if self.by_text.len() >= MOST || self.texts.len() >= MOST {
            self.by_text.clear();
            self.texts.clear();
        }
    }
}

/// How often a node that knows no member dials its bootstrap addresses.
const REDIAL_EVERY: Duration = Duration::from_secs(1);

impl Driver {
    pub(super) fn on_swarm_event(&mut self, event: Event) {
        match event {
            SwarmEvent::ConnectionEstablished {
                peer_id,
                connection_id,
                ..
            } => {
                if let Some(address) = self.bootstrap.dials.remove(&connection_id) {
                    let mut problems = self.shared.join_problems.lock();
                    if let Some(at) = problems.iter().position(|p| p.address == address) {
                        problems.remove(at);
                        tracing::info!(%address, "reached a bootstrap node after failing to");
                    }
                    drop(problems);
                    let addrs = vec![without_peer(address).to_string()];
                    let peer = NetPeer {
                        id: peer_id.to_string(),
                        addrs,
                    };
                    tracing::debug!(%peer_id, "connected to a bootstrap node");
                    self.node.contact(peer, Instant::now());
                }
            }
            SwarmEvent::ConnectionClosed {
                peer_id,
                num_established: 0,
                cause,
                ..
            } => {
                // Requests on it fail, and the node hears of each.
                tracing::debug!(%peer_id, ?cause, "connection closed");
                if cause
                    .as_ref()
                    .is_some_and(|cause| was_reset(&format!("{cause:?}")))
                {
                    self.unreachable(peer_id);
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
                    self.node.count_refused();
                    let why = match classify(&error.to_string(), &text) {
                        JoinFailure::WrongKey => "the peer has a different pool key",
                        // A dialer that went away is not a stranger.
                        JoinFailure::Handshake => "the connection was closed during the handshake",
                        _ => "not a constellation node with this pool's key",
                    };
                    tracing::warn!(from = %send_back_addr, reason = why, "refused a connection");
                }
            }
            SwarmEvent::OutgoingConnectionError {
                connection_id,
                peer_id,
                error,
                ..
            } => {
                if let Some(peer) = peer_id {
                    if dial_failure(&error).0 == JoinFailure::Refused {
                        self.unreachable(peer);
                    }
                }
                self.dial_failed(connection_id, peer_id, &error);
            }
            SwarmEvent::Behaviour(event) => self.on_rpc(event),
            _ => {}
        }
    }

    /// A dial failed: one to a bootstrap address is kept as a join problem.
    fn dial_failed(&mut self, connection: ConnectionId, peer: Option<PeerId>, error: &DialError) {
        match self.bootstrap.dials.remove(&connection) {
            Some(address) => {
                let problem = JoinProblem::from_dial_error(address, error);
                record_problem(&self.shared.join_problems, problem);
            }
            None => tracing::debug!(?peer, %error, "could not connect"),
        }
    }

    /// A connection to `peer` was refused or reset: if it is a member, the
    /// node suspects it at once ([`StateMachine::handle_unreachable`](crate::protocol::StateMachine::handle_unreachable)).
    fn unreachable(&mut self, peer: PeerId) {
        let text = self.peers.text(peer).to_string();
        let member = (self.node.members())
            .find(|(id, _)| id.peer.id == text)
            .map(|(id, _)| id.peer.clone());
        if let Some(member) = member {
            tracing::debug!(%peer, "a member's connection was refused or reset");
            self.node.handle_unreachable(&member, Instant::now());
        }
    }

    fn on_rpc(&mut self, event: request_response::Event<Request, Response>) {
        let now = Instant::now();
        match event {
            request_response::Event::Message { peer, message, .. } => match message {
                request_response::Message::Request {
                    request_id,
                    request,
                    channel,
                } => self.on_request(peer, request_id, request, channel),
                request_response::Message::Response {
                    request_id,
                    response,
                } => match self.in_flight.remove(&request_id) {
                    Some(InFlight::Query(reply)) => {
                        let _ = reply.send(Ok(response));
                    }
                    Some(InFlight::Protocol { to, token, .. }) => match response {
                        Response::Ack => {}
                        Response::Reply(envelopes) => {
                            for envelope in envelopes {
                                self.receive(peer, envelope, now);
                            }
                        }
                        other => {
                            tracing::debug!(%peer, response = ?other, "a member refused a message");
                            self.node
                                .handle_send_failed(&to, token, now, &mut self.host);
                        }
                    },
                    None => {}
                },
            },
            request_response::Event::OutboundFailure {
                peer,
                request_id,
                error,
                ..
            } => {
                tracing::debug!(%peer, %error, "request failed");
                match self.in_flight.remove(&request_id) {
                    Some(InFlight::Query(reply)) => {
                        let _ = reply.send(Err(error.to_string()));
                    }
                    Some(InFlight::Protocol { to, token, .. }) => {
                        self.node
                            .handle_send_failed(&to, token, now, &mut self.host);
                    }
                    None => {}
                }
            }
            request_response::Event::InboundFailure {
                peer,
                request_id,
                error,
                ..
            } => {
                // Replies that rode on the answer are lost with it.
                for (to, token) in self.replies.remove(&request_id).unwrap_or_default() {
                    self.node
                        .handle_send_failed(&to, token, now, &mut self.host);
                }
                // A frame we could not read: garbage, too large, or a codec
                // mismatch. The peer is cut off; this node carries on.
                if matches!(error, request_response::InboundFailure::Io(_)) {
                    self.node.count_refused();
                    tracing::warn!(%peer, %error, "refused a malformed or oversized frame; disconnecting the peer");
                    let _ = self.swarm.disconnect_peer_id(peer);
                } else {
                    tracing::debug!(%peer, %error, "inbound request failed");
                }
            }
            request_response::Event::ResponseSent { request_id, .. } => {
                self.replies.remove(&request_id);
            }
        }
    }

    fn on_request(
        &mut self,
        peer: PeerId,
        request_id: InboundRequestId,
        request: Request,
        channel: ResponseChannel<Response>,
    ) {
        match request {
            Request::Malformed(reason) => {
                self.node.count_refused();
                tracing::warn!(%peer, %reason, "refused a frame; disconnecting the peer");
                self.respond(channel, Response::Refused(reason));
                let _ = self.swarm.disconnect_peer_id(peer);
            }
            Request::Protocol(envelope) => {
                let sender = envelope.from.peer.id.clone();
                if !self.receive(peer, *envelope, Instant::now()) {
                    let reason = "the sender is not the peer it names".to_string();
                    self.respond(channel, Response::Refused(reason));
                    return;
                }
                // What the node says to the sender at once rides on the
                // answer; the rest goes out as usual.
                let mut replies = Vec::new();
                let mut failures = Vec::new();
                self.wake = None;
                while let Some(output) = self.node.poll_output() {
                    match output {
                        Output::Transmit(transmit) if transmit.to.id == sender => {
                            failures.push((transmit.to, transmit.token));
                            replies.push(transmit.envelope);
                        }
                        other => self.on_output(other),
                    }
                }
                if replies.is_empty() {
                    self.respond(channel, Response::Ack);
                } else {
                    self.replies.insert(request_id, failures);
                    self.respond(channel, Response::Reply(replies));
                }
            }
            // Administration is open to any peer that got past the pool
            // key, member or not: `constellation status` asks from a node
            // that has only just joined.
            Request::Status => {
                let status = self.status();
                self.respond(channel, Response::Status(Box::new(status)));
            }
            Request::App(body) => self.answer_app(peer, body, channel),
            Request::Relabel(request) => {
                tracing::info!(from = %peer, context = %request.context, "relabelling on request");
                let response = match self.relabel(request) {
                    Ok(()) => Response::Ack,
                    Err(reason) => Response::Refused(reason),
                };
                self.respond(channel, response);
            }
        }
    }

    /// Hands an app request to the application's handler on a blocking
    /// thread; its answer comes back through the driver's inbox. Without a
    /// handler, or if the thread cannot be had, it is refused at once.
    fn answer_app(&mut self, from: PeerId, body: Vec<u8>, channel: ResponseChannel<Response>) {
        let Some(handler) = self.config.app_handler.clone() else {
            let reason = format!("this {} takes no app requests", self.config.role);
            self.respond(channel, Response::Refused(reason));
            return;
        };
        let inbox = self.to_itself.clone();
        tokio::task::spawn_blocking(move || {
            // A panicking handler must not leave the asker waiting for
            // its timeout: it gets the panic as a refusal.
            let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                handler(crate::net::AppRequest { from, body })
            }))
            .unwrap_or_else(|_| Err("the request's handler failed (a bug; see its log)".into()));
            // A closed inbox: the node is stopping, and the asker hears
            // that its stream closed.
            let _ = inbox.send(super::Command::AppAnswered { channel, answer });
        });
    }

    /// Hands a protocol message from `peer` to the node, unless it names
    /// another sender: the pool key lets a peer in, it may still not speak
    /// for another. Whether it was taken.
    fn receive(&mut self, peer: PeerId, envelope: Envelope, now: Instant) -> bool {
        if envelope.from.peer.id != self.peers.text(peer) {
            tracing::warn!(%peer, claimed = %envelope.from.peer.id, "refused a message sent in another peer's name");
            self.node.count_refused();
            return false;
        }
        self.node.handle_message(envelope, now, &mut self.host);
        true
    }

    pub(super) fn respond(&mut self, channel: ResponseChannel<Response>, response: Response) {
        if self
            .swarm
            .behaviour_mut()
            .send_response(channel, response)
            .is_err()
        {
            tracing::debug!("a peer went away before its answer");
        }
    }

    /// Sends one message of the node, dialling its peer at the addresses
    /// it announced if there is no connection.
    pub(super) fn transmit(&mut self, transmit: super::NetTransmit) {
        let awaited = transmit.must_arrive();
        let Transmit {
            to,
            envelope,
            token,
        } = transmit;
        let Some(peer) = self.peers.parse(&to.id) else {
            tracing::warn!(peer = %to.id, "a member has an unreadable peer id");
            self.node
                .handle_send_failed(&to, token, Instant::now(), &mut self.host);
            return;
        };
        let request = Request::Protocol(Box::new(envelope));
        let id = self.request(peer, &to, request);
        let in_flight = InFlight::Protocol { to, token, awaited };
        self.in_flight.insert(id, in_flight);
    }

    /// Sends `request` to `peer`, dialling `to`'s addresses if needed.
    pub(super) fn request(
        &mut self,
        peer: PeerId,
        to: &NetPeer,
        request: Request,
    ) -> request_response::OutboundRequestId {
        // Addresses matter only for a dial.
        let addrs = match self.swarm.is_connected(&peer) {
            true => Vec::new(),
            false => (to.addrs.iter())
                .filter_map(|a| a.parse::<Multiaddr>().ok())
                .collect(),
        };
        self.swarm
            .behaviour_mut()
            .send_request_with_addresses(&peer, request, addrs)
    }
}

/// Whether a connection's end (its error, as `Debug` shows it: the layers
/// between TCP and libp2p box their errors) says the peer's side is gone:
/// reset, or ended in the middle of the stream, as when its process dies.
/// A timeout is not one: a peer starved of CPU times out, alive.
fn was_reset(cause: &str) -> bool {
    let text = cause.to_lowercase();
    [
        "connectionreset",
        "connection reset",
        "brokenpipe",
        "broken pipe",
        "unexpectedeof",
    ]
    .iter()
    .any(|word| text.contains(word))
}

/// Keeps `problem` as the last one at its address, and logs it as a
/// warning when it is new there: a node that redials every second while
/// its pool node is away would otherwise log the same failure every second.
fn record_problem(problems: &Mutex<Vec<JoinProblem>>, problem: JoinProblem) {
    let mut problems = problems.lock();
    let same = |known: &JoinProblem| known.address == problem.address;
    let before = problems.iter().position(same).map(|at| problems.remove(at));
    let address = &problem.address;
    match before {
        Some(before) if before.failure == problem.failure => {
            tracing::debug!(%address, detail = %problem.detail, "could not connect to a bootstrap node, again");
        }
        _ => {
            tracing::warn!(%address, detail = %problem.detail, "could not connect to a bootstrap node: {problem}");
        }
    }
    problems.push(problem);
}

/// The peer `address` names in its `/p2p/<peer id>` suffix, if it has one.
fn named_peer(address: &Multiaddr) -> Option<PeerId> {
    match address.iter().last() {
        Some(Protocol::P2p(peer)) => Some(peer),
        _ => None,
    }
}

/// `address` without its `/p2p/<peer id>` suffix, if it has one.
fn without_peer(mut address: Multiaddr) -> Multiaddr {
    if let Some(Protocol::P2p(_)) = address.iter().last() {
        address.pop();
    }
    address
}
