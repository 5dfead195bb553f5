//! [`Node`]: the state machine itself.

use std::fmt;
use std::hash::Hash;
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::host::Host;
use super::message::{Envelope, MemberId, MemberInfo};
use super::steal::{Strategy, WideSteal};
use crate::context::ExecutorContext;
use crate::id::{ActivityId, NodeId};

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
    /// this time. Also how long a member that said it leaves is given for
    /// its last notices.
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

/// What a node counts; [`Node::stats`] returns them.
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
    /// The driver counts these ([`Node::count_refused`]).
    pub refused: u64,
}

/// A message for the driver to send.
#[derive(Debug)]
pub struct Transmit<P, B, E> {
    /// Whom to send it to.
    pub to: P,
    /// The message, with this node as its sender.
    pub envelope: Envelope<P, B, E>,
}

/// What the driver must know.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeEvent {
    /// The members, or what they offer, changed: read [`Node::members`].
    MembersChanged,
    /// An activity was given up: the nodes running it died too often, or
    /// it may not run again.
    Lost {
        /// The activity.
        id: ActivityId,
        /// Why.
        reason: String,
    },
}

/// One node's side of the node protocol. See the [module](super) docs.
///
/// `P` names peers for the driver (opaque to the node), `H` is the node's
/// own executors.
pub struct Node<P, H: Host> {
    _todo: std::marker::PhantomData<(P, H)>,
}

impl<P, H> Node<P, H>
where
    P: Clone + Eq + Hash + fmt::Debug + Serialize + DeserializeOwned,
    H: Host,
{
    /// A node that knows no member yet. `peer` is how others reach it;
    /// `info` is what it offers.
    pub fn new(settings: Settings, peer: P, info: MemberInfo, now: Instant) -> Self {
        let _ = (settings, peer, info, now);
        todo!("protocol::Node::new")
    }

    /// This node's identity as members know it.
    pub fn id(&self) -> &MemberId<P> {
        todo!()
    }

    /// Introduces this node to a peer it was told of (a bootstrap address):
    /// the peer's hello names it, and SWIM then spreads the membership.
    pub fn contact(&mut self, peer: P, now: Instant) {
        let _ = (peer, now);
        todo!()
    }

    /// A message from another node.
    pub fn handle_message(&mut self, envelope: Envelope<P, H::Body, H::Event>, now: Instant, host: &mut H) {
        let _ = (envelope, now, host);
        todo!()
    }

    /// A message this node asked to send to `to` could not be delivered;
    /// `steal` is [`Message::steal_request`](super::Message::steal_request)
    /// of it.
    pub fn handle_send_failed(&mut self, to: &P, steal: Option<u64>, now: Instant, host: &mut H) {
        let _ = (to, steal, now, host);
        todo!()
    }

    /// Time has come: the moment [`poll_timeout`](Self::poll_timeout) named,
    /// or later.
    pub fn handle_timeout(&mut self, now: Instant, host: &mut H) {
        let _ = (now, host);
        todo!()
    }

    /// Executors of this node wait for work: ask other nodes, if they may.
    pub fn handle_idle(&mut self, now: Instant, host: &mut H) {
        let _ = (now, host);
        todo!()
    }

    /// An activity finished on this node: whoever handed it over hears so.
    pub fn handle_finished(&mut self, id: ActivityId, now: Instant, host: &mut H) {
        let _ = (id, now, host);
        todo!()
    }

    /// An event the host could not deliver on this node: send it towards
    /// its activity.
    pub fn route(&mut self, event: H::Event, now: Instant, host: &mut H) {
        let _ = (event, now, host);
        todo!()
    }

    /// This node's executors offer something else now: tell the members.
    pub fn relabelled(&mut self, executors: Vec<ExecutorContext>, now: Instant, host: &mut H) {
        let _ = (executors, now, host);
        todo!()
    }

    /// Ask other nodes for no more work: this node is finishing.
    pub fn stop_stealing(&mut self) {
        todo!()
    }

    /// Leave the pool: no more stealing, no more exports, goodbyes to every
    /// member. The driver then sends what [`poll_transmit`](Self::poll_transmit)
    /// gives and stops.
    pub fn leave(&mut self, now: Instant, host: &mut H) {
        let _ = (now, host);
        todo!()
    }

    /// Whether this node has stopped taking work (stealing stopped, or leaving).
    pub fn is_draining(&self) -> bool {
        todo!()
    }

    /// The next message to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit<P, H::Body, H::Event>> {
        todo!()
    }

    /// When [`handle_timeout`](Self::handle_timeout) is due next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        todo!()
    }

    /// The next thing the driver must know.
    pub fn poll_event(&mut self) -> Option<NodeEvent> {
        todo!()
    }

    /// The live members this node can work with (up in SWIM, their hello
    /// heard, not leaving), itself not included.
    pub fn members(&self) -> impl Iterator<Item = (&MemberId<P>, &MemberInfo)> + '_ {
        std::iter::empty::<(&MemberId<P>, &MemberInfo)>()
    }

    /// How to reach member `node`, if it is one.
    pub fn peer_of(&self, node: NodeId) -> Option<&P> {
        let _ = node;
        todo!()
    }

    /// Members known, as SWIM sees them (up, hello heard or not).
    pub fn members_known(&self) -> usize {
        todo!()
    }

    /// What this node counted.
    pub fn stats(&self) -> &Stats {
        todo!()
    }

    /// The driver refused a connection or a frame.
    pub fn count_refused(&mut self) {
        todo!()
    }

    /// Activities exported and not yet settled, activities imported whose
    /// exporter waits to hear of their end, and events waiting for their
    /// activity: for the driver's periodic log line.
    pub fn backlog(&self) -> (usize, usize, usize) {
        todo!()
    }
}
