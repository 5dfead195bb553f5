//! Every execution of a pool run as attempts in its journal, also those
//! whose result never comes and those that come twice.
//!
//! On a pool, the coordinator reports each attempt as it starts and each
//! result for a node already settled
//! ([`Coordinator::report_executions`](graph::Coordinator::report_executions)),
//! which reach it through the run's [`Inputs`](super::inputs::Inputs).
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
//! - when the run stops, journals what never reported as lost too;
//! - journals each execution as lost as soon as it starts (a stand-in,
//!   committed with the next group of reports, 50 ms later), and replaces
//!   that row when its result or its loss comes: a runner killed while
//!   executions run leaves each of them an attempt in its journal, which
//!   the run that resumes it finds, instead of nothing.
//!
//! Attempt numbers are the journal's key within a run. Most activities run
//! once, and their attempts keep the numbers their result gives them; only
//! an activity with a lost or extra execution is numbered here, after the
//! highest number recorded for it, so a million-activity run keeps no
//! entry per activity but a bit.

use std::collections::{HashMap, HashSet};
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
/// without the wait an agent allows before it kills the work of a member
/// that is gone: the pool queued the activity again as it took the agent
/// out, and its new execution, numbered after the lost one, may end
/// within a second. A false alarm costs nothing: the execution's result,
/// if it comes, replaces the lost attempt.
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
    /// The agent that ran them.
    agent: NodeId,
    /// Its attempts, numbered within their execution (1, 2, ... as its
    /// retries went); lost ones have outcome [`LOST`].
    rows: Vec<NewAttempt>,
    /// Whether `rows` is the stand-in journaled for an execution as it
    /// starts, which its result or its loss replaces.
    provisional: bool,
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
    /// When the member list was last looked at.
    last_look: Option<Instant>,
    /// Attempts waiting for their numbers, in the order they came.
    late: Vec<Late>,
    /// Per node with a lost or an extra execution: the highest attempt
    /// number given so far, `None` until read from the journal.
    numbered: HashMap<usize, Option<i64>>,
    /// Lost attempts by activity: the agent's id (two agents' names may
    /// look alike), the attempt within its execution and its number, so
    /// that a result that comes after all (from an agent only taken for
    /// dead) replaces it rather than adding one.
    lost_numbers: HashMap<ActivityId, Vec<(NodeId, i64, i64)>>,
    /// Stand-ins journaled for executions that started and have not been
    /// replaced by their result or loss yet, as `lost_numbers` has them.
    provisional: HashMap<ActivityId, Vec<(NodeId, i64, i64)>>,
    /// Executions journaled as lost.
    pub(super) lost: usize,
    /// Extra executions journaled.
    pub(super) extra: usize,
}

impl Executions {
    /// Executions of a graph of `nodes` nodes, with agents named as
    /// `names` says.
    pub(super) fn new(nodes: usize, names: NodeNames) -> Executions {
        Executions {
            names,
            open: HashMap::new(),
            settled: vec![0; nodes.div_ceil(64)],
            early: Vec::new(),
            last_look: None,
            late: Vec::new(),
            numbered: HashMap::new(),
            lost_numbers: HashMap::new(),
            provisional: HashMap::new(),
            lost: 0,
            extra: 0,
        }
    }

    fn is_settled(&self, node: usize) -> bool {
        self.settled[node / 64] & (1 << (node % 64)) != 0
    }

