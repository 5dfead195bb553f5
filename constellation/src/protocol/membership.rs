//! Membership by SWIM, through [`foca`]: who is up, suspected or down, on
//! the node's clock.
//!
//! foca does the protocol: it probes members at random, asks others to
//! probe those that do not answer, suspects the silent ones, and declares
//! them down when they do not refute the suspicion in time. This module
//! only fits it to the node: the identity a member carries
//! ([`MemberId`]), the configuration derived from [`Settings`], and the
//! random numbers it draws.
//!
//! A node that the others declared down while it was alive (starved of
//! CPU, say) learns so from the next message it hears and rejoins at once
//! under a renewed identity (`bump + 1`): it is never excluded for good.

use std::num::{NonZeroU8, NonZeroUsize};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::RngCore;

use super::message::MemberId;
use super::node::Settings;
use crate::id::NodeId;

/// The SWIM state machine as the node uses it.
pub(crate) type Swim<P> =
    foca::Foca<MemberId<P>, foca::PostcardCodec, SwimRng, foca::NoCustomBroadcast>;

/// What foca asks of its caller, gathered during one call.
pub(crate) type SwimEffects<P> = foca::AccumulatingRuntime<MemberId<P>>;

impl<P> foca::Identity for MemberId<P>
where
    P: Clone + Eq + std::fmt::Debug,
{
    /// A node is one member whatever its bump: foca keeps one entry per
    /// node and lets the newer identity replace the older.
    type Addr = NodeId;

    /// The same node one bump later. foca calls this when it learns the
    /// others declared it down; the renewed identity wins over the old one
    /// and so rejoins at once.
    fn renew(&self) -> Option<Self> {
        Some(MemberId {
            node: self.node,
            peer: self.peer.clone(),
            bump: self.bump.wrapping_add(1),
        })
    }

    fn addr(&self) -> NodeId {
        self.node
    }

    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        self.bump > adversary.bump
    }
}

/// How many times one membership update rides on SWIM messages:
/// memberlist's rule (4 × log10(n + 1)) for a pool of about a thousand
/// nodes. A smaller pool only pays a few bytes per message for it.
const TRANSMISSIONS: u8 = 12;

/// The largest SWIM packet. Packets travel inside the node protocol's
/// messages over streams, not as datagrams, so there is no MTU to respect;
/// a large packet lets a newcomer's first feed name hundreds of members.
const MAX_PACKET: usize = 64 * 1024;

/// foca's configuration, derived from the node's settings.
///
/// - Probing follows `probe_period`; a probe unanswered for a third of it
///   goes to three other members to try (the indirect cycle).
/// - A suspect is declared down after `failure_timeout`: with the probe
///   that found it silent, a dead node is declared within about
///   `failure_timeout + 2 × probe_period`.
/// - Members declared down are told so (`notify_down_members`), so a live
///   node that was starved renews its identity and rejoins.
/// - Periodic gossip spreads updates faster than probes alone; periodic
///   announces to live members fill gaps in a member list (every 15 probe
///   periods), and announces to members believed down heal a partition
///   within about 10 probe periods of its end: the members on each side
///   learn that the other side counts them down, and rejoin under renewed
///   identities.
pub(crate) fn swim_config(settings: &Settings) -> foca::Config {
    let period = settings.probe_period.max(Duration::from_millis(3));
    let periodic = |frequency: Duration, members: usize| {
        Some(foca::PeriodicParams {
            frequency,
            num_members: NonZeroUsize::new(members).expect("a positive constant"),
        })
    };
    foca::Config {
        probe_period: period,
        probe_rtt: period / 3,
        num_indirect_probes: NonZeroUsize::new(3).expect("a positive constant"),
        max_transmissions: NonZeroU8::new(TRANSMISSIONS).expect("a positive constant"),
        suspect_to_down_after: settings.failure_timeout.max(Duration::from_millis(1)),
        // Down identities are remembered for a day: a node comes back under
        // a renewed identity, never under the one declared down.
        remove_down_after: Some(Duration::from_secs(24 * 60 * 60)),
        max_packet_size: NonZeroUsize::new(MAX_PACKET).expect("a positive constant"),
        notify_down_members: true,
        // Each announce is answered with a feed of up to every member: rare
        // enough that a pool of a thousand does not spend its time on them.
        periodic_announce: periodic(period * 15, 1),
        periodic_announce_to_down_members: periodic(period * 10, 2),
        periodic_gossip: periodic(period / 5, 3),
    }
}

/// foca's random numbers: a seeded generator, so that a simulation
/// replays exactly. foca draws through rand_core 0.10; the crate's own
/// generators are rand 0.8, so this adapts one.
pub(crate) struct SwimRng(pub(crate) StdRng);

impl rand_core::TryRng for SwimRng {
    type Error = std::convert::Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        Ok(self.0.next_u32())
    }

    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        Ok(self.0.next_u64())
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
        self.0.fill_bytes(dst);
        Ok(())
    }
}
