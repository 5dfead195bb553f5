//! [`StateMachine`]: the state machine itself.
//!
//! The node is split by concern:
//! - [`swim`](self::swim): membership: SWIM's packets and timers, hellos,
//!   members that come up, go down or leave;
//! - [`stealing`](self::stealing): whom idle executors ask, what a victim
//!   hands over, and taking loot in;
//! - [`handover`](self::handover): custody of exported work: its end, its
//!   return, and queueing it again when the node running it dies;
//! - [`routing`](self::routing): events towards their activity, early
//!   events, and the notices that carry them;
//! - [`roster`](self::roster) and [`timers`](self::timers): the members
//!   known, and the one timer queue.

use std::collections::BTreeMap;
use std::fmt;
use std::hash::Hash;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::SeedableRng;
use rustc_hash::{FxHashMap, FxHashSet};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::custody::Custody;
use super::host::{Export, Host};
use super::membership::{swim_config, Swim, SwimEffects, SwimRng};
use super::message::{Envelope, MemberId, MemberInfo, Message, Notice};
use super::strategy::{Candidate, Strategy, Throttle, WideSteal};
use crate::context::ExecutorContext;
use crate::id::{ActivityId, NodeId};

mod handover;
mod output;
mod roster;
mod routing;
mod stealing;
mod swim;
#[cfg(test)]
mod tests;
mod timers;

use output::Outbound;
pub use output::{NodeEvent, Output, SendToken, Transmit};
use roster::Roster;
use timers::{Due, Timers};

/// How a node behaves; the driver fills it from its own configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    /// This node's id.
    pub node: NodeId,
    /// This node's site, for hierarchical stealing.
    pub site: Option<String>,
    /// How idle executors find work on other nodes.
    pub strategy: Strategy,
    /// Whether this node is the master that master-worker stealing asks.
    pub master: bool,
    /// The steal pool this node belongs to.
    pub steal_pool: String,
    /// The steal pool this node takes work from.
    pub steal_from: String,
    /// The most activities one loot carries.
    pub max_steal: usize,
    /// How many activities a hierarchical steal from another site asks for.
    pub wide_steal: WideSteal,
    /// The bound on declaring a silent member dead: SWIM suspects it after
    /// a failed probe and declares it down if it does not refute within
    /// this time; what it held is queued again one probe period later (a
    /// grace for a `Leaving` that SWIM's goodbye overtook). A silent member
    /// is so given up within about `failure_timeout + 3 × probe_period`.
    /// Also how long a member that said it leaves is given for its last
    /// notices, and, with two probe periods, how long a loot waits for its
    /// thief to say it arrived before its work is queued again.
    pub failure_timeout: Duration,
    /// How often SWIM probes a member at random.
    pub probe_period: Duration,
    /// How many times an activity may be handed out before it is given up
    /// when the nodes running it die.
    pub max_attempts: u32,
    /// How long an event for an activity not (yet) here waits for it.
    pub early_event_wait: Duration,
    /// The shortest and longest pause after a round of empty steal replies.
    pub backoff: (Duration, Duration),
    /// Seeds the node's random choices (victims, SWIM), so a simulation
    /// replays exactly.
    pub seed: u64,
}

/// What a node counts; [`StateMachine::stats`] returns them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Steal requests sent.
    pub steal_requests: u64,
    /// Steal replies that carried no work.
    pub empty_replies: u64,
    /// Activities taken in from other nodes.
    pub imported: u64,
    /// Activities handed to other nodes.
    pub exported: u64,
    /// Events sent to other nodes (forwarded ones included).
    pub events_sent: u64,
    /// Events received from other nodes.
    pub events_received: u64,
    /// Events that reached no activity; each was logged.
    pub undeliverable: u64,
    /// Activities queued again because the node running them died.
    pub requeued: u64,
    /// Activities given up.
    pub lost: u64,
    /// Members declared dead.
    pub dead_members: u64,
    /// Connections or frames refused: wrong key, garbage, oversized frames.
    /// The driver counts these ([`StateMachine::count_refused`]).
    pub refused: u64,
}

