//! Running a graph as activities: a [`Coordinator`] submits each node as a
//! shell activity as soon as the nodes it runs after have succeeded, and
//! reports every node it settles to an observer.
//!
//! The coordinator is an ordinary activity, so a graph runs wherever the
//! pool runs it; only its [`NodeReport`] events go back to whoever watches
//! the run (the `constellation run` command, which journals them).

use std::collections::HashMap;

use constellation::{Activity, ActivityCx, ActivityId, Context, ContextList, Event, Step};
use executors::shell::{ShellActivity, ShellResult, ShellSpec};
use serde::{Deserialize, Serialize};

use crate::graph::Graph;

/// What the coordinator tells its observer: one report per node that it
/// settles, in the order they settle.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum NodeReport {
    /// The node's command ran, successfully or not (after its retries).
    Finished {
        /// Index into [`Graph::nodes`].
        node: usize,
        /// What the shell activity reported.
        result: Box<ShellResult>,
    },
    /// The node will never run: a node it depends on, directly or not, failed.
    Cancelled {
        /// Index into [`Graph::nodes`].
        node: usize,
        /// The failed node that caused it.
        because: usize,
    },
    /// No executor of the pool can run the node; it was not submitted.
    Refused {
        /// Index into [`Graph::nodes`].
        node: usize,
        /// The scheduler's reason.
        reason: String,
    },
}

impl NodeReport {
    /// The node the report is about.
    pub fn node(&self) -> usize {
        match self {
            NodeReport::Finished { node, .. }
            | NodeReport::Cancelled { node, .. }
            | NodeReport::Refused { node, .. } => *node,
        }
    }

    /// Whether the node succeeded.
    pub fn is_success(&self) -> bool {
        matches!(self, NodeReport::Finished { result, .. } if result.is_success())
    }
}

/// The activity that runs a graph: it submits ready nodes and collects
/// their results, releasing dependants as soon as their inputs are done.
#[derive(Serialize, Deserialize)]
pub struct Coordinator {
    /// Each node's command; taken when the node is submitted.
    specs: Vec<Option<ShellSpec>>,
    /// For each node, the nodes that run after it.
    dependants: Vec<Vec<u32>>,
    /// For each node, how many of its dependencies have not succeeded yet.
    waiting: Vec<u32>,
    /// Nodes that need no more reports: skipped, finished or cancelled.
    settled: Vec<bool>,
    /// Shell activities in flight, by id.
    running: HashMap<ActivityId, u32>,
    /// Nodes still to report.
    unsettled: usize,
    observer: ActivityId,
}

impl Coordinator {
    /// A coordinator for `graph` that reports to `observer`. Nodes marked
    /// in `skip` count as already succeeded: they are neither run nor
    /// reported (a resumed run skips what it finished before).
    ///
    /// # Panics
    /// If `skip` is not one flag per node.
    pub fn new(graph: &Graph, skip: &[bool], observer: ActivityId) -> Coordinator {
        assert_eq!(skip.len(), graph.nodes.len(), "one skip flag per node");
        let dependants = graph
            .dependants()
            .into_iter()
            .map(|list| list.into_iter().map(|n| n as u32).collect())
            .collect();
        let waiting = graph
            .nodes
            .iter()
            .map(|node| node.after.iter().filter(|&&d| !skip[d]).count() as u32)
            .collect();
        Coordinator {
            specs: graph
                .nodes
                .iter()
                .zip(skip)
                .map(|(node, &skip)| (!skip).then(|| node.spec.clone()))
                .collect(),
            dependants,
            waiting,
            settled: skip.to_vec(),
            running: HashMap::new(),
            unsettled: skip.iter().filter(|&&s| !s).count(),
            observer,
        }
    }

    /// How many reports the observer will receive: one per node not skipped.
    pub fn reports_expected(&self) -> usize {
        self.unsettled
    }

    fn submit(&mut self, cx: &mut ActivityCx<'_>, node: u32) {
        let Some(spec) = self.specs[node as usize].take() else {
            return;
        };
        let parent = cx.id();
        match cx.submit(ShellActivity::new(spec).reply_to(parent)) {
            Ok(child) => {
                self.running.insert(child, node);
            }
            Err(error) => {
                self.settle(
                    cx,
                    NodeReport::Refused {
                        node: node as usize,
                        reason: error.to_string(),
                    },
                );
                self.cancel_dependants(cx, node);
            }
        }
    }

    fn settle(&mut self, cx: &mut ActivityCx<'_>, report: NodeReport) {
        let node = report.node();
        debug_assert!(!self.settled[node], "node {node} settled twice");
        self.settled[node] = true;
        self.unsettled -= 1;
        cx.send(self.observer, report);
    }

    fn release_dependants(&mut self, cx: &mut ActivityCx<'_>, node: u32) {
        for k in 0..self.dependants[node as usize].len() {
            let dependant = self.dependants[node as usize][k];
            let waiting = &mut self.waiting[dependant as usize];
            *waiting -= 1;
            if *waiting == 0 && !self.settled[dependant as usize] {
                self.submit(cx, dependant);
            }
        }
    }

    /// Cancels everything that runs after `failed`, directly or not. None
    /// of it can have started: each waits for `failed` somewhere upstream.
    fn cancel_dependants(&mut self, cx: &mut ActivityCx<'_>, failed: u32) {
        let mut stack = self.dependants[failed as usize].clone();
        while let Some(node) = stack.pop() {
            if self.settled[node as usize] {
                continue;
            }
            self.specs[node as usize] = None;
            self.settle(
                cx,
                NodeReport::Cancelled {
                    node: node as usize,
                    because: failed as usize,
                },
            );
            stack.extend_from_slice(&self.dependants[node as usize]);
        }
    }

    fn step(&self) -> Step {
        if self.unsettled == 0 {
            Step::Finish
        } else {
            Step::Suspend
        }
    }
}

/// The label of the executor that a graph run keeps for its coordinator
/// (and for whoever collects its reports). An activity handles each event
/// on the executor it started on, so a coordinator sharing an executor with
/// hour-long commands would release their dependants an hour late.
pub const COORDINATOR_LABEL: &str = "constellation:coordinator";

#[typetag::serde]
impl Activity for Coordinator {
    fn context(&self) -> ContextList {
        ContextList::single(Context::new(COORDINATOR_LABEL))
    }

    fn may_be_stolen(&self) -> bool {
        false
    }

    fn initialize(&mut self, cx: &mut ActivityCx<'_>) -> Step {
        let ready: Vec<u32> = (0..self.waiting.len() as u32)
            .filter(|&n| self.waiting[n as usize] == 0 && !self.settled[n as usize])
            .collect();
        for node in ready {
            self.submit(cx, node);
        }
        self.step()
    }

    fn process(&mut self, cx: &mut ActivityCx<'_>, event: Event) -> Step {
        let source = event.source;
        let result = match event.take::<ShellResult>() {
            Ok(result) => result,
            Err(error) => {
                tracing::error!(%source, %error, "the graph coordinator got an event it does not understand; ignored");
                return self.step();
            }
        };
        let Some(node) = self.running.remove(&result.activity) else {
            tracing::error!(activity = %result.activity, "a shell result for no node of this graph; ignored");
            return self.step();
        };
        let success = result.is_success();
        self.settle(
            cx,
            NodeReport::Finished {
                node: node as usize,
                result: Box::new(result),
            },
        );
        if success {
            self.release_dependants(cx, node);
        } else {
            self.cancel_dependants(cx, node);
        }
        self.step()
    }
}
