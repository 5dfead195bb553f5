//! `constellation agent`: executors on this machine, joined to a pool.
//!
//! An agent serves until one of these, then leaves cleanly:
//! - the pool node is gone (`pool start` stopped);
//! - `--idle-timeout`: it had nothing to do for that long;
//! - `--walltime`: its allocation ends soon. It stops taking work when the
//!   time left is less than the longest activity call it has run so far
//!   plus a margin, finishes what it runs, and leaves, so the batch system
//!   never kills work in the middle;
//! - SIGINT or SIGTERM (a batch system cancelling the pilot): it stops
//!   taking work, lets what runs finish or die with it, and leaves; work it
//!   took but did not finish runs again on other agents.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use constellation::net::{Node, NodeConfig};
use constellation::Pool;
use executors::probe::Hardware;
use gluein::poolfile;
use gluein::signals;
use timefmt::parse_duration;

/// Arguments of `constellation agent`.
#[derive(Args)]
#[command(after_help = "\
Examples:
  constellation agent --pool constellation-pool.json
  constellation agent --pool constellation-pool.json -n 8 --context big --site vu --walltime 2h
  constellation agent --pool /ip4/10.0.0.5/tcp/4001/p2p/12D3Koo... --key-file ~/.constellation/pool.key

The executors get the probed labels (cpu, cores=N, mem=G, host:NAME,
site:NAME, gpu...) after yours, and `anywhere` last.")]
pub struct AgentArgs {
    #[command(flatten)]
    address: super::PoolAddress,
    /// Executors (each runs one activity at a time). Default: one per core.
    #[arg(long, short = 'n', env = "CONSTELLATION_EXECUTORS")]
    executors: Option<usize>,
    /// Labels put first on every executor, comma separated, e.g. `big,site:vu`.
    #[arg(long, value_name = "LABELS")]
    context: Option<String>,
    /// This agent's site, for `site:` labels and hierarchical stealing.
    #[arg(long, env = "CONSTELLATION_SITE")]
    site: Option<String>,
    /// How long this agent may run (e.g. `2h`, `1h30m`): it stops taking
    /// work in time to finish what it runs before then.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    walltime: Option<Duration>,
    /// Leave after having nothing to do for this long (e.g. `10m`).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    idle_timeout: Option<Duration>,
    /// Where to listen for other members (default: every interface with a
    /// key, loopback without).
    #[arg(long, value_name = "MULTIADDR")]
    listen: Option<String>,
}

/// How close to the walltime an agent stops taking work, beyond the
/// longest call it has seen: time to finish up and say goodbye.
const LEAVING_MARGIN: Duration = Duration::from_secs(2);

/// Why an agent stopped taking work.
#[derive(Debug, PartialEq, Eq)]
enum Leaving {
    PoolGone,
    Idle,
    Walltime,
    Signal,
}

/// Joins the pool and serves until told or timed to leave.
pub fn main(args: AgentArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let joining = poolfile::joining(&args.address.pool, args.address.key_file.as_deref())?;
    let listen = match &args.listen {
        Some(text) => text.clone(),
        None => joining.default_listen().to_string(),
    };
    let hardware = Hardware::probe(args.site.as_deref());
    let user = super::user_labels(args.context.as_deref())?;
    let count = args.executors.unwrap_or(hardware.cores).max(1);
    let config = NodeConfig {
        listen: listen
            .parse()
            .with_context(|| format!("--listen {listen:?} is not a multiaddr"))?,
        bootstrap: joining.bootstrap,
        key: joining.key,
        site: args.site.clone(),
        // With a walltime, take only what the executors can start at once:
        // work queued here when the agent stops taking more would wait for
        // another node to steal it back, perhaps past the walltime.
        max_steal: match args.walltime {
            Some(_) => count,
            None => NodeConfig::default().max_steal,
        },
        role: "agent".into(),
        host: hardware.hostname.clone(),
        deadline: args.walltime.map(|walltime| started + walltime),
        ..NodeConfig::default()
    };
    let context = hardware.executor_context(&user, false);
    let node = Node::start(
        config,
        Pool::builder().executors_with(count, context.clone()),
    )?;
    node.wait_for_members(1, Duration::from_secs(30))
        .with_context(|| format!("could not reach the pool {} within 30 s", args.address.pool))?;
    signals::catch_stop_signals().context("cannot catch SIGINT and SIGTERM")?;
    eprintln!(
        "agent {} joined with {count} executor(s) [{context}]{}",
        node.peer_id(),
        args.walltime
            .map(|w| format!(", walltime {} s", w.as_secs()))
            .unwrap_or_default()
    );
    let why = serve(&node, &args, started);
    eprintln!("agent leaving: {}", describe(&why));
    match why {
        Leaving::PoolGone => {
            node.leave();
        }
        Leaving::Signal => {
            // Whatever runs finishes or is killed with us; then go. Work
            // taken but not started, and commands the signal killed, run
            // again on other agents (their exporters hear no `Finished`).
            node.stop_taking_work();
            while node.pool().counts().running > 0 {
                std::thread::sleep(Duration::from_millis(20));
            }
            node.leave();
        }
        _ => {
            node.stop_taking_work();
            let (summary, _) = node.done()?;
            eprintln!("agent ran {} activities", summary.counts.finished);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn serve(node: &Node, args: &AgentArgs, started: Instant) -> Leaving {
    let mut idle_since = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(100));
        if signals::stop_requested() {
            return Leaving::Signal;
        }
        if node.wait_for_master_gone(Some(Duration::ZERO)) {
            return Leaving::PoolGone;
        }
        let pool = node.pool();
        if pool.outstanding() > 0 {
            idle_since = Instant::now();
        } else if args.idle_timeout.is_some_and(|t| idle_since.elapsed() >= t) {
            return Leaving::Idle;
        }
        if let Some(walltime) = args.walltime {
            let left = walltime.saturating_sub(started.elapsed());
            if left <= pool.longest_call() + LEAVING_MARGIN {
                return Leaving::Walltime;
            }
        }
    }
}

fn describe(why: &Leaving) -> &'static str {
    match why {
        Leaving::PoolGone => "the pool node is gone",
        Leaving::Idle => "nothing to do for the idle timeout",
        Leaving::Walltime => "the walltime ends before another activity could finish",
        Leaving::Signal => "asked to stop; work not finished here will run elsewhere",
    }
}
