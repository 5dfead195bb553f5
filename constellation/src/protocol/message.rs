//! What nodes say to each other: the messages of the node protocol.
//!
//! [`Message`] is the crate's own: outside it, a message is an opaque part
//! of an [`Envelope`], which the network codec carries as it is.
//!
//! Messages are generic over how an activity in transit is packed (`B`)
//! and over an event in transit (`E`): the network driver carries encoded
//! bytes, the simulator carries its own plain values. Peers are named by
//! an opaque key `P` (a libp2p peer with its addresses, or a simulated
//! node's index).

use serde::{Deserialize, Serialize};

use crate::context::{ContextList, ExecutorContext};
use crate::id::{ActivityId, NodeId};

/// Who a member is, as SWIM knows it: its node id, how to reach it, and a
/// bump that grows each time it rejoins after being declared down.
///
/// This is foca's identity type. Two identities with the same `node` are
/// the same member; the one with the higher `bump` is the newer.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MemberId<P> {
    /// The node's id; activity ids it issues carry it.
    pub node: NodeId,
    /// How the transport reaches it.
    pub peer: P,
    /// Grows by one each time the node renews its identity to rejoin.
    pub bump: u16,
}

/// What a member offers and where it sits: exchanged in hellos.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberInfo {
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

/// A message with its sender, as it crosses the network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope<P, B, E> {
    /// The sender.
    pub from: MemberId<P>,
    /// What it says.
    pub(crate) message: Message<B, E>,
}

impl<P, B, E> Envelope<P, B, E> {
    /// A goodbye from `from`: the message a node sends each member as it
    /// leaves the pool. The one message outsiders can make, for tests of
    /// a transport that must refuse a message sent in another peer's name.
    pub fn leaving(from: MemberId<P>) -> Self {
        Envelope {
            from,
            message: Message::Leaving,
        }
    }
}

/// One message of the node protocol. Every message is one-way; a steal
/// request and its loot are paired by `request`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) enum Message<B, E> {
    /// A SWIM packet, as foca wrote it: probes, acks, and membership gossip.
    Swim(#[serde(with = "serde_bytes")] Vec<u8>),
    /// "This is what I offer." Sent to each member on meeting it; `answer`
    /// asks the receiver to say hello back.
    Hello {
        /// The sender's offer.
        info: MemberInfo,
        /// Whether the receiver should answer with its own hello.
        answer: bool,
    },
    /// An idle executor asks for work it can run. Answered with
    /// [`Message::Loot`], possibly empty.
    Steal {
        /// Pairs the loot with this request.
        request: u64,
        /// What the idle executor offers, in its priority and preference order.
        thief: ExecutorContext,
        /// The steal pool the thief steals from.
        steal_from: String,
        /// The most activities the thief wants.
        max: u32,
    },
    /// The answer to a steal request: activities for the thief, possibly none.
    Loot {
        /// The request this answers.
        request: u64,
        /// The activities, never started.
        activities: Vec<Travelling<B>>,
    },
    /// Events and bookkeeping for activities, in the order they happened.
    Notices(Vec<Notice<E>>),
    /// The sender leaves the pool: it takes no more work, and will be gone
    /// once its last notices are through.
    Leaving,
}

/// An activity on its way to another node, never started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Travelling<B> {
    /// Its id, which it keeps.
    pub id: ActivityId,
    /// Its state, packed by the exporter's [`Host`](super::Host).
    pub body: B,
    /// Where it may run.
    pub contexts: ContextList,
    /// How many times it was handed out before, by nodes that then died.
    pub attempt: u32,
}

/// One item of a [`Message::Notices`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) enum Notice<E> {
    /// An event for an activity the receiver holds or knows the way to.
    Event(E),
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
    /// The loot that answered the sender's steal request `request` reached
    /// it. An exporter that hears nothing of the sort queues the loot's work
    /// again once a silent member would have been declared dead: the reply
    /// may have been lost on the way, and the thief knows nothing of it.
    LootTaken {
        /// The sender's steal request the loot answered.
        request: u64,
    },
}
