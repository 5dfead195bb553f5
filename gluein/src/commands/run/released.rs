//! What released work waits for, per context: the run's check that some
//! executor still offers the labels its released activities need.

use std::collections::HashMap;

use constellation::core::MatchTable;
use constellation::{ContextList, ExecutorContext};
use graph::{Graph, NodeReport};

/// The graph's released activities: all they run after has succeeded, and
/// they have not finished. Counted per distinct context, so that a check
/// against what the pool offers costs one match per context, not one per
/// activity.
pub(super) struct Released {
    /// The distinct contexts of the graph's activities.
    contexts: Vec<ContextList>,
    /// Per distinct context, how many activities needing it are released.
    counts: Vec<usize>,
    /// Per node, its context's index in `contexts`.
    context_of: Vec<u32>,
    /// Per node, how many of its dependencies have not succeeded yet.
    waiting: Vec<u32>,
    /// Per node, whether it is released now.
    released: Vec<bool>,
    dependants: Vec<Vec<usize>>,
}

impl Released {
    /// As the coordinator starts: skipped nodes count as succeeded.
    pub(super) fn new(graph: &Graph, skip: &[bool]) -> Released {
        let mut index: HashMap<&ContextList, u32> = HashMap::new();
        let mut contexts = Vec::new();
        let context_of = (graph.nodes.iter())
            .map(|node| {
                *index.entry(&node.spec.context).or_insert_with(|| {
                    contexts.push(node.spec.context.clone());
                    (contexts.len() - 1) as u32
                })
            })
            .collect();
        let waiting: Vec<u32> = (graph.nodes.iter())
            .map(|node| node.after.iter().filter(|&&d| !skip[d]).count() as u32)
            .collect();
        let mut released = Released {
            counts: vec![0; contexts.len()],
            contexts,
            context_of,
            released: vec![false; graph.nodes.len()],
            dependants: graph.dependants(),
            waiting,
        };
        for (node, &skipped) in skip.iter().enumerate() {
            if released.waiting[node] == 0 && !skipped {
                released.release(node);
            }
        }
        released
    }

    pub(super) fn release(&mut self, node: usize) {
        self.released[node] = true;
        self.counts[self.context_of[node] as usize] += 1;
    }

    /// Takes in one report: the node is done, and on success what waited
    /// only for it is released.
    pub(super) fn settle(&mut self, report: &NodeReport) {
        let node = report.node();
        if std::mem::take(&mut self.released[node]) {
            self.counts[self.context_of[node] as usize] -= 1;
        }
        if report.is_success() {
            for k in 0..self.dependants[node].len() {
                let dependant = self.dependants[node][k];
                self.waiting[dependant] -= 1;
                if self.waiting[dependant] == 0 {
                    self.release(dependant);
                }
            }
        }
    }

    /// The released work that no executor in `offered` can run, per
    /// context, e.g. `[("gpu", 12)]`: it waits until someone offers those
    /// labels. One still running on an executor relabelled since it
    /// started counts too, until it ends.
    pub(super) fn unoffered(&self, offered: &[ExecutorContext]) -> Vec<(String, usize)> {
        let table = MatchTable::new(offered);
        (self.contexts.iter().zip(&self.counts))
            .filter(|&(context, &count)| count > 0 && table.executors_for(context).next().is_none())
            .map(|(context, &count)| (context.to_string(), count))
            .collect()
    }
}
