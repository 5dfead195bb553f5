//! `constellation run`: an activity graph on an embedded pool, journaled.
//!
//! The graph runs as activities: a [`Coordinator`] submits ready nodes and
//! reports each one it settles. This command watches those reports, writes
//! them to the journal as they come (so a killed run can be resumed), and
//! shows progress. On a pool, where an agent can die with the commands it
//! runs, each execution is an attempt too: one lost with its agent, and
//! one that ran again after its activity had settled ([`executions`]).
//!
//! A run stops early on SIGINT or SIGTERM, or on a pool when the pool node
//! is gone for longer than `--reconnect`: it starts no more commands,
//! kills the ones this process runs (whole process groups) and journals
//! each as an attempt that the stop ended, leaving its activity pending;
//! on a pool it first asks every agent to do the same with the commands of
//! its activities there, whose reports come back marked cancelled and are
//! journaled alike; then it marks the run `interrupted` and leaves its
//! pool with a goodbye, so that no member declares it dead. A resume runs
//! what did not finish, with nothing of this run still running beside it.

mod census;
mod executions;
mod full_disk;
pub(crate) mod pool;
mod progress;
mod record;

use std::collections::HashSet;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use clap::Args;
use constellation::collect::MultiEventCollector;
use constellation::net::Node;
use constellation::{ActivityId, Context, ContextList, NodeId};
use executors::shell::{Capture, ShellOutcome};
use gluein::service::{ServiceRequest, ServiceResponse};
use gluein::signals::OnStop;
use graph::{Coordinator, Graph, NodeReport, Relabel, ReleasedCounts, COORDINATOR_LABEL};
use journal::{ActivityUpdate, ExecutorRow, Journal, NewRun, RunStatus};

use census::Census;
use executions::Executions;
use pool::{
    check_contexts, check_pool_contexts, check_travel, executor_contexts, join_pool, local_pool,
    unoffered, Runner,
};
use progress::{JobProgressFile, Progress, Tally};
use record::{
    declare, graph_hash, journaled_sources, open_journal, plan_skips, update_for, NodeNames,
    Recording,
};

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
    /// With --pool: how long to wait for the pool node to come back when it
    /// is gone mid-run (e.g. `5m`), before the run stops with a message
    /// that says how to resume it. Default: stop at once.
    #[arg(long, value_parser = timefmt::parse_duration, value_name = "DURATION", requires = "pool")]
    reconnect: Option<Duration>,
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
    /// Print the end-of-run summary as one JSON object on stdout (run,
    /// journal, status, activity counts, re-executions, failures, wall
    /// time) instead of text, for scripts; progress still goes to stderr.
    #[arg(long)]
    json: bool,
    /// For the pool node's job service, which starts runners for submitted
    /// jobs: the run's counts (`gluein::service::JobCounts` as JSON) are
    /// written to FILE at every progress update and at the end, replaced
    /// atomically, so that `constellation jobs` can show a running job's
    /// counts without opening a journal its runner writes to. Hidden: it
    /// is the service's, not a person's.
    #[arg(long, value_name = "FILE", hide = true)]
    job_progress: Option<PathBuf>,
    /// For the job service, on behalf of `submit --wait-for-labels`: work
    /// that no executor of the pool offers to run does not refuse the run
    /// up front; it waits (progress says so) until an agent that offers its
    /// labels joins or is relabelled. Hidden, like --job-progress.
    #[arg(long, hide = true, requires = "pool")]
    wait_for_labels: bool,
    /// The most bytes the graph file, a sweep file or the context file may
    /// have (e.g. `64MiB`, `200M`, `1000000`); each must be a regular file.
    #[arg(long, default_value = "64MiB", value_parser = super::parse_byte_size, value_name = "SIZE")]
    max_graph_size: u64,
    /// For the job service: sweep files are read from DIR, where the pool
    /// node keeps the job's copy of each (named by `graph::kept_sweep_name`),
    /// not beside the graph file; and since the pool node keeps them, the
    /// journal stores each source's SHA-256 rather than its text. Hidden,
    /// like --job-progress.
    #[arg(long, value_name = "DIR", hide = true)]
    kept_sweeps: Option<PathBuf>,
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

