//! A peer that speaks garbage is refused, and the node stays up.
//!
//! A real node runs in this process; a raw libp2p client with the pool key
//! (so it gets past pnet, noise and yamux) opens `/constellation/1` streams
//! and writes bytes of its choosing: frames that do not decode, a frame that
//! announces more than the node accepts, and a well-formed message sent in
//! another peer's name. A plain TCP socket writes random bytes where
//! the pnet handshake should be. Afterwards a second node joins and work
//! submitted at the first still runs to the right answer.
//!
//! Set `RUST_LOG=constellation=debug` to see what the node logs.

use std::io::{self, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use constellation::collect::SingleEventCollector;
use constellation::net::codec::{decode_frame, encode_frame, DEFAULT_MAX_FRAME, PROTOCOL};
use constellation::net::message::{Envelope, NetPeer, Request, Response};
use constellation::net::transport::build_transport;
use constellation::net::{Node, NodeConfig, PoolKey};
use constellation::protocol::MemberId;
use constellation::{NodeId, Pool};
use constellation_workloads::{fib_sequential, within_limit, Fib};
use futures::prelude::*;
use libp2p::multiaddr::Protocol;
use libp2p::request_response::{self, OutboundFailure, ProtocolSupport};
use libp2p::swarm::{Swarm, SwarmEvent};
use libp2p::{identity, Multiaddr, PeerId, StreamProtocol, SwarmBuilder};

/// No test here may take longer than this, whatever goes wrong.
const TEST_LIMIT: Duration = Duration::from_secs(30);

/// How long the raw client waits for one answer (or failure).
const REQUEST_WAIT: Duration = Duration::from_secs(5);

/// How long the node gets to count what it refused: its stats are
/// published at least every 100 ms.
const STATS_WAIT: Duration = Duration::from_secs(2);

/// The most response bytes the raw client reads.
const MAX_RESPONSE: u64 = 1 << 20;

// ----- a raw client ----------------------------------------------------

/// A request-response codec that writes requests verbatim and reads
/// whatever comes back until the stream ends.
#[derive(Debug, Clone, Copy, Default)]
struct RawCodec;

async fn read_to_eof<T: AsyncRead + Unpin + Send>(io: &mut T) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    io.take(MAX_RESPONSE).read_to_end(&mut bytes).await?;
    Ok(bytes)
}

#[async_trait]
impl request_response::Codec for RawCodec {
    type Protocol = StreamProtocol;
    type Request = Vec<u8>;
    type Response = Vec<u8>;

    async fn read_request<T>(&mut self, _: &StreamProtocol, io: &mut T) -> io::Result<Vec<u8>>
    where
        T: AsyncRead + Unpin + Send,
    {
        read_to_eof(io).await
    }

    async fn read_response<T>(&mut self, _: &StreamProtocol, io: &mut T) -> io::Result<Vec<u8>>
    where
        T: AsyncRead + Unpin + Send,
    {
        let bytes = read_to_eof(io).await?;
        if bytes.is_empty() {
            // The node closed the stream without a word: that is a refusal,
            // not an answer.
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the stream ended without a response",
            ));
        }
        Ok(bytes)
    }

    async fn write_request<T>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        req: Vec<u8>,
    ) -> io::Result<()>
    where
        T: AsyncWrite + Unpin + Send,
    {
        io.write_all(&req).await?;
        io.flush().await
    }

    async fn write_response<T>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        res: Vec<u8>,
    ) -> io::Result<()>
    where
        T: AsyncWrite + Unpin + Send,
    {
        io.write_all(&res).await?;
        io.flush().await
    }
}

type RawBehaviour = request_response::Behaviour<RawCodec>;

/// How one raw request ended.
#[derive(Debug)]
enum Outcome {
    /// The node answered with these bytes.
    Answered(Vec<u8>),
    /// The request failed.
    Failed(OutboundFailure),
}

/// A libp2p peer with the pool key that speaks `/constellation/1` with
/// bytes of the test's choosing.
struct RawClient {
    runtime: tokio::runtime::Runtime,
    swarm: Swarm<RawBehaviour>,
    node: PeerId,
    address: Multiaddr,
    /// Whether the last connection to the node was closed.
    closed: bool,
}