/// What an exporter keeps of an activity it handed over, until it hears
/// of its end: the host's export, and the attempt it left with.
#[derive(Debug)]
struct Kept<B> {
    export: Export<B>,
    attempt: u32,
}

/// Events that came before their activity.
#[derive(Debug)]
struct Early<E> {
    /// When the first of them came.
    since: Instant,
    events: Vec<E>,
}

/// One node's side of the node protocol. See the [module](super) docs.
///
/// `P` names peers for the driver (opaque to the node), `H` is the node's
/// own executors. `P` is bounded here as SWIM's identities need it.
pub struct StateMachine<P: Clone + Eq + fmt::Debug, H: Host> {
    settings: Settings,
    /// What this node offers, as its hellos say.
    me: MemberInfo,
    swim: Swim<P>,
    /// What SWIM asked for during the last call into it.
    effects: SwimEffects<P>,
    roster: Roster<P>,
    /// Copies of activities handed to other nodes, and whom to tell when
    /// an activity taken in finishes: the chain of custody.
    custody: Custody<NodeId, Kept<H::Body>>,
    /// Loots handed out whose thief has not said it took them, by thief
    /// and its steal request: the activities they carried.
    unacknowledged: FxHashMap<(NodeId, u64), Vec<ActivityId>>,
    /// Attempts of activities here that were handed out before.
    attempts: FxHashMap<ActivityId, u32>,
    /// Where activities that left this node, or that originated here, are now.
    location: FxHashMap<ActivityId, NodeId>,
    /// Events that came before their activity.
    early: FxHashMap<ActivityId, Early<H::Event>>,
    /// Steal state per distinct executor context.
    throttles: FxHashMap<ExecutorContext, Throttle>,
    /// Steal requests in flight: the context they ask for, and whom.
    steals: FxHashMap<u64, (ExecutorContext, Candidate<NodeId>)>,
    next_request: u64,
    /// When a paused steal may go out, if a timer is set for it.
    steal_retry: Option<Instant>,
    /// Notices waiting to go out, per destination; flushed at the end of
    /// each input, in node order so a simulation replays exactly.
    outbox: BTreeMap<NodeId, Vec<Notice<H::Event>>>,
    /// What the driver is to send and know, polled with
    /// [`poll_output`](Self::poll_output).
    outbound: Outbound<P, H::Body, H::Event>,
    /// The members ever seen usable as masters: a `Leaving` from one of
    /// them is [`NodeEvent::MasterLeft`].
    masters: FxHashSet<NodeId>,
    /// The usable members or their offers changed during this input.
    members_changed: bool,
    timers: Timers<P>,
    rng: StdRng,
    stats: Stats,
    /// The peers this node was told to contact (bootstrap addresses).
    contacts: Vec<P>,
    /// Whether a timer to contact them again is set.
    recontact_set: bool,
    /// Whether idle executors may ask other nodes for work.
    stealing: bool,
    leaving: bool,
}

impl<P, H> fmt::Debug for StateMachine<P, H>
where
    P: Clone + Eq + fmt::Debug,
    H: Host,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateMachine")
            .field("node", &self.settings.node)
            .field("stealing", &self.stealing)
            .field("leaving", &self.leaving)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<P, H> StateMachine<P, H>
