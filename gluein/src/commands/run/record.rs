//! What a run writes to its journal: the run, its activities and each
//! settled activity's attempts, and what a resume may skip.

use std::path::{Path, PathBuf};

use constellation::NodeId;
use executors::shell::{ShellOutcome, ShellResult};
use graph::{Graph, NodeReport};
use journal::{
    unix_seconds, ActivityDecl, ActivityState, ActivityUpdate, Journal, JournalError, NewAttempt,
    StreamPlace,
};
use report::run_dir;
use sha2::{Digest, Sha256};

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
