//! Stealing between nodes: whom idle executors ask and when, what a victim
//! hands over, and taking the loot in.
//!
//! Each distinct context of idle executors has its own [`Throttle`]: one
//! request in flight, and a growing pause after a full round of empty
//! replies, so idle nodes do not hammer their victims. A victim hands over
//! at most half of what it has queued, and keeps a copy of each activity
//! until it hears of its end (see [`handover`](super::handover)).

use std::fmt;
use std::hash::Hash;
use std::time::Instant;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::roster::VictimSet;
use super::{Kept, StateMachine};
use crate::context::ExecutorContext;
use crate::id::{ActivityId, NodeId};
use crate::protocol::host::Host;
use crate::protocol::message::{MemberId, Message, Notice, Travelling};
use crate::protocol::strategy::{Strategy, Throttle};

impl<P, H> StateMachine<P, H>
where
    P: Clone + Eq + Hash + fmt::Debug + Serialize + DeserializeOwned,
    H: Host,
{
    /// Whether `node` is this node or a member on its site.
    fn on_my_site(&self, node: NodeId) -> bool {
        node == self.settings.node
            || (self.settings.site.is_some()
                && (self.roster.get(node))
                    .and_then(|member| member.info.as_ref())
                    .is_some_and(|info| info.site == self.settings.site))
    }

    /// How many victims a full round of empty replies takes.
    pub(super) fn steal_round(&mut self) -> usize {
        match self.settings.strategy {
            Strategy::MasterWorker => 1,
            _ => self.victims().len(),
        }
    }

    /// The victims, listed again first if members changed since.
    fn victims(&mut self) -> &VictimSet {
        let settings = &self.settings;
        (self.roster).refresh_victims(&settings.steal_from, settings.site.as_ref());
        self.roster.victims()
    }

    /// Asks other nodes for work for every idle executor context that may
    /// ask now; a context waiting out a pause gets a timer for its end.
    pub(super) fn try_steal(&mut self, now: Instant, host: &mut H) {
        let settings = &self.settings;
        if !self.stealing
            || self.leaving
            || (settings.strategy == Strategy::MasterWorker && settings.master)
        {
            return;
        }
        let idle = host.idle_contexts();
        if idle.is_empty() {
            return;
        }
        if self.victims().len() == 0 {
            return;
        }
        let (min_backoff, max_backoff) = self.settings.backoff;
        for (context, idle) in idle {
            let throttle = (self.throttles.entry(context.clone()))
                .or_insert_with(|| Throttle::with_backoff(min_backoff, max_backoff));
            if !throttle.may_steal(now) {
                if let Some(at) = throttle.retry_at() {
                    if self.steal_retry.is_none_or(|set| at < set) {
                        self.steal_retry = Some(at);
                        self.timers.set(at, super::Due::StealRetry);
                    }
                }
                continue;
            }
            let victims = self.roster.victims();
            let Some(victim) = throttle.choose_from(self.settings.strategy, victims, &mut self.rng)
            else {
                continue;
            };
            let Some(peer) = self.roster.get(victim.peer).map(|m| m.id.peer.clone()) else {
                throttle.abandon();
                continue;
            };
            let max = throttle.ask(
                self.settings.strategy,
                self.settings.wide_steal,
                &victim,
                idle,
                self.settings.max_steal,
            );
            self.next_request += 1;
            let request = self.next_request;
            self.steals.insert(request, (context.clone(), victim));
            self.stats.steal_requests += 1;
            let steal = Message::Steal {
                request,
                thief: context,
                steal_from: self.settings.steal_from.clone(),
                max: max.min(u32::MAX as usize) as u32,
            };
            self.send(peer, steal);
        }
    }

    /// Answers a steal request, always, with the loot (possibly none);
    /// returns the ids of the activities it carries.
    pub(super) fn on_steal(
        &mut self,
        from: &MemberId<P>,
        request: u64,
        thief: &ExecutorContext,
        steal_from: &str,
        max: u32,
        host: &mut H,
    ) -> Vec<ActivityId> {
        let activities = self.export(from.node, thief, steal_from, max as usize, host);
        let ids = activities.iter().map(|activity| activity.id).collect();
        let loot = Message::Loot {
            request,
            activities,
        };
        self.send(from.peer.clone(), loot);
        ids
    }

    /// A loot that carries work waits for the thief's
    /// [`Notice::LootTaken`]: one lost on the way would otherwise stay in
    /// custody here, unrun, for as long as the thief lives.
    pub(super) fn await_loot_taken(
        &mut self,
        thief: NodeId,
        request: u64,
        ids: Vec<ActivityId>,
        now: Instant,
    ) {
        if ids.is_empty() {
            return;
        }
        self.unacknowledged.insert((thief, request), ids);
        let at = now + self.loot_ack_wait();
        (self.timers).set(at, super::Due::LootUnacknowledged { thief, request });
    }

    /// Up to half of the queued work, at most what the thief and this node
    /// allow; nothing to a thief of another steal pool, nothing while
    /// leaving, and nothing to a thief SWIM does not watch: its death would
    /// go unnoticed and what it took would never be queued again.
    fn export(
        &mut self,
        thief: NodeId,
        context: &ExecutorContext,
        steal_from: &str,
        asked: usize,
        host: &mut H,
    ) -> Vec<Travelling<H::Body>> {
        if steal_from != self.settings.steal_pool || self.leaving || !self.roster.is_up(thief) {
            return Vec::new();
        }
        let queued = host.queued();
        if queued == 0 {
            return Vec::new();
        }
        let max = (asked.min(self.settings.max_steal))
            .min(queued.div_ceil(2))
            .max(1);
        let exports = host.export(context, max);
        let mut loot = Vec::with_capacity(exports.len());
        for export in exports {
            let id = export.id;
            let attempt = self.attempts.get(&id).copied().unwrap_or(0);
            loot.push(Travelling {
                id,
                body: export.body.clone(),
                contexts: export.contexts.clone(),
                attempt,
            });
            self.custody.exported(id, thief, Kept { export, attempt });
            self.location.insert(id, thief);
        }
        self.stats.exported += loot.len() as u64;
        loot
    }

    /// The answer to a steal request: activities to take in, possibly none.
    pub(super) fn on_loot(
        &mut self,
        from: &MemberId<P>,
        request: u64,
        activities: Vec<Travelling<H::Body>>,
        now: Instant,
        host: &mut H,
    ) {
        let exporter = from.node;
        let taken = activities.len();
        let home_work = activities.iter().any(|a| self.on_my_site(a.id.origin()));
        for activity in activities {
            if self.leaving {
                // Too late to run it here: straight back.
                self.notify(exporter, Notice::Declined(activity.id));
            } else {
                self.import(exporter, activity, now, host);
            }
        }
        if taken > 0 {
            self.notify(exporter, Notice::LootTaken { request });
        }
        // A reply to a request given up on (its victim was declared dead
        // meanwhile) still carries work the victim keeps copies of: it is
        // taken in above, but counts for no throttle.
        let Some((context, victim)) = self.steals.remove(&request) else {
            return;
        };
        if taken == 0 {
            self.stats.empty_replies += 1;
        }
        let round = self.steal_round();
        if let Some(throttle) = self.throttles.get_mut(&context) {
            throttle.replied(&victim, taken, round, now);
            if home_work {
                throttle.found_home_work();
            }
        }
        self.try_steal(now, host);
    }

    /// Takes in one activity from a loot.
    fn import(
        &mut self,
        exporter: NodeId,
        activity: Travelling<H::Body>,
        now: Instant,
        host: &mut H,
    ) {
        let id = activity.id;
        let attempt = activity.attempt;
        // Who handed it over waits to hear that it finished.
        self.custody.imported(id, exporter);
        if let Err(reason) = host.import(activity) {
            tracing::error!(%id, from = %exporter, %reason, "refused an activity; it goes back to its exporter");
            self.stats.refused += 1;
            self.custody.pop_import(id);
            self.notify(exporter, Notice::Returned { id, reason });
            return;
        }
        if attempt > 0 {
            self.attempts.insert(id, attempt);
        }
        self.stats.imported += 1;
        if id.origin() != exporter && id.origin() != self.settings.node {
            let at = self.settings.node;
            self.notify(id.origin(), Notice::Moved { id, at });
        }
        self.location.remove(&id);
        if let Some(early) = self.early.remove(&id) {
            for event in early.events {
                self.deliver(event, now, host);
            }
        }
    }
}
