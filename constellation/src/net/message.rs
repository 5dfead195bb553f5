//! What nodes say to each other: the requests and responses of the
//! `/constellation/1` request-response protocol.
//!
//! Everything travels as MessagePack (rmp-serde) in length-prefixed frames
//! (see [`codec`](super::codec)). Activity state and event payloads are
//! already MessagePack when they get here, so they ride along as byte
//! strings (`serde_bytes`), not as arrays of integers.

use serde::{Deserialize, Serialize};

use crate::context::ExecutorContext;
use crate::id::{ActivityId, NodeId};
use crate::protocol;

/// A request from one node to another.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// A message of the node protocol ([`protocol::Envelope`]), with its
    /// sender. Answered once it arrived, with [`Response::Ack`], or with
    /// [`Response::Reply`] when the receiver answers it at once; with
    /// [`Response::Refused`] if the sender is not who it says it is. The
    /// answer is the transport's: what the message means, the receiving
    /// [`protocol::StateMachine`] decides.
    Protocol(Box<Envelope>),
    /// "How are you doing?": answered with [`Response::Status`].
    Status,
    /// Gives the receiver's executors a new context while they run.
    /// Answered with [`Response::Ack`], or [`Response::Refused`] saying why.
    Relabel(RelabelRequest),
    /// A question for the application on the receiving node (the job
    /// service on a pool node, the kill requests an agent takes): opaque
    /// bytes for its [`AppHandler`](crate::net::AppHandler). Answered with
    /// [`Response::App`], or [`Response::Refused`] saying why (no handler,
    /// or the handler's own refusal).
    App(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Never sent: what the codec hands the driver in place of a frame it
    /// refused (malformed, or over the size limit), so the driver can count
    /// it and cut the peer off. libp2p would only log a read error.
    #[serde(skip)]
    Malformed(String),
}

/// The answer to a [`Request`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Response {
    /// The request arrived, or was carried out.
    Ack,
    /// A protocol message arrived, and these are the receiver's messages
    /// for its sender that it gave in return (a loot for a steal request,
    /// a SWIM ack for a probe, a hello for a hello), in order. They ride
    /// on the acknowledgement instead of taking a request each: one
    /// stream instead of two for every question and its answer.
    Reply(Vec<Envelope>),
    /// The request was refused; the text says why.
    Refused(String),
    /// The answer to [`Request::Status`].
    Status(Box<MemberStatus>),
    /// The application's answer to [`Request::App`].
    App(#[serde(with = "serde_bytes")] Vec<u8>),
}

/// A node protocol message as it crosses the network: peers are libp2p
/// peers, activities travel packed, events with encoded payloads.
pub type Envelope = protocol::Envelope<NetPeer, PackedActivity, WireEvent>;

/// How the network names a member: its libp2p peer id and the addresses it
/// listens on, so that any member that hears of it can dial it.
///
/// This is the node protocol's peer key (`P` of [`protocol::StateMachine`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NetPeer {
    /// Its libp2p peer id, as text.
    pub id: String,
    /// Addresses it listens on (multiaddrs without the `/p2p/` suffix, as text).
    pub addrs: Vec<String>,
}

/// An activity on its way to another node, packed: the body of a
/// [`protocol::Travelling`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PackedActivity {
    /// Its state, as [`encode_activity`](crate::wire::encode_activity) wrote it.
    #[serde(with = "serde_bytes")]
    pub state: Vec<u8>,
    /// Events that reached it before it started.
    pub pending: Vec<WireEvent>,
}

/// Which executors of a node get which new context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RelabelRequest {
    /// The executors, by index; all of them if `None`.
    pub executors: Option<Vec<u32>>,
    /// What they offer from now on, replacing what they offered.
    pub context: ExecutorContext,
}

/// What a member says about itself when asked, for `constellation status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberStatus {
    /// Who it is, with what its executors offer now.
    pub member: Member,
    /// What the process is, as it described itself (`agent`, `pool`, `run`, ...).
    pub role: String,
    /// The host it runs on, as it described itself.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// Seconds since it started.
    pub uptime_s: f64,
    /// Per executor, in index order: whether it is inside a call now.
    pub busy: Vec<bool>,
    /// Never-started activities queued on it, per label name.
    pub queued: Vec<(String, u64)>,
    /// Activities inside a call.
    pub running: u64,
    /// Started activities waiting for events, or ready to process them.
    pub waiting: u64,
    /// Activities finished on it so far.
    pub finished: u64,
    /// Seconds until it must be gone (an agent's walltime), as it sees it.
    pub walltime_left_s: Option<f64>,
    /// The longest activity call it has made, in seconds.
    pub longest_call_s: f64,
    /// Whether it has stopped taking work from others (it is draining).
    pub draining: bool,
    /// Members it knows, itself not included.
    pub members_known: u32,
}

/// A member as it describes itself in a [`MemberStatus`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Member {
    /// The node's id; activity ids it issues carry it.
    pub node: NodeId,
    /// Its libp2p peer id, as text.
    pub peer: String,
    /// Addresses it listens on (multiaddrs, as text).
    pub addrs: Vec<String>,
    /// Its site, for hierarchical stealing.
    pub site: Option<String>,
    /// The steal pool it belongs to; others steal from it only if they steal
    /// from this pool.
    pub steal_pool: String,
    /// Whether it is the pool's master, the victim of master-worker stealing.
    pub master: bool,
    /// What its executors offer.
    pub executors: Vec<ExecutorContext>,
}

/// An event crossing the network: the crate's one wire form of an event.
pub use crate::event::WireEvent;

impl protocol::Routed for WireEvent {
    fn source(&self) -> ActivityId {
        self.source
    }

    fn target(&self) -> ActivityId {
        self.target
    }
}
