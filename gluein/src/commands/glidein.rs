//! `constellation glidein`: pilot jobs that start agents on clusters.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};
use gluein::glidein::{self, alloc, pbs, runner, Backend, PbsFlavor, PilotSpec, SystemRunner};

/// Arguments of `constellation glidein`.
#[derive(Args)]
#[command(after_help = "\
Examples:
  constellation glidein slurm --nodes 4 --walltime 2h --executors-per-node 16 -- --partition=short
  constellation glidein pbs --nodes 2 --walltime 1h -- -q batch
  constellation glidein pbs --pbs-flavor pro --nodes 2 --walltime 1h -- -A proj42
  constellation glidein ssh --nodes 2 --hosts node1,node2 --walltime 8h
  constellation glidein ssh --hosts gpu1 --ssh-option Port=2222 --walltime 8h
  constellation glidein local --nodes 2 --walltime 30m --dry-run
  constellation glidein list
  constellation glidein cancel slurm-20261121T101500Z

Each pilot gets a directory under $CONSTELLATION_HOME/allocations (default
~/.constellation/allocations) with its script, job id, state, stdout and
stderr; the last 20 are kept. Agents leave before the walltime ends.")]
pub(crate) struct GlideinArgs {
    /// Longest wait for each query (squeue, scontrol, qstat, ssh) and cancel
    /// command (scancel, qdel, cancel.sh), default 30s; one that takes
    /// longer is killed and reported. Submissions are never cut short: a
    /// killed sbatch or qsub could leave a job nobody recorded.
    #[arg(
        long,
        global = true,
        value_parser = timefmt::parse_duration,
        env = "CONSTELLATION_GLIDEIN_TIMEOUT",
        value_name = "DURATION"
    )]
    command_timeout: Option<Duration>,
    #[command(subcommand)]
    command: GlideinCommand,
}

#[derive(Subcommand)]
enum GlideinCommand {
    /// Submit pilots to Slurm (`sbatch`; one agent per node with `srun`).
    Slurm(SubmitArgs),
    /// Submit pilots to PBS/Torque or PBS Pro/OpenPBS (`qsub`; one agent per
    /// node with `pbsdsh`).
    Pbs(PbsArgs),
    /// Start agents on hosts over ssh.
    Ssh(SshArgs),
    /// Start agents on this machine.
    Local(SubmitArgs),
    /// Show the allocations and their states (queried afresh).
    List {
        /// Print JSON (an object with an `allocations` array) for scripts.
        #[arg(long)]
        json: bool,
    },
    /// Cancel an allocation's job and its agents.
    Cancel {
        /// The allocation's id, as `glidein list` shows it.
        id: String,
    },
    /// Lift the pause on a backend after repeated failed submissions.
    Resume {
        /// slurm, pbs, ssh or local.
        backend: Backend,
    },
}

/// What every backend's submission takes.
#[derive(Args)]
struct SubmitArgs {
    /// Nodes (one agent each; for ssh, the number of --hosts).
    #[arg(long, default_value_t = 1)]
    nodes: usize,
    /// The job's walltime, e.g. `2h`, `30m`, `1-00:00:00`.
    #[arg(long, value_parser = timefmt::parse_duration, value_name = "DURATION")]
    walltime: Duration,
    /// Executors per agent (default: one per core of its node).
    #[arg(long, value_name = "K")]
    executors_per_node: Option<usize>,
    /// Labels for the agents' executors, e.g. `big,site:vu`.
    #[arg(long, value_name = "LABELS")]
    context: Option<String>,
    /// The agents' site.
    #[arg(long)]
    site: Option<String>,
    /// The pool file the agents join (must be readable on the nodes).
    #[arg(long, default_value = "constellation-pool.json", value_name = "FILE")]
    pool: PathBuf,
    /// The constellation binary on the nodes (default: this one).
    #[arg(long, value_name = "PATH")]
    agent_binary: Option<PathBuf>,
    /// Print the pilot script and the submit command; submit nothing.
    #[arg(long)]
    dry_run: bool,
    /// Raw arguments for sbatch or qsub, after `--`.
    #[arg(last = true, value_name = "BATCH ARGS")]
    raw: Vec<String>,
}

