//! What comes to a run from its pool, through one path and in the order
//! the run must take it.
//!
//! The coordinator settles nodes as events to a collector (one per node,
//! which the collector counts), and on a pool it also reports executions
//! (each attempt as it starts, each result for a node already settled)
//! on a channel ([`Coordinator::report_executions`]). [`Inputs`] reads
//! both and hands them out as one sequence of [`Input`]s: the executions
//! reported by the time a batch of settling reports is taken come before
//! that batch, so that every start reported before a result is known when
//! the result closes it.

use std::sync::mpsc::Receiver;
use std::time::Duration;

use anyhow::Context as _;
use constellation::collect::Results;
use executors::shell::ShellReport;
use graph::{Coordinator, NodeReport};

/// One thing the pool reported.
pub(super) enum Input {
    /// Executions reported (on a pool run): attempts that started, and
    /// results of nodes already settled, each with its node's number.
    Executions(Vec<(usize, ShellReport)>),
    /// Nodes the coordinator settled, in the order it settled them.
    Settled(Vec<NodeReport>),
    /// Every node has settled: no settling report comes any more (on a
    /// pool, executions still may, until the run closes the coordinator).
    AllSettled,
}

/// The run's one source of [`Input`]s.
pub(super) struct Inputs {
    /// The coordinator's settling reports, as the collector takes them.
    settled: Results,
    /// On a pool run: the executions the coordinator reports.
    executions: Option<Receiver<(usize, ShellReport)>>,
}

impl Inputs {
    /// Inputs of the settling reports `settled` takes, and no executions.
    pub(super) fn new(settled: Results) -> Inputs {
        Inputs {
            settled,
            executions: None,
        }
    }

    /// Has `coordinator` report its executions here too; on a pool, where
    /// agents can die with their commands, so that each execution is an
    /// attempt in the journal. `sender` is the address the run's main
    /// program sends from, which closes the reports.
    pub(super) fn with_executions_of(
        mut self,
        coordinator: Coordinator,
        sender: constellation::ActivityId,
    ) -> (Inputs, Coordinator) {
        let (to, from) = std::sync::mpsc::channel();
        self.executions = Some(from);
        (self, coordinator.report_executions(to, sender))
    }

    /// What came within `wait`: the executions reported, then the batch of
    /// settling reports taken before them (perhaps empty), or
    /// [`Input::AllSettled`].
    pub(super) fn next(&mut self, wait: Duration) -> anyhow::Result<Vec<Input>> {
        let batch = self.settled.next_batch(wait)?;
        let mut inputs: Vec<Input> = self.executions(Duration::ZERO).into_iter().collect();
        inputs.push(match batch {
            Some(events) => Input::Settled(
                (events.into_iter())
                    .map(event_report)
                    .collect::<anyhow::Result<_>>()?,
            ),
            None => Input::AllSettled,
        });
        Ok(inputs)
    }

    /// The executions reported, waiting up to `wait` for the first; `None`
    /// if none came or none are reported here.
    pub(super) fn executions(&mut self, wait: Duration) -> Option<Input> {
        let reports = self.executions.as_ref()?;
        let first = match wait.is_zero() {
            true => reports.try_recv().ok(),
            false => reports.recv_timeout(wait).ok(),
        };
        let more = std::iter::from_fn(|| reports.try_recv().ok());
        let taken: Vec<(usize, ShellReport)> = first.into_iter().chain(more).collect();
        (!taken.is_empty()).then_some(Input::Executions(taken))
    }
}

/// The coordinator's report in an event.
fn event_report(event: constellation::Event) -> anyhow::Result<NodeReport> {
    event
        .take()
        .context("the coordinator sent a report this build cannot read")
}
