//! `constellation run`: an activity graph on an embedded pool, journaled.
//!
//! The graph runs as activities: a [`Coordinator`](graph::Coordinator)
//! submits ready nodes and reports each one it settles. This command
//! watches those reports, writes them to the journal as they come (so a
//! killed run can be resumed), and shows progress. On a pool, where an agent can die with the commands it
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
//!
//! [`session::RunSession`] owns a run from its set-up to its end; `main`
//! only drives it.

mod census;
mod executions;
mod full_disk;
mod inputs;
pub(crate) mod pool;
mod progress;
mod record;
mod session;
mod setup;
mod stop;
mod summary;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use clap::Args;
use graph::{Graph, Relabel};

use session::RunSession;

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
pub(crate) struct RunArgs {
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
    pub(crate) fn joins_a_pool(&self) -> bool {
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
pub(crate) fn main(args: RunArgs) -> anyhow::Result<ExitCode> {
    let mut session = RunSession::new(args)?;
    if session.start()? {
        while session.running() {
            session.on_batch()?;
            session.on_tick()?;
        }
        session.on_stop()?;
    }
    session.finish()
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
