//! Moving never-started activities between schedulers: [`Scheduler::steal`](crate::core::Scheduler::steal)
//! takes them out (leaving a forwarding pointer), [`Scheduler::accept`](crate::core::Scheduler::accept) takes
//! them in, and the forwarding pointers are kept until the activity finishes.

use super::{QueueOwner, Record, Scheduler, State};
use crate::context::ExecutorContext;
use crate::core::queue::End;
use crate::core::{ExecutorIndex, Place, Stolen, SubmitError};
use crate::id::ActivityId;

impl<T> Scheduler<T> {
    /// Takes up to `max` queued, never-started activities that an executor
    /// offering `thief` could run, oldest first, in the thief's priority and
    /// preference order. The core keeps a forwarding pointer to `to` for each.
    ///
    /// This moves work within a node: activities pinned to an executor never
    /// move, but unpinned ones move even if they may not leave the node.
    pub fn steal(&mut self, thief: &ExecutorContext, max: usize, to: Place) -> Vec<Stolen<T>> {
        self.steal_where(thief, max, to, false)
    }

    /// [`steal`](Self::steal) for a thief on another node: activities that
    /// may not leave their node ([`Submission::stealable`](crate::core::Submission::stealable) is `false`) stay.
    pub fn steal_off_node(
        &mut self,
        thief: &ExecutorContext,
        max: usize,
        to: Place,
    ) -> Vec<Stolen<T>> {
        self.steal_where(thief, max, to, true)
    }

    fn steal_where(
        &mut self,
        thief: &ExecutorContext,
        max: usize,
        to: Place,
        off_node: bool,
    ) -> Vec<Stolen<T>> {
        let mut stolen = Vec::new();
        // Taken from a queue but bound to this node: queued again afterwards,
        // so the search does not find them twice.
        let mut staying = Vec::new();
        for offered in &thief.contexts {
            // Off the node only stealable work may go; once none is left,
            // the rest of the search would only shuffle node-bound work.
            while stolen.len() < max && (!off_node || self.stealable_queued > 0) {
                let mut found = self
                    .take_from(QueueOwner::Shared, offered, thief.preference, End::Oldest)
                    .map(|slot| (slot, QueueOwner::Shared));
                for victim in 0..self.executors.len() {
                    if found.is_some() {
                        break;
                    }
                    found = self
                        .take_from(
                            QueueOwner::Own(victim),
                            offered,
                            thief.preference,
                            End::Oldest,
                        )
                        .map(|slot| (slot, QueueOwner::Own(victim)));
                }
                let Some((slot, owner)) = found else { break };
                let record = self.slots[slot as usize]
                    .record
                    .as_ref()
                    .expect("a taken slot is occupied");
                if off_node && !record.stealable {
                    staying.push((slot, owner));
                    continue;
                }
                stolen.push(self.remove_for_theft(slot, to));
            }
        }
        for (slot, owner) in staying {
            self.requeue(slot, owner);
        }
        self.counts.stolen += stolen.len() as u64;
        self.check_quiescence();
        stolen
    }

    fn remove_for_theft(&mut self, slot: u32, to: Place) -> Stolen<T> {
        let entry = &mut self.slots[slot as usize];
        let record = entry.record.take().expect("queued slot is occupied");
        entry.generation = entry.generation.wrapping_add(1);
        self.free_slots.push(slot);
        self.index.remove(&record.id);
        self.forwarded.insert(record.id, to);
        self.counts.live -= 1;
        self.counts.queued -= 1;
        self.stealable_queued -= usize::from(record.stealable);
        Stolen {
            id: record.id,
            body: record.body.expect("a queued activity holds its body"),
            contexts: record.contexts,
            stealable: record.stealable,
            pending: record.pending,
            trail: record.trail.map(|trail| *trail).unwrap_or_default(),
        }
    }

    /// Takes in an activity stolen from another scheduler. It joins
    /// `executor`'s own queue, where that executor finds it first.
    pub fn accept(
        &mut self,
        executor: ExecutorIndex,
        stolen: Stolen<T>,
    ) -> Result<(), SubmitError> {
        if self.index.contains_key(&stolen.id) {
            return Err(SubmitError::DuplicateId(stolen.id));
        }
        // It may come back to a place it once left.
        self.forwarded.remove(&stolen.id);
        let id = stolen.id;
        let contexts = stolen.contexts.clone();
        self.insert_queued(
            Record {
                id: stolen.id,
                body: Some(stolen.body),
                contexts: stolen.contexts,
                state: State::Queued,
                stealable: stolen.stealable,
                pending: stolen.pending,
                trail: (!stolen.trail.is_empty()).then(|| Box::new(stolen.trail)),
            },
            QueueOwner::Own(executor),
        );
        // An idle executor here (it asked for work and got none) gets it now.
        let slot = self.index[&id];
        self.assign_to_idle(slot, &contexts, None);
        Ok(())
    }

    /// Drops the forwarding pointer for a stolen activity that finished.
    pub fn forget_forward(&mut self, id: ActivityId) {
        self.forwarded.remove(&id);
    }

    /// Points the forwarding pointer for `id`, if this scheduler holds one,
    /// at `to`: the activity was moved on by someone who knows better.
    pub fn redirect_forward(&mut self, id: ActivityId, to: Place) {
        if let Some(place) = self.forwarded.get_mut(&id) {
            *place = to;
        }
    }

    /// Forwarding pointers held, one per stolen activity still alive.
    pub fn forwarding_pointers(&self) -> usize {
        self.forwarded.len()
    }
}