impl RawClient {
    fn new(key: &PoolKey, node: &Node) -> RawClient {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let psk = key.psk();
        let swarm = runtime.block_on(async move {
            SwarmBuilder::with_existing_identity(identity::Keypair::generate_ed25519())
                .with_tokio()
                .with_other_transport(|kp| {
                    build_transport(kp, Some(psk))
                        .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
                })
                .expect("the transport builds")
                .with_behaviour(|_| {
                    RawBehaviour::new(
                        [(StreamProtocol::new(PROTOCOL), ProtocolSupport::Outbound)],
                        request_response::Config::default().with_request_timeout(REQUEST_WAIT),
                    )
                })
                .expect("the behaviour builds")
                .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(60)))
                .build()
        });
        let mut client = RawClient {
            runtime,
            swarm,
            node: node.peer_id(),
            address: node.join_address(),
            closed: true,
        };
        client.connect();
        client
    }

    /// Connects to the node (again), waiting until the connection is up.
    fn connect(&mut self) {
        let RawClient {
            runtime,
            swarm,
            node,
            address,
            ..
        } = self;
        let connecting = async {
            // Dialing spawns tasks, so it happens inside the runtime.
            swarm
                .dial(address.clone())
                .map_err(|error| error.to_string())?;
            loop {
                match swarm.select_next_some().await {
                    SwarmEvent::ConnectionEstablished { peer_id, .. } if peer_id == *node => {
                        return Ok(());
                    }
                    SwarmEvent::OutgoingConnectionError { error, .. } => {
                        return Err(error.to_string())
                    }
                    _ => {}
                }
            }
        };
        // The timer needs the runtime too.
        let connected =
            runtime.block_on(async { tokio::time::timeout(REQUEST_WAIT, connecting).await });
        match connected {
            Ok(Ok(())) => self.closed = false,
            Ok(Err(error)) => panic!("the raw client could not connect: {error}"),
            Err(_) => panic!("the raw client did not connect within {REQUEST_WAIT:?}"),
        }
    }

    /// Sends `bytes` as one request on a fresh stream and waits for how it
    /// ends; then watches the connection for `linger` more to see whether
    /// the node closes it.
    fn send(&mut self, bytes: Vec<u8>, linger: Duration) -> Outcome {
        if self.closed {
            self.connect();
        }
        let RawClient {
            runtime,
            swarm,
            node,
            closed,
            ..
        } = self;
        let node = *node;
        let id = swarm.behaviour_mut().send_request(&node, bytes);
        runtime.block_on(async {
            let wait = async {
                loop {
                    match swarm.select_next_some().await {
                        SwarmEvent::Behaviour(request_response::Event::Message {
                            message:
                                request_response::Message::Response {
                                    request_id,
                                    response,
                                },
                            ..
                        }) if request_id == id => return Outcome::Answered(response),
                        SwarmEvent::Behaviour(request_response::Event::OutboundFailure {
                            request_id,
                            error,
                            ..
                        }) if request_id == id => return Outcome::Failed(error),
                        SwarmEvent::ConnectionClosed {
                            peer_id,
                            num_established: 0,
                            ..
                        } if peer_id == node => *closed = true,
                        _ => {}
                    }
                }
            };
            let outcome = tokio::time::timeout(REQUEST_WAIT + Duration::from_secs(1), wait)
                .await
                .expect("the request neither succeeded nor failed");
            let watch = async {
                while !*closed {
                    if let SwarmEvent::ConnectionClosed {
                        peer_id,
                        num_established: 0,
                        ..
                    } = swarm.select_next_some().await
                    {
                        if peer_id == node {
                            *closed = true;
                        }
                    }
                }
            };
            let _ = tokio::time::timeout(linger, watch).await;
            outcome
        })
    }
}

// ----- helpers ---------------------------------------------------------

fn start_node(key: &PoolKey, bootstrap: Vec<Multiaddr>) -> Node {
    Node::start(
        NodeConfig {
            key: Some(key.clone()),
            bootstrap,
            ..NodeConfig::default()
        },
        Pool::builder().executors(1),
    )
    .expect("the node starts")
}

/// Waits until the node has refused more than `before` connections or
/// frames; the count it reached.
fn refused_after(node: &Node, before: u64) -> u64 {
    let deadline = Instant::now() + STATS_WAIT;
    loop {
        let refused = node.stats().refused;
        if refused > before || Instant::now() >= deadline {
            return refused;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Checks that `first` still works: a second node with the same key joins
/// it, and fib(15) submitted at `first` comes back right. Ends both nodes.
fn still_serves(first: Node, key: &PoolKey) {
    let second = start_node(key, vec![first.join_address()]);
    first
        .wait_for_members(2, Duration::from_secs(10))
        .expect("the second node joins the first");
    second
        .wait_for_members(2, Duration::from_secs(10))
        .expect("the second node knows the first");
    let (collector, result) = SingleEventCollector::new();
    let reply_to = first.submit(collector).expect("the collector is accepted");
    first
        .submit(Fib::new(15, reply_to))
        .expect("fib is accepted");
    let events = result
        .wait_timeout(Duration::from_secs(10))
        .expect("fib(15) finishes");
    let value: u64 = events
        .into_iter()
        .next()
        .expect("one event")
        .take()
        .expect("fib sends a u64");
    assert_eq!(value, 610);
    assert_eq!(value, fib_sequential(15));
    // The first node waits for work the second took from it; then the
    // second has nothing left to wait for.
    first.done().expect("the first node ends cleanly");
    second.done().expect("the second node ends cleanly");
}

/// (a) A frame whose body is not MessagePack: 0xC1 is never valid.
fn undecodable_frame() -> Vec<u8> {
    let mut frame = 5u32.to_be_bytes().to_vec();
    frame.extend([0xC1; 5]);
    frame
}

/// (b) A frame announcing 1 GiB, far over the node's 64 MiB limit,
/// followed by a few bytes.
fn oversized_frame() -> Vec<u8> {
    let mut frame = (1u32 << 30).to_be_bytes().to_vec();
    frame.extend([0x90, 0x90, 0x90, 0x90]);
    frame
}

/// Random bytes from a small xorshift generator: no dependency needed.
fn random_bytes(len: usize) -> Vec<u8> {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x9E37_79B9_7F4A_7C15);
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 32) as u8
        })
        .collect()
}

