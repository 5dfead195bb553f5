//! Identifiers for nodes and activities.
//!
//! An [`ActivityId`] names its origin node, so an event can be routed towards
//! the activity without a broadcast: the origin either holds the activity or
//! knows where it went.

use std::fmt;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Identifies one node (one process) of a pool. Random (UUID v4), so nodes
/// that join independently never collide.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodeId(Uuid);

impl NodeId {
    /// A fresh random node id.
    pub fn random() -> Self {
        // From `rand`, which libp2p needs anyway: uuid's own `v4` feature
        // would build a third version of `getrandom`.
        NodeId(uuid::Builder::from_random_bytes(rand::random()).into_uuid())
    }

    /// A node id built from a fixed number; used by tests and the simulator,
    /// which need reproducible ids.
    pub fn from_u128(value: u128) -> Self {
        NodeId(Uuid::from_u128(value))
    }

    /// The underlying UUID.
    pub fn uuid(&self) -> Uuid {
        self.0
    }

    /// The first eight hex digits, enough to tell nodes apart in logs.
    fn short(&self) -> String {
        let mut text = self.0.simple().to_string();
        text.truncate(8);
        text
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.short())
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeId({})", self.0)
    }
}

/// The globally unique id of an activity: its origin node plus a sequence
/// number that the origin never hands out twice.
///
/// Prints compactly as `node8hex:slot.counter`, e.g. `3f2a9c1e:1.42`: the
/// slot says which issuer on the origin made the id, which helps when
/// reading traces.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ActivityId {
    node: NodeId,
    seq: u64,
}

/// Bits of the sequence number reserved for the per-issuer counter.
const COUNTER_BITS: u32 = 48;

impl ActivityId {
    /// Builds an id from its parts.
    pub fn new(node: NodeId, seq: u64) -> Self {
        ActivityId { node, seq }
    }

    /// The node that created the activity, and the first hop of every route to it.
    pub fn origin(&self) -> NodeId {
        self.node
    }

    /// The sequence number, unique within the origin node.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The id numbered `counter` in issuer slot `slot` of `node`; see [`IdIssuer`].
    pub fn in_slot(node: NodeId, slot: u16, counter: u64) -> Self {
        ActivityId::new(
            node,
            (u64::from(slot) << COUNTER_BITS) | (counter & ((1 << COUNTER_BITS) - 1)),
        )
    }

    /// The issuer slot that made this id on its origin node; drivers use it
    /// to find which part of the node holds (or forwards) the activity.
    pub fn issuer_slot(&self) -> u16 {
        (self.seq >> COUNTER_BITS) as u16
    }
}

impl fmt::Display for ActivityId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let slot = self.seq >> COUNTER_BITS;
        let counter = self.seq & ((1 << COUNTER_BITS) - 1);
        write!(f, "{}:{}.{}", self.node, slot, counter)
    }
}

impl fmt::Debug for ActivityId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ActivityId({self})")
    }
}

/// Hands out activity ids without a lock: each issuer (the node itself, or
/// one executor thread) owns a disjoint slot of the sequence space.
#[derive(Debug, Clone)]
pub struct IdIssuer {
    node: NodeId,
    next: u64,
    end: u64,
}

impl IdIssuer {
    /// The issuer for `slot` on `node`. Drivers decide what slots mean; the
    /// local driver gives each executor two (its own submissions, and
    /// submissions from outside that it receives) and keeps slot 0 for the
    /// main program's address.
    pub fn new(node: NodeId, slot: u16) -> Self {
        let base = u64::from(slot) << COUNTER_BITS;
        IdIssuer {
            node,
            next: base,
            end: base + (1 << COUNTER_BITS),
        }
    }

    /// The next fresh id.
    ///
    /// # Panics
    /// After 2^48 ids from one issuer, which no run reaches.
    pub fn issue(&mut self) -> ActivityId {
        assert!(
            self.next < self.end,
            "activity id space of one issuer exhausted"
        );
        let id = ActivityId::new(self.node, self.next);
        self.next += 1;
        id
    }

    /// The node whose ids this issuer hands out.
    pub fn node(&self) -> NodeId {
        self.node
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_node_ids_are_version_4_uuids_and_differ() {
        let a = NodeId::random();
        let b = NodeId::random();
        assert_ne!(a, b);
        assert_eq!(a.uuid().get_version(), Some(uuid::Version::Random));
        assert_eq!(a.uuid().get_variant(), uuid::Variant::RFC4122);
    }

    #[test]
    fn issuers_never_collide_and_print_compactly() {
        let node = NodeId::from_u128(0xabcdef12_0000_0000_0000_000000000000);
        let mut outside = IdIssuer::new(node, 0);
        let mut exec0 = IdIssuer::new(node, 1);
        let a = outside.issue();
        let b = exec0.issue();
        let c = exec0.issue();
        assert_ne!(a, b);
        assert_ne!(b, c);
        assert_eq!(a.to_string(), "abcdef12:0.0");
        assert_eq!(c.to_string(), "abcdef12:1.1");
        assert_eq!(c.origin(), node);
        assert_eq!(c.issuer_slot(), 1);
        assert_eq!(ActivityId::in_slot(node, 1, 1), c);
    }

    #[test]
    fn ids_round_trip_through_msgpack() {
        let id = IdIssuer::new(NodeId::random(), 3).issue();
        let bytes = rmp_serde::to_vec(&id).unwrap();
        let back: ActivityId = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(id, back);
    }
}
