//! `constellation submit`: hands a graph to the pool node's job service
//! and returns at once.
//!
//! The graph is loaded and checked here first, so that a typo is reported
//! to the person who made it, as `run` reports it, and not in a log on the
//! pool node. Then the work is checked against what the pool's agents
//! offer, and the job is sent with absolute paths: its runner starts on
//! the pool node's machine, in the submitter's working directory, which
//! it shares with this machine (as it shares the pool key).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use clap::Args;
use gluein::service::{JobSubmission, ServiceRequest, ServiceResponse};
use graph::Relabel;
use serde::Serialize;

use super::run::pool::{check_pool_contexts, check_travel};
use super::{ask_master, join_as_observer, unexpected_answer, ServiceAddress};

/// Arguments of `constellation submit`.
#[derive(Args)]
#[command(after_help = "\
Examples:
  constellation submit pipeline.toml --pool ~/pools/vu.json
  constellation submit pipeline.toml --name survey-night --priority 10
  constellation submit pipeline.toml --relabel cpu=gpu --json | jq .id
  id=$(constellation submit pipeline.toml --json | jq .id) && constellation wait \"$id\"

The job runs on the pool's agents under a runner that the pool node
starts on its own machine, in this directory: the graph, the context file
and the commands' files must be where the pool node can see them (a shared
file system). The job's journal and runner log are in the pool's state
directory; `constellation job ID` shows them.

Sharing: at most `pool start --max-jobs` jobs run at once. A queued job
starts when a slot is free: highest --priority first, then in submit
order. Jobs that run at once share the agents about evenly, whatever
their priority.

Work that no agent of the pool offers to run is refused, listed, unless
--wait-for-labels asks to queue it until an agent that offers its labels
joins or is relabelled.")]
pub struct SubmitArgs {
    /// The graph file (TOML, or JSON if it ends in .json).
    graph: PathBuf,
    #[command(flatten)]
    service: ServiceAddress,
    /// A name to list the job by. Default: the graph file's name without
    /// its extension.
    #[arg(long)]
    name: Option<String>,
    /// Renames a label in every activity's context, e.g. `cpu=gpu`. Repeatable.
    #[arg(long, value_name = "FROM=TO")]
    relabel: Vec<Relabel>,
    /// A TOML file mapping activity ids or `*` globs to contexts; applied
    /// before --relabel.
    #[arg(long, value_name = "FILE")]
    context_file: Option<PathBuf>,
    /// Among queued jobs, a higher priority starts first (negative ones
    /// after the default 0).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i32,
    /// Accept work that no agent offers to run now: it waits until an agent
    /// that offers its labels joins or is relabelled.
    #[arg(long)]
    wait_for_labels: bool,
    /// Print `{"id":N,"name":...}` instead of a sentence, for scripts.
    #[arg(long)]
    json: bool,
}

/// What `--json` prints.
#[derive(Serialize)]
struct SubmittedJson {
    id: u64,
    name: String,
}

/// Checks the graph, sends it, and prints the job's id.
pub fn main(args: SubmitArgs) -> anyhow::Result<ExitCode> {
    if args
        .name
        .as_deref()
        .is_some_and(|name| name.trim().is_empty())
    {
        bail!("--name is empty; leave it out to name the job after its graph file");
    }
    let graph = super::run::load_graph(&args.graph, args.context_file.as_deref(), &args.relabel)?;
    // Its runner has no executors: every activity must reach an agent.
    check_travel(&graph, &[])?;
    let submission = submission(&args)?;
    let node = join_as_observer(&args.service.address, "submit", args.service.timeout)?;
    if !args.wait_for_labels {
        // What the pool's agents offer, once the member list has settled
        // where something is missing.
        if let Err(error) = check_pool_contexts(&graph, &node, &[], SUBMIT_HINT) {
            node.leave();
            return Err(error);
        }
    }
    let answer = ask_master(
        &node,
        &ServiceRequest::Submit(submission),
        args.service.timeout,
    );
    node.leave();
    let id = match answer.context("the pool did not take the job")? {
        ServiceResponse::Submitted { id } => id,
        other => return Err(unexpected_answer("the new job's id", &other)),
    };
    let name = args.name.clone().unwrap_or_else(|| stem(&args.graph));
    if args.json {
        println!("{}", serde_json::to_string(&SubmittedJson { id, name })?);
    } else {
        println!("submitted job {id} ({name})");
    }
    Ok(ExitCode::SUCCESS)
}

/// What `submit` suggests when work can run on no agent of the pool.
const SUBMIT_HINT: &str = "start agents that offer those labels (`constellation agent --context \
     LABELS`), relabel agents (`constellation relabel`), retarget the work with --relabel or \
     --context-file, or submit with --wait-for-labels to queue it until such an agent joins";

/// The job as the pool node takes it: absolute paths, the working
/// directory, and who submits it.
fn submission(args: &SubmitArgs) -> anyhow::Result<JobSubmission> {
    let graph = std::fs::canonicalize(&args.graph)
        .with_context(|| format!("cannot find the graph file {}", args.graph.display()))?;
    let context_file = match &args.context_file {
        Some(path) => Some(
            std::fs::canonicalize(path)
                .with_context(|| format!("cannot find the context file {}", path.display()))?,
        ),
        None => None,
    };
    let cwd = std::env::current_dir().context("cannot tell the working directory")?;
    Ok(JobSubmission {
        graph,
        cwd,
        name: args.name.clone(),
        relabel: (args.relabel.iter())
            .map(|rule| format!("{}={}", rule.from, rule.to))
            .collect(),
        context_file,
        priority: args.priority,
        wait_for_labels: args.wait_for_labels,
        submitter: submitter(),
    })
}

/// `user@host`: the user from the environment, or the numeric uid where
/// it names none (a batch job's bare environment).
fn submitter() -> String {
    let user = ["USER", "LOGNAME"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|user| !user.is_empty()))
        // SAFETY: getuid has no preconditions and cannot fail.
        .unwrap_or_else(|| format!("uid {}", unsafe { libc::getuid() }));
    format!("{user}@{}", executors::probe::hostname())
}

/// The graph file's name without its extension: the job's default name.
fn stem(graph: &Path) -> String {
    graph.file_stem().map_or_else(
        || graph.display().to_string(),
        |stem| stem.to_string_lossy().into_owned(),
    )
}
