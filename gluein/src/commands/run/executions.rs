//! Every execution of a pool run as attempts in its journal, also those
//! whose result never comes and those that come twice.
//!
//! On a pool, the coordinator reports each attempt as it starts and each
//! result for a node already settled
//! ([`Coordinator::report_executions`](graph::Coordinator::report_executions)).
//! The run keeps the executions that started and have not ended, and:
//! - when the agent that runs one is gone from the member list, journals
//!   it as an attempt with outcome [`journal::LOST`]: the pool queued the
//!   activity again as it took the agent out, and the new execution's
//!   attempts are numbered after the lost one. An agent only taken for
//!   dead may still report the execution: its result then replaces the
//!   lost attempt;
//! - journals an extra execution's result (a re-run after the notice that
//!   the first one finished was lost with its agent, or a second copy) as
//!   more attempts of its activity, whose state stays as it was;
//! - when the run stops, journals what never reported as lost too.
//!
//! Attempt numbers are the journal's key within a run. Most activities run
//! once, and their attempts keep the numbers their result gives them; only
//! an activity with a lost or extra execution is numbered here, after the
//! highest number recorded for it, so a million-activity run keeps no
//! entry per activity but a bit.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant, SystemTime};

use constellation::net::Node;
use constellation::{ActivityId, NodeId};
use executors::shell::{ShellReport, ShellResult, ShellStarted};
use graph::NodeReport;
use journal::{
    unix_seconds, ActivityUpdate, Journal, JournalError, NewAttempt, EXTRA_EXECUTION, LOST,
};

use super::record::{new_attempts, NodeNames, Recording};

/// How often the member list is looked at while executions are open.
///
/// An execution counts as lost at the first look that misses its agent,
/// without waiting to be sure, as an agent does before it kills the work
/// of a member that is gone: the pool queued the activity again as it
/// took the agent out, and its new execution, numbered after the lost
/// one, may end within a second. A false alarm costs nothing: the
/// execution's result, if it comes, replaces the lost attempt.
const LOOK_EVERY: Duration = Duration::from_millis(250);

/// An execution that started and has not ended.
struct Open {
    /// Its node in the graph.
    node: usize,
    started: ShellStarted,
}

/// Attempts to journal whose numbers are given at commit, with the journal
/// at hand.
struct Late {
    /// The node in the graph.
    node: usize,
    /// The shell activity.
    activity: ActivityId,
    /// Its attempts, numbered within their execution (1, 2, ... as its
    /// retries went); lost ones have outcome [`LOST`].
    rows: Vec<NewAttempt>,
}

/// What [`Executions::take_reports`] saw that the rest of the run counts.
#[derive(Default)]
pub(super) struct Taken {
    /// Nodes that announced an attempt or ran an extra execution, with
    /// their host: the census lists an agent it has not listed yet.
    pub(super) nodes: Vec<(NodeId, String)>,
    /// Extra results, by activity, and whether each was cancelled on its
    /// agent: a stopping run waits for those it asked for.
    pub(super) ended: Vec<(ActivityId, bool)>,
}

/// The executions of a pool run: see the module's notes.
pub(super) struct Executions {
    reports: Receiver<(usize, ShellReport)>,
    names: NodeNames,
    /// Executions announced and not ended, by shell activity: a copy
    /// queued again after its agent died keeps its id, so one activity
    /// may have several.
    open: HashMap<ActivityId, Vec<Open>>,
    /// A bit per node of the graph: its settling report has been taken.
    settled: Vec<u64>,
    /// Extra results that came before their node's settling report (the
    /// two travel apart): they wait for it, to be numbered after it.
    early: Vec<(usize, Box<ShellResult>)>,
    last_look: Option<Instant>,
    /// Attempts waiting for their numbers, in the order they came.
    late: Vec<Late>,
    /// Per node with a lost or an extra execution: the highest attempt
    /// number given so far, `None` until read from the journal.
    numbered: HashMap<usize, Option<i64>>,
    /// Lost attempts by activity: the agent, the attempt within its
    /// execution and its number, so that a result that comes after all
    /// (an agent only taken for dead) replaces it rather than adding one.
    lost_numbers: HashMap<ActivityId, Vec<(String, i64, i64)>>,
    /// Executions journaled as lost.
    pub(super) lost: usize,
    /// Extra executions journaled.
    pub(super) extra: usize,
}

