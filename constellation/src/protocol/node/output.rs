//! What a node hands its driver: [`Output`], one at a time from
//! [`Machine::poll_output`](super::StateMachine::poll_output).
//!
//! The order is fixed: every message to send first (in the order the node
//! queued them), then every [`NodeEvent`], then the moment the node wants
//! to be woken ([`Output::Timeout`]) as the last output, then `None`. A
//! driver polls after each input until `None`, so it always holds the
//! latest timeout; a node with no timer set gives no `Timeout`.
//!
//! Notices for one peer that follow each other in the queue (no other
//! message for that peer between them) travel as one message: see
//! [`Outbound::push`].

use std::collections::VecDeque;
use std::time::Instant;

use crate::id::ActivityId;
use crate::protocol::message::{Envelope, Message};

#[cfg(test)]
mod tests;

/// One thing the driver must do or know, from
/// [`Machine::poll_output`](super::StateMachine::poll_output).
#[derive(Debug)]
pub enum Output<P, B, E> {
    /// A message to send.
    Transmit(Transmit<P, B, E>),
    /// Something the driver must know.
    Event(NodeEvent),
    /// When to call [`Machine::handle_timeout`](super::StateMachine::handle_timeout)
    /// next; always the last output before `None`.
    Timeout(Instant),
}

/// A message for the driver to send.
#[derive(Debug)]
pub struct Transmit<P, B, E> {
    /// Whom to send it to.
    pub to: P,
    /// The message, with this node as its sender.
    pub envelope: Envelope<P, B, E>,
    /// Handed back to
    /// [`Machine::handle_send_failed`](super::StateMachine::handle_send_failed)
    /// if the message cannot be delivered.
    pub token: SendToken,
}

impl<P, B, E> Transmit<P, B, E> {
    /// Whether the node relies on this message arriving, so that a leaving
    /// node waits for it: everything but SWIM packets, which are
    /// best-effort by design. Notices carry the last `Finished` news, and
    /// an exporter that never hears it runs the work again.
    pub fn must_arrive(&self) -> bool {
        !matches!(self.envelope.message, Message::Swim(_))
    }
}

/// What the node needs back of a message that could not be delivered;
/// opaque to the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendToken {
    /// The steal request the message is, if it is one: the only kind of
    /// message whose loss the node acts on.
    steal: Option<u64>,
}

impl SendToken {
    /// The token of `message`: for drivers (the simulator, tests) that
    /// hold a message in flight rather than its transmit.
    pub(crate) fn of<B, E>(message: &Message<B, E>) -> Self {
        let steal = match message {
            Message::Steal { request, .. } => Some(*request),
            _ => None,
        };
        SendToken { steal }
    }

    /// The steal request the message was, if it was one.
    pub(crate) fn steal_request(&self) -> Option<u64> {
        self.steal
    }
}

/// What the driver must know.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeEvent {
    /// The members, or what they offer, changed: read
    /// [`Machine::members`](super::StateMachine::members).
    MembersChanged,
    /// A member that was seen as a master said it leaves the pool: the pool
    /// node was stopped on purpose.
    MasterLeft,
    /// An activity was given up: the nodes running it died too often, or
    /// it may not run again.
    Lost {
        /// The activity.
        id: ActivityId,
        /// Why.
        reason: String,
    },
}

/// The outputs waiting for the driver, in order.
#[derive(Debug)]
pub(super) struct Outbound<P, B, E> {
    transmits: VecDeque<Transmit<P, B, E>>,
    pub(super) events: VecDeque<NodeEvent>,
    /// Whether this round of polling gave its `Timeout` already.
    timeout_given: bool,
}

impl<P: PartialEq, B, E> Outbound<P, B, E> {
    pub(super) fn new() -> Self {
        Outbound {
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            timeout_given: false,
        }
    }

    /// Queues `transmit`, joined to the notices queued for the same peer
    /// if no other message for that peer came between them.
    ///
    /// The node joins the notices of one input itself; a driver may hand
    /// it several inputs before it polls (the network driver does: one per
    /// item of an executor call, and whatever else waited). An activity's
    /// last events and the news that it finished must travel together: if
    /// its node dies in between, the exporter that got the events but not
    /// the news runs it again, and its results arrive twice.
    /// (`killing_a_worker_mid_run_...` in tests/net.rs saw that once in 13
    /// runs before they were joined.) Notices from a renewed identity are
    /// not joined to older ones.
    pub(super) fn push(&mut self, transmit: Transmit<P, B, E>) {
        let Transmit {
            to,
            envelope,
            token,
        } = transmit;
        let Envelope { from, message } = envelope;
        let message = match message {
            Message::Notices(notices) => {
                let last_for_peer = self.transmits.iter_mut().rev().find(|t| t.to == to);
                match last_for_peer.map(|t| &mut t.envelope) {
                    Some(Envelope {
                        from: earlier,
                        message: Message::Notices(batch),
                    }) if *earlier == from => {
                        batch.extend(notices);
                        return;
                    }
                    _ => Message::Notices(notices),
                }
            }
            other => other,
        };
        let envelope = Envelope { from, message };
        self.transmits.push_back(Transmit {
            to,
            envelope,
            token,
        });
    }

    /// The next output, in the order the [module](self) docs give;
    /// `next_timeout` is when the node's timer is due next.
    pub(super) fn poll(&mut self, next_timeout: Option<Instant>) -> Option<Output<P, B, E>> {
        if let Some(transmit) = self.transmits.pop_front() {
            return Some(Output::Transmit(transmit));
        }
        if let Some(event) = self.events.pop_front() {
            return Some(Output::Event(event));
        }
        if !self.timeout_given {
            self.timeout_given = true;
            if let Some(at) = next_timeout {
                return Some(Output::Timeout(at));
            }
        }
        // The round is over: the next one ends with the timeout again.
        self.timeout_given = false;
        None
    }
}
