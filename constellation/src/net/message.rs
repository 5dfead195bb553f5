//! What nodes say to each other: the requests and responses of the
//! `/constellation/1` request-response protocol.
//!
//! Everything travels as MessagePack (rmp-serde) in length-prefixed frames
//! (see [`codec`](super::codec)). Activity state and event payloads are
//! already MessagePack when they get here, so they ride along as byte
//! strings (`serde_bytes`), not as arrays of integers.

use serde::{Deserialize, Serialize};

use crate::context::{ContextList, ExecutorContext};
use crate::id::{ActivityId, NodeId};

/// A request from one node to another.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// "This is me": sent to every member on connecting. Answered with
    /// [`Response::Welcome`].
    Hello(Member),
    /// An idle executor asks for work it can run. Answered with
    /// [`Response::Loot`], possibly empty.
    Steal(StealRequest),
    /// Events and bookkeeping for activities, in the order they happened.
    /// Answered with [`Response::Ack`].
    Deliver(Vec<Notice>),
    /// The sender leaves the pool: it runs nothing and holds nothing any more.
    Leave,
    /// "How are you doing?": answered with [`Response::Status`].
    Status,
    /// Gives the receiver's executors a new context while they run.
    /// Answered with [`Response::Ack`], or [`Response::Refused`] saying why.
    Relabel(RelabelRequest),
    /// Never sent: what the codec hands the driver in place of a frame it
    /// refused (malformed, or over the size limit), so the driver can count
    /// it and cut the peer off. libp2p would only log a read error.
    #[serde(skip)]
    Malformed(String),
}

/// The answer to a [`Request`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Response {
    /// The answer to [`Request::Hello`]: who answers, and every member it knows.
    Welcome {
        /// The answering node.
        me: Member,
        /// The other members it knows, so the newcomer can dial them.
        members: Vec<Member>,
    },
    /// Activities for the thief, possibly none.
    Loot(Vec<WireActivity>),
    /// The request was carried out.
    Ack,
    /// The request was refused; the text says why.
    Refused(String),
    /// The answer to [`Request::Status`].
    Status(Box<MemberStatus>),
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

/// One member of a pool, as the others know it.
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

/// A request for work.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StealRequest {
    /// What the idle executor offers, in its priority and preference order.
    pub thief: ExecutorContext,
    /// The steal pool the thief steals from.
    pub steal_from: String,
    /// The most activities the thief wants.
    pub max: u32,
}

/// An activity on its way to another node, never started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireActivity {
    /// Its id, which it keeps.
    pub id: ActivityId,
    /// Its state, as [`encode_activity`](crate::wire::encode_activity) wrote it.
    #[serde(with = "serde_bytes")]
    pub body: Vec<u8>,
    /// Where it may run.
    pub contexts: ContextList,
    /// How many times it was handed out before, by nodes that then died.
    pub attempt: u32,
    /// Events that reached it before it started.
    pub pending: Vec<WireEvent>,
}

/// An event crossing the network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireEvent {
    /// The sender.
    pub source: ActivityId,
    /// The receiver.
    pub target: ActivityId,
    /// The payload, MessagePack.
    #[serde(with = "serde_bytes")]
    pub payload: Vec<u8>,
}

/// One item of a [`Request::Deliver`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Notice {
    /// A member the sender just met: passed on to every member, so all
    /// learn of a newcomer in one hop instead of waiting to be dialled.
    Joined(Member),
    /// An event for an activity the receiver holds or knows the way to.
    Event(WireEvent),
    /// An activity the receiver exported (directly, or through a chain of
    /// thieves) has finished; the receiver drops its copy.
    Finished(ActivityId),
    /// An activity that originated at the receiver now lives at `at`, so
    /// events for it take at most two hops.
    Moved {
        /// The activity.
        id: ActivityId,
        /// The node that holds it now.
        at: NodeId,
    },
    /// An activity the receiver exported was given up: the node it went to
    /// died too often, or it may not be restarted. The receiver drops its
    /// copy and passes the news on towards the activity's origin.
    GaveUp {
        /// The activity.
        id: ActivityId,
        /// Why it was given up.
        reason: String,
    },
    /// The sender's executors were relabelled; they offer this now.
    Relabelled(Vec<ExecutorContext>),
    /// An activity the receiver exported arrived as the thief was leaving
    /// the pool; the exporter queues it again as it was.
    Declined(ActivityId),
    /// An activity the receiver exported could not be taken in (its type is
    /// unknown to the thief's binary); the exporter keeps it.
    Returned {
        /// The activity.
        id: ActivityId,
        /// Why the thief could not take it.
        reason: String,
    },
}
