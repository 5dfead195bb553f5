//! The local pool as the node protocol's [`Host`]: it packs activities for
//! the wire and unpacks them, and delivers events, when the
//! [`protocol::StateMachine`](crate::protocol::StateMachine) says so.

use std::sync::Arc;

use crate::activity::Activity;
use crate::context::ExecutorContext;
use crate::core::{Place, Stolen};
use crate::event::Event;
use crate::id::ActivityId;
use crate::local::{Arrival, Pool, OFF_NODE};
use crate::net::message::{PackedActivity, WireEvent};
use crate::protocol::{Delivery, Export, Host, Travelling};
use crate::wire::{decode_activity, encode_activity, WireError};

/// The local pool, seen from the node protocol.
pub(crate) struct PoolHost {
    pool: Arc<Pool>,
    /// How many bytes of activity state one steal reply may carry
    /// ([`NodeConfig::largest_activity`](crate::net::NodeConfig::largest_activity)).
    loot_budget: usize,
    /// Activities given up because they can never leave this node and no
    /// executor here can run them, with why, until the driver takes them.
    given_up: Vec<(ActivityId, String)>,
}

impl PoolHost {
    /// The host of `pool`, whose steal replies carry at most
    /// `loot_budget` bytes of activity state.
    pub(crate) fn new(pool: Arc<Pool>, loot_budget: usize) -> Self {
        PoolHost {
            pool,
            loot_budget,
            given_up: Vec::new(),
        }
    }

    /// The activities given up since the last call: they were created
    /// here, can never travel, and no executor here can run them.
    pub(crate) fn take_given_up(&mut self) -> Vec<(ActivityId, String)> {
        std::mem::take(&mut self.given_up)
    }

    /// An activity taken for export that can never travel (`why`): it
    /// stays here if an executor here can run it (or it came from
    /// another node, which waits to hear of its end), and is given up
    /// otherwise, so that it does not wait forever on a node that cannot
    /// run it.
    fn cannot_travel(&mut self, activity: Stolen<Box<dyn Activity>>, why: String) {
        let id = activity.id;
        let came_from_elsewhere = activity.trail.contains(&OFF_NODE);
        if came_from_elsewhere || self.pool.matcher().any_executor_can_run(&activity.contexts) {
            tracing::error!(%id, %why, "an activity cannot travel; it stays here");
            self.keep(activity, false);
            return;
        }
        tracing::error!(%id, %why, "an activity cannot travel and no executor here can run it; given up");
        self.pool.exported_finished(id, &activity.trail);
        self.given_up.push((id, why));
    }

    /// The pool itself, for what the protocol does not cover (status,
    /// relabelling).
    pub(crate) fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Queues an activity taken for export here again; `stealable: false`
    /// keeps it on this node from now on.
    fn keep(&self, mut activity: Stolen<Box<dyn Activity>>, stealable: bool) {
        let id = activity.id;
        let trail = std::mem::take(&mut activity.trail);
        activity.stealable &= stealable;
        if let Err(error) = self.pool.reclaim(activity, &trail) {
            tracing::error!(%id, %error, "could not keep an activity that did not leave");
        }
    }
}

impl Host for PoolHost {
    type Body = PackedActivity;
    type Event = WireEvent;

    fn executor_contexts(&self) -> Vec<ExecutorContext> {
        self.pool.executor_contexts().to_vec()
    }

    fn idle_contexts(&self) -> Vec<(ExecutorContext, usize)> {
        let idle = self.pool.idle_executors().into_iter();
        crate::protocol::count_contexts(idle.filter_map(|e| self.pool.executor_context(e)))
    }

    fn queued(&self) -> usize {
        self.pool.queued()
    }

