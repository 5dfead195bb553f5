//! Custody of handed-over work: news of its end running back along the
//! chain of custody, work coming back (declined or refused), and work
//! queued again when the node running it dies.
//!
//! Execution is at-least-once: an exporter keeps a copy of each activity
//! it handed over until it hears that the activity finished or was given
//! up there; if the thief dies first, the copy is queued again with its
//! attempt raised, up to `max_attempts` (see [`custody::retry`]).

use std::fmt;
use std::hash::Hash;
use std::time::Instant;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{Kept, StateMachine};
use crate::id::{ActivityId, NodeId};
use crate::protocol::custody;
use crate::protocol::host::Host;
use crate::protocol::message::Notice;
use crate::protocol::node::NodeEvent;

/// Why an exporter takes back work it handed out without hearing of its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lapse {
    /// The thief was declared dead, or left, holding it.
    ThiefGone,
    /// The thief never acknowledged the loot that carried it.
    Unacknowledged,
}

impl Lapse {
    /// Why the work is queued again, for the log.
    fn why(self) -> &'static str {
        match self {
            Lapse::ThiefGone => "the node running it died",
            Lapse::Unacknowledged => {
                "the member it was handed to never acknowledged it (the loot may have been lost)"
            }
        }
    }

    /// Why the work is given up instead, for the node that reports it lost.
    fn give_up_reason(self, give_up: &custody::GiveUp) -> String {
        match (self, give_up) {
            (Lapse::ThiefGone, _) => give_up.to_string(),
            (Lapse::Unacknowledged, custody::GiveUp::NotRestartable) => {
                "the member it was handed to never acknowledged it, and it may not be restarted"
                    .to_string()
            }
            (Lapse::Unacknowledged, custody::GiveUp::TooManyAttempts { attempt, limit }) => {
                format!(
                    "it was handed out {attempt} times without an end (the limit is {limit}); \
                     the last member never acknowledged it"
                )
            }
        }
    }
}

impl<P, H> StateMachine<P, H>
where
    P: Clone + Eq + Hash + fmt::Debug + Serialize + DeserializeOwned,
    H: Host,
{
    /// One notice from `from`.
    pub(super) fn on_notice(
        &mut self,
        from: NodeId,
        notice: Notice<H::Event>,
        now: Instant,
        host: &mut H,
    ) {
        match notice {
            Notice::Event(event) => {
                self.stats.events_received += 1;
                self.deliver(event, now, host);
            }
            Notice::Finished(id) => {
                if let Some(kept) = self.take_export(id, from) {
                    if !self.custody.is_exported(id) {
                        self.location.remove(&id);
                        self.attempts.remove(&id);
                    }
                    host.settle(id, &kept.export.trail);
                    if let Some(exporter) = self.custody.pop_import(id) {
                        self.notify(exporter, Notice::Finished(id));
                    }
                }
            }
            Notice::GaveUp { id, reason } => {
                if let Some(kept) = self.take_export(id, from) {
                    self.location.remove(&id);
                    host.settle(id, &kept.export.trail);
                    self.give_up_upstream(id, reason);
                }
            }
            Notice::Relabelled(executors) => {
                if let Some(member) = self.roster.get_mut(from) {
                    if let Some(info) = member.info.as_mut() {
                        info.executors = executors;
                        self.members_changed();
                    }
                }
            }
            Notice::Moved { id, at } => {
                if id.origin() == self.settings.node && at != self.settings.node {
                    self.location.insert(id, at);
                }
            }
            Notice::Returned { id, reason } => {
                if let Some(kept) = self.take_export(id, from) {
                    tracing::error!(%id, thief = %from, %reason, "a member could not take an activity; it stays on this node (are all nodes running the same build?)");
                    self.take_back(id, kept, false, host);
                }
            }
            Notice::Declined(id) => {
                if let Some(kept) = self.take_export(id, from) {
                    self.take_back(id, kept, true, host);
                }
            }
            Notice::LootTaken { request } => {
                self.unacknowledged.remove(&(from, request));
            }
        }
    }

    /// The loot that answered `thief`'s steal request `request` was never
    /// acknowledged: what it carried and is still held there is queued
    /// again, once. (Work the thief did get runs twice then, which
    /// at-least-once allows; work it did not get is run at last.)
    pub(super) fn loot_unacknowledged(&mut self, thief: NodeId, request: u64, host: &mut H) {
        let Some(ids) = self.unacknowledged.remove(&(thief, request)) else {
            return;
        };
        for id in ids {
            if let Some(export) = self.custody.take_export(id, thief) {
                self.requeue(id, export.copy, Lapse::Unacknowledged, host);
            }
        }
    }

    /// The link of `id`'s chain of custody that handed it to `thief`.
    fn take_export(&mut self, id: ActivityId, thief: NodeId) -> Option<Kept<H::Body>> {
        self.custody
            .take_export(id, thief)
            .map(|export| export.copy)
    }

    /// Queues an exported activity here again, as it was when it left;
    /// `stealable: false` keeps it on this node from now on.
    fn take_back(&mut self, id: ActivityId, kept: Kept<H::Body>, stealable: bool, host: &mut H) {
        self.location.remove(&id);
        if let Err(error) = host.reclaim(&kept.export, kept.attempt, stealable) {
            host.settle(id, &kept.export.trail);
            self.give_up_upstream(id, format!("its copy no longer decodes: {error}"));
        }
    }

    /// Queues an activity again whose thief died or never acknowledged
    /// it, with the next attempt, or gives it up.
    pub(super) fn requeue(
        &mut self,
        id: ActivityId,
        kept: Kept<H::Body>,
        lapse: Lapse,
        host: &mut H,
    ) {
        self.location.remove(&id);
        let restartable = kept.export.restartable;
        let attempt = match custody::retry(kept.attempt, restartable, self.settings.max_attempts) {
            Ok(attempt) => attempt,
            Err(give_up) => {
                host.settle(id, &kept.export.trail);
                self.give_up_upstream(id, lapse.give_up_reason(&give_up));
                return;
            }
        };
        if let Err(error) = host.reclaim(&kept.export, attempt, true) {
            host.settle(id, &kept.export.trail);
            self.give_up_upstream(id, format!("its copy no longer decodes: {error}"));
            return;
        }
        self.attempts.insert(id, attempt);
        self.stats.requeued += 1;
        tracing::warn!(%id, attempt, "queued again: {}", lapse.why());
        if id.origin() != self.settings.node {
            let at = self.settings.node;
            self.notify(id.origin(), Notice::Moved { id, at });
        }
    }

    /// Passes the news that `id` was given up towards its origin; at the
    /// origin (or the first node it came from) the driver hears of it.
    fn give_up_upstream(&mut self, id: ActivityId, reason: String) {
        self.attempts.remove(&id);
        match self.custody.pop_import(id) {
            Some(exporter) => self.notify(exporter, Notice::GaveUp { id, reason }),
            None => {
                self.stats.lost += 1;
                tracing::error!(%id, %reason, "activity given up");
                self.outbound
                    .events
                    .push_back(NodeEvent::Lost { id, reason });
            }
        }
    }

    /// An activity that came from elsewhere finished on this node.
    pub(super) fn finished_here(&mut self, id: ActivityId) {
        self.attempts.remove(&id);
        if let Some(exporter) = self.custody.pop_import(id) {
            if self.roster.get(exporter).is_some() {
                self.notify(exporter, Notice::Finished(id));
            }
        }
    }
}
