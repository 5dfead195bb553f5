//! What a run writes to its journal: the run, its activities and each
//! settled activity's attempts ([`Recorder`]), and what a resume may skip.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use constellation::{ActivityId, NodeId};
use executors::shell::{ShellOutcome, ShellReport, ShellResult};
use graph::{Graph, NodeReport};
use journal::{
    unix_seconds, ActivityDecl, ActivityState, ActivityUpdate, Journal, JournalError, NewAttempt,
    StreamPlace,
};
use report::run_dir;
use sha2::{Digest, Sha256};

use super::executions::Executions;
use super::progress::Tally;
use super::RunArgs;

/// Opens the journal to resume, or creates a new one.
pub(super) fn open_journal(args: &RunArgs) -> anyhow::Result<(Journal, PathBuf)> {
    if let Some(path) = &args.resume {
        let journal = Journal::open(path)?;
        if let Some(last) = journal.runs()?.last() {
            if Path::new(&last.graph_path) != args.graph {
                eprintln!(
                    "warning: resuming a journal of {}, with graph {}",
                    last.graph_path,
                    args.graph.display()
                );
            }
        }
        return Ok((journal, path.clone()));
    }
    let path = match &args.journal {
        Some(path) => path.clone(),
        None => default_journal_path(&args.graph)?,
    };
    Ok((Journal::create(&path)?, path))
}

/// `constellation-runs/<graph stem>-<UTC time>/journal.db`, in a directory
/// made for this run alone: a run started in the same second as another
/// gets `-2`, `-3`, ... ([`run_dir::create_run_dir`]). The link
/// `constellation-runs/latest` then names it, so that commands written
/// for the latest run keep working as runs accumulate.
pub(super) fn default_journal_path(graph: &Path) -> anyhow::Result<PathBuf> {
    let stem = graph
        .file_stem()
        .map_or("graph".into(), |s| s.to_string_lossy());
    let made = run_dir::create_latest_run_dir(Path::new(run_dir::RUNS_DIR), &stem)?;
    if let Some(error) = made.link_error {
        eprintln!("warning: {error}");
    }
    Ok(made.dir.join("journal.db"))
}

/// A hash of the whole graph as run, for the run's row: every node's id
/// and spec hash, in order (so relabelling and sweep values count).
pub(super) fn graph_hash(graph: &Graph, hashes: &[u64]) -> String {
    let mut digest = Sha256::new();
    for (n, hash) in hashes.iter().enumerate() {
        digest.update(graph.id(n).as_bytes());
        digest.update([0]);
        digest.update(hash.to_le_bytes());
    }
    hex(&digest.finalize())
}

/// The sources a run journals: the graph file and its sweep files as
/// read, each by its text; or, for a job's runner (`kept`, its files kept
/// by the pool node in the job's folder), each by [`KEPT_SOURCE`] and the
/// SHA-256 of its text, so that a job's graph is stored once, in its
/// folder, and not again in its journal at every run.
pub(super) fn journaled_sources(graph: &Graph, kept: bool) -> Vec<(String, String)> {
    let sources = graph.sources();
    if !kept {
        return sources.to_vec();
    }
    (sources.iter())
        .map(|(name, text)| {
            let digest = hex(&Sha256::digest(text.as_bytes()));
            (name.clone(), format!("{KEPT_SOURCE}{digest}"))
        })
        .collect()
}

/// How a journal's source row begins when the file is kept in the job's
/// folder rather than in the journal; the text's SHA-256 follows.
const KEPT_SOURCE: &str = "kept in the job's folder by the pool node; sha256 ";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Which nodes a resume skips: those done before with the same spec hash,
/// all of whose dependencies are skipped too. Anything downstream of work
/// that runs again runs again, since its inputs may change. The journal's
/// done rows are streamed into a flag per node, not held as a map.
pub(super) fn plan_skips(
    graph: &Graph,
    hashes: &[u64],
    journal: &Journal,
) -> Result<Vec<bool>, JournalError> {
    let mut done = vec![false; graph.len()];
    journal.for_each_done(|id, hash| {
        if let Some(n) = graph.index_of(id) {
            done[n] = hashes[n] == hash;
        }
    })?;
    Ok(graph.skippable(&done))
}

/// Declares the graph's nodes to the journal for run `run` and returns
/// each node's activity number, indexed by node, for its updates.
pub(super) fn declare(
    journal: &mut Journal,
    run: i64,
    graph: &Graph,
    hashes: &[u64],
    skip: &[bool],
) -> Result<Vec<i64>, JournalError> {
    let contexts: Vec<String> = graph.contexts().iter().map(|c| c.to_string()).collect();
    let activities = (0..graph.len()).map(|n| ActivityDecl {
        id: graph.id(n),
        kind: graph.kind_of(n),
        context: graph.context_of(n),
        spec_hash: hashes[n],
        rerun: !skip[n],
    });
    journal.declare(run, graph.kinds(), &contexts, activities)
}