where
    P: Clone + Eq + Hash + fmt::Debug + Serialize + DeserializeOwned,
    H: Host,
{
    /// A node that knows no member yet. `peer` is how others reach it;
    /// `info` is what it offers.
    pub fn new(settings: Settings, peer: P, info: MemberInfo, now: Instant) -> Self {
        let id = MemberId {
            node: settings.node,
            peer,
            bump: 0,
        };
        // Two streams from one seed: SWIM's choices and victim choice
        // stay apart, so a change in one does not shift the other.
        let swim_rng = SwimRng(StdRng::seed_from_u64(settings.seed ^ 0x5157_494d));
        let swim = Swim::new(id, swim_config(&settings), swim_rng, foca::PostcardCodec);
        let _ = now;
        StateMachine {
            rng: StdRng::seed_from_u64(settings.seed),
            settings,
            me: info,
            swim,
            effects: SwimEffects::new(),
            roster: Roster::new(),
            custody: Custody::new(),
            unacknowledged: FxHashMap::default(),
            attempts: FxHashMap::default(),
            location: FxHashMap::default(),
            early: FxHashMap::default(),
            throttles: FxHashMap::default(),
            steals: FxHashMap::default(),
            next_request: 0,
            steal_retry: None,
            outbox: BTreeMap::new(),
            outbound: Outbound::new(),
            masters: FxHashSet::default(),
            members_changed: false,
            timers: Timers::new(),
            stats: Stats::default(),
            contacts: Vec::new(),
            recontact_set: false,
            stealing: true,
            leaving: false,
        }
    }

    /// This node's identity as members know it.
    pub fn id(&self) -> &MemberId<P> {
        self.swim.identity()
    }

    /// Introduces this node to a peer it was told of (a bootstrap address):
    /// the peer's hello names it, and SWIM then spreads the membership.
    ///
    /// While this node knows no live member, it says hello to the peers it
    /// was told of again every probe period: a bootstrap node may not be up
    /// yet, and a node cut off from all others finds its way back.
    pub fn contact(&mut self, peer: P, now: Instant) {
        if !self.contacts.contains(&peer) {
            self.contacts.push(peer.clone());
        }
        if !self.recontact_set {
            self.recontact_set = true;
            self.timers
                .set(now + self.settings.probe_period, Due::Recontact);
        }
        self.say_hello(peer);
    }

    /// A message from another node.
    pub fn handle_message(
        &mut self,
        envelope: Envelope<P, H::Body, H::Event>,
        now: Instant,
        host: &mut H,
    ) {
        let Envelope { from, message } = envelope;
        if from.node == self.settings.node {
            tracing::debug!("a message from this node itself; ignored");
            return;
        }
        match message {
            Message::Swim(packet) => self.on_swim(&packet, now),
            Message::Hello { info, answer } => self.on_hello(&from, info, answer, now),
            Message::Steal {
                request,
                thief,
                steal_from,
                max,
            } => {
                self.note_sender(&from, now);
                let loot = self.on_steal(&from, request, &thief, &steal_from, max, host);
                self.await_loot_taken(from.node, request, loot, now);
            }
            Message::Loot {
                request,
                activities,
            } => {
                self.note_sender(&from, now);
                self.on_loot(&from, request, activities, now, host);
            }
            Message::Notices(notices) => {
                self.note_sender(&from, now);
                for notice in notices {
                    self.on_notice(from.node, notice, now, host);
                }
            }
            Message::Leaving => {
                if self.masters.contains(&from.node) {
                    tracing::info!(peer = ?from.peer, "the master leaves the pool");
                    self.outbound.events.push_back(NodeEvent::MasterLeft);
                }
                self.on_leaving(&from, now)
            }
        }
        self.finish(now, host);
    }

    /// A message this node asked to send to `to` could not be delivered;
    /// `token` is its [`Transmit::token`].
    ///
    /// Only a lost steal request matters here: it counts as an empty
    /// reply. Whether the peer is gone is SWIM's to decide.
    pub fn handle_send_failed(&mut self, to: &P, token: SendToken, now: Instant, host: &mut H) {
        if let Some(request) = token.steal_request() {
            if let Some((context, victim)) = self.steals.remove(&request) {
                tracing::debug!(peer = ?to, "a steal request could not be sent");
                let round = self.steal_round();
                if let Some(throttle) = self.throttles.get_mut(&context) {
                    throttle.replied(&victim, 0, round, now);
                }
                self.try_steal(now, host);
            }
        }
        self.finish(now, host);
    }

    /// A connection to `peer` was refused or reset: nothing listens where
    /// it was, as when its process died. SWIM suspects it at once, instead
    /// of at its next failed probe (up to a probe period per member later),
    /// and declares it down if it does not refute within the failure
    /// timeout, as after a failed probe.
    ///
    /// Only for a refused or reset connection, never for a timeout: a node
    /// starved of CPU times out but still accepts connections, and it must
    /// not be suspected for being busy. A suspected node that lives refutes
    /// the suspicion as soon as it hears of it.
    pub fn handle_unreachable(&mut self, peer: &P, now: Instant) {
        self.suspect_unreachable(peer, now);
        self.drain_swim(now);
    }

    /// Time has come: the moment [`Output::Timeout`] named, or later.
    pub fn handle_timeout(&mut self, now: Instant, host: &mut H) {
        while let Some(due) = self.timers.pop_due(now) {
            match due {
                Due::Swim(timer) => self.on_swim_timer(timer, now),
                Due::StealRetry => {
                    if self.steal_retry.is_some_and(|at| at <= now) {
                        self.steal_retry = None;
                    }
                    self.try_steal(now, host);
                }
                Due::EarlyEvents(id) => self.expire_early(id, now),
                Due::Recontact => self.recontact(now),
                Due::DownGrace { node, bump } => self.down_grace_over(node, bump, now, host),
                Due::LeaverGone { node, bump } => self.leaver_gone(node, bump, now, host),
                Due::UnreachableSuspect { id, incarnation } => {
                    self.unreachable_suspect_over(id, incarnation, now)
                }
                Due::LootUnacknowledged { thief, request } => {
                    self.loot_unacknowledged(thief, request, host)
                }
            }
        }
        self.finish(now, host);
    }

    /// Executors of this node wait for work: ask other nodes, if they may.
    pub fn handle_idle(&mut self, now: Instant, host: &mut H) {
        self.try_steal(now, host);
        self.finish(now, host);
    }

    /// An activity finished on this node: whoever handed it over hears so.
    pub fn handle_finished(&mut self, id: ActivityId, now: Instant, host: &mut H) {
        self.finished_here(id);
        self.finish(now, host);
    }

    /// An event the host could not deliver on this node: send it towards
    /// its activity.
    pub fn route(&mut self, event: H::Event, now: Instant, host: &mut H) {
        self.route_event(event, now, host);
        self.finish(now, host);
    }

    /// This node's executors offer something else now: tell the members.
    pub fn relabelled(&mut self, executors: Vec<ExecutorContext>, now: Instant, host: &mut H) {
        self.me.executors = executors;
        let members: Vec<NodeId> = self.roster.iter().map(|m| m.id.node).collect();
        for node in members {
            self.notify(node, Notice::Relabelled(self.me.executors.clone()));
        }
        // The driver's view of what the pool offers includes this node's
        // own executors; idle executors may want other work now (`finish`
        // asks for it).
        self.members_changed = true;
        self.finish(now, host);
    }

    /// Ask other nodes for no more work: this node is finishing.
    pub fn stop_stealing(&mut self) {
        self.stealing = false;
    }

    /// Leave the pool: no more stealing, no more exports, goodbyes to every
    /// member. The driver then sends what [`poll_output`](Self::poll_output)
    /// gives and stops.
    pub fn leave(&mut self, now: Instant, host: &mut H) {
        if self.leaving {
            return;
        }
        self.leaving = true;
        // Notices first: the last `Finished` ones must reach their
        // exporters, which wait for them before running the work again.
        self.finish(now, host);
        let members: Vec<P> = self.roster.iter().map(|m| m.id.peer.clone()).collect();
        for peer in members {
            self.send(peer, Message::Leaving);
        }
        if let Err(error) = self.swim.leave_cluster(&mut self.effects) {
            tracing::debug!(%error, "SWIM could not say goodbye");
        }
        self.drain_swim(now);
        self.finish(now, host);
    }

    /// Whether this node has stopped taking work (stealing stopped, or leaving).
    pub fn is_draining(&self) -> bool {
        !self.stealing || self.leaving
    }

    /// The next thing the driver must do or know: messages to send, then
    /// events, then the next timeout as the last output (see
    /// [`Output`]). Poll after every input until `None`.
    pub fn poll_output(&mut self) -> Option<Output<P, H::Body, H::Event>> {
        self.outbound.poll(self.timers.next_at())
    }

    /// When [`handle_timeout`](Self::handle_timeout) is due next, without
    /// polling: for a test cluster that looks at every node's timer.
    #[cfg(test)]
    pub(crate) fn next_timeout(&self) -> Option<Instant> {
        self.timers.next_at()
    }

    /// The live members this node can work with (up in SWIM, their hello
    /// heard, not leaving), itself not included.
    pub fn members(&self) -> impl Iterator<Item = (&MemberId<P>, &MemberInfo)> + '_ {
        self.roster.usable()
    }

    /// How to reach member `node`, if it is one.
    pub fn peer_of(&self, node: NodeId) -> Option<&P> {
        (self.roster.get(node))
            .filter(|member| member.up || member.leaving.is_some())
            .map(|member| &member.id.peer)
    }

    /// Members known, as SWIM sees them (up, hello heard or not).
    pub fn members_known(&self) -> usize {
        self.swim.num_members()
    }

    /// What this node counted.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The driver refused a connection or a frame.
    pub fn count_refused(&mut self) {
        self.stats.refused += 1;
    }

    /// Activities exported and not yet settled, activities imported whose
    /// exporter waits to hear of their end, and events waiting for their
    /// activity: for the driver's periodic log line.
    pub fn backlog(&self) -> (usize, usize, usize) {
        let early = self.early.values().map(|early| early.events.len()).sum();
        (
            self.custody.exported_count(),
            self.custody.imported_count(),
            early,
        )
    }
}

