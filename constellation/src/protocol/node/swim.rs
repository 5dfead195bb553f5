//! Membership: SWIM's packets and timers, hellos, and members that come
//! up, go down or leave.
//!
//! SWIM (foca) decides who is up; this module carries out what follows:
//! it asks a new member what it offers (its hello), takes back what a dead
//! member held for this node, and gives a member that said it leaves the
//! failure timeout for its last notices before doing the same.

use std::fmt;
use std::hash::Hash;
use std::time::Instant;

use serde::de::DeserializeOwned;
use serde::Serialize;

use foca::OwnedNotification;

use super::handover::Lapse;
use super::timers::Due;
use super::StateMachine;
use crate::id::NodeId;
use crate::protocol::host::Host;
use crate::protocol::message::{MemberId, MemberInfo, Message};

impl<P, H> StateMachine<P, H>
where
    P: Clone + Eq + Hash + fmt::Debug + Serialize + DeserializeOwned,
    H: Host,
{
    /// A SWIM packet from another node.
    pub(super) fn on_swim(&mut self, packet: &[u8], now: Instant) {
        // A node that left stays out: SWIM would otherwise hear that the
        // others count it down, renew its identity and rejoin.
        if self.leaving {
            return;
        }
        if let Err(error) = self.swim.handle_data(packet, &mut self.effects) {
            tracing::debug!(%error, "a SWIM packet was not taken");
        }
        self.drain_swim(now);
    }

    /// A timer SWIM set is due.
    pub(super) fn on_swim_timer(&mut self, timer: foca::Timer<MemberId<P>>, now: Instant) {
        if let Err(error) = self.swim.handle_timer(timer, &mut self.effects) {
            tracing::debug!(%error, "a SWIM timer failed");
        }
        self.drain_swim(now);
    }

    /// Carries out what SWIM asked for: packets to send, timers to set,
    /// and members that came up, went down or were renamed. (What follows
    /// a notification does not call SWIM again, so one pass drains it.)
    pub(super) fn drain_swim(&mut self, now: Instant) {
        while let Some((to, packet)) = self.effects.to_send() {
            self.send(to.peer, Message::Swim(packet.to_vec()));
        }
        while let Some((after, timer)) = self.effects.to_schedule() {
            self.timers.set(now + after, Due::Swim(timer));
        }
        while let Some(notification) = self.effects.to_notify() {
            match notification {
                OwnedNotification::MemberUp(id) => self.member_up(id, now),
                OwnedNotification::MemberDown(id) => self.member_down(&id, now),
                OwnedNotification::Rename(old, new) => self.renamed(&old, new),
                OwnedNotification::Rejoin(id) => {
                    tracing::warn!(
                        bump = id.bump,
                        "the pool counted this node down; it rejoins under a renewed identity"
                    );
                }
                OwnedNotification::Active => tracing::debug!("SWIM: in touch with the pool"),
                OwnedNotification::Idle => tracing::debug!("SWIM: no live member known"),
                OwnedNotification::Defunct => tracing::debug!("SWIM: out of the pool"),
                #[allow(unreachable_patterns)]
                _ => {}
            }
        }
    }

    /// Records the sender of a message that is not SWIM's and, if SWIM does
    /// not have it up, introduces it to SWIM (at most once a probe period):
    /// a node that talks to this one is a member, and SWIM must watch it,
    /// or its death would go unnoticed and what it holds would never be
    /// queued again.
    pub(super) fn note_sender(&mut self, from: &MemberId<P>, now: Instant) {
        let leaving = self.leaving;
        let period = self.settings.probe_period;
        let member = self.roster.entry(from);
        let known = member.up && member.id == *from;
        let stale = from.bump < member.id.bump;
        let due = member.announced.is_none_or(|at| now >= at + period);
        if known || stale || leaving || member.leaving.is_some() || !due {
            return;
        }
        member.announced = Some(now);
        // A node alone asks the sender for its member list (an announce,
        // answered with a feed): that is how a newcomer learns the pool
        // from the member it contacted. A node with members only tells
        // SWIM the sender is alive (it talks), which SWIM then spreads: a
        // feed per hello would cost every node a full member list from
        // every other while a thousand nodes meet.
        let result = match self.swim.num_members() {
            0 => self.swim.announce(from.clone(), &mut self.effects),
            _ => {
                let alive = foca::Member::alive(from.clone());
                (self.swim).apply_many(std::iter::once(alive), true, &mut self.effects)
            }
        };
        if let Err(error) = result {
            tracing::debug!(%error, "could not introduce a sender to SWIM");
        }
    }

    /// Asks `peer` who it is and what it offers, saying the same.
    pub(super) fn say_hello(&mut self, peer: P) {
        let hello = Message::Hello {
            info: self.me.clone(),
            answer: true,
        };
        self.send(peer, hello);
    }

    /// The peers this node was told to contact hear from it again while it
    /// knows no live member, and members SWIM has up whose hello has not
    /// come for a whole probe period are asked again: a hello is sent once,
    /// and one lost on a failing connection would otherwise leave the pair
    /// unknown to each other for good. The check repeats every probe period.
    pub(super) fn recontact(&mut self, now: Instant) {
        if self.leaving {
            self.recontact_set = false;
            return;
        }
        if self.swim.num_members() == 0 {
            for peer in self.contacts.clone() {
                self.say_hello(peer);
            }
        }
        let mut overdue = Vec::new();
        for member in self.roster.iter_mut() {
            if !member.up || member.info.is_some() || member.leaving.is_some() {
                continue;
            }
            if member.hello_overdue {
                overdue.push(member.id.peer.clone());
            }
            member.hello_overdue = true;
        }
        for peer in overdue {
            self.say_hello(peer);
        }
        let at = now + self.settings.probe_period;
        self.timers.set(at, Due::Recontact);
    }

    /// A hello: what a member offers, and maybe a request to say hello back.
    pub(super) fn on_hello(
        &mut self,
        from: &MemberId<P>,
        info: MemberInfo,
        answer: bool,
        now: Instant,
    ) {
        self.note_sender(from, now);
        let member = self.roster.entry(from);
        if member.info.as_ref() != Some(&info) {
            member.info = Some(info);
            if member.usable() {
                self.members_changed();
            }
        }
        if answer && !self.leaving {
            let hello = Message::Hello {
                info: self.me.clone(),
                answer: false,
            };
            self.send(from.peer.clone(), hello);
        }
    }

    /// SWIM has a member up: it is usable once its hello is heard.
    fn member_up(&mut self, id: MemberId<P>, now: Instant) {
        let member = self.roster.entry(&id);
        if id.bump < member.id.bump {
            return;
        }
        member.id = id;
        member.up = true;
        let ask = member.info.is_none();
        let peer = member.id.peer.clone();
        if member.usable() {
            self.members_changed();
        }
        if ask && !self.leaving {
            self.say_hello(peer);
            // A node that contacted nobody (the first of a pool) has no
            // recontact timer yet; the check for lost hellos needs one.
            if !self.recontact_set {
                self.recontact_set = true;
                let at = now + self.settings.probe_period;
                self.timers.set(at, Due::Recontact);
            }
        }
    }

    /// SWIM declared a member down: it is no steal target from now on, and
    /// after a grace of one probe period it is removed and what it held for
    /// this node is queued again, unless it is back under a newer identity
    /// by then, or said it leaves (then it has the failure timeout after
    /// its `Leaving` for its last notices).
    ///
    /// The grace is for a leaver: it says goodbye to SWIM as it sends its
    /// `Leaving`, and SWIM's goodbye, gossiped on by others, may come
    /// first. Taken for a death, the leaver's work would run again while
    /// its last `Finished` notices are on their way.
    fn member_down(&mut self, id: &MemberId<P>, now: Instant) {
        let Some(member) = self.roster.get_mut(id.node) else {
            return;
        };
        if member.id.bump > id.bump || !member.up {
            return;
        }
        let was_usable = member.usable();
        member.up = false;
        let leaving = member.leaving.is_some();
        let bump = member.id.bump;
        if was_usable {
            self.members_changed();
        }
        if !leaving {
            let grace = self
                .settings
                .probe_period
                .min(self.settings.failure_timeout);
            let node = id.node;
            self.timers.set(now + grace, Due::DownGrace { node, bump });
        }
    }

    /// Makes the member reached as `peer` a suspect, as a failed probe
    /// would, unless it is already (or no longer) one; see
    /// [`StateMachine::handle_unreachable`].
    pub(super) fn suspect_unreachable(&mut self, peer: &P, now: Instant) {
        if self.leaving {
            return;
        }
        let Some(member) = self.roster.iter().find(|member| member.id.peer == *peer) else {
            return;
        };
        // A leaver closes its connections on purpose: its `Leaving` has
        // the failure timeout for its last notices.
        if !member.up || member.leaving.is_some() {
            return;
        }
        let id = member.id.clone();
        let Some(known) = self.swim.iter_members().find(|known| *known.id() == id) else {
            return;
        };
        // A suspect already has a timer running where it was suspected.
        if known.state() != foca::State::Alive {
            return;
        }
        let incarnation = known.incarnation();
        let suspect = foca::Member::new(id.clone(), incarnation, foca::State::Suspect);
        if let Err(error) =
            (self.swim).apply_many(std::iter::once(suspect), true, &mut self.effects)
        {
            tracing::debug!(%error, "SWIM did not take a suspicion");
            return;
        }
        tracing::debug!(node = %id.node, "a connection to a member was refused or reset: suspected at once");
        let at = now + self.settings.failure_timeout;
        self.timers
            .set(at, Due::UnreachableSuspect { id, incarnation });
    }

    /// The failure timeout after a suspicion for a refused or reset
    /// connection is over: a member that did not refute it (its
    /// incarnation is the same) is declared down, as SWIM does with a
    /// suspect that failed a probe.
    pub(super) fn unreachable_suspect_over(
        &mut self,
        id: MemberId<P>,
        incarnation: u16,
        now: Instant,
    ) {
        let unrefuted = self.swim.iter_members().any(|known| {
            *known.id() == id
                && known.state() == foca::State::Suspect
                && known.incarnation() == incarnation
        });
        if !unrefuted {
            return;
        }
        let down = foca::Member::new(id, incarnation, foca::State::Down);
        if let Err(error) = (self.swim).apply_many(std::iter::once(down), true, &mut self.effects) {
            tracing::debug!(%error, "SWIM did not take a suspect's end");
        }
        self.drain_swim(now);
    }

    /// The grace after SWIM declared a member down is over.
    pub(super) fn down_grace_over(&mut self, node: NodeId, bump: u16, now: Instant, host: &mut H) {
        let dead = (self.roster.get(node))
            .is_some_and(|member| !member.up && member.leaving.is_none() && member.id.bump == bump);
        if dead {
            self.remove_member(node, true, now, host);
        }
    }

    /// SWIM replaced a member's identity by a newer one: the same node,
    /// rejoined. Whether it is up follows in its own notification.
    fn renamed(&mut self, old: &MemberId<P>, new: MemberId<P>) {
        if let Some(member) = self.roster.get_mut(old.node) {
            if new.bump > member.id.bump {
                member.id = new;
            }
        }
    }

    /// A member leaves the pool: it takes no more work. What it holds is
    /// queued again only if it stays silent for the failure timeout after
    /// this, as for a death: its last notices may still be on their way.
    pub(super) fn on_leaving(&mut self, from: &MemberId<P>, now: Instant) {
        let Some(member) = self.roster.get_mut(from.node) else {
            return;
        };
        if member.leaving.is_some() || from.bump < member.id.bump {
            return;
        }
        tracing::info!(node = %from.node, "member leaves");
        member.leaving = Some(now);
        let bump = member.id.bump;
        self.members_changed();
        let at = now + self.settings.failure_timeout;
        let node = from.node;
        self.timers.set(at, Due::LeaverGone { node, bump });
    }

    /// The failure timeout after a member's `Leaving` is over.
    pub(super) fn leaver_gone(&mut self, node: NodeId, bump: u16, now: Instant, host: &mut H) {
        let gone = (self.roster.get(node))
            .is_some_and(|member| member.leaving.is_some() && member.id.bump == bump);
        if gone {
            self.remove_member(node, false, now, host);
        }
    }

    /// Removes a member that left or died; what it held for this node is
    /// queued again, or given up.
    pub(super) fn remove_member(&mut self, node: NodeId, died: bool, now: Instant, host: &mut H) {
        let Some(member) = self.roster.remove(node) else {
            return;
        };
        if died {
            self.stats.dead_members += 1;
            tracing::warn!(%node, "member declared dead");
        } else {
            tracing::info!(%node, "member left");
        }
        for id in self.custody.held_by(node) {
            while let Some(export) = self.custody.take_export(id, node) {
                self.requeue(id, export.copy, Lapse::ThiefGone, host);
            }
        }
        // What it did not acknowledge was just taken back with the rest.
        self.unacknowledged.retain(|(thief, _), _| *thief != node);
        self.outbox.remove(&node);
        let stale: Vec<u64> = (self.steals.iter())
            .filter(|(_, (_, victim))| victim.peer == node)
            .map(|(request, _)| *request)
            .collect();
        let abandoned = !stale.is_empty();
        for request in stale {
            if let Some((context, _)) = self.steals.remove(&request) {
                if let Some(throttle) = self.throttles.get_mut(&context) {
                    throttle.abandon();
                }
            }
        }
        if abandoned {
            // The executors that waited on those requests are still idle,
            // and no reply, idle notice or pause will come to wake them:
            // a member that froze (rather than died) keeps its requests
            // unanswered, and it was no victim since it went down, so the
            // members do not change again when it is removed. They ask the
            // others now, where what it held may just have been queued.
            self.try_steal(now, host);
        }
        if member.usable() || member.leaving.is_some() {
            self.members_changed();
        }
    }
}
