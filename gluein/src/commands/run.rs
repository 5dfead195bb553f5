//! `constellation run`: an activity graph on an embedded pool, journaled.
//!
//! The graph runs as activities: a [`Coordinator`] submits ready nodes and
//! reports each one it settles. This command watches those reports, writes
//! them to the journal as they come (so a killed run can be resumed), and
//! shows progress.

use std::collections::{BTreeMap, HashMap};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use clap::Args;
use constellation::collect::MultiEventCollector;
use constellation::core::MatchTable;
use constellation::net::{Node, NodeConfig};
use constellation::{Context, ContextList, ExecutorContext, Pool};
use executors::probe::Hardware;
use executors::shell::{Capture, Output, ShellOutcome, ShellResult};
use gluein::run_dir;
use graph::{Coordinator, Graph, NodeReport, Relabel, COORDINATOR_LABEL};
use journal::{
    unix_seconds, ActivityDecl, ActivityState, ActivityUpdate, AttemptRow, ExecutorRow, Journal,
    NewRun, RunStatus,
};
use sha2::{Digest, Sha256};

/// Arguments of `constellation run`.
#[derive(Args)]
#[command(after_help = "\
Examples:
  constellation run pipeline.toml
  constellation run pipeline.toml --executors 8 --context site:vu
  constellation run pipeline.toml --executors 3 --add-executors 1:gpu --relabel cpu=gpu
  constellation run pipeline.toml --resume constellation-runs/pipeline-20261121T101500Z/journal.db

Every run writes a journal (SQLite) and the commands' output files into one
directory, constellation-runs/<graph>-<time>/ by default. Query the journal
with `constellation report JOURNAL` or with sqlite3.")]
pub struct RunArgs {
    /// The graph file (TOML, or JSON if it ends in .json).
    graph: PathBuf,
    /// Executors for general work; each runs one activity at a time.
    /// Default: one per core.
    #[arg(long, short = 'n', env = "CONSTELLATION_EXECUTORS")]
    executors: Option<usize>,
    /// Labels added to those executors, before the probed ones
    /// (cpu, cores=N, mem=G, host:NAME, site:NAME, gpu...) and `anywhere`.
    /// Comma separated, e.g. `site:vu,big`.
    #[arg(long, value_name = "LABELS")]
    context: Option<String>,
    /// Adds N executors offering exactly CONTEXT (no probed labels, no
    /// `anywhere`), e.g. `1:gpu` or `2:site:uva>anywhere`. Repeatable.
    #[arg(long, value_name = "N:CONTEXT")]
    add_executors: Vec<String>,
    /// Renames a label in every activity's context, e.g. `cpu=gpu`. Repeatable.
    #[arg(long, value_name = "FROM=TO")]
    relabel: Vec<Relabel>,
    /// A TOML file mapping activity ids or `*` globs to contexts; applied
    /// before --relabel.
    #[arg(long, value_name = "FILE")]
    context_file: Option<PathBuf>,
    /// Where to write the journal. Default:
    /// constellation-runs/<graph>-<time>/journal.db
    #[arg(long, value_name = "FILE", conflicts_with = "resume")]
    journal: Option<PathBuf>,
    /// Continues the run journaled in FILE: activities that succeeded with
    /// the same spec are skipped; failed, unfinished and changed ones, and
    /// everything after them, run again.
    #[arg(long, value_name = "FILE")]
    resume: Option<PathBuf>,
    /// Run on a pool (a pool file from `constellation pool start`, or an
    /// address) instead of an embedded one: the activities go to the
    /// agents that joined it. Executors here: only what --executors and
    /// --add-executors ask for (default none).
    #[arg(long, value_name = "FILE|MULTIADDR")]
    pool: Option<String>,
    /// With --pool: wait for this many agents before starting.
    #[arg(long, default_value_t = 1, value_name = "N", requires = "pool")]
    wait_agents: usize,
    /// With --pool: how long to wait for them (e.g. `60s`, `10m`).
    #[arg(long, default_value = "60s", value_parser = timefmt::parse_duration, value_name = "DURATION")]
    wait_timeout: Duration,
    /// With --pool: the pool key, if the pool file does not name it.
    #[arg(long, value_name = "FILE", requires = "pool")]
    key_file: Option<PathBuf>,
    /// Progress display: `auto` (a bar when stderr is a terminal, else a
    /// line every 10 s), `bar` (refused when stderr is not a terminal,
    /// where a bar would draw nothing), `lines` or `none`.
    #[arg(long, default_value = "auto", value_name = "MODE")]
    progress: ProgressMode,
}

