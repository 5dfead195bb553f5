//! `constellation pool start`: the node that agents and runners join.
//!
//! The pool always has a key (loopback is open to every local user), and
//! the node claims its pool file with a lock for its whole life: see
//! [`gluein::poolfile`]. Its state directory keeps its libp2p identity and
//! the port it listened on, so that a pool node killed and started again
//! on the same state directory has the same peer id and address, and
//! writes the same pool file: members that knew it can find it again.
//!
//! The pool node hosts the job service ([`gluein::service::jobs`]): graphs handed
//! to it with `constellation submit` run as jobs, each in a runner process
//! of its own, and the state directory keeps the jobs across restarts.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use constellation::net::key::{self, KeyError};
use constellation::net::{AppHandler, AppRequest, Multiaddr, Node, NodeConfig, PoolKey};
use constellation::{ExecutorContext, Pool};
use gluein::poolfile::{self, PoolFile, PoolFileLock, StateDir};
use gluein::service::jobs::supervisor::DEFAULT_MAX_JOBS;
use gluein::service::jobs::{JobService, ServiceConfig};
use gluein::service::{self, ServiceRequest};
use gluein::signals;

/// Arguments of `constellation pool`.
#[derive(Args)]
pub(crate) struct PoolArgs {
    #[command(subcommand)]
    command: PoolCommand,
}

#[derive(Subcommand)]
enum PoolCommand {
    /// Start a pool node and write the pool file agents join with.
    Start(StartArgs),
}

/// Arguments of `constellation pool start`.
#[derive(Args)]
#[command(after_help = "\
Examples:
  constellation pool start                      # all interfaces, a new key next to the pool file
  constellation pool start --listen /ip4/127.0.0.1/tcp/0   # this machine only
  constellation agent --pool constellation-pool.json       # then, on any node that can reach it

Every pool has a key, loopback included (on a shared machine, every local
user can reach loopback). The key file and the pool file are mode 0600:
whoever joins must be able to read both, so on a cluster keep them on the
shared home file system.

One live pool per pool file: a second `pool start` on a pool file whose
pool runs is refused. A pool file left by a pool that was killed is
replaced.

The state directory keeps the pool node's identity (its peer id) and the
port it listened on. Started again on the same state directory, after a
crash or `kill -9`, the pool has the same peer id and, when --listen asks
for port 0 and the old port is free, the same address: its pool file is
the same as before.

Jobs: `constellation submit GRAPH --pool FILE` hands a graph to this pool
node and returns at once; the pool node runs it as a job, in a runner
process of its own on this machine, in the submitter's directory (a file
system both share, as they share the key). `constellation jobs` lists the
jobs, `constellation job ID` shows one, `constellation wait ID` waits for
it and `constellation cancel ID` cancels it.

Sharing: at most --max-jobs jobs run at once. A queued job starts when a
slot is free: highest --priority first, then in submit order. Jobs that run
at once share the agents: idle agents take the queued work of every running
job at random, so they share the executors about evenly.

The state directory keeps the jobs (jobs.db, and jobs/ID/ with each job's
run journal and runner log). Killed (kill -9) and started again on the same
state directory, the pool node finds its jobs: runners that still run are
waited for (they wait up to 10 minutes for a pool node that is gone), the
others are resumed; what their journals call done stays done.

The pool runs until Ctrl-C or SIGTERM; it then stops the jobs' runners
(their jobs resume at the next start on this state directory), leaves the
pool and removes the pool file.")]
pub(crate) struct StartArgs {
    /// Where to listen. The default takes every interface and a free port
    /// (the port of the last start on this state directory, if still free).
    #[arg(long, default_value = "/ip4/0.0.0.0/tcp/0", value_name = "MULTIADDR")]
    listen: String,
    /// The pool key. Default: the pool file's name with `.key`, created
    /// (mode 0600) if missing.
    #[arg(long, value_name = "FILE")]
    key_file: Option<PathBuf>,
    /// Where to write the pool file (mode 0600).
    #[arg(long, default_value = "constellation-pool.json", value_name = "FILE")]
    pool_file: PathBuf,
    /// Where the pool node keeps its identity and address across restarts.
    /// Default: the pool file's name with `.state` instead of its extension,
    /// beside it (created mode 0700).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// This node's site, for hierarchical stealing.
    #[arg(long, env = "CONSTELLATION_SITE")]
    site: Option<String>,
    /// How many submitted jobs run at once; the others wait in the queue,
    /// highest --priority first, then in submit order.
    #[arg(long, default_value_t = DEFAULT_MAX_JOBS, value_name = "N", value_parser = at_least_one)]
    max_jobs: usize,
}