    /// Takes `reports`, executions reported with their nodes. Taken after
    /// the batch of settling reports they go with, and before that batch
    /// is handled: every start reported before a result is then known
    /// when the result closes it.
    pub(super) fn reported(&mut self, reports: Vec<(usize, ShellReport)>) -> Taken {
        let mut taken = Taken::default();
        for (node, report) in reports {
            match report {
                ShellReport::Started(started) => {
                    taken.nodes.push((started.node, started.host.clone()));
                    self.stand_in(node, &started);
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
            agent: result.node,
            rows,
            provisional: false,
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
                    agent: result.node,
                    rows: std::mem::take(&mut update.attempts),
                    provisional: false,
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
    /// its agent did not report how it ended in time. Extra results whose
    /// node's settling report the stopping run did not take are journaled
    /// as they are.
    pub(super) fn unreported(&mut self) {
        for (node, result) in std::mem::take(&mut self.early) {
            self.extra_ran(node, &result);
        }
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
            self.lost += 1;
            self.journal_lost(node, &started, &why, noticed, false);
        }
    }

    /// Journals the execution `started` of node `node` as lost until its
    /// result or its loss replaces the row: if the runner dies first, the
    /// execution is an attempt all the same.
    fn stand_in(&mut self, node: usize, started: &ShellStarted) {
        let why = |name: &str| {
            format!(
                "the run ended without hearing how it ended: the agent {name} started it and \
                 this row was journaled then, in case the runner died before the agent \
                 reported (a runner killed, or its machine lost)"
            )
        };
        let noticed = unix_seconds(started.started);
        self.journal_lost(node, started, why, noticed, true);
    }

    /// Queues the row of the execution `started` of node `node`, lost as
    /// `why` says for its agent's name and noticed at `noticed` (Unix
    /// seconds); `provisional` for a stand-in.
    fn journal_lost(
        &mut self,
        node: usize,
        started: &ShellStarted,
        why: impl Fn(&str) -> String,
        noticed: f64,
        provisional: bool,
    ) {
        let name = self.names.name(&started.host, started.node);
        let message = why(&name);
        self.numbered.entry(node).or_default();
        self.late.push(Late {
            node,
            activity: started.activity,
            agent: started.node,
            rows: vec![lost_row(started, name, message, noticed)],
            provisional,
        });
    }

    /// Whether no execution is open and no extra result waits for its
    /// node: with nothing queued or running in the pool either, nothing
    /// more will be reported.
    pub(super) fn drained(&self) -> bool {
        self.open.is_empty() && self.early.is_empty()
    }

    /// The number of the row that `row`, of the execution of `activity` on
    /// `agent`, replaces, if any: its stand-in, journaled as it started, or
    /// (for a result, never a stand-in) a loss journaled for it before.
    fn replaced(
        &mut self,
        activity: ActivityId,
        agent: NodeId,
        row: &NewAttempt,
        provisional: bool,
    ) -> Option<i64> {
        let take = |rows: &mut HashMap<ActivityId, Vec<(NodeId, i64, i64)>>| {
            let kept = rows.get_mut(&activity)?;
            let at = (kept.iter()).position(|&(by, a, _)| by == agent && a == row.attempt)?;
            let (_, _, number) = kept.swap_remove(at);
            if kept.is_empty() {
                rows.remove(&activity);
            }
            Some(number)
        };
        if provisional {
            return None;
        }
        if let Some(number) = take(&mut self.provisional) {
            return Some(number);
        }
        if row.outcome == LOST {
            return None;
        }
        let number = take(&mut self.lost_numbers)?;
        // Not lost after all.
        self.lost -= 1;
        Some(number)
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
            agent,
            rows: attempts,
            provisional,
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
                let number = match self.replaced(activity, agent, &row, provisional) {
                    Some(number) => number,
                    None => {
                        last += 1;
                        last
                    }
                };
                let kept = match (provisional, row.outcome == LOST) {
                    (true, _) => Some(&mut self.provisional),
                    (false, true) => Some(&mut self.lost_numbers),
                    (false, false) => None,
                };
                if let Some(kept) = kept {
                    (kept.entry(activity).or_default()).push((agent, row.attempt, number));
                }
                row.attempt = number;
                rows.push((key, row));
            }
            self.numbered.insert(node, Some(last));
            let unreplaced = |rows: &HashMap<ActivityId, Vec<_>>| rows.contains_key(&activity);
            if self.is_settled(node)
                && !unreplaced(&self.provisional)
                && !unreplaced(&self.lost_numbers)
            {
                // Nothing of it waits to be replaced: a later extra result
                // (rare) reads its last number from the journal, and a run
                // of a million activities keeps no number per activity.
                self.numbered.remove(&node);
            }
        }
        Ok(rows)
    }
}

/// The attempt row of the execution `started`, run by the agent named
/// `node`, lost as `message` says: noticed at `noticed` (Unix seconds).
fn lost_row(started: &ShellStarted, node: String, message: String, noticed: f64) -> NewAttempt {
    NewAttempt {
        attempt: i64::from(started.attempt),
        message: Some(message),
        node,
        executor: started.executor as i64,
        labels: started.labels.clone(),
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
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use executors::shell::{AttemptRecord, Output, ShellOutcome};
    use graph::{Format, Graph};
    use journal::{ActivityDecl, ActivityState, AttemptRow, NewRun};

    use super::*;
    use crate::commands::run::record::update_for;

    /// The agents of the tests.
    fn agent(k: u128) -> NodeId {
        // Apart in the digits that names show.
        NodeId::from_u128(k << 100 | k)
    }

    /// When things happen, `at` seconds into the test.
    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + seconds)
    }

    fn started(activity: ActivityId, node: NodeId, attempt: u32, when: u64) -> ShellReport {
        ShellReport::Started(ShellStarted {
            activity,
            name: None,
            attempt,
            node,
            host: "h".to_string(),
            executor: 0,
            labels: "cpu".to_string(),
            started: at(when),
        })
    }

