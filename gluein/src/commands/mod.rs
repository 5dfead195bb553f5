//! One module per subcommand.

pub(crate) mod agent;
pub(crate) mod cancel;
pub(crate) mod glidein;
pub(crate) mod jobs;
pub(crate) mod output;
pub(crate) mod pool;
pub(crate) mod probe;
pub(crate) mod relabel;
pub(crate) mod report;
pub(crate) mod run;
pub(crate) mod runs;
pub(crate) mod status;
pub(crate) mod submit;
pub(crate) mod wait;

use std::time::{Duration, Instant};

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
pub(crate) struct PoolAddress {
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

/// Which pool's job service to ask, and how long to wait for it: the
/// arguments of the commands that ask it once (`submit`, `jobs`, `job`,
/// `cancel`).
#[derive(clap::Args)]
pub(crate) struct ServiceAddress {
    #[command(flatten)]
    pub address: PoolAddress,
    /// How long to wait for the pool, and for its answer.
    #[arg(long, default_value = "10s", value_parser = timefmt::parse_duration, value_name = "DURATION")]
    pub timeout: Duration,
}

impl ServiceAddress {
    /// Asks the job service once; see [`ask_pool`].
    fn ask(
        &self,
        request: &gluein::service::ServiceRequest,
    ) -> anyhow::Result<gluein::service::ServiceResponse> {
        ask_pool(&self.address, request, self.timeout)
    }
}

/// Label of the one executor of a node that only looks at the pool
/// (`status`, `relabel`): nothing asks for it, so no work goes there.
const OBSERVER_LABEL: &str = "constellation:observer";

/// Joins the pool `pool` as an observer described as `role`, and waits
/// until it knows the members the pool node knows.
fn observe(
    address: &PoolAddress,
    role: &str,
    timeout: Duration,
) -> anyhow::Result<constellation::net::Node> {
    let node = join_as_observer(address, role, timeout)?;
    settle_members(&node);
    Ok(node)
}

/// Waits until `node`, which has just met its pool node, knows the
/// members the pool node knows: the pool node's welcome names them, and
/// they come in one by one, so until their count has held still for a
/// moment (at most 3 s). A node that looks at the agents (`status`,
/// `submit`, a runner checking what they offer) must not look earlier.
fn settle_members(node: &constellation::net::Node) {
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
}

/// Joins the pool `pool` as an observer described as `role`, and waits
/// for the pool node itself to be a member, at most `timeout`, or until
/// SIGINT or SIGTERM where the command catches them. The other members
/// may still be coming in: enough for a command that only asks the pool
/// node.
fn join_as_observer(
    address: &PoolAddress,
    role: &str,
    timeout: Duration,
) -> anyhow::Result<constellation::net::Node> {
    use constellation::net::{Node, NodeConfig};

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
    // The pool node itself, not just anyone: a stale pool file can lead
    // to some other node, and that is no pool to ask about.
    if !wait_for_pool_node(&node, timeout) {
        if gluein::signals::stop_requested() {
            anyhow::bail!("stopped (SIGINT or SIGTERM) before the pool {pool} was reached");
        }
        anyhow::bail!(
            "could not reach the pool {pool} within {} s: {}",
            timeout.as_secs(),
            why_not_joined(&node)
        );
    }
    Ok(node)
}

/// Waits until the pool node itself is a member of `node`'s pool, at most
/// `timeout`: what "joined" means for an agent, a runner and an observer.
/// `false` if it is not by then, or if a caught SIGINT or SIGTERM asked to
/// stop first (the caller tells which by [`gluein::signals::stop_requested`]).
pub(crate) fn wait_for_pool_node(node: &constellation::net::Node, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while !node.master_known() {
        if gluein::signals::stop_requested() || Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Asks the job service of the pool at `address` once: joins as an
/// observer (waiting at most `timeout` for the pool node), asks (at most
/// `timeout` for the answer) and leaves. The error of a refusal is the
/// service's own words, e.g. that there is no such job.
pub(crate) fn ask_pool(
    address: &PoolAddress,
    request: &gluein::service::ServiceRequest,
    timeout: Duration,
) -> anyhow::Result<gluein::service::ServiceResponse> {
    let role = match request {
        gluein::service::ServiceRequest::Submit(_) => "submit",
        gluein::service::ServiceRequest::Cancel { .. } => "cancel",
        _ => "jobs",
    };
    let node = join_as_observer(address, role, timeout)?;
    let answer = ask_master(&node, request, timeout);
    node.leave();
    Ok(answer?)
}

/// Why a request to the pool node's job service got no answer it could use.
#[derive(Debug)]
pub(crate) enum ServiceError {
    /// The service refused it (an unknown job, a bad graph path, a pool
    /// node without a job service): its reason. Asking again changes
    /// nothing.
    Refused(String),
    /// No answer: the pool node is gone or did not answer in time, or
    /// answered with something this build cannot read. Asking again later
    /// may work.
    NoAnswer(String),
}

impl std::fmt::Display for ServiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServiceError::Refused(reason) => f.write_str(reason),
            ServiceError::NoAnswer(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for ServiceError {}

/// Asks the job service on `node`'s pool node, waiting at most `timeout`
/// for the answer.
pub(crate) fn ask_master(
    node: &constellation::net::Node,
    request: &gluein::service::ServiceRequest,
    timeout: Duration,
) -> Result<gluein::service::ServiceResponse, ServiceError> {
    use constellation::net::NodeError;
    use gluein::service::{decode, encode};
    let Some(master) = node.master() else {
        return Err(ServiceError::NoAnswer(
            "the pool node is gone (no member sees it any more)".to_string(),
        ));
    };
    match node.ask_app(master.node, encode(request), timeout) {
        Ok(bytes) => decode(&bytes).map_err(|error| {
            ServiceError::NoAnswer(format!("the pool node's answer is unreadable: {error}"))
        }),
        Err(NodeError::Refused { reason, .. }) => Err(ServiceError::Refused(reason)),
        Err(NodeError::NoAnswer { reason, .. }) => Err(ServiceError::NoAnswer(format!(
            "the pool node did not answer (waiting at most {} s): {reason}",
            timeout.as_secs()
        ))),
        Err(error) => Err(ServiceError::NoAnswer(format!(
            "cannot ask the pool node: {error}"
        ))),
    }
}

/// An answer of the wrong kind, as an error that names both kinds: a pool
/// node of another build, or a bug.
pub(crate) fn unexpected_answer(
    wanted: &str,
    answer: &gluein::service::ServiceResponse,
) -> anyhow::Error {
    anyhow::anyhow!("the pool node answered with {answer:?} where {wanted} was expected")
}

/// Why `node` has not reached its pool node (for an agent, `run --pool`, `status` and `relabel`): the last failed dial that got furthest, or what it did reach.
pub(crate) fn why_not_joined(node: &constellation::net::Node) -> String {
    if let Some(problem) = node.join_problem() {
        return problem.to_string();
    }
    match node.members().len() {
        0 => "no answer from the pool node in that time (a connection may still be under way: \
              a firewall, a host that is down, or a pool node too busy to answer)"
            .to_string(),
        n => format!(
            "it reached {n} other member(s) but not the pool node: the address is not the \
             pool node's, or the pool node is gone"
        ),
    }
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

/// A size in bytes as a person writes it: `1000000`, `512K`, `64MiB`,
/// `2G` (K, M, G and T, with or without `iB` or `B`, are powers of 1024).
pub(crate) fn parse_byte_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let bad = || format!("`{text}` is not a size like `64MiB`, `200M` or `1000000` (bytes)");
    let number: u64 = number.parse().map_err(|_| bad())?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(bad()),
    };
    number.checked_mul(1 << shift).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    #[test]
    fn byte_sizes_read_as_people_write_them() {
        use super::parse_byte_size as size;
        assert_eq!(size("1000000"), Ok(1_000_000));
        assert_eq!(size("64MiB"), Ok(64 << 20));
        assert_eq!(size("200M"), Ok(200 << 20));
        assert_eq!(size("1k"), Ok(1024));
        assert_eq!(size("2 GB"), Ok(2 << 30));
        for bad in ["", "MiB", "1.5M", "-1", "3 parsecs", "99999999999999T"] {
            let error = size(bad).unwrap_err();
            assert!(error.contains("is not a size like"), "{bad}: {error}");
        }
    }
}