/// How the journal names the node an attempt ran on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum NodeNames {
    /// By host name: an embedded pool is one node on one host.
    Host,
    /// `HOST#ID`, the host name and the node's short id: on a pool, where
    /// two agents on one host are two nodes, each with its own executors
    /// numbered from 0.
    HostAndId,
}

impl NodeNames {
    /// The name of node `node` on host `host`.
    pub(super) fn name(self, host: &str, node: NodeId) -> String {
        match self {
            NodeNames::Host => host.to_string(),
            NodeNames::HostAndId => format!("{host}#{node}"),
        }
    }
}

/// What the run knows about a report besides the report itself.
#[derive(Clone, Copy, Debug)]
pub(super) struct Recording {
    /// How nodes are named.
    pub(super) names: NodeNames,
    /// The activity was killed because the run stopped (Ctrl-C, or its
    /// pool node gone): it stays pending, to run again on resume, and
    /// its last attempt says why it ended.
    pub(super) interrupted: bool,
}

/// The journal rows for one report; `keys` are the nodes' activity
/// numbers, as [`declare`] returned them.
pub(super) fn update_for(
    graph: &Graph,
    keys: &[i64],
    report: &NodeReport,
    recording: Recording,
) -> ActivityUpdate {
    let activity = keys[report.node()];
    match report {
        NodeReport::Finished { result, .. } if recording.interrupted => ActivityUpdate {
            activity,
            state: ActivityState::Pending,
            message: Some(format!(
                "interrupted: the run stopped and its command {}",
                result.outcome
            )),
            attempts: new_attempts(result, recording),
        },
        NodeReport::Finished { result, .. } => ActivityUpdate {
            activity,
            state: if result.is_success() {
                ActivityState::Done
            } else {
                ActivityState::Failed
            },
            message: (!result.is_success()).then(|| result.outcome.to_string()),
            attempts: new_attempts(result, recording),
        },
        NodeReport::Cancelled { because, .. } => ActivityUpdate {
            activity,
            state: ActivityState::Cancelled,
            message: Some(format!("{} failed", graph.id(*because))),
            attempts: Vec::new(),
        },
        NodeReport::Refused { reason, .. } | NodeReport::Lost { reason, .. } => ActivityUpdate {
            activity,
            state: ActivityState::Failed,
            message: Some(reason.clone()),
            attempts: Vec::new(),
        },
    }
}

/// One journal row per attempt of `result`, each naming the executor that
/// ran it as `recording` says.
pub(super) fn new_attempts(result: &ShellResult, recording: Recording) -> Vec<NewAttempt> {
    let node = recording.names.name(&result.host, result.node);
    let last = result.history.len();
    result
        .history
        .iter()
        .enumerate()
        .map(|(k, a)| {
            let (outcome, exit_code, signal) = match &a.outcome {
                ShellOutcome::Exited { code } => ("exited", Some(i64::from(*code)), None),
                ShellOutcome::Signalled { signal } => ("signalled", None, Some(i64::from(*signal))),
                ShellOutcome::TimedOut { .. } => ("timed_out", None, None),
                ShellOutcome::StartFailed { .. } => ("start_failed", None, None),
                ShellOutcome::OutputLost { .. } => ("output_lost", None, None),
            };
            let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
            let message = match (!a.outcome.is_success()).then(|| a.outcome.to_string()) {
                Some(text) if recording.interrupted && k + 1 == last => {
                    Some(format!("interrupted: the run stopped and {text}"))
                }
                message => message,
            };
            NewAttempt {
                attempt: i64::from(a.attempt),
                node: node.clone(),
                executor: result.executor as i64,
                labels: result.executor_labels.clone(),
                started: unix_seconds(a.started),
                ended: unix_seconds(a.started + a.duration),
                outcome: outcome.to_string(),
                exit_code,
                signal,
                message,
                cpu_seconds: a.cpu.map(|c| c.as_secs_f64()),
                stdout: path(&a.stdout),
                stderr: path(&a.stderr),
                stdout_bytes: Some(a.stdout_bytes as i64),
                stderr_bytes: Some(a.stderr_bytes as i64),
                stream: a.stream.as_ref().map(|place| StreamPlace {
                    file: place.file.display().to_string(),
                    offset: place.offset as i64,
                    length: place.length as i64,
                }),
            }
        })
        .collect()
}

