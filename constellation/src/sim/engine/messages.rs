//! Carrying protocol messages between simulated nodes.
//!
//! A message takes its link's latency plus its size over the link's
//! bandwidth. One to a node that is not alive (not joined yet, or dead)
//! is lost, and its sender hears so after the latency back, as a refused
//! or reset connection would tell it.
//!
//! A victim answers steal requests one after another, each costing it
//! [`Model::answer_cost`](crate::sim::Model::answer_cost): requests that
//! arrive while it is answering wait, in order, and its loot leaves once
//! the answer is done. This is what makes a master saturate.

use super::{Engine, Ev, SimEnvelope};
use crate::protocol::{Message, Notice, SendToken, Transmit};
use crate::sim::model::nanos;

use super::host::{Packed, SimEvent};
use super::node::Life;

impl Engine<'_> {
    /// Sends what `from`'s protocol node asked to send, counting it.
    pub(super) fn transmit(&mut self, from: u32, transmit: Transmit<u32, Packed, SimEvent>) {
        let to = transmit.to;
        let envelope = transmit.envelope;
        let (a, b) = (
            self.nodes[from as usize].site as usize,
            self.nodes[to as usize].site as usize,
        );
        let across = a != b;
        let counts = &mut self.messages;
        counts.wide_area += u64::from(across);
        let mut bytes = self.model.message_bytes;
        // Time the sender still needs before the message leaves.
        let mut after = 0;
        match &envelope.message {
            Message::Steal { .. } => {
                counts.steal_requests += 1;
                counts.wide_area_steals += u64::from(across);
            }
            Message::Loot { activities, .. } => {
                let moved = activities.len() as u64;
                counts.moved += moved;
                if across {
                    counts.wide_area_moved += moved;
                }
                counts.empty_replies += u64::from(moved == 0);
                let workload = self.workload;
                for activity in activities {
                    let spec = &workload.activities[activity.body.spec as usize];
                    bytes += workload.kinds[spec.kind as usize].state_bytes;
                }
                after = self.answered(from, activities.len());
            }
            Message::Notices(notices) => {
                for notice in notices {
                    match notice {
                        Notice::Event(_) => counts.events += 1,
                        Notice::Finished(_) => counts.finished_notices += 1,
                        _ => {}
                    }
                }
            }
            Message::Swim(packet) => {
                counts.membership += 1;
                counts.wide_area_membership += u64::from(across);
                bytes += packet.len() as u64;
            }
            Message::Hello { .. } | Message::Leaving => {
                counts.membership += 1;
                counts.wide_area_membership += u64::from(across);
            }
        }
        let delay = self.network.message_delay(a, b, bytes);
        let at = self.now.saturating_add(after).saturating_add(delay);
        let envelope = Box::new(envelope);
        self.schedule(at, Ev::Deliver { to, from, envelope });
    }

    /// `node` answered a steal request handing over `activities`: it is
    /// busy for the answer's cost, which is returned.
    fn answered(&mut self, node: u32, activities: usize) -> u64 {
        let cost = nanos(self.model.answer_cost.seconds(activities));
        let state = &mut self.nodes[node as usize];
        state.answering_until = self.now.saturating_add(cost);
        state.answering = state.answering.saturating_add(cost);
        if cost > 0 {
            let done = state.answering_until;
            self.schedule(done, Ev::Answered(node));
        }
        cost
    }

    /// A message reaches `to`, or finds it gone.
    pub(super) fn deliver(&mut self, to: u32, from: u32, envelope: Box<SimEnvelope>) {
        let state = &mut self.nodes[to as usize];
        if state.life != Life::Alive {
            self.messages.dropped += 1;
            self.refuse(from, to, SendToken::of(&envelope.message));
            return;
        }
        if let Message::Steal { .. } = envelope.message {
            // Those that came earlier go first: while any wait, an
            // `Answered` is due that takes them in order.
            if state.answering_until > self.now || !state.waiting.is_empty() {
                state.waiting.push_back((from, envelope));
                return;
            }
            state.requests_handled += 1;
        }
        self.input(to, |protocol, now, host| {
            protocol.handle_message(*envelope, now, host)
        });
    }

    /// Tells `sender`, after the latency back from `to`, that its message
    /// to `to` did not arrive.
    pub(super) fn refuse(&mut self, sender: u32, to: u32, token: SendToken) {
        if self.nodes[sender as usize].life != Life::Alive {
            return;
        }
        let back = self.network.latency(
            self.nodes[to as usize].site as usize,
            self.nodes[sender as usize].site as usize,
        );
        let at = self.now.saturating_add(back);
        self.schedule(
            at,
            Ev::SendFailed {
                node: sender,
                to,
                token,
            },
        );
    }

    /// The transport's news that a message from `node` to `to` was lost.
    pub(super) fn send_failed(&mut self, node: u32, to: u32, token: SendToken) {
        if token.steal_request().is_some() && self.nodes[node as usize].life == Life::Alive {
            // The thief counts it as an empty reply.
            self.messages.empty_replies += 1;
        }
        // A message fails here only when its node is not alive, as a
        // refused connection tells the sender that nothing listens there.
        self.input(node, |protocol, now, host| {
            protocol.handle_send_failed(&to, token, now, host);
            protocol.handle_unreachable(&to, now);
        });
    }

    /// Answers the requests that waited while `node` answered others, in
    /// the order they came, until one keeps it busy.
    pub(super) fn answer_waiting(&mut self, node: u32) {
        loop {
            let state = &mut self.nodes[node as usize];
            if state.life != Life::Alive || state.answering_until > self.now {
                return;
            }
            let Some((_, envelope)) = state.waiting.pop_front() else {
                return;
            };
            state.requests_handled += 1;
            self.input(node, |protocol, now, host| {
                protocol.handle_message(*envelope, now, host)
            });
        }
    }
}
