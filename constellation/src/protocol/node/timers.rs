//! The node's one timer queue: everything that must happen later, in the
//! order it is due. [`StateMachine::poll_output`](super::StateMachine::poll_output)
//! reports its head.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::id::{ActivityId, NodeId};
use crate::protocol::message::MemberId;

/// Something the node must do at a given moment.
#[derive(Debug)]
pub(super) enum Due<P> {
    /// A timer SWIM asked for (probes, suspicion, periodic gossip).
    Swim(foca::Timer<MemberId<P>>),
    /// A steal pause is over: idle executors may ask again.
    StealRetry,
    /// Time to say hello again to the peers this node was told to
    /// contact, if it still knows no live member.
    Recontact,
    /// Events that came before their activity have waited long enough.
    EarlyEvents(ActivityId),
    /// A member SWIM declared down has had a moment for its `Leaving` to
    /// arrive (a leaver's goodbye to SWIM may overtake it): it is removed,
    /// and what it holds is queued again, unless it turned out to leave or
    /// came back under a newer identity.
    DownGrace {
        /// The member.
        node: NodeId,
        /// Its bump when SWIM declared it down.
        bump: u16,
    },
    /// A member suspected because a connection to it was refused or reset
    /// has had the failure timeout to refute it: unless it did, SWIM
    /// declares it down.
    UnreachableSuspect {
        /// The member as it was suspected.
        id: MemberId<P>,
        /// Its incarnation then; a refutation raises it.
        incarnation: u16,
    },
    /// A loot handed to `thief` has not been acknowledged within a silent
    /// member's detection time: what it carried and is still held there is
    /// queued again.
    LootUnacknowledged {
        /// The member the loot went to.
        thief: NodeId,
        /// The thief's steal request it answered.
        request: u64,
    },
    /// A member that said it leaves has had the failure timeout for its
    /// last notices: it is removed, and what it still holds is queued again.
    LeaverGone {
        /// The member.
        node: NodeId,
        /// Its bump when it said it leaves, so a later identity is spared.
        bump: u16,
    },
}

/// Timers by due moment; those due at the same moment keep the order they
/// were set in, as SWIM expects.
#[derive(Debug)]
pub(super) struct Timers<P> {
    queue: BTreeMap<(Instant, u64), Due<P>>,
    /// Breaks ties between timers due at the same moment.
    sequence: u64,
}

impl<P> Timers<P> {
    pub(super) fn new() -> Self {
        Timers {
            queue: BTreeMap::new(),
            sequence: 0,
        }
    }

    pub(super) fn set(&mut self, at: Instant, due: Due<P>) {
        self.sequence += 1;
        self.queue.insert((at, self.sequence), due);
    }

    /// When the next timer is due.
    pub(super) fn next_at(&self) -> Option<Instant> {
        self.queue.first_key_value().map(|((at, _), _)| *at)
    }

    /// The next timer due at `now` or earlier, taken off the queue.
    pub(super) fn pop_due(&mut self, now: Instant) -> Option<Due<P>> {
        let entry = self.queue.first_entry()?;
        (entry.key().0 <= now).then(|| entry.remove())
    }
}
