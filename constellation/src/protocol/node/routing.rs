//! Events towards their activity, and the notices that carry them.
//!
//! An event goes where this node last knew its target to be, else to the
//! target's origin. The origin learns where each of its activities moved
//! ([`Notice::Moved`]), so an event takes at most two hops: to the origin,
//! and from there to the node that holds the activity. An event that comes
//! before its activity (a steal reply racing the event) waits for it, up to
//! `early_event_wait`.

use std::fmt;
use std::hash::Hash;
use std::time::Instant;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::timers::Due;
use super::{Early, StateMachine};
use crate::id::{ActivityId, NodeId};
use crate::protocol::host::{Delivery, Host, Routed};
use crate::protocol::message::{Message, Notice};

impl<P, H> StateMachine<P, H>
where
    P: Clone + Eq + Hash + fmt::Debug + Serialize + DeserializeOwned,
    H: Host,
{
    /// An event from the network, or one this node routes: delivered here
    /// or passed on.
    pub(super) fn deliver(&mut self, event: H::Event, now: Instant, host: &mut H) {
        match host.deliver(event) {
            Delivery::Delivered => {}
            Delivery::Gone => {
                self.stats.undeliverable += 1;
                tracing::warn!("event lost: its target finished here");
            }
            Delivery::Away(event) => self.route_event(event, now, host),
            Delivery::Unknown(event) => {
                let target = event.target();
                let known = self.location.contains_key(&target);
                if target.origin() == self.settings.node && !known {
                    self.undeliverable(&event, "no such activity (it finished, or never existed)");
                } else if known {
                    self.route_event(event, now, host);
                } else {
                    // Its activity is on its way here (a steal reply racing
                    // the event), or it finished here moments ago.
                    let wait = self.settings.early_event_wait;
                    let early = self.early.entry(target).or_insert_with(|| {
                        self.timers.set(now + wait, Due::EarlyEvents(target));
                        Early {
                            since: now,
                            events: Vec::new(),
                        }
                    });
                    early.events.push(event);
                }
            }
        }
    }

    /// Sends an event towards its target: where this node last knew it to
    /// be, else its origin.
    pub(super) fn route_event(&mut self, event: H::Event, now: Instant, host: &mut H) {
        let target = event.target();
        let destination = match self.location.get(&target) {
            Some(&at) => at,
            None if target.origin() != self.settings.node => target.origin(),
            None => {
                self.undeliverable(&event, "its activity left this node and nobody knows where");
                return;
            }
        };
        if destination == self.settings.node {
            self.deliver(event, now, host);
            return;
        }
        if self.roster.get(destination).is_none() {
            self.undeliverable(
                &event,
                "the node holding its activity is not a member (it died or left)",
            );
            return;
        }
        self.stats.events_sent += 1;
        self.notify(destination, Notice::Event(event));
    }

    /// Events for `id` that waited their time: their activity never came.
    pub(super) fn expire_early(&mut self, id: ActivityId, now: Instant) {
        let expired = (self.early.get(&id))
            .is_some_and(|early| now >= early.since + self.settings.early_event_wait);
        if !expired {
            return;
        }
        if let Some(early) = self.early.remove(&id) {
            for event in early.events {
                self.undeliverable(&event, "its activity never arrived here");
            }
        }
    }

    pub(super) fn undeliverable(&mut self, event: &H::Event, why: &str) {
        self.stats.undeliverable += 1;
        tracing::warn!(source = %event.source(), target = %event.target(), reason = why, "event not delivered");
    }

    /// Queues a notice for `node`; it leaves with the others at the end of
    /// this input.
    pub(super) fn notify(&mut self, node: NodeId, notice: Notice<H::Event>) {
        self.outbox.entry(node).or_default().push(notice);
    }

    /// Sends what waits in the outbox, one message per destination.
    pub(super) fn flush(&mut self) {
        for (node, notices) in std::mem::take(&mut self.outbox) {
            match self.roster.get(node).map(|member| member.id.peer.clone()) {
                Some(peer) => self.send(peer, Message::Notices(notices)),
                None => {
                    for notice in notices {
                        if let Notice::Event(event) = notice {
                            self.undeliverable(&event, "its node is gone");
                        }
                    }
                }
            }
        }
    }
}
