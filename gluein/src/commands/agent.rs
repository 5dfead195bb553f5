//! `constellation agent`: executors on this machine, joined to a pool.
//!
//! An agent has joined once it knows the pool node; it never says
//! "joined" before. If it cannot within `--join-timeout` (30 s), it exits
//! non-zero and says why: the pool node has another key, nothing listens
//! at its address (a stale pool file), the address cannot be reached, or
//! nothing answered.
//!
//! An agent serves until one of these, then leaves cleanly:
//! - the pool node stopped (`pool start` got SIGINT or SIGTERM and said it
//!   leaves): a deliberate stop, so the agent leaves at once;
//! - the pool node died (killed, its host lost) and has not come back
//!   within `--reconnect` (60 s): meanwhile the agent keeps running what it
//!   runs and keeps dialling the pool's address, so a pool node restarted
//!   with the same identity and address is rejoined without restarting
//!   the agent. `--reconnect 0` leaves as soon as the pool node is gone;
//! - `--idle-timeout`: it had nothing to do for that long;
//! - `--walltime`: its allocation ends soon. It stops taking work when the
//!   time left is less than the longest activity call it has run so far
//!   plus a margin, finishes what it runs, and leaves, so the batch system
//!   never kills work in the middle;
//! - SIGINT or SIGTERM (a batch system cancelling the pilot): it stops
//!   taking work, lets what runs finish or die with it, and leaves; work it
//!   took but did not finish runs again on other agents.
//!
//! An agent drops a runner's work, and only that runner's, in two cases
//! ([`executors::shell::cancel_origin`]: commands killed with their process
//! groups, results marked cancelled, nothing of that work started after):
//! - the runner asks (a [`ServiceRequest::KillOrigin`] app request, which
//!   a stopping `run --pool` sends every agent, so that its commands die
//!   and their attempts reach its journal before it leaves);
//! - the runner is gone without asking (killed, its host lost): a member
//!   leaves this agent's view of the pool and stays away for
//!   [`GONE_CONFIRM`]. Its results have nobody to go to. Members do not
//!   say here whether they are runners (`MemberView` carries no role), so
//!   every gone member but the pool node (which comes back,
//!   `--reconnect`) has its work cancelled, each once: its commands that
//!   run here are killed, and its work queued here, or reaching an
//!   executor later (stolen from a sibling, or handed on by another
//!   agent), ends unstarted. Cancelling a member that created no work
//!   (another agent) costs one entry in a bounded list. A member taken
//!   for dead that comes back has its later work run again.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use constellation::net::{AppHandler, AppRequest, MasterState, Node, NodeConfig};
use constellation::{NodeId, Pool};
use executors::probe::Hardware;
use gluein::poolfile;
use gluein::service::{self, ServiceRequest, ServiceResponse};
use gluein::signals;
use timefmt::parse_duration;

/// Arguments of `constellation agent`.
#[derive(Args)]
#[command(after_help = "\
Examples:
  constellation agent --pool constellation-pool.json
  constellation agent --pool constellation-pool.json -n 8 --context big --site vu --walltime 2h
  constellation agent --pool /ip4/10.0.0.5/tcp/4001/p2p/12D3Koo... --key-file ~/.constellation/pool.key
  constellation agent --pool constellation-pool.json --join-timeout 2m --reconnect 10m

An agent that cannot reach the pool node within --join-timeout exits with
status 2 and says why. A pool node that stops is left at once; one that
dies is waited for (--reconnect), and rejoined if it comes back.

The executors get the probed labels (cpu, cores=N, mem=G, host:NAME,
site:NAME, gpu...) after yours, and `anywhere` last.")]
pub(crate) struct AgentArgs {
    #[command(flatten)]
    address: super::PoolAddress,
    /// Executors (each runs one activity at a time), at least 1. Default:
    /// one per core.
    #[arg(
        long,
        short = 'n',
        env = "CONSTELLATION_EXECUTORS",
        value_parser = super::pool::at_least_one
    )]
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
    /// Where to listen for other members (default: loopback when the pool
    /// is on loopback only, every interface otherwise).
    #[arg(long, value_name = "MULTIADDR")]
    listen: Option<String>,
    /// How long to try to reach the pool node before giving up with the
    /// reason (another key, nothing listening, unreachable, no answer).
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    join_timeout: Duration,
    /// How long the pool node may be gone (died, not stopped) before this
    /// agent leaves: meanwhile it finishes what it runs and keeps trying the
    /// pool's address, so a restarted pool node is rejoined. `0` leaves at
    /// once. A pool node stopped on purpose is left at once whatever this
    /// says.
    #[arg(long, default_value = "60s", value_parser = duration_or_zero, value_name = "DURATION")]
    reconnect: Duration,
}

/// How close to the walltime an agent stops taking work, beyond the
/// longest call it has seen: time to finish up and say goodbye.
const LEAVING_MARGIN: Duration = Duration::from_secs(2);