/// Runs the graph; exits 0 if every activity succeeded, 1 if some failed,
/// 130 when stopped by SIGINT or SIGTERM, and 2 when its pool node is gone
/// for good.
pub fn main(args: RunArgs) -> anyhow::Result<ExitCode> {
    args.progress.check()?;
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
    let executors = executor_contexts(&args)?;
    if args.pool.is_some() {
        check_travel(&graph, &executors)?;
    }
    let node = match &args.pool {
        Some(pool) => Some(join_pool(pool, &args, &executors)?),
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
        sources: journaled_sources(&graph, args.kept_sweeps.is_some()),
    })?;
    // On a pool every node is named by host and id: two agents on one
    // host are two nodes. This process's own executors are one of them.
    let names = match &node {
        Some(_) => NodeNames::HostAndId,
        None => NodeNames::Host,
    };
    let own_name = match &node {
        Some(node) => names.name(&host, node.node_id()),
        None => host.clone(),
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let share = (cores / executors.len().max(1)).max(1) as i64;
    journal.record_executors(
        run,
        &(executors.iter().enumerate())
            .map(|(k, context)| ExecutorRow {
                executor: k as i64,
                node: own_name.clone(),
                labels: context.label_list(),
                cores: share,
            })
            .collect::<Vec<_>>(),
    )?;
    let mut census = Census::default();
    if let Some(node) = &node {
        census.record_new(node, &mut journal, run)?;
    }
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
    let expected = graph.len() - skipped;
    let mut recorder = Recorder::new(&graph, keys, skipped, names);
    // Ctrl-C stops the commands this process started and ends the run
    // with its summary, which names what still waits. Caught before any
    // command starts, so that none escapes the stop.
    gluein::signals::catch_stop_signals_as(OnStop::Interrupt)
        .context("cannot catch SIGINT and SIGTERM")?;
    let mut stop = None;
    if expected > 0 {
        let (collector, reports) = MultiEventCollector::new(expected);
        let collector = collector.on(coordination);
        let observer = pool.submit(collector)?;
        let mut coordinator =
            Coordinator::new(Arc::clone(&graph), &skip, observer).with_capture(capture);
        if let Runner::Node(_) = &runner {
            // Agents can die with their commands: every execution is
            // reported, so that each is an attempt in the journal.
            let (to, from) = std::sync::mpsc::channel();
            coordinator = coordinator.report_executions(to, pool.address());
            recorder.executions = Some(Executions::new(from, graph.len(), names));
        }
        let released = coordinator.released();
        debug_assert_eq!(coordinator.reports_expected(), expected);
        let coordinator = pool.submit(coordinator)?;
        let mut progress = Progress::new(args.progress, expected as u64);
        if let Some(path) = &args.job_progress {
            progress = progress.with_job_file(path);
        }
        // Reports are committed in groups at most COMMIT_EVERY apart: one
        // transaction per report would cost more than a short command. A
        // runner killed in between loses at most that much of the record,
        // and those activities run again on resume (at-least-once).
        let mut last_commit = Instant::now();
        let mut last_offer_check: Option<Instant> = None;
        let mut pool_node = PoolNodeWatch::default();
        // Why the journal could not be written, when its disk is full.
        let mut full: Option<String> = None;
        loop {
            let wait = COMMIT_EVERY.saturating_sub(last_commit.elapsed());
            let batch = reports.next_batch(wait.max(Duration::from_millis(1)))?;
            recorder.take_executions(Duration::ZERO);
            // Once every node is settled, executions may still end.
            let finished = batch.is_none() && recorder.drained(pool, coordinator);
            for event in batch.into_iter().flatten() {
                recorder.take(&graph, event_report(event)?);
            }
            if let Runner::Node(node) = &runner {
                // Work the pool gave up never reports: its node fails,
                // and what runs after it is cancelled.
                for (activity, reason) in node.take_lost() {
                    Coordinator::given_up(pool, coordinator, activity, format!("lost: {reason}"));
                }
                if let Some(executions) = &mut recorder.executions {
                    executions.check_members(node);
                }
                // Before the attempts are committed, so that they find
                // their executors listed, with cores.
                for (id, host) in recorder.new_nodes.drain(..) {
                    let listed = census.ran_on(node, id, &host, &mut journal, run);
                    full = full.or(full_disk::unless_full(listed)?);
                }
            }
            if gluein::signals::stop_requested() {
                stop = Some(Stop::Signal);
            } else if let Runner::Node(node) = &runner {
                stop = pool_node.check(node, args.reconnect.unwrap_or_default(), &progress);
            }
            let checking = last_offer_check.is_none_or(|at| at.elapsed() >= OFFER_CHECK_EVERY);
            if checking || stop.is_some() {
                last_offer_check = Some(Instant::now());
                recorder.tally.unoffered = unoffered(&graph, &released, &runner.offered());
                progress.unoffered(&recorder.tally.unoffered);
                if let (Runner::Node(node), true) = (&runner, stop.is_none()) {
                    // Agents that joined since, or were relabelled.
                    let listed = census.record_new(node, &mut journal, run);
                    full = full.or(full_disk::unless_full(listed)?);
                }
            }
            if finished || stop.is_some() || last_commit.elapsed() >= COMMIT_EVERY {
                let committed = recorder.commit(&mut journal, run);
                full = full.or(full_disk::unless_full(committed)?);
                last_commit = Instant::now();
                progress.show(
                    &recorder.tally,
                    running_now(&runner, &released),
                    started.elapsed(),
                );
            }
            if let (None, false, Some(why)) = (&stop, finished, &full) {
                progress.say(&format!(
                    "the disk holding the journal {} is full ({why}): no command starts any more",
                    journal_path.display()
                ));
                stop = Some(Stop::DiskFull);
            }
            if finished || stop.is_some() {
                break;
            }
        }
        progress.finish(&recorder.tally);
        if let Some(stop) = &stop {
            eprintln!("{}", stop.stopping());
            // The agents kill this run's commands too, asked first so that
            // their grace runs alongside this process's.
            let on_agents = match &runner {
                Runner::Node(node) => cancel_on_agents(node),
                Runner::Local(_) => 0,
            };
            let killed = executors::shell::kill_all_running(KILL_GRACE);
            recorder.killed(&killed);
            recorder.cancelled_awaited += on_agents;
            // Each killed command's report is on its way: wait for them, so
            // that every execution is an attempt in the journal.
            let deadline = Instant::now() + KILLED_REPORTS_WAIT;
            while recorder.awaiting() && Instant::now() < deadline {
                let Some(batch) = reports.next_batch(Duration::from_millis(50))? else {
                    break;
                };
                recorder.take_executions(Duration::ZERO);
                for event in batch {
                    recorder.take(&graph, event_report(event)?);
                }
            }
            recorder.take_executions(Duration::ZERO);
            if let Some(executions) = &mut recorder.executions {
                executions.unreported();
            }
            if recorder.awaiting() {
                eprintln!(
                    "warning: {} killed command(s) did not report within {} s; \
                     the journal has no attempt for them",
                    recorder.awaited.len() + recorder.cancelled_awaited,
                    KILLED_REPORTS_WAIT.as_secs()
                );
            }
        }
        // Everything taken, also what a full disk held back.
        full_disk::when_room(&journal_path, "the attempts made", || {
            recorder.commit(&mut journal, run)
        })?;
    }
    let tally = &recorder.tally;
    let status = if stop.is_some() {
        RunStatus::Interrupted
    } else if tally.failed + tally.cancelled > 0 {
        RunStatus::Failed
    } else {
        RunStatus::Succeeded
    };
    full_disk::when_room(&journal_path, "the run's end", || {
        Ok(journal.end_run(run, status)?)
    })?;
    if let Some(path) = &args.job_progress {
        // Nothing runs any more, whatever the last update said.
        JobProgressFile::new(path).write(tally, 0);
    }
    let re_executions = recorder.executions.as_ref().map(|e| (e.lost, e.extra));
    if args.json {
        let summary = RunJson {
            run,
            journal: journal_path.display().to_string(),
            graph: args.graph.display().to_string(),
            status: status.as_str(),
            activities: ActivityCountsJson {
                total: tally.total,
                skipped: tally.skipped,
                done: tally.done,
                failed: tally.failed,
                cancelled: tally.cancelled,
                interrupted: tally.interrupted,
                retried: tally.retried,
            },
            re_executions: re_executions.map(|(lost, extra)| ReExecutionsJson { lost, extra }),
            failures: tally.failures.clone(),
            wall_s: started.elapsed().as_secs_f64(),
        };
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print_summary(tally, re_executions, &journal_path, started.elapsed());
    }
    let Some(stop) = stop else {
        runner.done();
        return Ok(match status {
            RunStatus::Succeeded => ExitCode::SUCCESS,
            _ => ExitCode::from(1),
        });
    };
    // Not `runner.done()`, which waits for all work to finish.
    leave(runner);
    let unfinished = expected - tally.settled();
    match stop {
        Stop::Signal => {
            use std::io::Write as _;
            let _ = std::io::stdout().flush();
            std::process::exit(130);
        }
        Stop::DiskFull => bail!(
            "the disk holding the journal {} filled during the run: no command started after \
             that, and {unfinished} activities did not finish; the attempts made are journaled \
             and the run is interrupted; free space there and resume with \
             `constellation run {} --resume {}`",
            journal_path.display(),
            args.graph.display(),
            journal_path.display()
        ),
        Stop::PoolGone { since } => {
            let pool = args.pool.as_deref().unwrap_or_default();
            bail!(
                "the pool node at {pool} is gone (this run lost it {} s ago: it stopped, or stopped answering); \
                 {unfinished} activities did not finish; resume with \
                 `constellation run {} --resume {} --pool {pool}`",
                since.elapsed().as_secs(),
                args.graph.display(),
                journal_path.display()
            )
        }
    }
}