/// `glidein pbs`: the common arguments and the PBS family.
#[derive(Args)]
struct PbsArgs {
    #[command(flatten)]
    submit: SubmitArgs,
    /// Which PBS: `torque` (`-l nodes=N:ppn=K`, `pbsdsh -u`) or `pro` for
    /// PBS Professional and OpenPBS (`-l select=N:ncpus=K:mpiprocs=1`,
    /// `-l place=scatter`, `pbsdsh --`). Default: asks `qstat --version`
    /// (PBS Pro prints `pbs_version = ...`), torque if that does not tell.
    #[arg(long, value_name = "torque|pro")]
    pbs_flavor: Option<PbsFlavor>,
}

/// `glidein ssh`: the common arguments, the hosts and ssh options.
#[derive(Args)]
struct SshArgs {
    #[command(flatten)]
    submit: SubmitArgs,
    /// Hosts to start one agent on each, comma separated (`user@host` works).
    #[arg(long, value_delimiter = ',', value_name = "HOSTS", required = true)]
    hosts: Vec<String>,
    /// An option for every ssh call (start, `glidein list`, cancel), as
    /// `ssh -o` takes it, e.g. `--ssh-option Port=2222 --ssh-option
    /// IdentityFile=~/.ssh/cluster`; repeat for more. Your ~/.ssh/config
    /// applies too; these come first, so they win over it and over our
    /// defaults (BatchMode=yes, ConnectTimeout=10).
    #[arg(long = "ssh-option", value_name = "KEY=VALUE")]
    ssh_options: Vec<String>,
}

