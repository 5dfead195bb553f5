//! What a run leaves behind: one record per attempt, and the report built
//! from the records, the executors' busy time and the protocol's counters.

use super::{seconds, Engine, Time};
use crate::id::ActivityId;
use crate::sim::model::nanos;
use crate::sim::report::{AttemptRecord, ExecutorSummary, NodeSummary, SimReport};

pub(super) use crate::sim::report::AttemptEnd;

/// The trace of an attempt that has started and not ended.
pub(super) struct Started {
    pub(super) spec: u32,
    pub(super) attempt: u32,
    pub(super) executor: u32,
    pub(super) start: Time,
    pub(super) transfer: Time,
    pub(super) busy: Time,
}

impl Engine<'_> {
    pub(super) fn record(
        &mut self,
        node: u32,
        id: ActivityId,
        started: Started,
        outcome: AttemptEnd,
    ) {
        let workload = self.workload;
        let spec = &workload.activities[started.spec as usize];
        self.records.push(AttemptRecord {
            activity: id,
            spec: started.spec,
            kind: spec.kind,
            contexts: self.spec_contexts[started.spec as usize],
            node,
            executor: started.executor,
            site: self.nodes[node as usize].site,
            attempt: started.attempt + 1,
            start: seconds(started.start),
            end: seconds(self.now),
            transfer: seconds(started.transfer),
            busy: seconds(started.busy),
            outcome,
        });
    }

    pub(super) fn report(mut self) -> SimReport {
        let makespan = self.now;
        let mut executors = Vec::new();
        let mut nodes = Vec::new();
        let mut capacity = 0.0;
        for (index, (state, spec)) in self.nodes.iter().zip(&self.model.nodes).enumerate() {
            let joined = nanos(spec.joins_at);
            let died = spec.dies_at.map(nanos).filter(|&died| died <= makespan);
            let until = died.unwrap_or(makespan);
            capacity += seconds(until.saturating_sub(joined)) * state.executors.len() as f64;
            nodes.push(NodeSummary {
                name: spec.name.clone(),
                site: state.site,
                joined: seconds(joined),
                died: died.map(seconds),
                requests_handled: state.requests_handled,
                answering: seconds(state.answering),
            });
            for (e, exec) in state.executors.iter().enumerate() {
                let running = exec.call.as_ref().map_or(0, |call| makespan - call.start);
                executors.push(ExecutorSummary {
                    node: index as u32,
                    index: e as u32,
                    labels: spec.executors[e].context.label_list(),
                    cores: exec.cores,
                    busy: seconds(exec.busy + running),
                });
            }
        }
        let mut completed: Vec<ActivityId> = (self.records.iter())
            .filter(|record| record.outcome == AttemptEnd::Completed)
            .map(|record| record.activity)
            .collect();
        let work: f64 = (self.records.iter())
            .filter(|record| record.outcome == AttemptEnd::Completed)
            .map(|record| record.busy - record.transfer)
            .sum();
        let total = completed.len() as u64;
        completed.sort_unstable();
        completed.dedup();
        let duplicates = total - completed.len() as u64;
        let master = self.model.master as u32;
        let stats = self.protocol_stats();
        let undeliverable = stats.undeliverable
            + self.undeliverable
            + (self.nodes.iter())
                .map(|node| node.host.undeliverable)
                .sum::<u64>();
        SimReport {
            strategy: self.model.strategy,
            seed: self.model.seed,
            makespan: seconds(makespan),
            sites: self.model.sites.iter().map(|s| s.name.clone()).collect(),
            master,
            master_load: nodes[master as usize].requests_handled,
            busiest_victim: (nodes.iter())
                .map(|node| node.requests_handled)
                .max()
                .unwrap_or(0),
            nodes,
            executors,
            kinds: self.workload.kinds.iter().map(|k| k.name.clone()).collect(),
            context_lists: std::mem::take(&mut self.context_texts),
            records: std::mem::take(&mut self.records),
            messages: std::mem::take(&mut self.messages),
            completed: completed.len() as u64,
            requeued: stats.requeued,
            lost: stats.lost,
            duplicates,
            undeliverable,
            work,
            capacity,
            efficiency: if capacity > 0.0 { work / capacity } else { 0.0 },
            events: self.events,
            membership_converged: self.converged.map(seconds),
        }
    }
}