/// How progress is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ProgressMode {
    Auto,
    Bar,
    Lines,
    None,
}

impl RunArgs {
    /// Whether the run joins a pool (`--pool`), and so talks to other
    /// nodes over the network.
    pub fn joins_a_pool(&self) -> bool {
        self.pool.is_some()
    }
}

impl ProgressMode {
    /// Refuses `bar` where it cannot be seen: indicatif hides its bars when
    /// stderr is not a terminal, so the run would show no progress at all.
    fn check(self) -> anyhow::Result<()> {
        if self == ProgressMode::Bar && !std::io::stderr().is_terminal() {
            bail!(
                "--progress bar needs stderr to be a terminal, but it is a pipe or a file, \
                 where no bar is drawn; use --progress lines (a line every 10 s) or auto"
            );
        }
        Ok(())
    }
}

/// Runs the graph; exits 0 if every activity succeeded, 1 if some failed.
pub fn main(args: RunArgs) -> anyhow::Result<ExitCode> {
    args.progress.check()?;
    let mut graph = Graph::load(&args.graph).map_err(|errors| {
        anyhow::anyhow!("{errors}\n{} error(s) in the graph file", errors.0.len())
    })?;
    let rules = match &args.context_file {
        Some(path) => graph::read_context_file(path).map_err(anyhow::Error::msg)?,
        None => Vec::new(),
    };
    let retargeted = graph.retarget(&rules, &args.relabel);
    for warning in &retargeted.unused {
        eprintln!("warning: {warning}");
    }
    if retargeted.changed > 0 {
        eprintln!("retargeted {} activities", retargeted.changed);
    }
    let executors = executor_contexts(&args)?;
    let node = match &args.pool {
        Some(pool) => Some(join_pool(pool, &args, &executors)?),
        None => None,
    };
    let offered = match &node {
        Some(node) => pool_executors(node, &executors),
        None => executors.clone(),
    };
    check_contexts(&graph, &offered)?;

    let (mut journal, journal_path) = open_journal(&args)?;
    let run_dir = journal_path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let previous_runs = journal.runs()?.len();
    let output_dir = match previous_runs {
        0 => run_dir.join("output"),
        n => run_dir.join(format!("output.run{}", n + 1)),
    };
    for node in &mut graph.nodes {
        node.spec.capture = Capture::Files {
            dir: output_dir.clone(),
        };
    }
    let hashes: Vec<String> = graph.nodes.iter().map(|n| spec_hash(&graph, n)).collect();
    let skip = plan_skips(&graph, &hashes, &journal.done()?);
    let skipped = skip.iter().filter(|&&s| s).count();

    let host = executors::probe::hostname();
    let spec_json = graph_json(&graph);
    let run = journal.begin_run(&NewRun {
        graph_path: args.graph.display().to_string(),
        graph_hash: hex(&Sha256::digest(spec_json.as_bytes())),
        graph_spec: spec_json,
        host: host.clone(),
        command_line: std::env::args().collect::<Vec<_>>().join(" "),
        output_dir: output_dir.display().to_string(),
    })?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let share = (cores / executors.len().max(1)).max(1) as i64;
    journal.record_executors(
        run,
        &(executors.iter().enumerate())
            .map(|(k, context)| ExecutorRow {
                executor: k as i64,
                node: host.clone(),
                labels: context.label_list(),
                cores: share,
            })
            .collect::<Vec<_>>(),
    )?;
    journal.declare(run, &declarations(&graph, &hashes, &skip))?;

    eprintln!(
        "run {run} of {}: {} activities{}, {} executor(s); journal {}",
        args.graph.display(),
        graph.nodes.len(),
        if skipped > 0 {
            format!(" ({skipped} done before, skipped)")
        } else {
            String::new()
        },
        executors.len(),
        journal_path.display()
    );

    let coordination = ContextList::single(Context::new(COORDINATOR_LABEL));
    let runner = match node {
        Some(node) => Runner::Node(node),
        None => Runner::Local(local_pool(&executors)?),
    };
    let pool = runner.pool();
    let started = Instant::now();
    let mut tally = Tally::new(&graph, skipped);
    let expected = graph.nodes.len() - skipped;
    // Ctrl-C ends the run with its summary, which names what still waits.
    gluein::signals::catch_stop_signals().context("cannot catch SIGINT and SIGTERM")?;
    let mut interrupted = false;
    if expected > 0 {
        let (collector, reports) = MultiEventCollector::new(expected);
        let collector = collector.on(coordination);
        let observer = pool.submit(collector)?;
        let coordinator = Coordinator::new(&graph, &skip, observer);
        debug_assert_eq!(coordinator.reports_expected(), expected);
        pool.submit(coordinator)?;
        let mut progress = Progress::new(args.progress, expected as u64);
        // Reports are committed in groups at most COMMIT_EVERY apart: one
        // transaction per report would cost more than a short command. A
        // runner killed in between loses at most that much of the record,
        // and those activities run again on resume (at-least-once).
        let mut updates = Vec::new();
        let mut last_commit = Instant::now();
        let mut released = Released::new(&graph, &skip);
        let mut last_offer_check: Option<Instant> = None;
        loop {
            let wait = COMMIT_EVERY.saturating_sub(last_commit.elapsed());
            let batch = reports.next_batch(wait.max(Duration::from_millis(1)))?;
            let finished = batch.is_none();
            for event in batch.into_iter().flatten() {
                let report = event_report(event)?;
                tally.count(&graph, &report);
                released.settle(&report);
                updates.push(update_for(&graph, &report));
            }
            interrupted = gluein::signals::stop_requested();
            if last_offer_check.is_none_or(|at| at.elapsed() >= OFFER_CHECK_EVERY) || interrupted {
                last_offer_check = Some(Instant::now());
                tally.unoffered = released.unoffered(&runner.offered());
                progress.unoffered(&tally.unoffered);
            }
            if finished || interrupted || last_commit.elapsed() >= COMMIT_EVERY {
                if !updates.is_empty() {
                    journal.record(run, &std::mem::take(&mut updates))?;
                }
                last_commit = Instant::now();
                progress.show(&tally, pool.counts().running, started.elapsed());
            }
            if finished || interrupted {
                break;
            }
        }
        progress.finish(&tally);
    }
    let status = if interrupted {
        RunStatus::Interrupted
    } else if tally.failed + tally.cancelled > 0 {
        RunStatus::Failed
    } else {
        RunStatus::Succeeded
    };
    if !interrupted {
        runner.done();
    }
    journal.end_run(run, status)?;
    print!("{}", tally.summary(started.elapsed()));
    println!("journal: {}", journal_path.display());
    if interrupted {
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        // Not `runner.done()`, which waits for the work in flight, and not
        // a return, whose drop of the pool waits for it too. Commands still
        // running are in process groups of their own and go on; `--resume`
        // runs what they did not finish.
        std::process::exit(130);
    }
    Ok(match status {
        RunStatus::Succeeded => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    })
}