/// Turns the coordinator's reports into journal rows and counts.
pub(super) struct Recorder {
    pub(super) tally: Tally,
    /// The graph's nodes' activity numbers in the journal.
    keys: Vec<i64>,
    names: NodeNames,
    /// Rows not committed yet.
    updates: Vec<ActivityUpdate>,
    /// Numbered attempts of lost and extra executions not committed yet (a
    /// commit failed: the disk is full).
    unwritten: Vec<(i64, journal::NewAttempt)>,
    /// Once the run stops: the shell activities whose commands it killed
    /// and whose reports have not come yet.
    pub(super) awaited: HashSet<ActivityId>,
    /// Once the run stops: how many reports marked cancelled the agents
    /// said would come (commands they killed for this run), and have not.
    pub(super) cancelled_awaited: usize,
    /// Whether the run has stopped: a command killed by a signal from then
    /// on was killed by the stop (the run's own kill, or the signal that
    /// stopped the run reaching its commands too).
    stopped: bool,
    /// Nodes whose command the stop killed: what they cancel stays pending.
    interrupted: HashSet<usize>,
    /// The nodes attempts ran on, by id.
    nodes_seen: HashSet<NodeId>,
    /// Those seen first since the caller last took them, with their host.
    pub(super) new_nodes: Vec<(NodeId, String)>,
    /// On a pool: the executions reported, to journal those lost with
    /// their agent and extra ones.
    pub(super) executions: Option<Executions>,
}

impl Recorder {
    /// A recorder for `graph`, whose nodes are the journal's activities
    /// `keys`, `skipped` of them done before; attempts name their nodes as
    /// `names` says.
    pub(super) fn new(graph: &Graph, keys: Vec<i64>, skipped: usize, names: NodeNames) -> Recorder {
        Recorder {
            tally: Tally::new(graph, skipped),
            keys,
            names,
            updates: Vec::new(),
            unwritten: Vec::new(),
            awaited: HashSet::new(),
            cancelled_awaited: 0,
            stopped: false,
            interrupted: HashSet::new(),
            nodes_seen: HashSet::new(),
            new_nodes: Vec::new(),
            executions: None,
        }
    }

    /// Takes executions reported: after the batch of settling reports
    /// they go with, and before it is taken ([`Input`](super::inputs::Input)).
    pub(super) fn on_executions(&mut self, reports: Vec<(usize, ShellReport)>) {
        let Some(executions) = &mut self.executions else {
            return;
        };
        let taken = executions.reported(reports);
        for (node, host) in taken.nodes {
            if self.nodes_seen.insert(node) {
                self.new_nodes.push((node, host));
            }
        }
        for (activity, cancelled) in taken.ended {
            self.awaited.remove(&activity);
            if cancelled {
                self.cancelled_awaited = self.cancelled_awaited.saturating_sub(1);
            }
        }
    }

    /// Whether every execution reported has ended or been journaled as
    /// lost (always, where executions are not reported).
    pub(super) fn executions_drained(&self) -> bool {
        self.executions.as_ref().is_none_or(Executions::drained)
    }

    /// The run stopped and killed the commands of `killed`.
    pub(super) fn killed(&mut self, killed: &[ActivityId]) {
        self.stopped = true;
        self.awaited.extend(killed.iter().copied());
    }

    /// Whether reports of commands the stop killed are still to come.
    pub(super) fn awaiting(&self) -> bool {
        !self.awaited.is_empty() || self.cancelled_awaited > 0
    }

    /// Counts one settling report and takes its journal rows.
    pub(super) fn take(&mut self, graph: &Graph, report: NodeReport) {
        let stopped = self.stopped || gluein::signals::stop_requested();
        let interrupted = match &report {
            NodeReport::Finished { result, .. } => {
                if self.nodes_seen.insert(result.node) {
                    self.new_nodes.push((result.node, result.host.clone()));
                }
                let killed = self.awaited.remove(&result.activity);
                // Killed (or its retry dropped) on an agent, which this
                // run asked to cancel its work.
                let cancelled = result.cancelled.is_some();
                if cancelled {
                    self.cancelled_awaited = self.cancelled_awaited.saturating_sub(1);
                }
                killed
                    || (cancelled && !result.is_success())
                    || (stopped && matches!(result.outcome, ShellOutcome::Signalled { .. }))
            }
            // Cancelled because of a command the stop killed: it runs on
            // resume, like the killed one.
            NodeReport::Cancelled { because, .. } if self.interrupted.contains(because) => {
                self.interrupted.insert(report.node());
                return;
            }
            _ => false,
        };
        if interrupted {
            self.interrupted.insert(report.node());
            self.tally.interrupted += 1;
        } else {
            self.tally.count(graph, &report);
        }
        let recording = Recording {
            names: self.names,
            interrupted,
        };
        let mut update = update_for(graph, &self.keys, &report, recording);
        if let Some(executions) = &mut self.executions {
            executions.settled(&report, &mut update);
        }
        self.updates.push(update);
    }

    /// Writes the rows taken since the last commit, in one transaction:
    /// with the attempts of executions lost or extra, numbered after those
    /// recorded for their activities.
    /// A commit that fails keeps them all, to be written by the next.
    pub(super) fn commit(&mut self, journal: &mut Journal, run: i64) -> anyhow::Result<()> {
        if let Some(executions) = &mut self.executions {
            let more = executions.numbered_rows(journal, run, &self.keys, &self.updates)?;
            self.unwritten.extend(more);
        }
        if !self.updates.is_empty() || !self.unwritten.is_empty() {
            journal.record_with(run, &self.updates, &self.unwritten)?;
            self.updates.clear();
            self.unwritten.clear();
        }
        Ok(())
    }
}