/// The end-of-run summary as text: counts, durations per kind, failures,
/// re-executions (lost with their agent, or extra results) and the journal.
fn print_summary(
    tally: &Tally,
    re_executions: Option<(usize, usize)>,
    journal_path: &Path,
    elapsed: Duration,
) {
    print!("{}", tally.summary(elapsed));
    if let Some((lost, extra)) = re_executions.filter(|(lost, extra)| lost + extra > 0) {
        println!(
            "re-executions: {} ({lost} lost with their agent, {extra} extra results), each an attempt in the journal",
            lost + extra,
        );
    }
    println!("journal: {}", journal_path.display());
}

/// What `run --json` prints at the end: one object, in the style of
/// `status --json` and `jobs --json`.
#[derive(serde::Serialize)]
struct RunJson {
    run: i64,
    journal: String,
    graph: String,
    status: &'static str,
    activities: ActivityCountsJson,
    /// Executions beyond one per activity, on a pool run: lost with their
    /// agent, or extra results after the activity settled.
    re_executions: Option<ReExecutionsJson>,
    failures: Vec<String>,
    wall_s: f64,
}

/// The graph's activities by how this run left them.
#[derive(serde::Serialize)]
struct ActivityCountsJson {
    total: usize,
    skipped: usize,
    done: usize,
    failed: usize,
    cancelled: usize,
    interrupted: usize,
    retried: usize,
}