/// Runs a glidein subcommand.
pub(crate) fn main(args: GlideinArgs) -> anyhow::Result<ExitCode> {
    let root = alloc::default_root()?;
    // Submissions run as long as they take (see --command-timeout);
    // queries and cancels get the limit.
    let submitter = SystemRunner::new();
    let limit = args.command_timeout.unwrap_or(runner::DEFAULT_TIMEOUT);
    let runner = SystemRunner::new().with_timeout(limit);
    let submit = |backend, submit: SubmitArgs, extra: &dyn Fn(&mut PilotSpec)| {
        start(backend, submit, extra, &root, &submitter)
    };
    match args.command {
        GlideinCommand::Slurm(args) => submit(Backend::Slurm, args, &|_| {}),
        GlideinCommand::Pbs(args) => {
            let flavor = match args.pbs_flavor {
                Some(flavor) => flavor,
                None => detect_pbs_flavor(&runner),
            };
            submit(Backend::Pbs, args.submit, &|spec| spec.pbs_flavor = flavor)
        }
        GlideinCommand::Ssh(args) => submit(Backend::Ssh, args.submit, &|spec| {
            spec.hosts = args.hosts.clone();
            spec.ssh_options = args.ssh_options.clone();
        }),
        GlideinCommand::Local(args) => submit(Backend::Local, args, &|_| {}),
        GlideinCommand::List { json } => list(&root, &runner, json),
        GlideinCommand::Cancel { id } => {
            let mut allocation = alloc::load(&root.join(&id)).with_context(|| {
                format!(
                    "no allocation {id} in {}; see `constellation glidein list`",
                    root.display()
                )
            })?;
            let outcome = glidein::cancel(&mut allocation, &runner)?;
            println!("{id}: {outcome:?}");
            Ok(ExitCode::SUCCESS)
        }
        GlideinCommand::Resume { backend } => {
            glidein::resume(&root, backend)?;
            println!("{backend}: submissions allowed again");
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The PBS flavor `qstat --version` reports, said on stderr so the user
/// knows which script was written; Torque when it cannot tell.
fn detect_pbs_flavor(runner: &SystemRunner) -> PbsFlavor {
    match pbs::detect_flavor(runner) {
        Ok(flavor) => {
            eprintln!("PBS flavor: {flavor} (from `qstat --version`; choose with --pbs-flavor)");
            flavor
        }
        Err(error) => {
            let flavor = PbsFlavor::Torque;
            eprintln!(
                "PBS flavor: {flavor}, since `qstat --version` did not tell ({error}); \
                 choose with --pbs-flavor"
            );
            flavor
        }
    }
}

/// Submits (or, with --dry-run, shows) a pilot for `backend`; `extra`
/// fills in what only that backend's arguments have.
fn start(
    backend: Backend,
    args: SubmitArgs,
    extra: &dyn Fn(&mut PilotSpec),
    root: &std::path::Path,
    runner: &SystemRunner,
) -> anyhow::Result<ExitCode> {
    if !args.dry_run && !args.pool.exists() {
        bail!(
            "no pool file {}: start a pool first (`constellation pool start`), or name it with --pool",
            args.pool.display()
        );
    }
    let binary = match args.agent_binary {
        Some(binary) => binary,
        None => std::env::current_exe().context("finding this program's path")?,
    };
    let mut spec = PilotSpec::new(backend, args.nodes, args.walltime, args.pool, binary);
    spec.executors_per_node = args.executors_per_node;
    spec.context = args.context;
    spec.site = args.site;
    spec.raw_args = args.raw;
    extra(&mut spec);
    spec.absolutize(&std::env::current_dir()?);
    let now = alloc::unix_now();
    if args.dry_run {
        print!("{}", glidein::dry_run(&spec, root, now)?);
        return Ok(ExitCode::SUCCESS);
    }
    let allocation = glidein::submit(&spec, root, runner, now)?;
    let record = &allocation.record;
    println!(
        "{}: {} job {} ({} node(s), walltime {} s); files in {}",
        record.id,
        backend,
        record.job_id.as_deref().unwrap_or("-"),
        record.nodes,
        record.walltime_secs,
        allocation.dir().display()
    );
    for pruned in alloc::prune(root, alloc::DEFAULT_KEEP)? {
        eprintln!("removed the old allocation {}", pruned.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// One allocation in `glidein list --json`.
#[derive(serde::Serialize)]
struct AllocationJson {
    id: String,
    backend: String,
    job_id: Option<String>,
    nodes: usize,
    walltime_s: u64,
    submitted: f64,
    /// As the batch system says now, or the last known state if it could
    /// not be asked (then `error` says why).
    state: String,
    error: Option<String>,
    dir: String,
}

/// `glidein list --json`: the same shape as `status --json`, an object
/// whose lists a script can index by name.
#[derive(serde::Serialize)]
struct ListJson {
    allocations: Vec<AllocationJson>,
}

fn list(root: &std::path::Path, runner: &SystemRunner, json: bool) -> anyhow::Result<ExitCode> {
    let mut allocations = alloc::list(root)?;
    let listed: Vec<AllocationJson> = (allocations.iter_mut())
        .map(|allocation| {
            let (state, error) = match glidein::refresh(allocation, runner) {
                Ok(state) => (state.to_string(), None),
                Err(error) => (allocation.record.state.to_string(), Some(error.to_string())),
            };
            let record = &allocation.record;
            AllocationJson {
                id: record.id.clone(),
                backend: record.backend.to_string(),
                job_id: record.job_id.clone(),
                nodes: record.nodes,
                walltime_s: record.walltime_secs,
                submitted: record.submitted_at,
                state,
                error,
                dir: allocation.dir().display().to_string(),
            }
        })
        .collect();
    if json {
        let json = ListJson {
            allocations: listed,
        };
        println!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(ExitCode::SUCCESS);
    }
    if listed.is_empty() {
        println!("no allocations in {}", root.display());
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<34} {:<6} {:<14} {:>5} {:>9}  state",
        "id", "kind", "job", "nodes", "walltime"
    );
    for allocation in &listed {
        let state = match &allocation.error {
            None => allocation.state.clone(),
            Some(error) => format!("{} (could not ask: {error})", allocation.state),
        };
        println!(
            "{:<34} {:<6} {:<14} {:>5} {:>8}s  {state}",
            allocation.id,
            allocation.backend,
            allocation.job_id.as_deref().unwrap_or("-"),
            allocation.nodes,
            allocation.walltime_s
        );
    }
    Ok(ExitCode::SUCCESS)
}
