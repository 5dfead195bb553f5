//! `constellation submit`: hands a graph to the pool node's job service
//! and returns at once.
//!
//! The graph is loaded and checked here first, so that a typo is reported
//! to the person who made it, as `run` reports it, and not in a log on the
//! pool node. Then the work is checked against what the pool's agents
//! offer, and the job is sent with the files as read here (the graph,
//! its sweep files, the context file), which the pool node keeps and
//! runs: its runner starts on the pool node's machine, in the
//! submitter's working directory, which it shares with this machine (as
//! it shares the pool key) for the commands' own files.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use clap::Args;
use gluein::service::{
    check_job_name, JobSubmission, ServiceRequest, ServiceResponse, SubmittedFiles,
};
use graph::Relabel;
use serde::Serialize;

use super::run::pool::{check_pool_contexts, check_travel};
use super::{ask_master, join_as_observer, unexpected_answer, ServiceAddress, ServiceError};

/// Arguments of `constellation submit`.
#[derive(Args)]
#[command(after_help = "\
Examples:
  constellation submit pipeline.toml --pool ~/pools/vu.json
  constellation submit pipeline.toml --name survey-night --priority 10
  constellation submit pipeline.toml --relabel cpu=gpu --json | jq .id
  id=$(constellation submit pipeline.toml --json | jq .id) && constellation wait \"$id\"

The job runs on the pool's agents under a runner that the pool node
starts on its own machine, in this directory. The graph file, its sweep
files and the context file are sent with the job, and the pool node keeps
that copy: the job runs them as they were at submit, whatever happens to
the files afterwards. The commands' own files must be where the pool node
can see them (a shared file system). Each of those files must be a
regular file under --max-graph-size.

A submit whose answer does not come is sent again (3 tries, each waiting
--timeout), with a token that makes the pool node answer with the job it
already took rather than make another. The job's journal and runner log are in the pool's state
directory; `constellation job ID` shows them.

Sharing: at most `pool start --max-jobs` jobs run at once. A queued job
starts when a slot is free: highest --priority first, then in submit
order. Jobs that run at once share the agents about evenly, whatever
their priority.

Work that no agent of the pool offers to run is refused, listed, unless
--wait-for-labels asks to queue it until an agent that offers its labels
joins or is relabelled.")]
pub(crate) struct SubmitArgs {
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
    /// The most bytes the graph file, a sweep file or the context file may
    /// have (e.g. `64MiB`, `200M`); each must be a regular file.
    #[arg(long, default_value = "64MiB", value_parser = super::parse_byte_size, value_name = "SIZE")]
    max_graph_size: u64,
}

/// What `--json` prints.
#[derive(Serialize)]
struct SubmittedJson {
    id: u64,
    name: String,
}

/// Checks the graph, sends it, and prints the job's id.
pub(crate) fn main(args: SubmitArgs) -> anyhow::Result<ExitCode> {
    if let Some(name) = &args.name {
        check_job_name(name).map_err(|error| {
            anyhow::anyhow!("--name: {error}; leave it out to name the job after its graph file")
        })?;
    }
    let options = graph::LoadOptions {
        max_bytes: args.max_graph_size,
        kept_sweeps: None,
    };
    let (graph, context_text) = super::run::load_graph(
        &args.graph,
        args.context_file.as_deref(),
        &args.relabel,
        &options,
    )?;
    // Its runner has no executors: every activity must reach an agent.
    check_travel(&graph, &[])?;
    let name = args.name.clone().unwrap_or_else(|| stem(&args.graph));
    check_job_name(&name).map_err(|error| {
        anyhow::anyhow!(
            "the graph file's name cannot name the job: {error}; give one with --name NAME"
        )
    })?;
    let files = SubmittedFiles {
        graph: graph.sources()[0].1.clone(),
        sweeps: graph.sources()[1..].to_vec(),
        context: context_text,
    };
    let request = ServiceRequest::Submit(submission(&args, files)?);
    check_fits_a_frame(&request, &args.graph)?;
    let node = join_as_observer(&args.service.address, "submit", args.service.timeout)?;
    if !args.wait_for_labels {
        // What the pool's agents offer, once the member list has settled
        // where something is missing.
        if let Err(error) = check_pool_contexts(&graph, &node, &[], SUBMIT_HINT) {
            node.leave();
            return Err(error);
        }
    }
    drop(graph);
    let answer = ask_until_answered(&node, &request, args.service.timeout);
    node.leave();
    let id = match answer.context("the pool did not take the job")? {
        ServiceResponse::Submitted { id } => id,
        other => return Err(unexpected_answer("the new job's id", &other)),
    };
    if args.json {
        println!("{}", serde_json::to_string(&SubmittedJson { id, name })?);
    } else {
        println!("submitted job {id} ({name})");
    }
    Ok(ExitCode::SUCCESS)
}