/// See [`RunJson::re_executions`].
#[derive(serde::Serialize)]
struct ReExecutionsJson {
    lost: usize,
    extra: usize,
}

/// Loads the graph file at `path` and retargets it with the context file
/// and the `--relabel` rules, as `run` and `submit` do, saying what the
/// rules changed or did not match. Graph errors are listed as
/// `file:line:column: ...`, with their count. Every file is read within
/// `options` ([`graph::read_bounded`]). Returns the graph and the context
/// file's text, as read.
pub(crate) fn load_graph(
    path: &Path,
    context_file: Option<&Path>,
    relabel: &[Relabel],
    options: &graph::LoadOptions,
) -> anyhow::Result<(Graph, Option<String>)> {
    let mut graph = Graph::load_with(path, options).map_err(|errors| {
        anyhow::anyhow!("{errors}\n{} error(s) in the graph file", errors.0.len())
    })?;
    let (rules, context_text) = match context_file {
        Some(path) => {
            let text =
                graph::read_bounded(path, "context file", options.max_bytes, graph::RAISE_LIMIT)
                    .map_err(anyhow::Error::msg)?;
            let rules = graph::parse_context_rules(&text)
                .map_err(|error| anyhow::anyhow!("{}: {error}", path.display()))?;
            (rules, Some(text))
        }
        None => (Vec::new(), None),
    };
    let retargeted = graph.retarget(&rules, relabel);
    for warning in &retargeted.unused {
        eprintln!("warning: {warning}");
    }
    if retargeted.changed > 0 {
        eprintln!("retargeted {} activities", retargeted.changed);
    }
    Ok((graph, context_text))
}

/// What `run` suggests when work can run on no executor it has.
const RUN_HINT: &str =
    "add executors with --context or --add-executors, or retarget with --relabel or --context-file";

/// The longest a settled activity waits to be committed to the journal.
const COMMIT_EVERY: Duration = Duration::from_millis(50);

/// How often the run compares what released work needs with what the
/// executors offer (a relabel can take a label away at any time).
const OFFER_CHECK_EVERY: Duration = Duration::from_secs(1);

/// How long a command may take to end after the SIGTERM of a stopping run,
/// before it gets SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(3);

/// How long a pool run whose nodes have all settled waits for the report of
/// an execution at a time, while some still run.
const DRAIN_POLL: Duration = Duration::from_millis(20);