fn tcp_address(node: &Node) -> SocketAddr {
    let mut ip = None;
    let mut port = None;
    for part in node.join_address().iter() {
        match part {
            Protocol::Ip4(addr) => ip = Some(std::net::IpAddr::V4(addr)),
            Protocol::Ip6(addr) => ip = Some(std::net::IpAddr::V6(addr)),
            Protocol::Tcp(p) => port = Some(p),
            _ => {}
        }
    }
    SocketAddr::new(ip.expect("an IP address"), port.expect("a TCP port"))
}

// ----- tests -----------------------------------------------------------

/// Garbage and oversized frames fail on the client's side, a message in
/// another peer's name is refused in words, and the node serves on
/// afterwards.
#[test]
fn garbage_frames_fail_and_the_node_still_serves() {
    within_limit(TEST_LIMIT, || {
        let key = PoolKey::generate();
        let node = start_node(&key, Vec::new());
        let mut client = RawClient::new(&key, &node);

        let outcome = client.send(undecodable_frame(), Duration::ZERO);
        println!("undecodable frame: {outcome:?}");
        assert!(
            matches!(outcome, Outcome::Failed(_)),
            "an undecodable frame got {outcome:?}"
        );

        let outcome = client.send(oversized_frame(), Duration::ZERO);
        println!("1 GiB frame: {outcome:?}");
        assert!(
            matches!(outcome, Outcome::Failed(_)),
            "a 1 GiB frame got {outcome:?}"
        );

        // (c) Well framed but not allowed: the client speaks for a peer it
        // is not.
        let impostor = Envelope::leaving(MemberId {
            node: NodeId::random(),
            peer: NetPeer {
                id: PeerId::random().to_string(),
                addrs: vec!["/ip4/127.0.0.1/tcp/9".to_string()],
            },
            bump: 0,
        });
        let request = Request::Protocol(Box::new(impostor));
        let frame = encode_frame(&request, DEFAULT_MAX_FRAME).unwrap();
        match client.send(frame, Duration::ZERO) {
            Outcome::Answered(bytes) => match decode_frame::<Response>(&bytes, DEFAULT_MAX_FRAME) {
                Ok(Response::Refused(_)) => {}
                other => panic!("a message in another peer's name got {other:?}"),
            },
            Outcome::Failed(error) => panic!("a message in another peer's name failed: {error}"),
        }
        assert!(
            node.members().is_empty(),
            "the raw client became a member: {:?}",
            node.members()
        );

        drop(client);
        still_serves(node, &key);
    });
}

/// A peer that sends an undecodable or oversized frame is counted as
/// refused and cut off.
#[test]
fn garbage_frames_are_counted_and_cut_the_peer_off() {
    within_limit(TEST_LIMIT, || {
        let key = PoolKey::generate();
        let node = start_node(&key, Vec::new());
        let mut client = RawClient::new(&key, &node);

        for (what, frame) in [
            ("an undecodable frame", undecodable_frame()),
            ("a 1 GiB frame", oversized_frame()),
        ] {
            let before = node.stats().refused;
            let outcome = client.send(frame, Duration::from_secs(1));
            assert!(
                matches!(outcome, Outcome::Failed(_)),
                "{what} got {outcome:?}"
            );
            let after = refused_after(&node, before);
            assert!(
                after > before,
                "{what} was not counted as refused (refused stayed at {after}); \
                 the request failed with {outcome:?}"
            );
            assert!(
                client.closed,
                "{what}: the node kept the connection to the peer that sent it"
            );
        }

        drop(client);
        still_serves(node, &key);
    });
}

/// Random bytes where the pnet handshake should be: refused, counted, and
/// the node serves on.
#[test]
fn tcp_garbage_is_refused_and_the_node_still_serves() {
    within_limit(TEST_LIMIT, || {
        let key = PoolKey::generate();
        let node = start_node(&key, Vec::new());
        let before = node.stats().refused;

        let mut socket = TcpStream::connect_timeout(&tcp_address(&node), Duration::from_secs(5))
            .expect("a TCP connection to the node");
        socket
            .set_write_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        // The node may close first; a failed write is fine.
        let _ = socket.write_all(&random_bytes(1024));
        let _ = socket.flush();
        drop(socket);

        let after = refused_after(&node, before);
        assert!(
            after > before,
            "TCP garbage was not counted as refused (refused stayed at {after})"
        );

        still_serves(node, &key);
    });
}
