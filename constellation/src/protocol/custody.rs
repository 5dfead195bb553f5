//! Custody of activities that move between nodes: who handed what to whom,
//! and what to do when a node dies.
//!
//! This is the bookkeeping behind "work is not lost when a node dies", kept
//! apart from any transport so that the network driver and the simulator
//! keep the same books:
//! - An exporter keeps a *copy* of each activity it hands to a thief until
//!   it hears that the activity finished (or was given up) there.
//! - A node that took an activity in remembers who handed it over, so news
//!   of its end runs back along the chain of custody (A → B → C: C tells B,
//!   B tells A).
//! - When a thief is declared dead, each exporter takes back what it still
//!   holds copies of ([`Custody::held_by`]) and queues it again with a
//!   higher attempt number, or gives it up ([`retry`]).
//!
//! One activity can be handed out more than once by the same node when it
//! comes back (A → B → A → C): each hand-over is a link of its chain of
//! custody and is settled on its own.
//!
//! The table is generic over how the driver names nodes (`N`) and over what
//! it keeps as a copy (`C`): encoded bytes for the network, a plain value
//! for the simulator.

use std::collections::hash_map::Entry;

use rustc_hash::FxHashMap;

use crate::id::ActivityId;

/// An activity handed to another node, kept until it finishes there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export<N, C> {
    /// The node it went to.
    pub thief: N,
    /// What the exporter keeps to queue it again if the thief dies.
    pub copy: C,
}

/// The links of one activity's chain of custody kept by one node, oldest
/// first. Almost always one: kept inline, so the common case costs no
/// allocation and one memory access less per lookup.
#[derive(Debug, Clone)]
enum Links<T> {
    One(T),
    Many(Vec<T>),
}

impl<T> Links<T> {
    fn push(&mut self, item: T) {
        match self {
            Links::Many(items) => items.push(item),
            Links::One(_) => {
                let Links::One(first) = std::mem::replace(self, Links::Many(Vec::new())) else {
                    unreachable!("matched One above");
                };
                *self = Links::Many(vec![first, item]);
            }
        }
    }

    fn iter(&self) -> std::slice::Iter<'_, T> {
        match self {
            Links::One(item) => std::slice::from_ref(item).iter(),
            Links::Many(items) => items.iter(),
        }
    }
}

/// Takes the item at `position` (or the last, for `None`) out of the links
/// in `map` under `id`, dropping the entry when none is left.
fn take_link<T>(
    map: &mut FxHashMap<ActivityId, Links<T>>,
    id: ActivityId,
    position: impl FnOnce(&Links<T>) -> Option<usize>,
) -> Option<T> {
    let links = map.get_mut(&id)?;
    let at = position(links)?;
    match links {
        Links::One(_) => match map.remove(&id) {
            Some(Links::One(item)) => Some(item),
            _ => None,
        },
        Links::Many(items) => {
            let item = items.remove(at);
            if items.is_empty() {
                map.remove(&id);
            }
            Some(item)
        }
    }
}

/// The custody books of one node. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct Custody<N, C> {
    /// Hand-overs not yet settled, per activity, oldest first.
    exports: FxHashMap<ActivityId, Links<Export<N, C>>>,
    /// Who handed each activity here, latest hand-over last.
    imports: FxHashMap<ActivityId, Links<N>>,
}

impl<N, C> Default for Custody<N, C> {
    fn default() -> Self {
        Custody {
            exports: FxHashMap::default(),
            imports: FxHashMap::default(),
        }
    }
}

impl<N: Copy + Eq, C> Custody<N, C> {
    /// Empty books.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `id` was handed to `thief`, keeping `copy`.
    pub fn exported(&mut self, id: ActivityId, thief: N, copy: C) {
        let export = Export { thief, copy };
        match self.exports.entry(id) {
            Entry::Occupied(mut links) => links.get_mut().push(export),
            Entry::Vacant(slot) => {
                slot.insert(Links::One(export));
            }
        }
    }

    /// Settles the hand-over of `id` to `thief`, returning what was kept,
    /// or `None` if there is no such hand-over (a late or repeated notice).
    pub fn take_export(&mut self, id: ActivityId, thief: N) -> Option<Export<N, C>> {
        take_link(&mut self.exports, id, |links| {
            links.iter().position(|export| export.thief == thief)
        })
    }

    /// Whether some hand-over of `id` is not settled yet.
    pub fn is_exported(&self, id: ActivityId) -> bool {
        self.exports.contains_key(&id)
    }

    /// How many activities have unsettled hand-overs.
    pub fn exported_count(&self) -> usize {
        self.exports.len()
    }