/// How long a stopping run waits for the reports of the commands it killed.
const KILLED_REPORTS_WAIT: Duration = Duration::from_secs(10);

/// How long a stopping run waits to have left its pool.
const LEAVE_WAIT: Duration = Duration::from_secs(10);

/// How long a stopping run waits for each agent's answer to its request to
/// kill the run's commands there.
const KILL_REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// How many agents a stopping run asks at once.
const KILL_REQUESTS_AT_ONCE: usize = 32;

/// Asks every agent of the pool to kill the commands of this run's
/// activities and to start none of them any more
/// ([`ServiceRequest::KillOrigin`], this node being their origin). Returns
/// how many activities will report because of it (killed commands, and
/// dropped retries reporting their failed attempt), each marked cancelled.
/// An agent that does not answer within [`KILL_REQUEST_TIMEOUT`] or refuses
/// is named in a warning: the stop goes on without it.
fn cancel_on_agents(node: &Node) -> usize {
    let agents: Vec<NodeId> = (pool::agents_of(node))
        .filter(|member| !member.master)
        .map(|member| member.node)
        .collect();
    if agents.is_empty() {
        return 0;
    }
    let request = gluein::service::encode(&ServiceRequest::KillOrigin {
        origin: executors::shell::origin_text(node.node_id()),
    });
    let (mut killed, mut dropped) = (0, 0);
    for group in agents.chunks(KILL_REQUESTS_AT_ONCE) {
        let answers: Vec<(NodeId, Result<ServiceResponse, String>)> = std::thread::scope(|scope| {
            let asking: Vec<_> = (group.iter())
                .map(|&agent| {
                    let request = request.clone();
                    scope.spawn(move || {
                        let answer = node
                            .ask_app(agent, request, KILL_REQUEST_TIMEOUT)
                            .map_err(|error| error.to_string())
                            .and_then(|bytes| gluein::service::decode(&bytes));
                        (agent, answer)
                    })
                })
                .collect();
            (asking.into_iter())
                .filter_map(|asked| asked.join().ok())
                .collect()
        });
        for (agent, answer) in answers {
            match answer {
                Ok(ServiceResponse::Killed {
                    running,
                    not_started,
                }) => {
                    killed += running;
                    dropped += not_started;
                }
                Ok(other) => eprintln!(
                    "warning: agent {agent} answered the request to kill this run's commands \
                     with {other:?}"
                ),
                Err(error) => eprintln!(
                    "warning: could not have agent {agent} kill this run's commands: {error}"
                ),
            }
        }
    }
    eprintln!(
        "asked {} agent(s) to kill this run's commands: {killed} killed, {dropped} retries dropped",
        agents.len()
    );
    killed + dropped
}

/// Why a run stopped before its graph was done.
enum Stop {
    /// SIGINT or SIGTERM.
    Signal,
    /// The pool node has been gone since `since`, longer than `--reconnect`.
    PoolGone { since: Instant },
    /// The disk holding the journal is full: what runs is not recorded.
    DiskFull,
}

impl Stop {
    /// What the run does now, in words.
    fn stopping(&self) -> &'static str {
        match self {
            Stop::Signal => "stopping: killing the commands this run started",
            Stop::PoolGone { .. } => {
                "stopping: the pool node did not come back; killing the commands this run started"
            }
            Stop::DiskFull => {
                "stopping: the journal cannot be written; killing the commands this run started"
            }
        }
    }
}

/// Watches a pool run's pool node: when it is gone, says so, and gives
/// up once it has been gone for longer than `--reconnect`.
#[derive(Default)]
struct PoolNodeWatch {
    gone_since: Option<Instant>,
}

impl PoolNodeWatch {
    /// [`Stop::PoolGone`] once the pool node has been gone for longer than
    /// `reconnect`.
    fn check(&mut self, node: &Node, reconnect: Duration, progress: &Progress) -> Option<Stop> {
        if !node.wait_for_master_gone(Some(Duration::ZERO)) {
            if self.gone_since.take().is_some() {
                progress.say("the pool node is back; the run goes on");
            }
            return None;
        }
        let since = *self.gone_since.get_or_insert_with(|| {
            progress.say(&if reconnect.is_zero() {
                "the pool node is gone (no member sees it any more)".to_string()
            } else {
                format!(
                    "the pool node is gone (no member sees it any more); \
                     waiting up to {} s for it to come back (--reconnect)",
                    reconnect.as_secs()
                )
            });
            Instant::now()
        });
        (since.elapsed() >= reconnect).then_some(Stop::PoolGone { since })
    }
}