    /// Packs what the pool hands over until the reply's byte budget is
    /// spent. An activity past the budget stays here for the next thief; one
    /// that alone exceeds it, or cannot be encoded, stays here for good.
    fn export(&mut self, thief: &ExecutorContext, max: usize) -> Vec<Export<PackedActivity>> {
        let mut loot = Vec::new();
        let mut bytes = 0usize;
        for activity in self.pool.export(thief, max) {
            let id = activity.id;
            let body = match pack(&activity) {
                Ok(body) if bytes + body.state.len() < self.loot_budget => body,
                Ok(_) if bytes > 0 => {
                    // Too big for this reply; the next one can carry it.
                    self.keep(activity, true);
                    continue;
                }
                Ok(body) => {
                    let why = format!(
                        "it is too large to travel to another node: {} bytes encoded, and a \
                         steal reply carries less than {} bytes",
                        body.state.len(),
                        self.loot_budget
                    );
                    self.cannot_travel(activity, why);
                    continue;
                }
                Err(error) => {
                    self.cannot_travel(activity, format!("it cannot be encoded: {error}"));
                    continue;
                }
            };
            bytes += body.state.len();
            loot.push(Export {
                id,
                body,
                contexts: activity.contexts,
                trail: activity.trail,
                restartable: activity.body.restartable(),
            });
        }
        loot
    }

    fn import(&mut self, activity: Travelling<PackedActivity>) -> Result<(), String> {
        let id = activity.id;
        let mut stolen = unpack(id, &activity.body, activity.contexts, true)
            .map_err(|error| error.to_string())?;
        // Who handed it over waits to hear that it finished.
        stolen.trail = vec![OFF_NODE];
        self.pool.import(stolen).map_err(|error| error.to_string())
    }

    fn reclaim(
        &mut self,
        export: &Export<PackedActivity>,
        _attempt: u32,
        stealable: bool,
    ) -> Result<(), String> {
        let stolen = unpack(export.id, &export.body, export.contexts.clone(), stealable)
            .map_err(|error| format!("its copy no longer decodes: {error}"))?;
        self.pool
            .reclaim(stolen, &export.trail)
            .map_err(|error| error.to_string())
    }

    fn settle(&mut self, id: ActivityId, trail: &[Place]) {
        let trail: Vec<Place> = (trail.iter())
            .copied()
            .filter(|&place| place != OFF_NODE)
            .collect();
        self.pool.exported_finished(id, &trail);
    }

    fn deliver(&mut self, event: WireEvent) -> Delivery<WireEvent> {
        match self.pool.deliver_from_network(Event::from(event)) {
            Arrival::Delivered => Delivery::Delivered,
            Arrival::Gone(undeliverable) => {
                // The node logs the loss and counts it; this says why.
                tracing::debug!(%undeliverable, "its target is gone");
                Delivery::Gone
            }
            Arrival::Away(event) => match WireEvent::try_from(&event) {
                Ok(event) => Delivery::Away(event),
                Err(error) => {
                    // It came from the network, so its payload is encoded
                    // already; this would be a bug.
                    tracing::warn!(source = %event.source, target = %event.target, %error, "event lost: its payload cannot be encoded");
                    Delivery::Gone
                }
            },
            Arrival::Unknown(event) => match WireEvent::try_from(&event) {
                Ok(event) => Delivery::Unknown(event),
                Err(error) => {
                    tracing::warn!(source = %event.source, target = %event.target, %error, "event lost: its payload cannot be encoded");
                    Delivery::Gone
                }
            },
        }
    }
}

/// An activity's state and buffered events, encoded for the wire.
fn pack(activity: &Stolen<Box<dyn Activity>>) -> Result<PackedActivity, String> {
    let state = encode_activity(&*activity.body).map_err(|error| error.to_string())?;
    let pending = (activity.pending.iter())
        .map(WireEvent::try_from)
        .collect::<Result<_, _>>()
        .map_err(|error| format!("an event waiting for it: {error}"))?;
    Ok(PackedActivity { state, pending })
}

/// An activity off the wire, ready for the pool, with an empty trail.
fn unpack(
    id: ActivityId,
    body: &PackedActivity,
    contexts: crate::context::ContextList,
    stealable: bool,
) -> Result<Stolen<Box<dyn Activity>>, WireError> {
    Ok(Stolen {
        id,
        body: decode_activity(&body.state)?,
        contexts,
        stealable,
        pending: body.pending.iter().cloned().map(Event::from).collect(),
        trail: Vec::new(),
    })
}