/// A count of 1 or more: a pool that runs no job would queue every job
/// for good, and an agent of no executors would take no work (`agent
/// -n` uses it too).
pub(super) fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_string()),
        Ok(n) => Ok(n),
        Err(error) => Err(format!("not a count: {error}")),
    }
}

/// How long a stopping pool node waits for its jobs' runners to have
/// journaled their runs as interrupted.
const RUNNERS_STOP_WAIT: Duration = Duration::from_secs(20);

/// Starts the pool node and serves until stopped.
pub(crate) fn main(args: PoolArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        PoolCommand::Start(start) => serve(start),
    }
}

fn serve(args: StartArgs) -> anyhow::Result<ExitCode> {
    let listen: Multiaddr = args
        .listen
        .parse()
        .with_context(|| format!("--listen {:?} is not a multiaddr", args.listen))?;
    let (claim, state, key_file, key) = claim_files(&args).map_err(with_pool_file_advice)?;
    let (identity, new) = state.identity()?;
    eprintln!(
        "pool node {} ({} identity, kept in {})",
        identity.public().to_peer_id(),
        if new { "a new" } else { "its previous" },
        state.path().display()
    );
    // Caught before the pool file appears: whoever sees the file may stop
    // the pool at once, and it must still remove its file.
    signals::catch_stop_signals().context("cannot catch SIGINT and SIGTERM")?;
    // Requests may come as soon as the node listens; the service starts
    // once the pool file is written, since the runners it may restart
    // join with it.
    let jobs: Arc<OnceLock<JobService>> = Arc::default();
    let config = NodeConfig {
        listen: listen.clone(),
        key: Some(key),
        site: args.site.clone(),
        master: true,
        role: "pool".into(),
        host: executors::probe::hostname(),
        identity: Some(identity),
        app_handler: Some(job_requests(Arc::clone(&jobs))),
        ..NodeConfig::default()
    };
    let node = start_node(config, state.last_listen())?;
    if let Some(listened) = node
        .listen_addrs()
        .first()
        .and_then(poolfile::tcp_port)
        .and_then(|port| poolfile::with_tcp_port(&listen, port))
    {
        state.save_listen(&listened)?;
    }
    let file = PoolFile {
        addresses: node
            .listen_addrs()
            .iter()
            .map(ToString::to_string)
            .collect(),
        key_file: Some(std::fs::canonicalize(&key_file).unwrap_or(key_file)),
        pid: std::process::id(),
        started: journal::unix_seconds(std::time::SystemTime::now()),
    };
    file.save(&args.pool_file)?;
    let service = ServiceConfig::new(state.path(), &args.pool_file, args.max_jobs)
        .and_then(JobService::start);
    let service = match service {
        Ok(service) => service,
        Err(error) => {
            // No pool file may name a pool node that is not there.
            let _ = std::fs::remove_file(&args.pool_file);
            return Err(error);
        }
    };
    let jobs = jobs.get_or_init(|| service);
    println!("pool listening on:");
    for address in &file.addresses {
        println!("  {address}");
    }
    println!(
        "pool file {}; agents join with\n  constellation agent --pool {}",
        args.pool_file.display(),
        args.pool_file.display()
    );
    let mut members = 0;
    while !signals::stop_requested() {
        std::thread::sleep(Duration::from_millis(200));
        let now = node.members().len();
        if now != members {
            eprintln!("{now} member(s) in the pool");
            members = now;
        }
    }
    // Before leaving: a runner that stops tells the agents to kill its
    // commands, and leaves the pool node with a goodbye.
    jobs.stop(RUNNERS_STOP_WAIT);
    eprintln!(
        "stopping: leaving the pool and removing {}",
        args.pool_file.display()
    );
    // Removed while the claim is held: no other pool can own the file yet.
    let _ = std::fs::remove_file(&args.pool_file);
    node.leave();
    drop(claim);
    Ok(ExitCode::SUCCESS)
}

