//! Per-label work queues with rank-aware selection.
//!
//! Entries are references into the scheduler's activity table. An activity
//! with an any-of list sits in the queue of every label it names; once one
//! queue hands it out, its other entries go stale and are dropped when they
//! are next met (lazy deletion), which keeps enqueueing O(1).

use std::collections::{BTreeSet, VecDeque};

use crate::context::{Context, Label, Preference, RankRange};

/// A reference to an activity-table slot, with the slot's generation so a
/// reused slot is not mistaken for the activity that queued the entry.
pub(crate) type EntryRef = u64;

/// Which end of the unranked queue to serve from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// The most recently queued: an executor works depth-first on its own work.
    Newest,
    /// The longest queued: thieves and the shared queue take the oldest,
    /// which in divide-and-conquer is the biggest piece.
    Oldest,
}

/// The activities queued under one label.
#[derive(Default, Debug)]
pub(crate) struct LabelQueue {
    unranked: VecDeque<EntryRef>,
    /// (rank, arrival order, entry): ordered by rank, then by arrival.
    ranked: BTreeSet<(i64, u64, EntryRef)>,
}

impl LabelQueue {
    pub(crate) fn push(&mut self, rank: Option<i64>, order: u64, entry: EntryRef) {
        match rank {
            None => self.unranked.push_back(entry),
            Some(rank) => {
                self.ranked.insert((rank, order, entry));
            }
        }
    }

    /// Entries held, stale ones included.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.unranked.len() + self.ranked.len()
    }

    /// Removes and returns the first entry, in `preference` order, that fits
    /// `offered` and for which `live` says it is still queued. Stale entries
    /// met on the way are dropped.
    pub(crate) fn take(
        &mut self,
        offered: &Context,
        preference: Preference,
        end: End,
        mut live: impl FnMut(EntryRef) -> bool,
    ) -> Option<EntryRef> {
        let allowed = offered.rank.unwrap_or(RankRange {
            lo: i64::MIN,
            hi: i64::MAX,
        });
        let ranked_first = match preference {
            Preference::Any => false,
            Preference::Biggest => {
                if let Some(found) = self.take_ranked(allowed, true, &mut live) {
                    return Some(found);
                }
                true
            }
            Preference::Smallest => {
                if let Some(found) = self.take_ranked(allowed, false, &mut live) {
                    return Some(found);
                }
                true
            }
            Preference::Range(lo, hi) => {
                let inside = RankRange {
                    lo: lo.max(allowed.lo),
                    hi: hi.min(allowed.hi),
                };
                if inside.lo <= inside.hi {
                    if let Some(found) = self.take_ranked(inside, false, &mut live) {
                        return Some(found);
                    }
                }
                if let Some(found) = self.take_ranked(allowed, false, &mut live) {
                    return Some(found);
                }
                true
            }
        };
        if let Some(found) = self.take_unranked(end, &mut live) {
            return Some(found);
        }
        if ranked_first {
            return None;
        }
        self.take_ranked(allowed, end == End::Newest, &mut live)
    }

    fn take_unranked(
        &mut self,
        end: End,
        live: &mut impl FnMut(EntryRef) -> bool,
    ) -> Option<EntryRef> {
        loop {
            let entry = match end {
                End::Newest => self.unranked.pop_back()?,
                End::Oldest => self.unranked.pop_front()?,
            };
            if live(entry) {
                return Some(entry);
            }
        }
    }

    fn take_ranked(
        &mut self,
        within: RankRange,
        biggest: bool,
        live: &mut impl FnMut(EntryRef) -> bool,
    ) -> Option<EntryRef> {
        let bounds = (within.lo, 0, 0)..=(within.hi, u64::MAX, u64::MAX);
        loop {
            let key = if biggest {
                self.ranked.range(bounds.clone()).next_back().copied()?
            } else {
                self.ranked.range(bounds.clone()).next().copied()?
            };
            self.ranked.remove(&key);
            if live(key.2) {
                return Some(key.2);
            }
        }
    }
}

/// Queues for every label, indexed densely by label number.
#[derive(Default, Debug)]
pub(crate) struct QueueSet {
    by_label: Vec<LabelQueue>,
}

impl QueueSet {
    pub(crate) fn push(&mut self, label: Label, rank: Option<i64>, order: u64, entry: EntryRef) {
        let index = label.index();
        if index >= self.by_label.len() {
            self.by_label.resize_with(index + 1, LabelQueue::default);
        }
        self.by_label[index].push(rank, order, entry);
    }

    pub(crate) fn get_mut(&mut self, label: Label) -> Option<&mut LabelQueue> {
        self.by_label.get_mut(label.index())
    }

    /// Every entry held, stale ones included, in no particular order.
    pub(crate) fn entries(&self) -> impl Iterator<Item = EntryRef> + '_ {
        self.by_label.iter().flat_map(|queue| {
            (queue.unranked.iter().copied()).chain(queue.ranked.iter().map(|key| key.2))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(
        queue: &mut LabelQueue,
        offered: &Context,
        pref: Preference,
        end: End,
    ) -> Vec<EntryRef> {
        std::iter::from_fn(|| queue.take(offered, pref, end, |_| true)).collect()
    }

    fn ranked_queue() -> LabelQueue {
        let mut queue = LabelQueue::default();
        for (order, rank) in [5, 1, 9, 3, 7].into_iter().enumerate() {
            queue.push(Some(rank), order as u64, rank as EntryRef);
        }
        queue
    }

    #[test]
    fn preferences_order_by_rank() {
        let any = Context::new("size");
        assert_eq!(
            drain(&mut ranked_queue(), &any, Preference::Biggest, End::Oldest),
            [9, 7, 5, 3, 1]
        );
        assert_eq!(
            drain(&mut ranked_queue(), &any, Preference::Smallest, End::Oldest),
            [1, 3, 5, 7, 9]
        );
        assert_eq!(
            drain(
                &mut ranked_queue(),
                &any,
                Preference::Range(3, 6),
                End::Oldest
            ),
            [3, 5, 1, 7, 9]
        );
    }

    #[test]
    fn offered_range_restricts_what_is_taken() {
        let small = Context::new("size").with_range(0, 4);
        assert_eq!(
            drain(
                &mut ranked_queue(),
                &small,
                Preference::Biggest,
                End::Oldest
            ),
            [3, 1]
        );
    }

    #[test]
    fn unranked_ends_give_lifo_and_fifo() {
        let mut queue = LabelQueue::default();
        for entry in 0..4 {
            queue.push(None, entry, entry);
        }
        let offered = Context::new("x");
        assert_eq!(
            queue.take(&offered, Preference::Any, End::Newest, |_| true),
            Some(3)
        );
        assert_eq!(
            queue.take(&offered, Preference::Any, End::Oldest, |_| true),
            Some(0)
        );
    }

    #[test]
    fn stale_entries_are_dropped_on_the_way() {
        let mut queue = LabelQueue::default();
        for entry in 0..4 {
            queue.push(None, entry, entry);
        }
        let taken = queue.take(&Context::new("x"), Preference::Any, End::Oldest, |e| e >= 2);
        assert_eq!(taken, Some(2));
        assert_eq!(queue.len(), 1);
    }
}