/// A duration as `parse_duration` reads it, or zero (`0`, `0s`), which it
/// refuses elsewhere: `--reconnect 0` means "leave at once".
fn duration_or_zero(text: &str) -> Result<Duration, timefmt::DurationError> {
    if text.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    match parse_duration(text) {
        Err(timefmt::DurationError::Zero(_)) => Ok(Duration::ZERO),
        other => other,
    }
}

/// How often the agent looks at its pool, its work and its signals.
const TICK: Duration = Duration::from_millis(100);

/// Why an agent stopped taking work.
#[derive(Debug, PartialEq, Eq)]
enum Leaving {
    /// The pool node said it leaves.
    PoolStopped,
    /// The pool node was gone, without a word, for this long.
    PoolLost(Duration),
    Idle,
    Walltime,
    Signal,
}

/// Joins the pool and serves until told or timed to leave.
pub(crate) fn main(args: AgentArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let joining = poolfile::joining(&args.address.pool, args.address.key_file.as_deref())?;
    let listen = match &args.listen {
        Some(text) => text.clone(),
        None => joining.default_listen().to_string(),
    };
    let hardware = Hardware::probe(args.site.as_deref());
    let user = super::user_labels(args.context.as_deref())?;
    // A machine whose core count reads as 0 still gets one executor;
    // `-n 0` is refused by its parser.
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
        app_handler: Some(kill_origin_requests()),
        ..NodeConfig::default()
    };
    let context = hardware.executor_context(&user, false);
    let node = Node::start(
        config,
        Pool::builder().executors_with(count, context.clone()),
    )?;
    signals::catch_stop_signals().context("cannot catch SIGINT and SIGTERM")?;
    if !super::wait_for_pool_node(&node, args.join_timeout) {
        if signals::stop_requested() {
            eprintln!("agent stopped before it joined the pool");
            node.leave();
            return Ok(ExitCode::SUCCESS);
        }
        anyhow::bail!(
            "could not join the pool {} within {} s: {}",
            args.address.pool,
            args.join_timeout.as_secs_f64(),
            super::why_not_joined(&node)
        );
    }
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
        Leaving::PoolStopped | Leaving::PoolLost(_) => {
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

/// Watches the pool node after joining: a pool node that stopped is left
/// at once, one that died is given `--reconnect` to come back.
struct PoolWatch {
    reconnect: Duration,
    gone_since: Option<Instant>,
}

impl PoolWatch {
    /// Why to leave now, if the pool node says so.
    fn check(&mut self, node: &Node, pool: &str) -> Option<Leaving> {
        match node.master_state() {
            MasterState::Known => {
                if let Some(since) = self.gone_since.take() {
                    eprintln!(
                        "agent: the pool node is back after {:.1} s",
                        since.elapsed().as_secs_f64()
                    );
                }
                None
            }
            MasterState::Left => Some(Leaving::PoolStopped),
            MasterState::Lost | MasterState::NotYetSeen => {
                if self.reconnect.is_zero() {
                    return Some(Leaving::PoolLost(Duration::ZERO));
                }
                let since = *self.gone_since.get_or_insert_with(|| {
                    eprintln!(
                        "agent: the pool node is gone; trying to reach {pool} again for up to {} s \
                         (--reconnect), and finishing what runs here",
                        self.reconnect.as_secs_f64()
                    );
                    Instant::now()
                });
                (since.elapsed() >= self.reconnect).then_some(Leaving::PoolLost(self.reconnect))
            }
        }
    }
}

/// How long a command of a cancelled run may take to end after its
/// `SIGTERM`, before it gets `SIGKILL`.
const CANCEL_GRACE: Duration = Duration::from_secs(3);

/// How long a member must stay out of this agent's view of the pool before
/// its work here is dropped: on top of the failure detection that took it
/// out (about 7.5 s of silence), so that a member only briefly away keeps
/// its commands.
const GONE_CONFIRM: Duration = Duration::from_secs(2);

/// The app requests an agent answers: [`ServiceRequest::KillOrigin`] only.
/// The answer is [`ServiceResponse::Killed`]; anything else is refused
/// with a reason.
fn kill_origin_requests() -> AppHandler {
    Arc::new(|request: AppRequest| {
        let ServiceRequest::KillOrigin { origin } = service::decode(&request.body)? else {
            return Err("an agent answers only kill-origin requests".to_string());
        };
        let origin = executors::shell::parse_origin(&origin)?;
        let done = executors::shell::cancel_origin(origin, CANCEL_GRACE);
        eprintln!(
            "agent: {} asked to cancel the work of run {origin}: killed {} command(s), \
             dropped {} retry(ies); none of its work starts here any more",
            request.from, done.running, done.not_started
        );
        Ok(service::encode(&ServiceResponse::Killed {
            running: done.running,
            not_started: done.not_started,
        }))
    })
}

/// Watches the other members for one that is gone while this agent runs its
/// commands, and cancels that member's work here (see the module's notes).
#[derive(Default)]
struct GoneMembers {
    /// Members in view at the last look; `true` for the pool node.
    in_view: HashMap<NodeId, bool>,
    /// Members out of view since when, not yet acted on.
    away_since: HashMap<NodeId, Instant>,
    /// Origins this agent cancelled by itself, to restore if they come back.
    cancelled: HashMap<NodeId, Instant>,
}

/// How many self-cancelled origins an agent remembers, to restore one that
/// comes back: the oldest is forgotten first.
const REMEMBERED_CANCELS: usize = 1024;

impl GoneMembers {
    /// Looks at the members once.
    fn check(&mut self, node: &Node) {
        let now = Instant::now();
        let members = node.members();
        for member in &members {
            self.away_since.remove(&member.node);
            if self.in_view.insert(member.node, member.master).is_none()
                && self.cancelled.remove(&member.node).is_some()
                && executors::shell::restore_origin(member.node)
            {
                eprintln!(
                    "agent: member {} is back; its new work runs here again",
                    member.node
                );
            }
        }
        let gone: Vec<(NodeId, bool)> = (self.in_view.iter())
            .filter(|(id, _)| !members.iter().any(|m| m.node == **id))
            .map(|(&id, &master)| (id, master))
            .collect();
        for (id, master) in gone {
            let since = *self.away_since.entry(id).or_insert(now);
            if now.duration_since(since) < GONE_CONFIRM {
                continue;
            }
            self.in_view.remove(&id);
            self.away_since.remove(&id);
            if master {
                // The pool node: PoolWatch waits for it to come back.
                continue;
            }
            // Cancelled whether or not a command of it runs now: work it
            // exported that is only queued here (or stolen from here by
            // a sibling executor later) must never start either.
            let held = executors::shell::running_from(id);
            let done = executors::shell::cancel_origin(id, CANCEL_GRACE);
            if self.cancelled.len() >= REMEMBERED_CANCELS {
                if let Some(oldest) = (self.cancelled.iter())
                    .min_by_key(|(_, &at)| at)
                    .map(|(&id, _)| id)
                {
                    self.cancelled.remove(&oldest);
                }
            }
            self.cancelled.insert(id, now);
            if held == 0 {
                continue;
            }
            eprintln!(
                "agent: member {id} left or was declared dead while {held} of its activities \
                 ran here; its results have nobody to go to, so its work is cancelled: \
                 killed {} command(s), dropped {} retry(ies)",
                done.running, done.not_started
            );
        }
    }
}

fn serve(node: &Node, args: &AgentArgs, started: Instant) -> Leaving {
    let mut idle_since = Instant::now();
    let mut watch = PoolWatch {
        reconnect: args.reconnect,
        gone_since: None,
    };
    let mut members = GoneMembers::default();
    loop {
        std::thread::sleep(TICK);
        if signals::stop_requested() {
            return Leaving::Signal;
        }
        if let Some(why) = watch.check(node, &args.address.pool) {
            return why;
        }
        members.check(node);
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

fn describe(why: &Leaving) -> String {
    match why {
        Leaving::PoolStopped => "the pool node stopped".into(),
        Leaving::PoolLost(gone) if gone.is_zero() => "the pool node is gone".into(),
        Leaving::PoolLost(gone) => format!("pool node gone for {} s", gone.as_secs_f64()),
        Leaving::Idle => "nothing to do for the idle timeout".into(),
        Leaving::Walltime => "the walltime ends before another activity could finish".into(),
        Leaving::Signal => "asked to stop; work not finished here will run elsewhere".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use constellation::net::Keypair;

    /// `body` as an app request from some peer.
    fn asked(body: Vec<u8>) -> AppRequest {
        AppRequest {
            from: Keypair::generate_ed25519().public().to_peer_id(),
            body,
        }
    }

    #[test]
    fn an_agent_answers_kill_origin_and_refuses_anything_else_with_a_reason() {
        let handler = kill_origin_requests();
        let origin = NodeId::random();
        let request = ServiceRequest::KillOrigin {
            origin: executors::shell::origin_text(origin),
        };
        let answer = handler(asked(service::encode(&request))).unwrap();
        assert_eq!(
            service::decode::<ServiceResponse>(&answer).unwrap(),
            ServiceResponse::Killed {
                running: 0,
                not_started: 0
            }
        );
        assert!(executors::shell::origin_cancelled(origin));

        let refused = handler(asked(service::encode(&ServiceRequest::Jobs { all: true })));
        assert_eq!(
            refused.unwrap_err(),
            "an agent answers only kill-origin requests"
        );
        let bad_origin = ServiceRequest::KillOrigin {
            origin: origin.to_string(),
        };
        let refused = handler(asked(service::encode(&bad_origin))).unwrap_err();
        assert!(refused.contains("is not a node id"), "{refused}");
        let refused = handler(asked(b"kill everything".to_vec())).unwrap_err();
        assert!(refused.contains("not a service message"), "{refused}");
    }
}