impl Executions {
    /// Executions of a graph of `nodes` nodes, reported on `reports`, with
    /// agents named as `names` says.
    pub(super) fn new(
        reports: Receiver<(usize, ShellReport)>,
        nodes: usize,
        names: NodeNames,
    ) -> Executions {
        Executions {
            reports,
            names,
            open: HashMap::new(),
            settled: vec![0; nodes.div_ceil(64)],
            early: Vec::new(),
            last_look: None,
            late: Vec::new(),
            numbered: HashMap::new(),
            lost_numbers: HashMap::new(),
            lost: 0,
            extra: 0,
        }
    }

    fn is_settled(&self, node: usize) -> bool {
        self.settled[node / 64] & (1 << (node % 64)) != 0
    }

    /// Takes the reports that came, waiting up to `wait` for the first.
    /// Taken after the batch of settling reports it goes with, and before
    /// that batch is handled: every start reported before a result is then
    /// known when the result closes it.
    pub(super) fn take_reports(&mut self, wait: Duration) -> Taken {
        let mut taken = Taken::default();
        let first = match wait.is_zero() {
            true => self.reports.try_recv().ok(),
            false => self.reports.recv_timeout(wait).ok(),
        };
        let more = std::iter::from_fn(|| self.reports.try_recv().ok());
        let reports: Vec<(usize, ShellReport)> = first.into_iter().chain(more).collect();
        for (node, report) in reports {
            match report {
                ShellReport::Started(started) => {
                    taken.nodes.push((started.node, started.host.clone()));
                    (self.open.entry(started.activity).or_default()).push(Open { node, started });
                }
                ShellReport::Ended(result) => {
                    taken.nodes.push((result.node, result.host.clone()));
                    taken
                        .ended
                        .push((result.activity, result.cancelled.is_some()));
                    if self.is_settled(node) {
                        self.extra_ran(node, &result);
                    } else {
                        self.early.push((node, result));
                    }
                }
            }
        }
        taken
    }

    /// Executions of `activity` that `result` reports the end of: those on
    /// its agent announced before its last attempt ended. A later one on
    /// the same agent is another copy.
    fn close(&mut self, result: &ShellResult) {
        let Some(open) = self.open.get_mut(&result.activity) else {
            return;
        };
        let ended = (result.history.iter())
            .map(|a| a.started + a.duration)
            .max()
            .unwrap_or_else(SystemTime::now);
        open.retain(|o| !(o.started.node == result.node && o.started.started <= ended));
        if open.is_empty() {
            self.open.remove(&result.activity);
        }
    }

    /// An extra execution of settled node `node` ended with `result`.
    fn extra_ran(&mut self, node: usize, result: &ShellResult) {
        self.close(result);
        self.extra += 1;
        let recording = Recording {
            names: self.names,
            interrupted: false,
        };
        let mut rows = new_attempts(result, recording);
        for row in &mut rows {
            let outcome = row
                .message
                .take()
                .map_or(String::new(), |m| format!("; {m}"));
            row.message = Some(format!(
                "{EXTRA_EXECUTION}: it ran after its activity had settled (the notice that an \
                 earlier execution finished was lost with its agent, or two copies ran){outcome}"
            ));
        }
        self.numbered.entry(node).or_default();
        self.late.push(Late {
            node,
            activity: result.activity,
            rows,
        });
    }

    /// The run took `report`, settling its node, and will journal
    /// `update` for it: closes its execution, and numbers its attempts
    /// here if the node had a lost or extra execution.
    pub(super) fn settled(&mut self, report: &NodeReport, update: &mut ActivityUpdate) {
        let node = report.node();
        self.settled[node / 64] |= 1 << (node % 64);
        if let NodeReport::Finished { result, .. } = report {
            self.close(result);
            if self.numbered.contains_key(&node) {
                self.late.push(Late {
                    node,
                    activity: result.activity,
                    rows: std::mem::take(&mut update.attempts),
                });
            }
        }
        let (came, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.early)
            .into_iter()
            .partition(|(n, _)| *n == node);
        self.early = waiting;
        for (node, result) in came {
            self.extra_ran(node, &result);
        }
    }