impl<P, H> StateMachine<P, H>
where
    P: Clone + Eq + Hash + fmt::Debug + Serialize + DeserializeOwned,
    H: Host,
{
    /// How long an exporter waits for a thief to acknowledge a loot before
    /// it queues the loot's work again: as long as SWIM takes to declare a
    /// silent member down, so that a thief that is merely slow is not
    /// taken for one that never got its loot any sooner than for a dead one.
    fn loot_ack_wait(&self) -> Duration {
        self.settings.failure_timeout + 2 * self.settings.probe_period
    }

    /// Queues `message` for `to`, with this node as its sender.
    fn send(&mut self, to: P, message: Message<H::Body, H::Event>) {
        let envelope = Envelope {
            from: self.swim.identity().clone(),
            message,
        };
        let token = SendToken::of(&envelope.message);
        self.outbound.push(Transmit {
            to,
            envelope,
            token,
        });
    }

    /// The usable members, or an offer, changed: victims are listed again
    /// and the driver hears of it.
    fn members_changed(&mut self) {
        self.roster.invalidate();
        self.members_changed = true;
    }

    /// The end of every input: SWIM's requests carried out, new members
    /// asked for work, notices sent (one message per destination), and
    /// the driver told what changed.
    fn finish(&mut self, now: Instant, host: &mut H) {
        self.drain_swim(now);
        if self.members_changed {
            self.members_changed = false;
            // A new member may have work for executors that wait.
            self.try_steal(now, host);
            let masters = (self.roster.usable())
                .filter(|(_, info)| info.master)
                .map(|(id, _)| id.node);
            self.masters.extend(masters);
            // One is enough until the driver reads the members again.
            let events = &mut self.outbound.events;
            if !events.contains(&NodeEvent::MembersChanged) {
                events.push_back(NodeEvent::MembersChanged);
            }
        }
        self.flush();
    }
}