/// How many times `submit` sends its request when no answer comes.
const SUBMIT_TRIES: usize = 3;

/// Sends the submit request until the pool node answers, at most
/// [`SUBMIT_TRIES`] times, each waiting at most `timeout`. Every try
/// carries the same submit token, so a job that the pool node took on a
/// try whose answer was lost is answered again, not made twice.
fn ask_until_answered(
    node: &constellation::net::Node,
    request: &ServiceRequest,
    timeout: std::time::Duration,
) -> Result<ServiceResponse, ServiceError> {
    let mut tries = 1;
    loop {
        match ask_master(node, request, timeout) {
            Err(ServiceError::NoAnswer(why)) if tries < SUBMIT_TRIES => {
                tries += 1;
                eprintln!(
                    "{why}; asking again (try {tries} of {SUBMIT_TRIES}) with the same submit \
                     token, so that the job is not made twice"
                );
            }
            answer => return answer,
        }
    }
}

/// Refuses a request too large for one network frame, naming the graph
/// and the sizes, before the pool is joined.
fn check_fits_a_frame(request: &ServiceRequest, graph: &Path) -> anyhow::Result<()> {
    // Room for the app request's own framing around the JSON body.
    const HEADROOM: usize = 64 * 1024;
    let size = gluein::service::encode(request).len();
    let limit = constellation::net::codec::DEFAULT_MAX_FRAME - HEADROOM;
    if size > limit {
        bail!(
            "the job's request (the graph file {} with its sweep and context files) takes \
             {size} bytes, over the {limit} bytes one request to the pool node may carry; \
             split the graph, or run it with `constellation run --pool`",
            graph.display()
        );
    }
    Ok(())
}

/// What `submit` suggests when work can run on no agent of the pool.
const SUBMIT_HINT: &str = "start agents that offer those labels (`constellation agent --context \
     LABELS`), relabel agents (`constellation relabel`), retarget the work with --relabel or \
     --context-file, or submit with --wait-for-labels to queue it until such an agent joins";

/// The job as the pool node takes it: the files as read here, absolute
/// paths (to show and to name the job by), the working directory, who
/// submits it, and a fresh submit token.
fn submission(args: &SubmitArgs, files: SubmittedFiles) -> anyhow::Result<JobSubmission> {
    let graph = std::path::absolute(&args.graph)
        .with_context(|| format!("cannot make {} absolute", args.graph.display()))?;
    let context_file = match &args.context_file {
        Some(path) => Some(
            std::path::absolute(path)
                .with_context(|| format!("cannot make {} absolute", path.display()))?,
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
        files: Some(Box::new(files)),
        token: Some(submit_token()?),
    })
}

/// 128 random bits as hex, from the kernel: a submit token no other
/// `submit` makes.
fn submit_token() -> anyhow::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut random| std::io::Read::read_exact(&mut random, &mut bytes))
        .context("cannot read /dev/urandom for a submit token")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
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
