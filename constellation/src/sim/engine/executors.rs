//! Calls on simulated executors: how long each takes (its work scaled by
//! the executor, plus fetching its input), the stages of children an
//! activity submits and waits for, and what happens when one finishes.
//!
//! This is the simulated application; it talks to the core directly, as
//! executor threads do, and to the protocol only through the inputs a
//! production node gives it: an executor ran dry ([`StateMachine::handle_idle`]),
//! an activity finished ([`StateMachine::handle_finished`]), an event must leave
//! the node ([`StateMachine::route`]).
//!
//! [`StateMachine::handle_idle`]: crate::protocol::StateMachine::handle_idle
//! [`StateMachine::handle_finished`]: crate::protocol::StateMachine::handle_finished
//! [`StateMachine::route`]: crate::protocol::StateMachine::route

use super::host::{Body, Children, SimEvent};
use super::records::Started;
use super::{root_index, Engine, Ev, Time};
use crate::core::{Call, Outcome, Ticket, Work};
use crate::id::ActivityId;
use crate::protocol::{Delivery, Host};
use crate::sim::model::nanos;
use crate::sim::workload::Placement;
use crate::sim::SimError;

/// A call in progress on an executor.
pub(super) struct Running {
    pub(super) ticket: Ticket,
    body: Body,
    /// `None` for `initialize`, the event's source for `process`.
    event_from: Option<ActivityId>,
    pub(super) start: Time,
}

