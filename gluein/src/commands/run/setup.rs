//! How a run begins, before anything runs: the graph loaded and checked
//! against the executors that will run it ([`prepare`]), then the run
//! begun in its journal ([`begin`]): what a resume skips, the executors of
//! this process and of the pool's agents, and the graph's activities.

use std::path::{Path, PathBuf};

use constellation::net::Node;
use constellation::ExecutorContext;
use executors::shell::Capture;
use graph::Graph;
use journal::{ExecutorRow, Journal, NewRun};

use super::census::Census;
use super::pool::{
    check_contexts, check_pool_contexts, check_travel, executor_contexts, join_pool,
};
use super::record::{declare, graph_hash, journaled_sources, open_journal, plan_skips, NodeNames};
use super::{load_graph, OutputMode, RunArgs, RUN_HINT};

/// Loads the graph as `args` retarget it, works out this process's
/// executors and, with `--pool`, joins the pool. Refuses a graph with
/// work that no executor offers (unless it may wait for labels) or too
/// large to travel to an agent; a refused run leaves the pool it joined.
pub(super) fn prepare(
    args: &RunArgs,
) -> anyhow::Result<(Graph, Vec<ExecutorContext>, Option<Node>)> {
    let options = graph::LoadOptions {
        max_bytes: args.max_graph_size,
        kept_sweeps: args.kept_sweeps.clone(),
    };
    let (graph, _) = load_graph(
        &args.graph,
        args.context_file.as_deref(),
        &args.relabel,
        &options,
    )?;
    let executors = executor_contexts(args)?;
    if args.pool.is_some() {
        check_travel(&graph, &executors)?;
    }
    let node = match &args.pool {
        Some(pool) => Some(join_pool(pool, args, &executors)?),
        None => None,
    };
    if !(args.wait_for_labels && node.is_some()) {
        let checked = match &node {
            Some(node) => check_pool_contexts(&graph, node, &executors, RUN_HINT),
            None => check_contexts(&graph, &executors, RUN_HINT),
        };
        if let Err(error) = checked {
            // With a goodbye, so that no member declares this one dead.
            if let Some(node) = node {
                node.leave();
            }
            return Err(error);
        }
    }
    Ok((graph, executors, node))
}

/// A run as begun in its journal.
pub(super) struct Begun {
    /// The journal, open for the run.
    pub(super) journal: Journal,
    /// Where it is.
    pub(super) journal_path: PathBuf,
    /// The run's number in the journal.
    pub(super) run: i64,
    /// Where the commands' output goes.
    pub(super) capture: Capture,
    /// Per node: whether this run skips it, done before.
    pub(super) skip: Vec<bool>,
    /// How many nodes it skips.
    pub(super) skipped: usize,
    /// The nodes' activity numbers in the journal.
    pub(super) keys: Vec<i64>,
    /// How attempts name the node they ran on.
    pub(super) names: NodeNames,
    /// The nodes listed in the journal with their executors.
    pub(super) census: Census,
}

/// Opens the journal (a new one, or the one `--resume` names), plans what
/// a resume skips and begins the run there: with this process's
/// `executors`, on a pool (`node`) the agents known now, and the graph's
/// activities.
pub(super) fn begin(
    args: &RunArgs,
    graph: &Graph,
    executors: &[ExecutorContext],
    node: Option<&Node>,
) -> anyhow::Result<Begun> {
    let (mut journal, journal_path) = open_journal(args)?;
    let output_dir = output_dir(&journal, &journal_path)?;
    let capture = match args.output {
        OutputMode::Files => Capture::Files {
            dir: output_dir.clone(),
        },
        OutputMode::Stream => Capture::Stream {
            dir: output_dir.clone(),
        },
    };
    let hashes: Vec<u64> = (0..graph.len()).map(|n| graph.spec_hash(n)).collect();
    let skip = plan_skips(graph, &hashes, &journal)?;
    let skipped = skip.iter().filter(|&&s| s).count();
    let host = executors::probe::hostname();
    let run = journal.begin_run(&NewRun {
        graph_path: args.graph.display().to_string(),
        graph_hash: graph_hash(graph, &hashes),
        host: host.clone(),
        command_line: std::env::args().collect::<Vec<_>>().join(" "),
        output_dir: output_dir.display().to_string(),
        sources: journaled_sources(graph, args.kept_sweeps.is_some()),
    })?;
    // On a pool every node is named by host and id: two agents on one
    // host are two nodes. This process's own executors are one of them.
    let (names, own_name) = match node {
        Some(node) => (
            NodeNames::HostAndId,
            NodeNames::HostAndId.name(&host, node.node_id()),
        ),
        None => (NodeNames::Host, host),
    };
    record_own_executors(&mut journal, run, executors, own_name)?;
    let mut census = Census::default();
    if let Some(node) = node {
        census.record_new(node, &mut journal, run)?;
    }
    let keys = declare(&mut journal, run, graph, &hashes, &skip)?;
    Ok(Begun {
        journal,
        journal_path,
        run,
        capture,
        skip,
        skipped,
        keys,
        names,
        census,
    })
}

/// Where the commands' output goes, beside the journal at `journal_path`:
/// `output` for its first run, `output.runN` for the Nth.
fn output_dir(journal: &Journal, journal_path: &Path) -> anyhow::Result<PathBuf> {
    let run_dir = journal_path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    Ok(match journal.runs()?.len() {
        0 => run_dir.join("output"),
        n => run_dir.join(format!("output.run{}", n + 1)),
    })
}

/// Lists this process's `executors` for run `run`, on the node named
/// `own_name`, each with an equal share of this machine's cores.
fn record_own_executors(
    journal: &mut Journal,
    run: i64,
    executors: &[ExecutorContext],
    own_name: String,
) -> anyhow::Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let share = (cores / executors.len().max(1)).max(1) as i64;
    let rows: Vec<ExecutorRow> = (executors.iter().enumerate())
        .map(|(k, context)| ExecutorRow {
            executor: k as i64,
            node: own_name.clone(),
            labels: context.label_list(),
            cores: share,
        })
        .collect();
    journal.record_executors(run, &rows)?;
    Ok(())
}