    /// A result from `node` whose attempts started at `starts` and took a
    /// second each; the last one exited with `code`, the others with 1.
    fn result(activity: ActivityId, node: NodeId, starts: &[u64], code: i32) -> ShellResult {
        let history: Vec<AttemptRecord> = (starts.iter().enumerate())
            .map(|(k, &when)| AttemptRecord {
                attempt: k as u32 + 1,
                started: at(when),
                duration: Duration::from_secs(1),
                outcome: ShellOutcome::Exited {
                    code: if k + 1 == starts.len() { code } else { 1 },
                },
                cpu: None,
                stdout: None,
                stderr: None,
                stdout_bytes: 0,
                stderr_bytes: 0,
                stream: None,
            })
            .collect();
        ShellResult {
            activity,
            name: None,
            command: "true".to_string(),
            outcome: history.last().unwrap().outcome.clone(),
            attempts: history.len() as u32,
            duration: Duration::from_secs(1),
            stdout: Output::Discarded,
            stderr: Output::Discarded,
            executor_labels: "cpu".to_string(),
            node,
            host: "h".to_string(),
            executor: 0,
            history,
            cancelled: None,
        }
    }

    /// A graph of three nodes, a journal with its run, and the tracker.
    struct Bench {
        graph: Graph,
        journal: Journal,
        run: i64,
        keys: Vec<i64>,
        executions: Executions,
        updates: Vec<ActivityUpdate>,
        ids: Vec<ActivityId>,
    }

