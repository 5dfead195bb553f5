//! What the driver does beside the node protocol: it answers status
//! questions, relabels executors, asks other members on the node handle's
//! behalf, and publishes what the node handle reads ([`Shared`](crate::net::Shared)).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::{Driver, InFlight};
use crate::context::ExecutorContext;
use crate::core::MatchTable;
use crate::id::NodeId;
use crate::net::message::{Member, MemberStatus, RelabelRequest, Request, Response};
use crate::net::MemberView;

impl Driver {
    /// Gives the executors `request` names a new context, then tells every
    /// member what this node offers now. Says why if any executor kept
    /// its old context.
    pub(super) fn relabel(&mut self, request: RelabelRequest) -> Result<(), String> {
        let pool = self.host.pool();
        let count = pool.executor_contexts().len();
        let indices: Vec<usize> = match request.executors {
            None => (0..count).collect(),
            Some(list) => list.into_iter().map(|index| index as usize).collect(),
        };
        if let Some(&bad) = indices.iter().find(|&&index| index >= count) {
            return Err(format!(
                "there is no executor {bad}: this node has {count} (numbered from 0)"
            ));
        }
        let mut refused = Vec::new();
        let mut changed = false;
        for index in indices {
            match pool.relabel(index, request.context.clone()) {
                Ok(()) => changed = true,
                Err(error) => refused.push(error.to_string()),
            }
        }
        if changed {
            let executors = pool.executor_contexts().to_vec();
            self.node
                .relabelled(executors, Instant::now(), &mut self.host);
            // What the pool offers as a whole changed with this node's part.
            self.publish_members();
        }
        match refused.is_empty() {
            true => Ok(()),
            false => Err(refused.join("; ")),
        }
    }

    /// What this node says about itself to `constellation status`.
    pub(super) fn status(&self) -> MemberStatus {
        let pool = self.host.pool();
        let counts = pool.counts();
        let config = &self.config;
        let member = Member {
            node: pool.node(),
            peer: self.me.id.clone(),
            addrs: self.me.addrs.clone(),
            site: config.site.clone(),
            steal_pool: config.steal_pool.clone(),
            master: config.master,
            executors: pool.executor_contexts().to_vec(),
        };
        let now = Instant::now();
        MemberStatus {
            member,
            role: config.role.clone(),
            host: config.host.clone(),
            pid: std::process::id(),
            uptime_s: now.duration_since(self.started).as_secs_f64(),
            busy: pool.busy_executors(),
            queued: (pool.queued_by_label().into_iter())
                .map(|(label, count)| (label, count as u64))
                .collect(),
            running: counts.running as u64,
            waiting: counts.live.saturating_sub(counts.queued + counts.running) as u64,
            finished: counts.finished,
            walltime_left_s: (config.deadline)
                .map(|deadline| deadline.saturating_duration_since(now).as_secs_f64()),
            longest_call_s: pool.longest_call().as_secs_f64(),
            draining: self.node.is_draining(),
            members_known: self.node.members_known() as u32,
        }
    }

    /// Sends `request` to member `node` for the node handle; the answer,
    /// or why there is none, goes to `reply`.
    pub(super) fn ask(
        &mut self,
        node: NodeId,
        request: Request,
        reply: std::sync::mpsc::Sender<Result<Response, String>>,
    ) {
        let Some(to) = self.node.peer_of(node).cloned() else {
            let _ = reply.send(Err(format!("{node} is not a member of the pool")));
            return;
        };
        let Some(peer) = self.peers.parse(&to.id) else {
            let _ = reply.send(Err(format!("{node} has an unreadable peer id {}", to.id)));
            return;
        };
        let id = self.request(peer, &to, request);
        self.in_flight.insert(id, InFlight::Query(reply));
    }

    /// Publishes the members the node can work with, and what the pool
    /// offers with them, to the node handle; wakes whoever waits on them.
    pub(super) fn publish_members(&mut self) {
        let peers = &mut self.peers;
        let views: Vec<MemberView> = (self.node.members())
            .filter_map(|(id, info)| {
                let peer = peers.parse(&id.peer.id)?;
                Some(MemberView {
                    node: id.node,
                    peer,
                    site: info.site.clone(),
                    master: info.master,
                    executors: info.executors.clone(),
                })
            })
            .collect();
        let master_present = views.iter().any(|m| m.master);
        let mut offered: Vec<ExecutorContext> = self.host.pool().executor_contexts().to_vec();
        for member in &views {
            offered.extend(member.executors.iter().cloned());
        }
        *self.shared.offered.lock() = Arc::new(MatchTable::new(&offered));
        let mut members = self.shared.members.lock();
        *members = views;
        if master_present {
            self.shared.master_seen.store(true, Ordering::SeqCst);
        }
        self.shared.changed.notify_all();
    }

    /// Publishes the node's counters to the node handle.
    pub(super) fn publish_stats(&self) {
        let mut stats = self.node.stats().clone();
        stats.undeliverable += self.unencodable;
        *self.shared.stats.lock() = stats;
    }
}