    /// Journals as lost the open executions whose agent is out of
    /// `node`'s member list. Looks at most every [`LOOK_EVERY`], and only
    /// while executions are open.
    pub(super) fn check_members(&mut self, node: &Node) {
        if self.open.is_empty() || self.last_look.is_some_and(|at| at.elapsed() < LOOK_EVERY) {
            return;
        }
        self.last_look = Some(Instant::now());
        let mut listed: HashSet<NodeId> = node.members().iter().map(|m| m.node).collect();
        listed.insert(node.node_id());
        self.lose(
            |o| !listed.contains(&o.started.node),
            |name| format!("the agent {name} died or left while it ran"),
        );
    }

    /// Journals as lost every execution still open when the run stops:
    /// its agent did not report how it ended in time.
    pub(super) fn unreported(&mut self) {
        self.lose(
            |_| true,
            |name| {
                format!(
                    "interrupted: the run stopped before the agent {name} reported how it ended"
                )
            },
        );
    }

    /// Journals the open executions that `which` picks as lost, with the
    /// message `why` gives for their agent's name.
    fn lose(&mut self, which: impl Fn(&Open) -> bool, why: impl Fn(&str) -> String) {
        let noticed = unix_seconds(SystemTime::now());
        let mut gone = Vec::new();
        self.open.retain(|_, open| {
            let (lost, kept): (Vec<Open>, Vec<Open>) = open.drain(..).partition(&which);
            gone.extend(lost);
            *open = kept;
            !open.is_empty()
        });
        for Open { node, started } in gone {
            let name = self.names.name(&started.host, started.node);
            let row = NewAttempt {
                attempt: i64::from(started.attempt),
                message: Some(why(&name)),
                node: name,
                executor: started.executor as i64,
                labels: started.labels,
                started: unix_seconds(started.started),
                ended: noticed.max(unix_seconds(started.started)),
                outcome: LOST.to_string(),
                exit_code: None,
                signal: None,
                cpu_seconds: None,
                stdout: None,
                stderr: None,
                stdout_bytes: None,
                stderr_bytes: None,
                stream: None,
            };
            self.lost += 1;
            self.numbered.entry(node).or_default();
            self.late.push(Late {
                node,
                activity: started.activity,
                rows: vec![row],
            });
        }
    }

    /// Whether no execution is open and no extra result waits for its
    /// node: with nothing queued or running in the pool either, nothing
    /// more will be reported.
    pub(super) fn drained(&self) -> bool {
        self.open.is_empty() && self.early.is_empty()
    }

    /// Numbers the attempts waiting for it, after the highest recorded for
    /// their activity in run `run` of `journal` or among `pending` (the
    /// updates committed with them), and returns them for
    /// [`Journal::record_with`]. `keys` are the nodes' activity numbers.
    pub(super) fn numbered_rows(
        &mut self,
        journal: &Journal,
        run: i64,
        keys: &[i64],
        pending: &[ActivityUpdate],
    ) -> Result<Vec<(i64, NewAttempt)>, JournalError> {
        let mut rows = Vec::new();
        for Late {
            node,
            activity,
            rows: attempts,
        } in std::mem::take(&mut self.late)
        {
            let key = keys[node];
            let last = match self.numbered.get(&node).copied().flatten() {
                Some(last) => last,
                None => {
                    let before = (pending.iter())
                        .filter(|u| u.activity == key)
                        .flat_map(|u| u.attempts.iter().map(|a| a.attempt))
                        .max()
                        .unwrap_or(0);
                    journal.last_attempt(run, key)?.max(before)
                }
            };
            let mut last = last;
            for mut row in attempts {
                let lost_before = (self.lost_numbers.get_mut(&activity))
                    .filter(|_| row.outcome != LOST)
                    .and_then(|lost| {
                        let at = (lost.iter())
                            .position(|(agent, a, _)| *agent == row.node && *a == row.attempt)?;
                        Some(lost.swap_remove(at).2)
                    });
                let number = match lost_before {
                    Some(number) => {
                        // Not lost after all.
                        self.lost -= 1;
                        number
                    }
                    None => {
                        last += 1;
                        last
                    }
                };
                if row.outcome == LOST {
                    (self.lost_numbers.entry(activity).or_default()).push((
                        row.node.clone(),
                        row.attempt,
                        number,
                    ));
                }
                row.attempt = number;
                rows.push((key, row));
            }
            self.numbered.insert(node, Some(last));
        }
        Ok(rows)
    }
}