impl Engine<'_> {
    /// Queues the workload's roots on the master, from outside the pool.
    pub(super) fn submit_roots(&mut self, node: u32) -> Result<(), SimError> {
        self.roots_submitted = true;
        let workload = self.workload;
        let host = &mut self.nodes[node as usize].host;
        for (number, &spec) in workload.roots.iter().enumerate() {
            let activity = &workload.activities[spec as usize];
            let body = Body {
                spec,
                attempt: 0,
                parent: None,
                children: None,
            };
            let stealable = activity.placement == Placement::Anywhere;
            host.submit_outside(number as u64, body, activity.contexts.clone(), stealable)?;
        }
        Ok(())
    }

    /// Gives `executor` its next call, or marks it idle and lets the
    /// protocol ask other nodes.
    pub(super) fn ask_for_work(&mut self, node: u32, executor: usize) {
        match self.nodes[node as usize].host.next_work(executor) {
            Some(work) => {
                self.start(node, executor, work);
                self.start_runs(node);
            }
            None => self.input(node, |protocol, now, host| protocol.handle_idle(now, host)),
        }
    }

    /// Starts the calls the core handed to idle executors.
    pub(super) fn start_runs(&mut self, node: u32) {
        while let Some((executor, work)) = self.nodes[node as usize].host.next_run() {
            self.start(node, executor, work);
        }
    }

    fn start(&mut self, node: u32, executor: usize, work: Work<Body>) {
        let now = self.now;
        let workload = self.workload;
        let spec_index = work.body.spec;
        let spec = &workload.activities[spec_index as usize];
        let kind = &workload.kinds[spec.kind as usize];
        let (duration, event_from) = match work.call {
            Call::Initialize => {
                let transfer = match spec.input {
                    Some(data) => self.fetch(node, data),
                    None => 0,
                };
                let exec = &self.nodes[node as usize].executors[executor];
                let seconds = kind.seconds_on(
                    spec.seconds,
                    &self.contexts[exec.context as usize],
                    exec.cores,
                    exec.speed,
                );
                let started = Started {
                    spec: spec_index,
                    attempt: work.body.attempt,
                    executor: executor as u32,
                    start: now,
                    transfer,
                    busy: 0,
                };
                (self.nodes[node as usize].started).insert(work.ticket.id(), started);
                (transfer.saturating_add(nanos(seconds)), None)
            }
            Call::Process(event) => (self.event_ns[spec.kind as usize], Some(event.source)),
        };
        let exec = &mut self.nodes[node as usize].executors[executor];
        debug_assert!(exec.call.is_none(), "an executor runs one call at a time");
        exec.call = Some(Running {
            ticket: work.ticket,
            body: work.body,
            event_from,
            start: now,
        });
        self.running += 1;
        self.last_progress = now;
        self.schedule(
            now.saturating_add(duration),
            Ev::CallDone {
                node,
                executor: executor as u32,
            },
        );
    }

    pub(super) fn call_done(&mut self, node: u32, executor: u32) -> Result<(), SimError> {
        let now = self.now;
        let executor = executor as usize;
        let state = &mut self.nodes[node as usize];
        if state.life != super::node::Life::Alive {
            return Ok(());
        }
        let exec = &mut state.executors[executor];
        let Some(call) = exec.call.take() else {
            return Ok(());
        };
        let elapsed = now - call.start;
        exec.busy += elapsed;
        self.running -= 1;
        self.last_progress = now;
        let id = call.ticket.id();
        if let Some(started) = state.started.get_mut(&id) {
            started.busy += elapsed;
        }
        let mut body = call.body;
        let next_stage = match call.event_from {
            None => Some(0),
            Some(child) => match body.children.as_mut() {
                Some(children) => children.report(child).then_some(children.stage + 1),
                None => None,
            },
        };
        let finished = match next_stage {
            Some(stage) => !self.submit_stage(node, executor, id, &mut body, stage)?,
            None => false,
        };
        let host = &mut self.nodes[node as usize].host;
        if finished {
            host.complete(executor, call.ticket, Outcome::Finish);
            self.finished(node, id, body);
        } else {
            host.complete(executor, call.ticket, Outcome::Suspend(body));
        }
        self.ask_for_work(node, executor);
        Ok(())
    }

    /// Submits the first non-empty stage of children from `stage` on;
    /// returns whether there was one (the activity waits for it).
    fn submit_stage(
        &mut self,
        node: u32,
        executor: usize,
        parent: ActivityId,
        body: &mut Body,
        mut stage: usize,
    ) -> Result<bool, SimError> {
        let workload = self.workload;
        let stages = &workload.activities[body.spec as usize].stages;
        while stage < stages.len() && stages[stage].is_empty() {
            stage += 1;
        }
        let Some(children) = stages.get(stage) else {
            body.children = None;
            return Ok(false);
        };
        let state = &mut self.nodes[node as usize];
        let mut first = None;
        for &child in children {
            let spec = &workload.activities[child as usize];
            let id = state.host.issue(executor);
            first.get_or_insert(id.seq());
            let body = Body {
                spec: child,
                attempt: 0,
                parent: Some(parent),
                children: None,
            };
            (state.host).submit_child(executor, id, body, spec.contexts.clone(), spec.placement)?;
        }
        let count = children.len() as u64;
        body.children = Some(Box::new(Children {
            stage,
            origin: state.id,
            first: first.expect("the stage is not empty"),
            count,
            remaining: count,
            seen: vec![0; count.div_ceil(64) as usize],
        }));
        Ok(true)
    }

    /// An activity finished on `node`: record it, tell its parent, and let
    /// the protocol tell whoever handed it here.
    fn finished(&mut self, node: u32, id: ActivityId, body: Body) {
        if let Some(started) = self.nodes[node as usize].started.remove(&id) {
            self.record(node, id, started, super::records::AttemptEnd::Completed);
        }
        match body.parent {
            Some(parent) => {
                let event = SimEvent {
                    source: id,
                    target: parent,
                };
                match self.nodes[node as usize].host.deliver(event) {
                    Delivery::Delivered => {}
                    Delivery::Gone => self.undeliverable += 1,
                    Delivery::Away(event) | Delivery::Unknown(event) => {
                        self.input(node, |protocol, now, host| protocol.route(event, now, host))
                    }
                }
            }
            None => {
                let seq = root_index(id);
                let master = self.nodes[self.model.master].id;
                if id.origin() == master && seq < self.root_done.len() && !self.root_done[seq] {
                    self.root_done[seq] = true;
                    self.roots_left -= 1;
                }
            }
        }
        self.input(node, |protocol, now, host| {
            protocol.handle_finished(id, now, host)
        });
    }

    /// How long until input `data` is on `node`, fetching it if need be.
    fn fetch(&mut self, node: u32, data: u32) -> Time {
        let key = (u64::from(node) << 32) | u64::from(data);
        if self.model.cache_inputs {
            if let Some(&ready) = self.cache.get(&key) {
                return ready.saturating_sub(self.now);
            }
        }
        let workload = self.workload;
        let spec = &workload.data[data as usize];
        let here = self.nodes[node as usize].site as usize;
        let source = if spec.replicas.contains(&here) {
            here
        } else {
            // The replica that would arrive first on an idle network.
            (spec.replicas.iter().copied())
                .min_by_key(|&site| (self.network.estimate(site, here, spec.bytes), site))
                .expect("validated: data has a replica")
        };
        let duration = self.network.transfer(source, here, spec.bytes, self.now);
        if source == here {
            self.messages.local_transfers += 1;
            self.messages.local_bytes += spec.bytes;
        } else {
            self.messages.wide_area_transfers += 1;
            self.messages.wide_area_bytes += spec.bytes;
        }
        if self.model.cache_inputs {
            self.cache.insert(key, self.now.saturating_add(duration));
        }
        duration
    }
}
