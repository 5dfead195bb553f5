//! Joining notices in the output queue, without a node.

use super::{Outbound, Output, SendToken, Transmit};
use crate::id::{ActivityId, NodeId};
use crate::protocol::message::{Envelope, MemberId, Message, Notice};

/// Peers are named by strings, events are numbers.
type Queue = Outbound<String, (), u64>;

fn me(bump: u16) -> MemberId<String> {
    MemberId {
        node: NodeId::from_u128(1),
        peer: "me".to_string(),
        bump,
    }
}

fn to(name: &str, bump: u16, message: Message<(), u64>) -> Transmit<String, (), u64> {
    Transmit {
        to: name.to_string(),
        token: SendToken::of(&message),
        envelope: Envelope {
            from: me(bump),
            message,
        },
    }
}

fn finished(n: u64) -> Notice<u64> {
    Notice::Finished(ActivityId::new(NodeId::from_u128(2), n))
}

fn event(n: u64) -> Notice<u64> {
    Notice::Event(n)
}

/// Queues `transmits` and polls them all back.
fn joined(
    transmits: impl IntoIterator<Item = Transmit<String, (), u64>>,
) -> Vec<Transmit<String, (), u64>> {
    let mut queue = Queue::new();
    for transmit in transmits {
        queue.push(transmit);
    }
    std::iter::from_fn(|| queue.poll(None))
        .map(|output| match output {
            Output::Transmit(transmit) => transmit,
            other => panic!("only transmits were queued, got {other:?}"),
        })
        .collect()
}

/// Each transmit as (peer, what it says), for comparing.
fn summary(transmits: &[Transmit<String, (), u64>]) -> Vec<(String, String)> {
    (transmits.iter())
        .map(|t| {
            let what = match &t.envelope.message {
                Message::Notices(notices) => format!("{} notices", notices.len()),
                Message::Loot { .. } => "loot".to_string(),
                Message::Leaving => "leaving".to_string(),
                other => format!("{other:?}"),
            };
            (t.to.clone(), what)
        })
        .collect()
}

#[test]
fn an_activity_s_events_and_its_end_travel_in_one_message() {
    let joined = joined([
        to("master", 0, Message::Notices(vec![event(1)])),
        to("master", 0, Message::Notices(vec![event(3)])),
        to("master", 0, Message::Notices(vec![finished(1)])),
    ]);
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
    let joined = joined([
        to("a", 0, Message::Notices(vec![event(1)])),
        to("b", 0, loot()),
        to("a", 0, Message::Notices(vec![finished(1)])),
        to("a", 0, loot()),
        to("a", 0, Message::Notices(vec![finished(5)])),
        to("b", 0, Message::Notices(vec![finished(9)])),
    ]);
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
    let joined = joined([
        to("a", 0, Message::Notices(vec![event(1)])),
        to("a", 1, Message::Notices(vec![finished(1)])),
    ]);
    assert_eq!(joined.len(), 2);
    assert_eq!(joined[1].envelope.from.bump, 1);
}

#[test]
fn the_timeout_is_the_last_output_of_each_round() {
    let mut queue = Queue::new();
    let at = std::time::Instant::now();
    queue.push(to("a", 0, Message::Leaving));
    assert!(matches!(queue.poll(Some(at)), Some(Output::Transmit(_))));
    assert!(matches!(queue.poll(Some(at)), Some(Output::Timeout(t)) if t == at));
    assert!(queue.poll(Some(at)).is_none(), "then the round ends");
    assert!(
        matches!(queue.poll(Some(at)), Some(Output::Timeout(_))),
        "and the next round gives the timeout again"
    );
    assert!(queue.poll(Some(at)).is_none());
    assert!(queue.poll(None).is_none(), "no timer, no timeout");
}