/// The pool's files: the claim on its pool file, its state directory, and
/// its key (created if missing). Each is refused when this user may not
/// trust it (see the `trust` crate): a key or state directory another user
/// planted would run that user's work as this one.
fn claim_files(args: &StartArgs) -> anyhow::Result<(PoolFileLock, StateDir, PathBuf, PoolKey)> {
    // The claim comes first: a start refused because a live pool owns the
    // pool file must change nothing, neither its files nor its key.
    let claim = PoolFileLock::acquire(&args.pool_file)?;
    if let Some(stale) = claim.stale() {
        let whose = match stale.pid {
            Some(pid) => format!(" (its pool, pid {pid}, is gone)"),
            None => " (its pool is gone)".to_string(),
        };
        eprintln!(
            "replacing the stale pool file {}{whose}",
            args.pool_file.display()
        );
    }
    let state_path =
        (args.state_dir.clone()).unwrap_or_else(|| StateDir::default_for(&args.pool_file));
    let state = StateDir::open(&state_path)?;
    let key_file = (args.key_file.clone()).unwrap_or_else(|| args.pool_file.with_extension("key"));
    // Created when missing, never through a link; one already there is
    // read only if it may be trusted.
    let key = match key::write_new_file(&key_file) {
        Ok(created) => {
            eprintln!("created the pool key {} (mode 0600)", key_file.display());
            created
        }
        Err(KeyError::AlreadyExists { .. }) => key::read_file(&key_file)?,
        Err(error) => return Err(error.into()),
    };
    Ok((claim, state, key_file, key))
}

/// A refused file of the pool, with the way out that `pool start` has: a
/// pool file in a directory only this user may write, beside which its
/// key, lock and state directory go.
fn with_pool_file_advice(error: anyhow::Error) -> anyhow::Error {
    let refused = error.chain().any(|cause| {
        cause.is::<trust::Refusal>() || matches!(cause.downcast_ref(), Some(KeyError::Untrusted(_)))
    });
    if !refused {
        return error;
    }
    anyhow::anyhow!(
        "{}. With `--pool-file ~/pools/NAME.json` (a directory only you can write), the \
         pool's key, lock and state directory go beside it",
        clitools::error_message(&error)
    )
}

/// The pool node's answer to app requests: the job service's requests,
/// once the service has started.
fn job_requests(jobs: Arc<OnceLock<JobService>>) -> AppHandler {
    Arc::new(move |request: AppRequest| {
        let Some(jobs) = jobs.get() else {
            return Err(service::SERVICE_STARTING.to_string());
        };
        let request: ServiceRequest = service::decode(&request.body)?;
        jobs.handle(request).map(|answer| service::encode(&answer))
    })
}

/// Starts the pool node. When `config` asks for port 0, the port of the
/// last start (`previous`) comes first, so that a restarted pool keeps its
/// address; a new port, with a warning, when that one is taken.
fn start_node(config: NodeConfig, previous: Option<Multiaddr>) -> anyhow::Result<Node> {
    // The pool node runs no work itself: one executor offering a label
    // nothing asks for gives work stolen back to it a place to wait.
    let holds_only: ExecutorContext = "constellation:pool".parse().expect("a label");
    let builder = || Pool::builder().executor(holds_only.clone());
    let again = previous
        .as_ref()
        .and_then(poolfile::tcp_port)
        .filter(|&port| port != 0 && poolfile::tcp_port(&config.listen) == Some(0))
        .and_then(|port| Some((port, poolfile::with_tcp_port(&config.listen, port)?)));
    if let Some((port, listen)) = again {
        let same = NodeConfig {
            listen,
            ..config.clone()
        };
        match Node::start(same, builder()) {
            Ok(node) => return Ok(node),
            Err(error) => {
                // The driver's text for a taken port is often empty, so
                // the warning names the likely cause and the log keeps it.
                tracing::debug!("listening on the previous port {port}: {error}");
                eprintln!(
                    "warning: cannot listen on the pool's previous port {port} (taken?); \
                     listening on a new port, so members must join with the new pool file"
                );
            }
        }
    }
    Ok(Node::start(config, builder())?)
}