/// The pool a run's activities go to: embedded, or joined over the network.
enum Runner {
    Local(Pool),
    Node(Node),
}

impl Runner {
    /// What every executor that may run the graph's work offers now: this
    /// process's, and on a pool every agent's, relabelled ones as they are
    /// now.
    fn offered(&self) -> Vec<ExecutorContext> {
        match self {
            Runner::Local(pool) => pool.executor_contexts().to_vec(),
            Runner::Node(node) => pool_executors(node, &node.pool().executor_contexts()),
        }
    }

    fn pool(&self) -> &Pool {
        match self {
            Runner::Local(pool) => pool,
            Runner::Node(node) => node.pool(),
        }
    }

    fn done(self) {
        let ended = match self {
            Runner::Local(pool) => pool.done().map(drop).map_err(|e| e.to_string()),
            Runner::Node(node) => node.done().map(drop).map_err(|e| e.to_string()),
        };
        if let Err(error) = ended {
            tracing::error!(%error, "the pool did not finish cleanly");
        }
    }
}

/// `executors` (perhaps none), and one executor for the coordinator.
fn with_coordinator(executors: &[ExecutorContext]) -> constellation::PoolBuilder {
    let builder = executors.iter().fold(Pool::builder(), |builder, context| {
        builder.executor(context.clone())
    });
    builder.executor(ExecutorContext::new([Context::new(COORDINATOR_LABEL)]))
}

