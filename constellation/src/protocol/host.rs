//! What a [`StateMachine`](super::StateMachine) asks of the node's own executors: the
//! local pool in production, a simulated node in the simulator.
//!
//! The node decides *what* moves between nodes and when; the host only
//! does it: takes activities out of its queues, takes them in, queues them
//! again, and delivers events. Calls are synchronous and must not block.

use std::fmt;

use crate::context::{ContextList, ExecutorContext};
use crate::core::Place;
use crate::id::ActivityId;

use super::message::Travelling;

/// An event as the protocol routes it: it only needs to know its ends.
pub trait Routed {
    /// The activity that sent it.
    fn source(&self) -> ActivityId;
    /// The activity it is for.
    fn target(&self) -> ActivityId;
}

/// An activity the host took out of its queues for a thief, packed.
#[derive(Debug, Clone, PartialEq)]
pub struct Export<B> {
    /// Its id.
    pub id: ActivityId,
    /// Its state, packed for the wire, with the events that reached it
    /// before it started.
    pub body: B,
    /// Where it may run.
    pub contexts: ContextList,
    /// Where pointers to it are kept on this node, so that they can be
    /// dropped when it finishes elsewhere ([`Host::settle`]) or followed
    /// again when it comes back ([`Host::reclaim`]).
    pub trail: Vec<Place>,
    /// Whether it may run again if the node it went to dies.
    pub restartable: bool,
}

/// What became of an event the host was asked to deliver.
#[derive(Debug)]
pub enum Delivery<E> {
    /// It reached its activity, or waits in the activity's buffer.
    Delivered,
    /// Its activity finished here; the event is dropped (and counted).
    Gone,
    /// Its activity left this node; the node routes it on.
    Away(E),
    /// No activity with that id is known here: it may not have arrived yet,
    /// it finished here, or it lives elsewhere.
    Unknown(E),
}

/// The node's own executors, as the protocol sees them.
pub trait Host {
    /// An activity packed for the wire (see [`Export::body`]).
    type Body: Clone + fmt::Debug;
    /// An event in transit.
    type Event: Routed + Clone + fmt::Debug;

    /// What each executor offers, in executor order.
    fn executor_contexts(&self) -> Vec<ExecutorContext>;
    /// The contexts of executors that wait for work, each with how many
    /// executors offer it.
    fn idle_contexts(&self) -> Vec<(ExecutorContext, usize)>;
    /// Never-started activities queued here that may leave the node.
    fn queued(&self) -> usize;
    /// Takes up to `max` queued activities a thief offering `thief` may run,
    /// packed. Work that cannot be packed, or would not fit a message, stays
    /// queued here; the host decides that, and logs it.
    fn export(&mut self, thief: &ExecutorContext, max: usize) -> Vec<Export<Self::Body>>;
    /// Takes in an activity another node handed over. An error (its type is
    /// unknown to this binary, say) sends it back to its exporter.
    fn import(&mut self, activity: Travelling<Self::Body>) -> Result<(), String>;
    /// Queues an exported activity here again, as it left, with `attempt`;
    /// `stealable: false` keeps it on this node from now on. An error (its
    /// copy no longer decodes) gives it up.
    fn reclaim(
        &mut self,
        export: &Export<Self::Body>,
        attempt: u32,
        stealable: bool,
    ) -> Result<(), String>;
    /// An exported activity ended elsewhere: drop the pointers to it.
    fn settle(&mut self, id: ActivityId, trail: &[Place]);
    /// Delivers an event that came from the network, or that this node
    /// routes.
    fn deliver(&mut self, event: Self::Event) -> Delivery<Self::Event>;
}

/// Each context in `contexts` with how many times it occurs there, in the
/// order of first occurrence: what [`Host::idle_contexts`] answers, given
/// the contexts of the idle executors.
pub(crate) fn count_contexts<C: std::borrow::Borrow<ExecutorContext>>(
    contexts: impl IntoIterator<Item = C>,
) -> Vec<(ExecutorContext, usize)> {
    let mut counted: Vec<(ExecutorContext, usize)> = Vec::new();
    for context in contexts {
        let context = context.borrow();
        match counted.iter_mut().find(|(c, _)| c == context) {
            Some((_, count)) => *count += 1,
            None => counted.push((context.clone(), 1)),
        }
    }
    counted
}