/// Leaves the pool (a runner on one) or stops the embedded pool, waiting at
/// most [`LEAVE_WAIT`]: a runner that stops must end even if its pool
/// does not answer. The commands are dead by now, so the executors only
/// have to notice.
fn leave(runner: Runner) {
    let (left, leaving) = std::sync::mpsc::channel();
    let went = std::thread::Builder::new()
        .name("leave".to_string())
        .spawn(move || {
            match runner {
                // Says goodbye, so that no member declares this one dead.
                Runner::Node(node) => drop(node.leave()),
                Runner::Local(pool) => drop(pool),
            }
            let _ = left.send(());
        });
    if went.is_ok() && leaving.recv_timeout(LEAVE_WAIT).is_err() {
        eprintln!(
            "warning: the pool was not left within {} s",
            LEAVE_WAIT.as_secs()
        );
    }
}

/// Activities running now: in the embedded pool, its count; on a pool,
/// where they run on the agents, the coordinator's activities in flight
/// (submitted and not finished), at most one per executor offered.
fn running_now(runner: &Runner, released: &ReleasedCounts) -> usize {
    match runner {
        Runner::Local(pool) => pool.counts().running,
        Runner::Node(_) => {
            let in_flight: usize = (0..released.len()).map(|k| released.in_flight(k)).sum();
            let executors = (runner.offered().iter())
                .filter(|e| !super::is_internal(e))
                .count();
            in_flight.min(executors)
        }
    }
}

/// Turns the coordinator's reports into journal rows and counts.
struct Recorder {
    tally: Tally,
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
    awaited: HashSet<ActivityId>,
    /// Once the run stops: how many reports marked cancelled the agents
    /// said would come (commands they killed for this run), and have not.
    cancelled_awaited: usize,
    /// Whether the run has stopped: a command killed by a signal from then
    /// on was killed by the stop (the run's own kill, or the signal that
    /// stopped the run reaching its commands too).
    stopped: bool,
    /// Nodes whose command the stop killed: what they cancel stays pending.
    interrupted: HashSet<usize>,
    /// The nodes attempts ran on, by id.
    nodes_seen: HashSet<NodeId>,
    /// Those seen first since the caller last took them, with their host.
    new_nodes: Vec<(NodeId, String)>,
    /// On a pool: the executions reported, to journal those lost with
    /// their agent and extra ones.
    executions: Option<Executions>,
}

impl Recorder {
    fn new(graph: &Graph, keys: Vec<i64>, skipped: usize, names: NodeNames) -> Recorder {
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

    /// Takes the executions reported since the last call, waiting up to
    /// `wait` for one: after the batch of settling reports they go with,
    /// and before it is taken.
    fn take_executions(&mut self, wait: Duration) {
        let Some(executions) = &mut self.executions else {
            return;
        };
        let taken = executions.take_reports(wait);
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

    /// Whether nothing more will be reported, once every node has settled:
    /// no execution runs on `pool` or anywhere it sent work to. Then the
    /// coordinator `coordinator` is told so, and finishes. Waits a little
    /// for reports when there may be more.
    fn drained(&mut self, pool: &constellation::Pool, coordinator: ActivityId) -> bool {
        if self.executions.is_none() {
            return true;
        }
        // Read before the reports are taken: whatever was reported before
        // the pool was seen idle is taken below.
        let idle = pool.outstanding() == 0;
        self.take_executions(Duration::ZERO);
        if idle && self.executions.as_ref().is_some_and(Executions::drained) {
            Coordinator::close(pool, coordinator);
            return true;
        }
        self.take_executions(DRAIN_POLL);
        false
    }

    /// The run stopped and killed the commands of `killed`.
    fn killed(&mut self, killed: &[ActivityId]) {
        self.stopped = true;
        self.awaited.extend(killed.iter().copied());
    }

    /// Whether reports of commands the stop killed are still to come.
    fn awaiting(&self) -> bool {
        !self.awaited.is_empty() || self.cancelled_awaited > 0
    }

    /// Counts and records one report.
    fn take(&mut self, graph: &Graph, report: NodeReport) {
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
    fn commit(&mut self, journal: &mut Journal, run: i64) -> anyhow::Result<()> {
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

/// The coordinator's report in an event.
fn event_report(event: constellation::Event) -> anyhow::Result<NodeReport> {
    event
        .take()
        .context("the coordinator sent a report this build cannot read")
}
