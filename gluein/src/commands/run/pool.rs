//! Where a run's activities go: the embedded pool, or a pool joined over
//! the network, and the executors each offers.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use constellation::net::{Node, NodeConfig};
use constellation::MatchTable;
use constellation::{Context, ExecutorContext, Pool};
use executors::probe::Hardware;
use graph::{Graph, ReleasedCounts, COORDINATOR_LABEL, TRAVEL_SLACK};

use super::RunArgs;

/// The pool a run's activities go to: embedded, or joined over the network.
pub(super) enum RunPool {
    /// The embedded pool, this process's executors alone.
    Local(Pool),
    /// A pool joined as this node: the activities go to its agents.
    Node(Node),
}

impl RunPool {
    /// What every executor that may run the graph's work offers now: this
    /// process's, and on a pool every agent's, relabelled ones as they are
    /// now.
    pub(super) fn offered(&self) -> Vec<ExecutorContext> {
        match self {
            RunPool::Local(pool) => pool.executor_contexts().to_vec(),
            RunPool::Node(node) => pool_executors(node, &node.pool().executor_contexts()),
        }
    }

    /// The pool this process submits to.
    pub(super) fn pool(&self) -> &Pool {
        match self {
            RunPool::Local(pool) => pool,
            RunPool::Node(node) => node.pool(),
        }
    }

    /// The node, on a pool run.
    pub(super) fn node(&self) -> Option<&Node> {
        match self {
            RunPool::Local(_) => None,
            RunPool::Node(node) => Some(node),
        }
    }

    /// Activities running now: in the embedded pool, its count; on a pool,
    /// where they run on the agents, the coordinator's activities in flight
    /// (submitted and not finished), at most one per executor offered.
    pub(super) fn running_now(&self, released: &ReleasedCounts) -> usize {
        match self {
            RunPool::Local(pool) => pool.counts().running,
            RunPool::Node(_) => {
                let in_flight: usize = (0..released.len()).map(|k| released.in_flight(k)).sum();
                let executors = (self.offered().iter())
                    .filter(|e| !super::super::is_internal(e))
                    .count();
                in_flight.min(executors)
            }
        }
    }

