//! What a network driver uses: the [`Uplink`] a pool hands off-node
//! traffic to, and the [`Pool`] calls that take events in from other nodes
//! and say which executors want work. The calls that move activities
//! between nodes are crate-private, in `export.rs`.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::pool_state::Effects;
use super::Pool;
use crate::core::{DeliveryError, Place, Undeliverable};
use crate::event::Event;
use crate::id::ActivityId;

/// The place of anything off this node, for a pool with an [`Uplink`].
///
/// As a forwarding pointer it means "moved to another node: ask the uplink
/// where". In the trail of an activity it means "came from another node: tell
/// the uplink when it finishes", so the exporter can drop its copy.
pub(crate) const OFF_NODE: Place = Place(u64::MAX);

/// Where a pool hands over what must leave its process: the network driver.
///
/// A pool started with [`PoolBuilder::start_with_uplink`] is one node of a
/// networked pool. Executor threads call the uplink; it must not block.
///
/// [`PoolBuilder::start_with_uplink`]: super::PoolBuilder::start_with_uplink
pub trait Uplink: Send + Sync + 'static {
    /// Things for other nodes, in the order they happened. One call carries
    /// everything one executor call produced, so an activity's last events
    /// and the news that it finished travel together.
    fn send(&self, outgoing: Vec<Outgoing>);

    /// An executor found no work on this node and is going to sleep: time to
    /// ask other nodes for some ([`Pool::idle_executors`] says which).
    fn idle(&self);
}

/// Something a pool sends off its node through its [`Uplink`].
#[derive(Debug)]
pub enum Outgoing {
    /// An event for an activity on another node, or of unknown whereabouts.
    Event(Event),
    /// An activity that came from another node finished here.
    Finished(ActivityId),
}

/// What became of an event handed to [`Pool::deliver_from_network`].
#[derive(Debug)]
pub enum Arrival {
    /// It reached its activity, or waits in the activity's buffer.
    Delivered,
    /// Its activity left for another node; the uplink knows where.
    Away(Event),
    /// No activity with that id is known here: it may not have arrived yet,
    /// it finished here, or it lives elsewhere.
    Unknown(Event),
    /// Its activity was here and is gone (finished, or never existed).
    Gone(Box<Undeliverable>),
}

impl Pool {
    /// Delivers an event to an activity on this node, following forwarding
    /// pointers between executors. For network drivers, and for
    /// [`send`](Self::send).
    pub fn deliver_from_network(&self, mut event: Event) -> Arrival {
        let shared = &self.shared;
        let mut effects = Effects::default();
        let mut at = (shared.home_of(event.target)).or_else(|| shared.remote_home(event.target));
        // The event counts as outstanding work until it is delivered, and
        // pays for the activity it readies.
        shared.add_outstanding(1);
        let mut credit = 1;
        let arrival = loop {
            let Some(shard) = at else {
                break Arrival::Unknown(event);
            };
            match shared.session(shard, &mut credit, &mut effects, |core| core.deliver(event)) {
                Ok(()) => break Arrival::Delivered,
                Err(DeliveryError::Moved { event: moved, to }) if to == OFF_NODE => {
                    break Arrival::Away(moved)
                }
                Err(DeliveryError::Moved { event: moved, to }) => {
                    event = moved;
                    at = Some(to.0 as usize);
                }
                Err(DeliveryError::Undeliverable(undeliverable)) => {
                    break Arrival::Gone(undeliverable)
                }
            }
        };
        shared.perform(&mut effects, &mut credit);
        shared.settle(&mut credit);
        arrival
    }

    /// The executors of this pool that are asleep for want of work, for a
    /// network driver deciding what to steal from other nodes.
    pub fn idle_executors(&self) -> Vec<usize> {
        let handoffs = self.shared.handoffs();
        (0..handoffs.len())
            .filter(|&index| handoffs[index].idle.load(Ordering::SeqCst))
            .collect()
    }

    /// The longest activity call this node has run so far (zero on a pool
    /// that is not a network node, which does not time its calls).
    pub fn longest_call(&self) -> Duration {
        Duration::from_nanos(self.shared.longest_call_ns.load(Ordering::Relaxed))
    }
}
