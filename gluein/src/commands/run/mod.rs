//! `constellation run`: an activity graph on an embedded pool, journaled.
//!
//! The graph runs as activities: a [`Coordinator`] submits ready nodes and
//! reports each one it settles. This command watches those reports, writes
//! them to the journal as they come (so a killed run can be resumed), and
//! shows progress.

mod pool;
mod progress;
mod record;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use clap::Args;
use constellation::collect::MultiEventCollector;
use constellation::{Context, ContextList};
use executors::shell::Capture;
use graph::{Coordinator, Graph, NodeReport, Relabel, COORDINATOR_LABEL};
use journal::{ExecutorRow, NewRun, RunStatus};

use pool::{
    check_contexts, executor_contexts, join_pool, local_pool, pool_executors, unoffered, Runner,
};
use progress::{Progress, Tally};
use record::{declare, graph_hash, open_journal, plan_skips, update_for};

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
    /// Where the commands' output goes: `files` (a folder per activity
    /// with `stdout` and `stderr`, for those that wrote any) or `stream`
    /// (a few stream files, one per executor, for many activities; read
    /// one activity's output with `constellation output RUN ID`).
    #[arg(long, default_value = "files", value_name = "MODE")]
    output: OutputMode,
}

/// Where the commands' output goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum OutputMode {
    /// Files in a folder per activity.
    Files,
    /// A few stream files shared by all activities.
    Stream,
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
    let capture = match args.output {
        OutputMode::Files => Capture::Files {
            dir: output_dir.clone(),
        },
        OutputMode::Stream => Capture::Stream {
            dir: output_dir.clone(),
        },
    };
    let hashes: Vec<u64> = (0..graph.len()).map(|n| graph.spec_hash(n)).collect();
    let skip = plan_skips(&graph, &hashes, &journal)?;
    let skipped = skip.iter().filter(|&&s| s).count();

    let host = executors::probe::hostname();
    let run = journal.begin_run(&NewRun {
        graph_path: args.graph.display().to_string(),
        graph_hash: graph_hash(&graph, &hashes),
        host: host.clone(),
        command_line: std::env::args().collect::<Vec<_>>().join(" "),
        output_dir: output_dir.display().to_string(),
        sources: graph.sources().to_vec(),
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
    let keys = declare(&mut journal, run, &graph, &hashes, &skip)?;
    drop(hashes);

    eprintln!(
        "run {run} of {}: {} activities{}, {} executor(s); journal {}",
        args.graph.display(),
        graph.len(),
        if skipped > 0 {
            format!(" ({skipped} done before, skipped)")
        } else {
            String::new()
        },
        executors.len(),
        journal_path.display()
    );

    // Shared with the coordinator, which renders each command from it.
    let graph = Arc::new(graph);
    let coordination = ContextList::single(Context::new(COORDINATOR_LABEL));
    let runner = match node {
        Some(node) => Runner::Node(node),
        None => Runner::Local(local_pool(&executors)?),
    };
    let pool = runner.pool();
    let started = Instant::now();
    let mut tally = Tally::new(&graph, skipped);
    let expected = graph.len() - skipped;
    // Ctrl-C ends the run with its summary, which names what still waits.
    gluein::signals::catch_stop_signals().context("cannot catch SIGINT and SIGTERM")?;
    let mut interrupted = false;
    if expected > 0 {
        let (collector, reports) = MultiEventCollector::new(expected);
        let collector = collector.on(coordination);
        let observer = pool.submit(collector)?;
        let coordinator =
            Coordinator::new(Arc::clone(&graph), &skip, observer).with_capture(capture);
        let released = coordinator.released();
        debug_assert_eq!(coordinator.reports_expected(), expected);
        pool.submit(coordinator)?;
        let mut progress = Progress::new(args.progress, expected as u64);
        // Reports are committed in groups at most COMMIT_EVERY apart: one
        // transaction per report would cost more than a short command. A
        // runner killed in between loses at most that much of the record,
        // and those activities run again on resume (at-least-once).
        let mut updates = Vec::new();
        let mut last_commit = Instant::now();
        let mut last_offer_check: Option<Instant> = None;
        loop {
            let wait = COMMIT_EVERY.saturating_sub(last_commit.elapsed());
            let batch = reports.next_batch(wait.max(Duration::from_millis(1)))?;
            let finished = batch.is_none();
            for event in batch.into_iter().flatten() {
                let report = event_report(event)?;
                tally.count(&graph, &report);
                updates.push(update_for(&graph, &keys, &report));
            }
            interrupted = gluein::signals::stop_requested();
            if last_offer_check.is_none_or(|at| at.elapsed() >= OFFER_CHECK_EVERY) || interrupted {
                last_offer_check = Some(Instant::now());
                tally.unoffered = unoffered(&graph, &released, &runner.offered());
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

/// The longest a settled activity waits to be committed to the journal.
const COMMIT_EVERY: Duration = Duration::from_millis(50);

/// How often the run compares what released work needs with what the
/// executors offer (a relabel can take a label away at any time).
const OFFER_CHECK_EVERY: Duration = Duration::from_secs(1);

/// The coordinator's report in an event.
fn event_report(event: constellation::Event) -> anyhow::Result<NodeReport> {
    event
        .take()
        .context("the coordinator sent a report this build cannot read")
}
