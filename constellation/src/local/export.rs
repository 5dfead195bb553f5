//! Export and import: never-started activities handed to other nodes and
//! taken in from them, for the network driver in this crate (`net`, through
//! its `Host`). Not part of the user's [`Pool`] API: an exported activity
//! counts as this pool's work until the driver hears how it ended, which
//! only the node protocol knows.

// Only the network driver calls these; without it they are unused.
#![cfg_attr(not(feature = "net"), allow(dead_code))]

use std::sync::atomic::Ordering;

use super::pool_state::Effects;
use super::{Boxed, Pool, OFF_NODE};
use crate::context::ExecutorContext;
use crate::core::shards;
use crate::core::{Place, Stolen, SubmitError};
use crate::id::ActivityId;

impl Pool {
    /// Takes up to `max` never-started activities that `thief` could run
    /// and that may leave this node, for an executor on another node.
    ///
    /// Each keeps a forwarding pointer ([`OFF_NODE`]) on the shard it left;
    /// its trail ends with that shard. Exported activities still count as
    /// this pool's work, so [`done`](Self::done) waits for them, until the
    /// driver calls [`exported_finished`](Self::exported_finished).
    pub(crate) fn export(&self, thief: &ExecutorContext, max: usize) -> Vec<Stolen<Boxed>> {
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
    pub(crate) fn exported_finished(&self, id: ActivityId, trail: &[Place]) {
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
    pub(crate) fn reclaim(
        &self,
        mut stolen: Stolen<Boxed>,
        trail: &[Place],
    ) -> Result<(), SubmitError> {
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
    pub(crate) fn import(&self, mut stolen: Stolen<Boxed>) -> Result<(), SubmitError> {
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
}