/// The embedded pool: `executors`, and one executor for the coordinator.
fn local_pool(executors: &[ExecutorContext]) -> anyhow::Result<Pool> {
    Ok(with_coordinator(executors).start()?)
}

/// Joins the pool `pool` with `executors` (perhaps none) plus one for the
/// coordinator, and waits for `--wait-agents` agents.
fn join_pool(pool: &str, args: &RunArgs, executors: &[ExecutorContext]) -> anyhow::Result<Node> {
    let joining = gluein::poolfile::joining(pool, args.key_file.as_deref())?;
    let listen = joining.default_listen();
    let config = NodeConfig {
        listen: listen.parse().expect("a valid multiaddr"),
        bootstrap: joining.bootstrap,
        key: joining.key,
        role: "run".into(),
        host: executors::probe::hostname(),
        ..NodeConfig::default()
    };
    let node = Node::start(config, with_coordinator(executors))?;
    let deadline = Instant::now() + args.wait_timeout;
    loop {
        let agents = agents_of(&node).count();
        if agents >= args.wait_agents {
            eprintln!("joined the pool {pool}: {agents} agent(s)");
            return Ok(node);
        }
        if Instant::now() >= deadline {
            bail!(
                "the pool {pool} has {agents} agent(s) after {} s, and --wait-agents asks for {}; \
                 start agents with `constellation agent --pool {pool}`",
                args.wait_timeout.as_secs(),
                args.wait_agents
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Members of the pool that run work: not the pool node, not runners.
fn agents_of(node: &Node) -> impl Iterator<Item = constellation::net::MemberView> {
    (node.members().into_iter())
        .filter(|member| member.executors.iter().any(|e| !super::is_internal(e)))
}

/// What the pool's agents and this node's own executors offer.
fn pool_executors(node: &Node, executors: &[ExecutorContext]) -> Vec<ExecutorContext> {
    let mut offered = executors.to_vec();
    offered.extend(agents_of(node).flat_map(|member| member.executors));
    offered
}

/// The longest a settled activity waits to be committed to the journal.
const COMMIT_EVERY: Duration = Duration::from_millis(50);

/// How often the run compares what released work needs with what the
/// executors offer (a relabel can take a label away at any time).
const OFFER_CHECK_EVERY: Duration = Duration::from_secs(1);

/// The graph's released activities: all they run after has succeeded, and
/// they have not finished. Counted per distinct context, so that a check
/// against what the pool offers costs one match per context, not one per
/// activity.
struct Released {
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
    fn new(graph: &Graph, skip: &[bool]) -> Released {
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

    fn release(&mut self, node: usize) {
        self.released[node] = true;
        self.counts[self.context_of[node] as usize] += 1;
    }

    /// Takes in one report: the node is done, and on success what waited
    /// only for it is released.
    fn settle(&mut self, report: &NodeReport) {
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
    fn unoffered(&self, offered: &[ExecutorContext]) -> Vec<(String, usize)> {
        let table = MatchTable::new(offered);
        (self.contexts.iter().zip(&self.counts))
            .filter(|&(context, &count)| count > 0 && table.executors_for(context).next().is_none())
            .map(|(context, &count)| (context.to_string(), count))
            .collect()
    }
}

/// `12 waiting for labels no executor offers: gpu (12)`.
fn unoffered_text(unoffered: &[(String, usize)]) -> String {
    let total: usize = unoffered.iter().map(|(_, n)| n).sum();
    let each: Vec<String> = (unoffered.iter())
        .map(|(context, n)| format!("{context} ({n})"))
        .collect();
    format!(
        "{total} waiting for labels no executor offers: {}",
        each.join(", ")
    )
}

/// The coordinator's report in an event.
fn event_report(event: constellation::Event) -> anyhow::Result<NodeReport> {
    event
        .take()
        .context("the coordinator sent a report this build cannot read")
}

/// The executors of the embedded pool: `--executors` general ones with the
/// probed labels, then each `--add-executors` group.
fn executor_contexts(args: &RunArgs) -> anyhow::Result<Vec<ExecutorContext>> {
    let hardware = Hardware::probe(None);
    let user = super::user_labels(args.context.as_deref())?;
    let default = if args.pool.is_some() {
        0
    } else {
        hardware.cores
    };
    let general = args.executors.unwrap_or(default);
    let mut executors = vec![hardware.executor_context(&user, false); general];
    for group in &args.add_executors {
        let (count, context) = group.split_once(':').with_context(|| {
            format!("--add-executors {group:?}: expected N:CONTEXT, e.g. 1:gpu")
        })?;
        let count: usize = count.trim().parse().with_context(|| {
            format!("--add-executors {group:?}: {count:?} is not a number of executors")
        })?;
        let context: ExecutorContext = context
            .parse()
            .with_context(|| format!("--add-executors {group:?}: bad context"))?;
        executors.extend(std::iter::repeat_n(context, count));
    }
    if executors.is_empty() && args.pool.is_none() {
        bail!("no executors: give --executors N (N > 0) or --add-executors N:CONTEXT");
    }
    Ok(executors)
}

/// Refuses a graph with activities no executor of this pool can ever run:
/// on a local pool they would wait forever.
fn check_contexts(graph: &Graph, executors: &[ExecutorContext]) -> anyhow::Result<()> {
    let table = MatchTable::new(executors);
    // Like every other graph error: `file:line:column: ...`, at the context.
    let unmatched: Vec<String> = (graph.nodes.iter().enumerate())
        .filter(|(_, node)| table.executors_for(&node.spec.context).next().is_none())
        .map(|(n, node)| {
            format!(
                "{}: {} needs [{}], which no executor offers",
                graph.place(n),
                node.id,
                node.spec.context
            )
        })
        .collect();
    if unmatched.is_empty() {
        return Ok(());
    }
    let offered: Vec<String> = executors.iter().map(|e| format!("  [{e}]")).collect();
    let shown = unmatched.len().min(10);
    bail!(
        "{}{}\n{} activities can run on no executor of this pool; the executors offer:\n{}\n\
         add executors with --context or --add-executors, or retarget with --relabel or --context-file",
        unmatched[..shown].join("\n"),
        if unmatched.len() > shown {
            format!("\n... and {} more", unmatched.len() - shown)
        } else {
            String::new()
        },
        unmatched.len(),
        offered.join("\n")
    )
}

/// Opens the journal to resume, or creates a new one.
fn open_journal(args: &RunArgs) -> anyhow::Result<(Journal, PathBuf)> {
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
fn default_journal_path(graph: &Path) -> anyhow::Result<PathBuf> {
    let stem = graph
        .file_stem()
        .map_or("graph".into(), |s| s.to_string_lossy());
    let dir = run_dir::create_run_dir(Path::new("constellation-runs"), &stem)?;
    Ok(dir.join("journal.db"))
}

/// What decides what a node does, hashed: its command, environment,
/// context, retries and timeout, files, and what it runs after. The output
/// directory is left out: it differs between a run and its resumption.
fn spec_hash(graph: &Graph, node: &graph::Node) -> String {
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

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Which nodes a resume skips: those done before with the same spec, all of
/// whose dependencies are skipped too. Anything downstream of work that runs
/// again runs again, since its inputs may change.
fn plan_skips(graph: &Graph, hashes: &[String], done: &HashMap<String, String>) -> Vec<bool> {
    let mut skip = vec![false; graph.nodes.len()];
    for n in graph.topological_order() {
        let node = &graph.nodes[n];
        skip[n] = done.get(&node.id) == Some(&hashes[n]) && node.after.iter().all(|&d| skip[d]);
    }
    skip
}

fn declarations(graph: &Graph, hashes: &[String], skip: &[bool]) -> Vec<ActivityDecl> {
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
fn graph_json(graph: &Graph) -> String {
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
fn update_for(graph: &Graph, report: &NodeReport) -> ActivityUpdate {
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

fn attempt_rows(result: &ShellResult) -> Vec<AttemptRow> {
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

/// Counts for progress and the summary.
struct Tally {
    total: usize,
    skipped: usize,
    done: usize,
    failed: usize,
    cancelled: usize,
    retried: usize,
    /// Per kind: durations of successful runs.
    durations: BTreeMap<String, Vec<f64>>,
    /// Failure messages, in the order they happened.
    failures: Vec<String>,
    /// Released work no executor offers to run, per context, when last
    /// checked.
    unoffered: Vec<(String, usize)>,
}

impl Tally {
    fn new(graph: &Graph, skipped: usize) -> Tally {
        Tally {
            total: graph.nodes.len(),
            skipped,
            done: 0,
            failed: 0,
            cancelled: 0,
            retried: 0,
            durations: BTreeMap::new(),
            failures: Vec::new(),
            unoffered: Vec::new(),
        }
    }

    fn settled(&self) -> usize {
        self.done + self.failed + self.cancelled
    }

    fn count(&mut self, graph: &Graph, report: &NodeReport) {
        let node = &graph.nodes[report.node()];
        match report {
            NodeReport::Finished { result, .. } => {
                if result.attempts > 1 {
                    self.retried += 1;
                }
                if result.is_success() {
                    self.done += 1;
                    self.durations
                        .entry(node.kind.clone())
                        .or_default()
                        .push(result.duration.as_secs_f64());
                } else {
                    self.failed += 1;
                    self.failures.push(failure_text(&node.id, result));
                }
            }
            NodeReport::Cancelled { .. } => self.cancelled += 1,
            NodeReport::Refused { reason, .. } => {
                self.failed += 1;
                self.failures.push(format!(
                    "{}: not run ({}): {reason}",
                    node.id,
                    graph.place(report.node())
                ));
            }
        }
    }

    fn summary(&self, elapsed: Duration) -> String {
        let mut out = String::new();
        let run = self.total - self.skipped;
        out.push_str(&format!(
            "\n{} of {} activities done in {:.1} s ({:.0}/s)",
            self.done + self.skipped,
            self.total,
            elapsed.as_secs_f64(),
            run as f64 / elapsed.as_secs_f64().max(1e-9),
        ));
        for (count, what) in [
            (self.skipped, "skipped as done before"),
            (self.failed, "failed"),
            (self.cancelled, "cancelled because of a failure"),
            (self.retried, "needed retries"),
        ] {
            if count > 0 {
                out.push_str(&format!(", {count} {what}"));
            }
        }
        out.push('\n');
        let unfinished = run - self.settled();
        if unfinished > 0 {
            out.push_str(&format!(
                "interrupted with {unfinished} activities not finished"
            ));
            if !self.unoffered.is_empty() {
                out.push_str(&format!("; {}", unoffered_text(&self.unoffered)));
            }
            out.push('\n');
        }
        if !self.durations.is_empty() {
            let width = self
                .durations
                .keys()
                .map(String::len)
                .max()
                .unwrap_or(4)
                .max(4);
            out.push_str(&format!(
                "\n{:width$}  {:>7}  {:>9}  {:>9}  {:>9}\n",
                "kind", "done", "min s", "median s", "max s"
            ));
            for (kind, times) in &self.durations {
                let mut sorted = times.clone();
                sorted.sort_by(f64::total_cmp);
                out.push_str(&format!(
                    "{kind:width$}  {:>7}  {:>9.3}  {:>9.3}  {:>9.3}\n",
                    sorted.len(),
                    sorted[0],
                    sorted[sorted.len() / 2],
                    sorted[sorted.len() - 1]
                ));
            }
        }
        for failure in self.failures.iter().take(10) {
            out.push_str(&format!("\nFAILED {failure}\n"));
        }
        if self.failures.len() > 10 {
            out.push_str(&format!(
                "\n... and {} more failures; see the journal\n",
                self.failures.len() - 10
            ));
        }
        out
    }
}

/// A failure with the last lines of its error output.
fn failure_text(id: &str, result: &ShellResult) -> String {
    let mut text = format!("{id}: {}", result.command);
    text.push_str(&format!(" {}", result.outcome));
    if result.attempts > 1 {
        text.push_str(&format!(" on the last of {} attempts", result.attempts));
    }
    if let Some(path) = result.stderr.path() {
        text.push_str(&format!("\n  stderr: {}", path.display()));
    }
    if result.stderr == Output::Empty {
        // Its empty file was removed: say so rather than name no file.
        text.push_str(" and wrote no error output");
    }
    // Only the stream's end is read, and long lines are cut: a command may
    // write gigabytes of error output, all on one line.
    for line in result.stderr.last_lines(5) {
        text.push_str(&format!("\n  | {line}"));
    }
    text
}

/// Progress while the graph runs: a bar on a terminal, or a line every 10 s.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    lines: bool,
    /// `--progress none`: not even the notices.
    quiet: bool,
    last_line: Instant,
    /// The contexts of the last notice about work no executor offers to run.
    unoffered_labels: Vec<String>,
}

impl Progress {
    fn new(mode: ProgressMode, total: u64) -> Progress {
        let terminal = std::io::stderr().is_terminal();
        let bar = matches!(mode, ProgressMode::Bar) || (mode == ProgressMode::Auto && terminal);
        let bar = bar.then(|| {
            let bar = indicatif::ProgressBar::new(total);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{elapsed_precise} [{bar:40}] {pos}/{len} {msg} eta {eta}",
                )
                .expect("the template is valid")
                .progress_chars("=> "),
            );
            bar
        });
        Progress {
            lines: bar.is_none()
                && (mode == ProgressMode::Lines || (mode == ProgressMode::Auto && !terminal)),
            bar,
            quiet: mode == ProgressMode::None,
            last_line: Instant::now(),
            unoffered_labels: Vec::new(),
        }
    }

    /// Says at once when released work starts (or stops) waiting for
    /// labels that no executor offers: the bar or a progress line every
    /// 10 s would show it late, and only a changing ETA would hint at it.
    fn unoffered(&mut self, unoffered: &[(String, usize)]) {
        let labels: Vec<&str> = unoffered
            .iter()
            .map(|(context, _)| context.as_str())
            .collect();
        if labels == self.unoffered_labels {
            return;
        }
        let line = if unoffered.is_empty() {
            "every released activity has an executor that offers its labels again".to_string()
        } else {
            format!(
                "{}; relabel executors or add some that offer them",
                unoffered_text(unoffered)
            )
        };
        self.unoffered_labels = labels.into_iter().map(String::from).collect();
        match &self.bar {
            Some(bar) => bar.println(line),
            None if !self.quiet => eprintln!("{line}"),
            None => {}
        }
    }

    fn show(&mut self, tally: &Tally, running: usize, elapsed: Duration) {
        let mut message = format!(
            "running {running}, failed {}, cancelled {}",
            tally.failed, tally.cancelled
        );
        if !tally.unoffered.is_empty() {
            message.push_str(&format!(", {}", unoffered_text(&tally.unoffered)));
        }
        if let Some(bar) = &self.bar {
            bar.set_position(tally.settled() as u64);
            bar.set_message(message);
        } else if self.lines && self.last_line.elapsed() >= Duration::from_secs(10) {
            self.last_line = Instant::now();
            let total = tally.total - tally.skipped;
            let settled = tally.settled();
            // Work that no executor can take has no end to estimate.
            let eta = (settled > 0 && tally.unoffered.is_empty())
                .then(|| elapsed.as_secs_f64() * (total - settled) as f64 / settled as f64);
            eprintln!(
                "progress: {settled}/{total} settled ({} done), {message}{}",
                tally.done,
                eta.map_or(String::new(), |s| format!(", eta {s:.0} s"))
            );
        }
    }

    fn finish(&mut self, tally: &Tally) {
        if let Some(bar) = self.bar.take() {
            bar.set_position(tally.settled() as u64);
            bar.finish_and_clear();
        }
    }
}
