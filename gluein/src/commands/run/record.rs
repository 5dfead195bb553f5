//! What a run writes to its journal: the run, its activities and each
//! settled activity's attempts, and what a resume may skip.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use executors::shell::{Capture, ShellOutcome, ShellResult};
use gluein::run_dir;
use graph::{Graph, NodeReport};
use journal::{unix_seconds, ActivityDecl, ActivityState, ActivityUpdate, AttemptRow, Journal};
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
/// gets `-2`, `-3`, ... ([`run_dir::create_run_dir`]).
pub(super) fn default_journal_path(graph: &Path) -> anyhow::Result<PathBuf> {
    let stem = graph
        .file_stem()
        .map_or("graph".into(), |s| s.to_string_lossy());
    let dir = run_dir::create_run_dir(Path::new("constellation-runs"), &stem)?;
    Ok(dir.join("journal.db"))
}

/// What decides what a node does, hashed: its command, environment,
/// context, retries and timeout, files, and what it runs after. The output
/// directory is left out: it differs between a run and its resumption.
pub(super) fn spec_hash(graph: &Graph, node: &graph::Node) -> String {
    let mut spec = node.spec.clone();
    spec.capture = Capture::default();
    let after: Vec<&str> = node
        .after
        .iter()
        .map(|&d| graph.nodes[d].id.as_str())
        .collect();
    let value = serde_json::json!({
        "spec": spec,
        "after": after,
        "inputs": node.inputs,
        "outputs": node.outputs,
    });
    hex(&Sha256::digest(value.to_string().as_bytes()))
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Which nodes a resume skips: those done before with the same spec, all of
/// whose dependencies are skipped too. Anything downstream of work that runs
/// again runs again, since its inputs may change.
pub(super) fn plan_skips(
    graph: &Graph,
    hashes: &[String],
    done: &HashMap<String, String>,
) -> Vec<bool> {
    let mut skip = vec![false; graph.nodes.len()];
    for n in graph.topological_order() {
        let node = &graph.nodes[n];
        skip[n] = done.get(&node.id) == Some(&hashes[n]) && node.after.iter().all(|&d| skip[d]);
    }
    skip
}

pub(super) fn declarations(graph: &Graph, hashes: &[String], skip: &[bool]) -> Vec<ActivityDecl> {
    (graph.nodes.iter().zip(hashes).zip(skip))
        .map(|((node, hash), &skip)| ActivityDecl {
            rerun: !skip,
            id: node.id.clone(),
            kind: node.kind.clone(),
            spec_hash: hash.clone(),
            context: node.spec.context.to_string(),
            after: node
                .after
                .iter()
                .map(|&d| graph.nodes[d].id.clone())
                .collect(),
        })
        .collect()
}

/// The expanded graph as the journal keeps it.
pub(super) fn graph_json(graph: &Graph) -> String {
    let nodes: Vec<serde_json::Value> = graph
        .nodes
        .iter()
        .map(|node| {
            serde_json::json!({
                "id": node.id,
                "kind": node.kind,
                "spec": node.spec,
                "context": node.spec.context.to_string(),
                "after": node.after.iter().map(|&d| &graph.nodes[d].id).collect::<Vec<_>>(),
                "inputs": node.inputs,
                "outputs": node.outputs,
            })
        })
        .collect();
    serde_json::json!({ "activities": nodes }).to_string()
}

/// The journal rows for one report.
pub(super) fn update_for(graph: &Graph, report: &NodeReport) -> ActivityUpdate {
    let id = graph.nodes[report.node()].id.clone();
    match report {
        NodeReport::Finished { result, .. } => ActivityUpdate {
            id,
            state: if result.is_success() {
                ActivityState::Done
            } else {
                ActivityState::Failed
            },
            message: (!result.is_success()).then(|| result.outcome.to_string()),
            attempts: attempt_rows(result),
        },
        NodeReport::Cancelled { because, .. } => ActivityUpdate {
            id,
            state: ActivityState::Cancelled,
            message: Some(format!("{} failed", graph.nodes[*because].id)),
            attempts: Vec::new(),
        },
        NodeReport::Refused { reason, .. } => ActivityUpdate {
            id,
            state: ActivityState::Failed,
            message: Some(reason.clone()),
            attempts: Vec::new(),
        },
    }
}

pub(super) fn attempt_rows(result: &ShellResult) -> Vec<AttemptRow> {
    result
        .history
        .iter()
        .map(|a| {
            let (outcome, exit_code, signal) = match &a.outcome {
                ShellOutcome::Exited { code } => ("exited", Some(i64::from(*code)), None),
                ShellOutcome::Signalled { signal } => ("signalled", None, Some(i64::from(*signal))),
                ShellOutcome::TimedOut { .. } => ("timed_out", None, None),
                ShellOutcome::StartFailed { .. } => ("start_failed", None, None),
            };
            let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
            AttemptRow {
                run: 0,
                activity: String::new(),
                attempt: i64::from(a.attempt),
                node: result.host.clone(),
                executor: result.executor as i64,
                labels: result.executor_labels.clone(),
                started: unix_seconds(a.started),
                ended: unix_seconds(a.started + a.duration),
                outcome: outcome.to_string(),
                exit_code,
                signal,
                message: (!a.outcome.is_success()).then(|| a.outcome.to_string()),
                cpu_seconds: a.cpu.map(|c| c.as_secs_f64()),
                stdout: path(&a.stdout),
                stderr: path(&a.stderr),
                stdout_bytes: Some(a.stdout_bytes as i64),
                stderr_bytes: Some(a.stderr_bytes as i64),
            }
        })
        .collect()
}
