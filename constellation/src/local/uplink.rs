//! What a network driver uses: the [`Uplink`] a pool hands off-node
//! traffic to, and the [`Pool`] calls that take work and events in from
//! other nodes and hand work out to them.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::pool_state::Effects;
use super::{Boxed, Pool};
use crate::context::ExecutorContext;
use crate::core::shards;
use crate::core::{DeliveryError, Place, Stolen, SubmitError, Undeliverable};
use crate::event::Event;
use crate::id::ActivityId;

/// The place of anything off this node, for a pool with an [`Uplink`].
///
/// As a forwarding pointer it means "moved to another node: ask the uplink
/// where". In the trail of an activity it means "came from another node: tell
/// the uplink when it finishes", so the exporter can drop its copy.
pub const OFF_NODE: Place = Place(u64::MAX);

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

    /// Takes up to `max` never-started activities that `thief` could run
    /// and that may leave this node, for an executor on another node.
    ///
    /// Each keeps a forwarding pointer ([`OFF_NODE`]) on the shard it left;
    /// its trail ends with that shard. Exported activities still count as
    /// this pool's work, so [`done`](Self::done) waits for them, until the
    /// driver calls [`exported_finished`](Self::exported_finished).
    pub fn export(&self, thief: &ExecutorContext, max: usize) -> Vec<Stolen<Boxed>> {
        let shared = &self.shared;
        let mut effects = Effects::default();
        let mut credit = 0;
        let start = shared.round_robin.fetch_add(1, Ordering::Relaxed);
        let mut sessions = shared.sessions(&mut credit, &mut effects);
        let loot = shards::export(&mut sessions, thief, max, start, OFF_NODE);
        credit -= loot.len() as i64;
        shared.perform(&mut effects, &mut credit);
        shared.settle(&mut credit);
        loot
    }

    /// An activity [`export`](Self::export)ed from here finished elsewhere,
    /// or is given up: drops the forwarding pointers in its `trail` (telling
    /// the uplink, if the trail says it came from another node) and stops
    /// counting it as outstanding.
    pub fn exported_finished(&self, id: ActivityId, trail: &[Place]) {
        let shared = &self.shared;
        let mut effects = Effects::default();
        let mut credit = 1;
        shared.forget_forwards(id, trail, &mut credit, &mut effects);
        shared.perform(&mut effects, &mut credit);
        shared.settle(&mut credit);
    }

    /// Takes back an activity [`export`](Self::export)ed from here that did
    /// not stay away (its thief died or returned it, or it could not be
    /// sent): queues it again, drops the pointers its old `trail` (as
    /// `export` returned it) left behind, and stops counting the export.
    pub fn reclaim(&self, mut stolen: Stolen<Boxed>, trail: &[Place]) -> Result<(), SubmitError> {
        let shared = &self.shared;
        let id = stolen.id;
        let home = shared.home_of(id).map(|home| Place(home as u64));
        stolen.trail = if trail.contains(&OFF_NODE) {
            vec![OFF_NODE]
        } else {
            Vec::new()
        };
        // Queued first, so the count cannot touch zero in between.
        let imported = self.import(stolen);
        let mut effects = Effects::default();
        let mut credit = 1;
        for &place in trail {
            if place != OFF_NODE && Some(place) != home {
                shared.session(place.0 as usize, &mut credit, &mut effects, |core| {
                    core.forget_forward(id)
                });
            }
        }
        if imported.is_err() {
            if let Some(home) = home {
                shared.session(home.0 as usize, &mut credit, &mut effects, |core| {
                    core.forget_forward(id)
                });
            }
        }
        shared.perform(&mut effects, &mut credit);
        shared.settle(&mut credit);
        imported
    }

    /// Takes in an activity from another node, or one queued again after
    /// the node it went to died. It goes to an executor that can run it,
    /// an idle one if there is one; a networked pool keeps work none of its
    /// executors can run until another node steals it. Its `trail` should
    /// hold [`OFF_NODE`] if another node waits to hear that it finished.
    pub fn import(&self, mut stolen: Stolen<Boxed>) -> Result<(), SubmitError> {
        let shared = &self.shared;
        let handoffs = shared.handoffs();
        let contexts = stolen.contexts.clone();
        let matcher = shared.matcher.load();
        let target = (matcher.executors_for(&contexts))
            .find(|&e| handoffs[e].idle.load(Ordering::Relaxed))
            .or_else(|| shared.next_in_turn(&contexts))
            .or_else(|| shared.uplink.is_some().then(|| shared.holding_shard()));
        let Some(target) = target else {
            return Err(matcher
                .check(stolen.id, &contexts, None)
                .expect_err("no executor matched, so the check refuses"));
        };
        let id = stolen.id;
        match shared.home_of(id) {
            // Back home after its thief died: the home shard's pointer,
            // which said "off the node", must lead here instead.
            Some(home) if home != target => {
                stolen.trail.push(Place(home as u64));
                let mut effects = Effects::default();
                let mut credit = 0;
                shared.session(home, &mut credit, &mut effects, |core| {
                    core.redirect_forward(id, Place(target as u64))
                });
                shared.perform(&mut effects, &mut credit);
                shared.settle(&mut credit);
            }
            Some(_) => {}
            None => {
                shared.remote_homes.lock().insert(id, target);
            }
        }
        let mut effects = Effects::default();
        let mut credit = 0;
        let accepted = shared.session(target, &mut credit, &mut effects, |core| {
            core.accept(0, stolen)
        });
        if accepted.is_err() && shared.home_of(id).is_none() {
            shared.remote_homes.lock().remove(&id);
        }
        shared.perform(&mut effects, &mut credit);
        shared.settle(&mut credit);
        shared.wake_idle_for(&contexts, target);
        accepted
    }

    /// The longest activity call this node has run so far (zero on a pool
    /// that is not a network node, which does not time its calls).
    pub fn longest_call(&self) -> Duration {
        Duration::from_nanos(self.shared.longest_call_ns.load(Ordering::Relaxed))
    }
}
