//! A node as one scheduler per executor, and stealing between them.
//!
//! A node's executors each own one single-executor [`Scheduler`], a
//! *shard*: the local driver keeps each behind its own lock, so an executor
//! takes its next call without contending with the others; the simulator
//! keeps them in a plain slice. How work moves between the shards of one
//! node is decided here, once, for both:
//!
//! - [`steal_for`]: an executor whose own shard has nothing steals one
//!   activity it can run from another shard, the next ones round from its
//!   own, oldest first;
//! - [`export`]: a thief on another node takes up to `max` activities that
//!   may leave the node, the thief's contexts in its priority order, each
//!   over all shards.
//!
//! The caller reaches the shards through [`Shards`], so that it decides how
//! a shard is entered (a lock and its bookkeeping, or a plain `&mut`).
//! A shard's scheduler has one executor, index 0, and a shard's index is
//! the executor's index in the node; a [`Place`] names a shard by its index.

use super::{ExecutorIndex, Place, Scheduler, Stolen, Work};
use crate::context::ExecutorContext;

/// A node's shards as the steal loops see them.
pub trait Shards<T> {
    /// How many shards, one per executor.
    fn count(&self) -> usize;

    /// Whether `shard` may hold work a thief could take. A hint read
    /// without entering the shard: a `false` skips it, a `true` costs one
    /// [`enter`](Shards::enter) that may find nothing.
    fn may_have_work(&self, shard: usize) -> bool;

    /// Runs `operate` on `shard`'s scheduler.
    fn enter<R>(&mut self, shard: usize, operate: impl FnOnce(&mut Scheduler<T>) -> R) -> R;
}

/// Steals one activity that `context` can run from another shard into
/// `thief`'s, and returns `thief`'s next call, if some shard had work.
///
/// Victims are tried in turn from the shard after the thief's, so thieves
/// spread over victims instead of all raiding shard 0. The victim keeps a
/// forwarding pointer to the thief's shard, and the activity's trail gets
/// the victim's, so that events still find it and the pointer is dropped
/// when it finishes.
pub fn steal_for<T, S: Shards<T> + ?Sized>(
    shards: &mut S,
    thief: ExecutorIndex,
    context: &ExecutorContext,
) -> Option<Work<T>> {
    let count = shards.count();
    for step in 1..count {
        let victim = (thief + step) % count;
        if !shards.may_have_work(victim) {
            continue;
        }
        let mut stolen = shards.enter(victim, |core| core.steal(context, 1, Place(thief as u64)));
        if stolen.is_empty() {
            continue;
        }
        for activity in &mut stolen {
            activity.trail.push(Place(victim as u64));
        }
        return shards.enter(thief, |core| {
            for activity in stolen {
                let id = activity.id;
                if let Err(error) = core.accept(0, activity) {
                    tracing::error!(%id, %error, "stolen activity refused");
                }
            }
            core.next_work(0)
        });
    }
    None
}

/// Takes up to `max` never-started activities that may leave the node and
/// that `thief`, an executor on another node, could run.
///
/// The thief's contexts go in its priority order, each over all shards:
/// one shard's work for a later context must not go while another shard
/// holds work for an earlier one (a thief's own site first). Shards are
/// searched from `first` on, so that successive exports start at different
/// shards. Each shard keeps a forwarding pointer to `to` (the place that
/// means "off this node"), and each activity's trail ends with its shard.
pub fn export<T, S: Shards<T> + ?Sized>(
    shards: &mut S,
    thief: &ExecutorContext,
    max: usize,
    first: usize,
    to: Place,
) -> Vec<Stolen<T>> {
    let mut loot = Vec::new();
    let count = shards.count();
    for offered in &thief.contexts {
        let single = ExecutorContext {
            contexts: vec![*offered],
            preference: thief.preference,
        };
        for step in 0..count {
            if loot.len() >= max {
                break;
            }
            let victim = (first + step) % count;
            if !shards.may_have_work(victim) {
                continue;
            }
            let wanted = max - loot.len();
            let mut stolen = shards.enter(victim, |core| core.steal_off_node(&single, wanted, to));
            for activity in &mut stolen {
                activity.trail.push(Place(victim as u64));
            }
            loot.extend(stolen);
        }
    }
    loot
}

/// Shards held in a slice, as a single-threaded driver (the simulator,
/// tests) keeps them.
impl<T> Shards<T> for [Scheduler<T>] {
    fn count(&self) -> usize {
        self.len()
    }

    fn may_have_work(&self, shard: usize) -> bool {
        self[shard].counts().queued > 0
    }

    fn enter<R>(&mut self, shard: usize, operate: impl FnOnce(&mut Scheduler<T>) -> R) -> R {
        operate(&mut self[shard])
    }
}