    impl Bench {
        fn new(name: &str) -> Bench {
            let text =
                "[[activity]]\nid = \"n-{i}\"\nfor = { i = \"0..=2\" }\ncommand = \"true\"\n";
            let graph = Graph::parse(text, Format::Toml, "g.toml", Path::new(".")).unwrap();
            let dir =
                std::env::temp_dir().join(format!("executions-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let mut journal = Journal::create(&dir.join("journal.db")).unwrap();
            let run = journal.begin_run(&NewRun::default()).unwrap();
            let decls = (0..graph.len()).map(|n| ActivityDecl {
                id: graph.id(n),
                kind: 0,
                context: 0,
                spec_hash: 0,
                rerun: true,
            });
            let keys = journal
                .declare(run, graph.kinds(), &["anywhere".to_string()], decls)
                .unwrap();
            let runner = agent(99);
            Bench {
                executions: Executions::new(graph.len(), NodeNames::HostAndId),
                ids: (0..3).map(|k| ActivityId::new(runner, k)).collect(),
                graph,
                journal,
                run,
                keys,
                updates: Vec::new(),
            }
        }

        fn report(&mut self, node: usize, report: ShellReport) {
            self.executions.reported(vec![(node, report)]);
        }

        fn settle(&mut self, node: usize, result: ShellResult) {
            let report = NodeReport::Finished {
                node,
                result: Box::new(result),
            };
            let recording = Recording {
                names: NodeNames::HostAndId,
                interrupted: false,
            };
            let mut update = update_for(&self.graph, &self.keys, &report, recording);
            self.executions.settled(&report, &mut update);
            self.updates.push(update);
        }

        fn commit(&mut self) {
            let more = (self.executions)
                .numbered_rows(&self.journal, self.run, &self.keys, &self.updates)
                .unwrap();
            let updates = std::mem::take(&mut self.updates);
            self.journal.record_with(self.run, &updates, &more).unwrap();
        }

        /// Node `n`'s attempts: (number, agent name, outcome), by number.
        fn attempts(&self, n: usize) -> Vec<(i64, String, String)> {
            let mut rows: Vec<AttemptRow> = self.journal.attempts_of(self.graph.id(n)).unwrap();
            rows.sort_by_key(|a| a.recorded.attempt);
            (rows.into_iter())
                .map(|a| (a.recorded.attempt, a.recorded.node, a.recorded.outcome))
                .collect()
        }

        fn state(&self, n: usize) -> ActivityState {
            self.journal.activities().unwrap()[n].state
        }
    }

    fn name(node: NodeId) -> String {
        NodeNames::HostAndId.name("h", node)
    }

    #[test]
    fn a_lost_execution_comes_first_and_its_rerun_after_it() {
        let mut bench = Bench::new("lost");
        let (victim, survivor) = (agent(1), agent(2));
        let a = bench.ids[0];
        bench.report(0, started(a, victim, 1, 0));
        bench
            .executions
            .lose(|o| o.started.node == victim, |n| format!("{n} died"));
        assert_eq!(bench.executions.lost, 1);
        bench.commit();
        assert_eq!(bench.state(0), ActivityState::Pending);
        bench.report(0, started(a, survivor, 1, 10));
        bench.settle(0, result(a, survivor, &[10], 0));
        assert!(bench.executions.drained());
        bench.commit();
        assert_eq!(
            bench.attempts(0),
            [
                (1, name(victim), LOST.to_string()),
                (2, name(survivor), "exited".to_string())
            ]
        );
        assert_eq!(bench.state(0), ActivityState::Done);
    }

    #[test]
    fn an_extra_result_before_its_settling_one_is_numbered_after_it() {
        let mut bench = Bench::new("extra");
        let (first, second) = (agent(1), agent(2));
        let b = bench.ids[1];
        bench.report(1, started(b, first, 1, 0));
        bench.report(1, started(b, first, 2, 2));
        bench.report(1, started(b, second, 1, 5));
        // The copy's result travels apart from the settling one and may
        // come first: it waits for it.
        bench.report(1, ShellReport::Ended(Box::new(result(b, second, &[5], 1))));
        assert!(!bench.executions.drained());
        bench.settle(1, result(b, first, &[0, 2], 0));
        assert!(bench.executions.drained());
        assert_eq!(bench.executions.extra, 1);
        bench.commit();
        let attempts = bench.attempts(1);
        assert_eq!(attempts.len(), 3, "{attempts:?}");
        assert_eq!(attempts[2], (3, name(second), "exited".to_string()));
        assert_eq!(
            bench.state(1),
            ActivityState::Done,
            "the extra changes no state"
        );
        let extra = &bench.journal.attempts_of(bench.graph.id(1)).unwrap();
        let message = extra
            .iter()
            .find(|a| a.recorded.attempt == 3)
            .unwrap()
            .recorded
            .message
            .clone();
        assert!(
            message.is_some_and(|m| m.starts_with(EXTRA_EXECUTION) && m.contains("status 1")),
            "{extra:?}"
        );
        assert_eq!(bench.journal.re_executions(bench.run).unwrap().extra, 1);
    }

    #[test]
    fn a_result_for_an_execution_taken_for_lost_replaces_it() {
        let mut bench = Bench::new("replaced");
        let slow = agent(1);
        let c = bench.ids[2];
        bench.report(2, started(c, slow, 1, 0));
        bench.executions.lose(|_| true, |n| format!("{n} died"));
        bench.commit();
        assert_eq!(bench.attempts(2), [(1, name(slow), LOST.to_string())]);
        // Only taken for dead: its result comes after all.
        bench.settle(2, result(c, slow, &[0], 0));
        bench.commit();
        assert_eq!(bench.attempts(2), [(1, name(slow), "exited".to_string())]);
        assert_eq!(bench.executions.lost, 0);
    }

    #[test]
    fn a_later_copy_on_the_same_agent_stays_open_after_a_result() {
        let mut bench = Bench::new("copy");
        let both = agent(1);
        let a = bench.ids[0];
        bench.report(0, started(a, both, 1, 0));
        bench.report(0, started(a, both, 1, 30));
        bench.settle(0, result(a, both, &[0], 0));
        assert!(!bench.executions.drained(), "the second copy still runs");
        bench.executions.unreported();
        assert!(bench.executions.drained());
        bench.commit();
        let attempts = bench.attempts(0);
        assert_eq!(
            attempts,
            [
                (1, name(both), "exited".to_string()),
                (2, name(both), LOST.to_string())
            ]
        );
    }

    #[test]
    fn an_execution_is_journaled_as_it_starts_and_its_result_replaces_that_row() {
        let mut bench = Bench::new("stand-in");
        let worker = agent(1);
        let a = bench.ids[0];
        bench.report(0, started(a, worker, 1, 0));
        bench.commit();
        // A runner killed now leaves this row: the execution is an attempt.
        let journaled = bench.journal.attempts_of(bench.graph.id(0)).unwrap();
        assert_eq!(journaled.len(), 1, "{journaled:?}");
        assert_eq!(journaled[0].recorded.outcome, LOST);
        let message = journaled[0].recorded.message.clone().unwrap_or_default();
        assert!(
            message.starts_with("the run ended without hearing how it ended")
                && message.contains(&name(worker)),
            "{message}"
        );
        assert_eq!(bench.executions.lost, 0, "not counted lost while it runs");
        bench.settle(0, result(a, worker, &[0], 0));
        bench.commit();
        assert_eq!(bench.attempts(0), [(1, name(worker), "exited".to_string())]);
        assert_eq!(bench.state(0), ActivityState::Done);
        assert!(bench.executions.drained());
        assert!(
            bench.executions.numbered.is_empty() && bench.executions.provisional.is_empty(),
            "nothing kept per activity once it settled"
        );
    }
}