    /// Activities with an unsettled hand-over to `thief`, in id order (so
    /// that a driver that takes them back does so in a reproducible order).
    /// Costs a walk over all unsettled hand-overs: call it when a node
    /// dies, not per message.
    pub fn held_by(&self, thief: N) -> Vec<ActivityId> {
        let mut held: Vec<ActivityId> = (self.exports.iter())
            .filter(|(_, links)| links.iter().any(|export| export.thief == thief))
            .map(|(id, _)| *id)
            .collect();
        held.sort_unstable();
        held
    }

    /// Records that `exporter` handed `id` here; it waits to hear of its end.
    pub fn imported(&mut self, id: ActivityId, exporter: N) {
        match self.imports.entry(id) {
            Entry::Occupied(mut links) => links.get_mut().push(exporter),
            Entry::Vacant(slot) => {
                slot.insert(Links::One(exporter));
            }
        }
    }

    /// The node that handed `id` here last, forgotten now: the one to tell
    /// that it finished or was given up. `None` if it did not come from
    /// another node.
    pub fn pop_import(&mut self, id: ActivityId) -> Option<N> {
        take_link(&mut self.imports, id, |links| {
            links.iter().len().checked_sub(1)
        })
    }

    /// How many activities that came from other nodes are still here.
    pub fn imported_count(&self) -> usize {
        self.imports.len()
    }
}

/// Why an activity whose node died is not queued again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GiveUp {
    /// The activity said it may not run twice.
    #[error("the node running it died and it may not be restarted")]
    NotRestartable,
    /// It was handed out and lost too often.
    #[error("the nodes running it died {attempt} times (the limit is {limit})")]
    TooManyAttempts {
        /// Attempts made.
        attempt: u32,
        /// The limit.
        limit: u32,
    },
}

/// The attempt number for queueing an activity again after the node
/// running attempt `previous` (0 for the first) died, or why it is given
/// up: execution is at-least-once, up to `max_attempts` hand-outs.
pub fn retry(previous: u32, restartable: bool, max_attempts: u32) -> Result<u32, GiveUp> {
    let attempt = previous.saturating_add(1);
    if !restartable {
        Err(GiveUp::NotRestartable)
    } else if attempt >= max_attempts {
        Err(GiveUp::TooManyAttempts {
            attempt,
            limit: max_attempts,
        })
    } else {
        Ok(attempt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::{IdIssuer, NodeId};

    #[test]
    fn a_chain_of_custody_settles_link_by_link() {
        let mut ids = IdIssuer::new(NodeId::from_u128(1), 0);
        let id = ids.issue();
        // A hands it to B, gets it back, hands it to C.
        let mut a: Custody<char, &str> = Custody::new();
        a.exported(id, 'B', "first");
        a.exported(id, 'C', "second");
        assert_eq!(a.held_by('B'), vec![id]);
        assert!(a.take_export(id, 'D').is_none(), "no hand-over to D");
        assert_eq!(a.take_export(id, 'B').map(|e| e.copy), Some("first"));
        assert!(a.is_exported(id), "the hand-over to C is still open");
        assert_eq!(a.take_export(id, 'C').map(|e| e.copy), Some("second"));
        assert!(!a.is_exported(id));
        assert!(
            a.take_export(id, 'C').is_none(),
            "a repeated notice is ignored"
        );

        let mut b: Custody<char, ()> = Custody::new();
        b.imported(id, 'A');
        b.imported(id, 'C');
        assert_eq!(b.pop_import(id), Some('C'), "latest hand-over first");
        assert_eq!(b.pop_import(id), Some('A'));
        assert_eq!(b.pop_import(id), None);
        assert_eq!(b.imported_count(), 0);
    }

    #[test]
    fn held_by_lists_only_that_thiefs_activities_in_order() {
        let mut ids = IdIssuer::new(NodeId::from_u128(1), 0);
        let mut books: Custody<u8, ()> = Custody::new();
        let all: Vec<ActivityId> = (0..10).map(|_| ids.issue()).collect();
        for (i, id) in all.iter().enumerate().rev() {
            books.exported(*id, (i % 2) as u8, ());
        }
        let odd: Vec<ActivityId> = all.iter().copied().skip(1).step_by(2).collect();
        assert_eq!(books.held_by(1), odd);
        assert_eq!(books.exported_count(), 10);
    }

    #[test]
    fn retries_count_up_to_the_limit() {
        assert_eq!(retry(0, true, 3), Ok(1));
        assert_eq!(retry(1, true, 3), Ok(2));
        assert_eq!(
            retry(2, true, 3),
            Err(GiveUp::TooManyAttempts {
                attempt: 3,
                limit: 3
            })
        );
        assert_eq!(retry(0, false, 3), Err(GiveUp::NotRestartable));
        assert!(retry(2, true, 3)
            .unwrap_err()
            .to_string()
            .contains("died 3 times"));
    }
}
