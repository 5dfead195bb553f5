//! The members a node knows, and the victims an idle executor may ask.
//!
//! SWIM says who is up; a member's hello says what it offers; its
//! `Leaving` says it takes no more work. A member is *usable* (a steal
//! target, listed by [`StateMachine::members`](super::StateMachine::members)) only with all
//! three in its favour. The candidate list for victim choice is cached and
//! rebuilt only when membership or an offer changes, so that an idle
//! executor's steal costs the same with a thousand members as with two.

use std::time::Instant;

use rustc_hash::FxHashMap;

use crate::id::NodeId;
use crate::protocol::message::{MemberId, MemberInfo};
use crate::protocol::strategy::{Candidate, Victims};

/// What a node knows of one other node.
#[derive(Debug)]
pub(super) struct Member<P> {
    /// Its identity as SWIM knows it (the newest bump SWIM reported).
    pub(super) id: MemberId<P>,
    /// What it offers, once its hello came.
    pub(super) info: Option<MemberInfo>,
    /// Whether SWIM has it up (alive or suspect).
    pub(super) up: bool,
    /// When it said it leaves, if it did.
    pub(super) leaving: Option<Instant>,
    /// When this node last introduced it to SWIM, after a message from it
    /// that SWIM did not know of.
    pub(super) announced: Option<Instant>,
    /// Up for a whole probe period without its hello: the hello this node
    /// asked for, or the answer, was lost, and is asked for again.
    pub(super) hello_overdue: bool,
}

impl<P> Member<P> {
    /// Up in SWIM, its offer known, and not leaving.
    pub(super) fn usable(&self) -> bool {
        self.up && self.info.is_some() && self.leaving.is_none()
    }
}

/// The victims of one node, grouped the way victim choice needs them.
#[derive(Debug, Default)]
pub(super) struct VictimSet {
    site: Vec<Candidate<NodeId>>,
    away: Vec<Candidate<NodeId>>,
    master: Option<Candidate<NodeId>>,
}

impl VictimSet {
    /// How many members may be asked.
    pub(super) fn len(&self) -> usize {
        self.site.len() + self.away.len()
    }
}

impl Victims<NodeId> for VictimSet {
    fn on_site_count(&self) -> usize {
        self.site.len()
    }
    fn on_site(&self, index: usize) -> Candidate<NodeId> {
        self.site[index]
    }
    fn away_count(&self) -> usize {
        self.away.len()
    }
    fn away(&self, index: usize) -> Candidate<NodeId> {
        self.away[index]
    }
    fn master(&self) -> Option<Candidate<NodeId>> {
        self.master
    }
}

/// The members a node knows, by node id.
#[derive(Debug)]
pub(super) struct Roster<P> {
    members: FxHashMap<NodeId, Member<P>>,
    /// The victims, while no member changed since they were listed.
    victims: Option<VictimSet>,
}

impl<P: Clone + Eq> Roster<P> {
    pub(super) fn new() -> Self {
        Roster {
            members: FxHashMap::default(),
            victims: None,
        }
    }

    pub(super) fn get(&self, node: NodeId) -> Option<&Member<P>> {
        self.members.get(&node)
    }

    /// A member, to change. A change of whether it is usable, or of its
    /// offer, must be followed by [`invalidate`](Self::invalidate).
    pub(super) fn get_mut(&mut self, node: NodeId) -> Option<&mut Member<P>> {
        self.members.get_mut(&node)
    }

    /// The member `id` names, recorded (not up, offer unknown, so not
    /// usable: the victims stay as listed) if it was not.
    pub(super) fn entry(&mut self, id: &MemberId<P>) -> &mut Member<P> {
        self.members.entry(id.node).or_insert_with(|| Member {
            id: id.clone(),
            info: None,
            up: false,
            leaving: None,
            announced: None,
            hello_overdue: false,
        })
    }

    pub(super) fn remove(&mut self, node: NodeId) -> Option<Member<P>> {
        self.victims = None;
        self.members.remove(&node)
    }

    pub(super) fn is_up(&self, node: NodeId) -> bool {
        self.members.get(&node).is_some_and(|member| member.up)
    }

    /// Every member known, usable or not.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Member<P>> + '_ {
        self.members.values()
    }

    /// Every member known, to change.
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Member<P>> + '_ {
        self.members.values_mut()
    }

    /// The usable members with their offers.
    pub(super) fn usable(&self) -> impl Iterator<Item = (&MemberId<P>, &MemberInfo)> + '_ {
        (self.members.values())
            .filter(|member| member.usable())
            .filter_map(|member| Some((&member.id, member.info.as_ref()?)))
    }

    /// Lists the victims again if a member changed since they were listed:
    /// usable members of the pool `steal_from`, split by whether they
    /// share `site`. Read them with [`victims`](Self::victims).
    pub(super) fn refresh_victims(&mut self, steal_from: &str, site: Option<&String>) {
        if self.victims.is_some() {
            return;
        }
        let mut set = VictimSet::default();
        // By node id, so that a seeded node chooses the same victims
        // whatever order the members were met in.
        let mut usable: Vec<(&NodeId, &MemberInfo)> = (self.members.iter())
            .filter(|(_, member)| member.usable())
            .filter_map(|(node, member)| Some((node, member.info.as_ref()?)))
            .filter(|(_, info)| info.steal_pool == steal_from)
            .collect();
        // As an integer: the same order as the id's bytes (big-endian), but
        // a comparison is one instruction, not a memcmp call. Listing the
        // victims of 1,250 nodes while they meet sorted this way spent most
        // of the simulator's time in memcmp.
        usable.sort_unstable_by_key(|(node, _)| node.uuid().as_u128());
        for (node, info) in usable {
            let candidate = Candidate {
                peer: *node,
                same_site: site.is_some() && info.site.as_ref() == site,
                master: info.master,
            };
            if candidate.master && set.master.is_none() {
                set.master = Some(candidate);
            }
            match candidate.same_site {
                true => set.site.push(candidate),
                false => set.away.push(candidate),
            }
        }
        self.victims = Some(set);
    }

    /// The victims as last listed by [`refresh_victims`](Self::refresh_victims).
    pub(super) fn victims(&self) -> &VictimSet {
        static EMPTY: VictimSet = VictimSet {
            site: Vec::new(),
            away: Vec::new(),
            master: None,
        };
        self.victims.as_ref().unwrap_or(&EMPTY)
    }

    /// Forgets the victim list: a member became usable or unusable, or its
    /// offer changed.
    pub(super) fn invalidate(&mut self) {
        self.victims = None;
    }
}
