//! The driver's own logic, without a swarm: joining notices.

use super::{join_notices, NetTransmit};
use crate::id::{ActivityId, NodeId};
use crate::net::message::{NetPeer, WireEvent};
use crate::protocol::{Envelope, MemberId, Message, Notice, Transmit};

fn peer(name: &str) -> NetPeer {
    NetPeer {
        id: name.to_string(),
        addrs: Vec::new(),
    }
}

fn me(bump: u16) -> MemberId<NetPeer> {
    MemberId {
        node: NodeId::from_u128(1),
        peer: peer("me"),
        bump,
    }
}

fn to(
    name: &str,
    bump: u16,
    message: Message<crate::net::message::PackedActivity, WireEvent>,
) -> NetTransmit {
    Transmit {
        to: peer(name),
        envelope: Envelope {
            from: me(bump),
            message,
        },
    }
}

fn finished(n: u64) -> Notice<WireEvent> {
    Notice::Finished(ActivityId::new(NodeId::from_u128(2), n))
}

fn event(n: u64) -> Notice<WireEvent> {
    let node = NodeId::from_u128(2);
    Notice::Event(WireEvent {
        source: ActivityId::new(node, n),
        target: ActivityId::new(node, n + 1),
        payload: vec![0xc0],
    })
}

/// Each transmit as (peer, what it says), for comparing.
fn summary(transmits: &[NetTransmit]) -> Vec<(String, String)> {
    (transmits.iter())
        .map(|t| {
            let what = match &t.envelope.message {
                Message::Notices(notices) => format!("{} notices", notices.len()),
                Message::Loot { .. } => "loot".to_string(),
                Message::Leaving => "leaving".to_string(),
                other => format!("{other:?}"),
            };
            (t.to.id.clone(), what)
        })
        .collect()
}

#[test]
fn an_activity_s_events_and_its_end_travel_in_one_message() {
    let joined = join_notices(
        [
            to("master", 0, Message::Notices(vec![event(1)])),
            to("master", 0, Message::Notices(vec![event(3)])),
            to("master", 0, Message::Notices(vec![finished(1)])),
        ]
        .into_iter(),
    );
    assert_eq!(joined.len(), 1);
    assert_eq!(
        joined[0].envelope.message,
        Message::Notices(vec![event(1), event(3), finished(1)]),
        "in the order they were given"
    );
}

#[test]
fn notices_join_across_other_peers_messages_but_not_across_their_own() {
    let loot = || Message::Loot {
        request: 7,
        activities: Vec::new(),
    };
    let joined = join_notices(
        [
            to("a", 0, Message::Notices(vec![event(1)])),
            to("b", 0, loot()),
            to("a", 0, Message::Notices(vec![finished(1)])),
            to("a", 0, loot()),
            to("a", 0, Message::Notices(vec![finished(5)])),
            to("b", 0, Message::Notices(vec![finished(9)])),
        ]
        .into_iter(),
    );
    let expected = [
        ("a", "2 notices"),
        ("b", "loot"),
        ("a", "loot"),
        ("a", "1 notices"),
        ("b", "1 notices"),
    ];
    let expected: Vec<(String, String)> = (expected.iter())
        .map(|(peer, what)| (peer.to_string(), what.to_string()))
        .collect();
    assert_eq!(summary(&joined), expected);
}

#[test]
fn notices_from_a_renewed_identity_are_not_joined_to_older_ones() {
    let joined = join_notices(
        [
            to("a", 0, Message::Notices(vec![event(1)])),
            to("a", 1, Message::Notices(vec![finished(1)])),
        ]
        .into_iter(),
    );
    assert_eq!(joined.len(), 2);
    assert_eq!(joined[1].envelope.from.bump, 1);
}
