//! One module per subcommand.

pub mod agent;
pub mod glidein;
pub mod output;
pub mod pool;
pub mod probe;
pub mod relabel;
pub mod report;
pub mod run;
pub mod runs;
pub mod status;

use anyhow::Context as _;
use constellation::Context;

/// The labels of a `--context` option (comma separated, e.g.
/// `site:vu,big`), or none.
fn user_labels(option: Option<&str>) -> anyhow::Result<Vec<Context>> {
    let Some(text) = option else {
        return Ok(Vec::new());
    };
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::parse::<Context>)
        .collect::<Result<_, _>>()
        .with_context(|| format!("--context {text:?}"))
}

/// Which pool to join, for the commands that join one as a member.
#[derive(clap::Args)]
pub struct PoolAddress {
    /// The pool: a pool file from `constellation pool start`, or an address.
    #[arg(
        long,
        env = "CONSTELLATION_POOL",
        default_value = "constellation-pool.json",
        value_name = "FILE|MULTIADDR"
    )]
    pub pool: String,
    /// The pool key, if the pool file does not name it.
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<std::path::PathBuf>,
}

/// Label of the one executor of a node that only looks at the pool
/// (`status`, `relabel`): nothing asks for it, so no work goes there.
const OBSERVER_LABEL: &str = "constellation:observer";

/// Joins the pool `pool` as an observer described as `role`, and waits
/// until it knows the members the pool node knows.
fn observe(
    address: &PoolAddress,
    role: &str,
    timeout: std::time::Duration,
) -> anyhow::Result<constellation::net::Node> {
    use constellation::net::{Node, NodeConfig};
    use std::time::{Duration, Instant};
    let pool = &address.pool;
    let joining = gluein::poolfile::joining(pool, address.key_file.as_deref())?;
    let config = NodeConfig {
        listen: joining.default_listen().parse().expect("a valid multiaddr"),
        bootstrap: joining.bootstrap,
        key: joining.key,
        role: role.to_string(),
        host: executors::probe::hostname(),
        ..NodeConfig::default()
    };
    let observer = constellation::ExecutorContext::new([Context::new(OBSERVER_LABEL)]);
    let node = Node::start(config, constellation::Pool::builder().executor(observer))?;
    node.wait_for_members(2, timeout).with_context(|| {
        format!(
            "could not reach the pool {pool} within {} s",
            timeout.as_secs()
        )
    })?;
    // The pool node's welcome names every member it knows, and they come
    // in one by one: wait until the count holds still for a moment.
    let settle = Duration::from_millis(300);
    let give_up = Instant::now() + Duration::from_secs(3);
    let mut known = node.members().len();
    let mut since = Instant::now();
    while since.elapsed() < settle && Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(20));
        let now = node.members().len();
        if now != known {
            known = now;
            since = Instant::now();
        }
    }
    Ok(node)
}

/// Whether `member` is an observer (a `status` or `relabel` command), known
/// by the one executor context every observer joins with.
fn is_observer(member: &constellation::net::MemberView) -> bool {
    !member.executors.is_empty()
        && (member.executors.iter())
            .all(|executor| (executor.contexts.iter()).all(|c| &*c.label.name() == OBSERVER_LABEL))
}

/// Whether `context` belongs to a node's own machinery (the pool node's
/// placeholder, an observer, a run's coordinator) rather than to work.
fn is_internal(context: &constellation::ExecutorContext) -> bool {
    context.contexts.iter().all(|c| {
        let name = c.label.name();
        name.starts_with("constellation:") || &*name == graph::COORDINATOR_LABEL
    })
}