    /// Leaves the pool (a runner on one) or stops the embedded pool,
    /// waiting at most [`LEAVE_WAIT`]: a runner that stops must end even
    /// if its pool does not answer. The commands are dead by now, so the
    /// executors only have to notice. Not [`done`](Self::done), which
    /// waits for all work to finish.
    pub(super) fn leave(self) {
        let (left, leaving) = std::sync::mpsc::channel();
        let went = std::thread::Builder::new()
            .name("leave".to_string())
            .spawn(move || {
                match self {
                    // Says goodbye, so that no member declares this one dead.
                    RunPool::Node(node) => drop(node.leave()),
                    RunPool::Local(pool) => drop(pool),
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

    /// Waits for all work to finish and ends the pool.
    pub(super) fn done(self) {
        let ended = match self {
            RunPool::Local(pool) => pool.done().map(drop).map_err(|e| e.to_string()),
            RunPool::Node(node) => node.done().map(drop).map_err(|e| e.to_string()),
        };
        if let Err(error) = ended {
            tracing::error!(%error, "the pool did not finish cleanly");
        }
    }
}

/// How long a stopping run waits to have left its pool.
const LEAVE_WAIT: Duration = Duration::from_secs(10);

/// `executors` (perhaps none), and one executor for the coordinator.
pub(super) fn with_coordinator(executors: &[ExecutorContext]) -> constellation::PoolBuilder {
    let builder = executors.iter().fold(Pool::builder(), |builder, context| {
        builder.executor(context.clone())
    });
    builder.executor(ExecutorContext::new([Context::new(COORDINATOR_LABEL)]))
}

/// The embedded pool: `executors`, and one executor for the coordinator.
pub(super) fn local_pool(executors: &[ExecutorContext]) -> anyhow::Result<Pool> {
    Ok(with_coordinator(executors).start()?)
}

/// Joins the pool `pool` with `executors` (perhaps none) plus one for the
/// coordinator, and waits for the pool node, then for `--wait-agents`
/// agents, all within `--wait-timeout`. A pool node that cannot be reached
/// is an error that says why (another key, nothing listening, ...).
pub(super) fn join_pool(
    pool: &str,
    args: &RunArgs,
    executors: &[ExecutorContext],
) -> anyhow::Result<Node> {
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
    if !super::super::wait_for_pool_node(&node, args.wait_timeout) {
        bail!(
            "could not join the pool {pool} within {} s (--wait-timeout): {}",
            args.wait_timeout.as_secs_f64(),
            super::super::why_not_joined(&node)
        );
    }
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

/// The released work that no executor in `offered` can run, per
/// context, e.g. `[("gpu", 12)]`: it waits until someone offers those
/// labels. One still running on an executor relabelled since it started
/// counts too, until it ends. One match per distinct context.
pub(super) fn unoffered(
    graph: &Graph,
    released: &ReleasedCounts,
    offered: &[ExecutorContext],
) -> Vec<(String, usize)> {
    let table = MatchTable::new(offered);
    (graph.contexts().iter().enumerate())
        .map(|(k, context)| (context, released.released(k)))
        .filter(|&(context, count)| count > 0 && table.executors_for(context).next().is_none())
        .map(|(context, count)| (context.to_string(), count))
        .collect()
}

/// Members of the pool that run work: not the pool node, not runners.
pub(crate) fn agents_of(node: &Node) -> impl Iterator<Item = constellation::net::MemberView> {
    (node.members().into_iter()).filter(|member| {
        member
            .executors
            .iter()
            .any(|e| !super::super::is_internal(e))
    })
}

/// What the pool's agents and this node's own executors offer.
pub(crate) fn pool_executors(node: &Node, executors: &[ExecutorContext]) -> Vec<ExecutorContext> {
    let mut offered = executors.to_vec();
    offered.extend(agents_of(node).flat_map(|member| member.executors));
    offered
}

/// [`check_contexts`] against what the pool's agents and `executors`
/// offer. A node that has just joined may not know every agent yet (a
/// job's runner asks for none before it starts, and on a busy machine an
/// agent's hello can take seconds): where work is not offered, it waits
/// until this node knows as many members as the pool node does, or the
/// work fits, at most [`POOL_VIEW_WAIT`], and checks again. So only work
/// that no agent the pool node knows offers is refused, and a graph that
/// fits costs no wait.
pub(crate) fn check_pool_contexts(
    graph: &Graph,
    node: &Node,
    executors: &[ExecutorContext],
    hint: &str,
) -> anyhow::Result<()> {
    let fits = || check_contexts(graph, &pool_executors(node, executors), hint);
    if fits().is_ok() {
        return Ok(());
    }
    wait_for_pool_view(node, || fits().is_ok());
    fits()
}

/// The longest a node that has just joined waits to know the members its
/// pool node knows before it refuses work that no member it knows offers.
const POOL_VIEW_WAIT: Duration = Duration::from_secs(10);

/// Waits until `fits` says yes, or `node` knows at least as many members
/// as its pool node does (which counts `node` where this one counts the
/// pool node), at most [`POOL_VIEW_WAIT`]. Without an answer from the
/// pool node, it waits for `fits` alone, until the deadline.
fn wait_for_pool_view(node: &Node, fits: impl Fn() -> bool) {
    let deadline = Instant::now() + POOL_VIEW_WAIT;
    let pool_node = (node.members().into_iter()).find(|member| member.master);
    let known_there = pool_node.and_then(|pool_node| {
        let left = deadline.saturating_duration_since(Instant::now());
        let status = node.member_status(pool_node.node, left);
        status.ok().map(|status| status.members_known as usize)
    });
    while !fits() && Instant::now() < deadline {
        if known_there.is_some_and(|there| node.members().len() >= there) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The executors of the embedded pool: `--executors` general ones with the
/// probed labels, then each `--add-executors` group.
pub(super) fn executor_contexts(args: &RunArgs) -> anyhow::Result<Vec<ExecutorContext>> {
    let hardware = Hardware::probe(None);
    let user = super::super::user_labels(args.context.as_deref())?;
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
/// on a local pool they would wait forever. One match per distinct
/// context, then a pass over the nodes only if some context has none.
/// `hint` ends the message: what the command's user can do about it.
pub(crate) fn check_contexts(
    graph: &Graph,
    executors: &[ExecutorContext],
    hint: &str,
) -> anyhow::Result<()> {
    let table = MatchTable::new(executors);
    let unmatched_context: Vec<bool> = (graph.contexts().iter())
        .map(|context| table.executors_for(context).next().is_none())
        .collect();
    if !unmatched_context.contains(&true) {
        return Ok(());
    }
    // Like every other graph error: `file:line:column: ...`, at the context.
    let mut unmatched = (0..graph.len()).filter(|&n| unmatched_context[graph.context_of(n)]);
    let shown: Vec<String> = (unmatched.by_ref().take(10))
        .map(|n| {
            format!(
                "{}: {} needs [{}], which no executor offers",
                graph.place(n),
                graph.id(n),
                graph.context(n)
            )
        })
        .collect();
    let more = unmatched.count();
    let offered: Vec<String> = executors.iter().map(|e| format!("  [{e}]")).collect();
    let offered = match offered.is_empty() {
        true => "  (nothing: no agent has joined)".to_string(),
        false => offered.join("\n"),
    };
    bail!(
        "{}{}\n{} activities can run on no executor of this pool; the executors offer:\n{}\n{hint}",
        shown.join("\n"),
        if more > 0 {
            format!("\n... and {more} more")
        } else {
            String::new()
        },
        shown.len() + more,
        offered
    )
}

/// Refuses a graph with activities too large to travel to an agent of a
/// pool (a steal reply carries at most half a network frame): such an
/// activity would never leave the runner, and wait there forever unless
/// one of `executors`, the runner's own, can run it. Checked by `run
/// --pool` and by `submit`, before the job is accepted.
pub(crate) fn check_travel(graph: &Graph, executors: &[ExecutorContext]) -> anyhow::Result<()> {
    const SHOWN: usize = 10;
    let limit = NodeConfig::default().largest_activity();
    let here = MatchTable::new(executors);
    let too_large = graph.too_large_to_travel(limit, SHOWN + 1, |n| {
        !here.any_executor_can_run(graph.context(n))
    });
    if too_large.is_empty() {
        return Ok(());
    }
    let shown: Vec<String> = (too_large.iter().take(SHOWN))
        .map(|&(n, size)| {
            format!(
                "{}: {} is {} encoded, too large to travel to an agent",
                graph.place(n),
                graph.id(n),
                mebibytes(size)
            )
        })
        .collect();
    bail!(
        "{}{}
an activity may take at most {} ({} bytes) to travel to an agent of a pool: half \
         the largest network frame, less {} KiB kept for what the runner adds; pass large data in \
         files that the commands read, not in their command line, script or environment",
        shown.join("\n"),
        if too_large.len() > SHOWN {
            "\n... and more"
        } else {
            ""
        },
        mebibytes(limit - TRAVEL_SLACK),
        limit - TRAVEL_SLACK,
        TRAVEL_SLACK / 1024,
    )
}

/// `bytes` in MiB, e.g. `32.0 MiB`.
fn mebibytes(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}
