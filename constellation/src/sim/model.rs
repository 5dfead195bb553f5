//! What the simulator simulates: sites and the links between them, nodes
//! with their executors, when nodes join and die, and how idle executors
//! find work.
//!
//! Times and rates are given in seconds and bytes per second (`f64`), the
//! units a scenario is written in; the simulator turns them into whole
//! nanoseconds once, so that runs are exactly reproducible.

use serde::{Deserialize, Serialize};

use super::SimError;
use crate::context::ExecutorContext;
use crate::protocol::strategy::{Strategy, WideSteal};

/// A network link: a fixed latency plus a transfer time.
///
/// A transfer of `b` bytes that starts at `t` ends at
/// `t + latency + max(b / per_transfer, queueing on bandwidth)`: transfers
/// share `bandwidth` first come, first served, and none runs faster than
/// `per_transfer` (the paper's 1 MB/s limit per inter-site transfer).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Link {
    /// One-way latency in seconds.
    pub latency: f64,
    /// Bytes per second the link carries in all; `None` for no limit.
    pub bandwidth: Option<f64>,
    /// Bytes per second one transfer may use; `None` for no limit.
    pub per_transfer: Option<f64>,
}

impl Link {
    /// A link with this latency and no bandwidth limits.
    pub fn latency(seconds: f64) -> Self {
        Link {
            latency: seconds,
            bandwidth: None,
            per_transfer: None,
        }
    }

    /// A cluster network: 50 µs latency, 10 Gbit/s shared, no per-transfer limit.
    pub fn cluster() -> Self {
        Link {
            latency: 50e-6,
            bandwidth: Some(1.25e9),
            per_transfer: None,
        }
    }

    /// A wide-area link as in the paper's first scenario: 2 ms latency,
    /// 10 Gbit/s shared, 1 MB/s per transfer.
    pub fn wide_area() -> Self {
        Link {
            latency: 2e-3,
            bandwidth: Some(1.25e9),
            per_transfer: Some(1e6),
        }
    }

    /// This link with a total bandwidth in bytes per second.
    pub fn with_bandwidth(mut self, bytes_per_second: f64) -> Self {
        self.bandwidth = Some(bytes_per_second);
        self
    }

    /// This link with a per-transfer limit in bytes per second.
    pub fn with_per_transfer(mut self, bytes_per_second: f64) -> Self {
        self.per_transfer = Some(bytes_per_second);
        self
    }

    fn validate(&self, what: &str) -> Result<(), SimError> {
        non_negative(self.latency, &format!("{what}: latency"))?;
        for (name, rate) in [
            ("bandwidth", self.bandwidth),
            ("per-transfer limit", self.per_transfer),
        ] {
            if let Some(rate) = rate {
                if !(rate.is_finite() && rate > 0.0) {
                    return Err(SimError::Model(format!(
                        "{what}: {name} must be a positive number of bytes per second, not {rate}"
                    )));
                }
            }
        }
        Ok(())
    }
}

/// A site: a cluster or a machine room, whose nodes share a network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Site {
    /// Its name, e.g. `vu`; also how scenarios label the site's data.
    pub name: String,
    /// The network between nodes of this site (and to its file server).
    pub within: Link,
}

impl Site {
    /// A site with a [`Link::cluster`] network.
    pub fn new(name: impl Into<String>) -> Self {
        Site {
            name: name.into(),
            within: Link::cluster(),
        }
    }
}

/// The link between two sites, when it differs from [`Model::wide_area`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SiteLink {
    /// One site's index.
    pub a: usize,
    /// The other site's index.
    pub b: usize,
    /// The link between them, used both ways.
    pub link: Link,
}

/// One executor of a node: what it offers and how fast it runs work.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutorSpec {
    /// What it offers, as a real executor would.
    pub context: ExecutorContext,
    /// Cores it may use: the parallel part of an activity
    /// ([`Kind::parallel`](super::Kind::parallel)) is divided among them.
    pub cores: u32,
    /// How fast it is relative to the workload's reference machine
    /// (2.0 runs everything in half the time).
    pub speed: f64,
}

impl ExecutorSpec {
    /// A one-core executor at reference speed offering `context`.
    pub fn new(context: ExecutorContext) -> Self {
        ExecutorSpec {
            context,
            cores: 1,
            speed: 1.0,
        }
    }

    /// This executor with `cores` cores.
    pub fn with_cores(mut self, cores: u32) -> Self {
        self.cores = cores;
        self
    }

    /// This executor with a relative speed.
    pub fn with_speed(mut self, speed: f64) -> Self {
        self.speed = speed;
        self
    }
}

/// One node: a process with executors, on a site, present for part of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeSpec {
    /// Its name, e.g. a host name; reports and journals show it.
    pub name: String,
    /// The index of its site in [`Model::sites`].
    pub site: usize,
    /// Its executors, indexed as the node's scheduler indexes them.
    pub executors: Vec<ExecutorSpec>,
    /// When it joins the pool, in seconds from the start.
    pub joins_at: f64,
    /// When it dies, if it does: it stops at once, messages to it fail, and
    /// the others declare it dead by SWIM (see [`Model::failure_timeout`]).
    pub dies_at: Option<f64>,
}

impl NodeSpec {
    /// A node on `site` that is there from the start and never dies.
    pub fn new(name: impl Into<String>, site: usize, executors: Vec<ExecutorSpec>) -> Self {
        NodeSpec {
            name: name.into(),
            site,
            executors,
            joins_at: 0.0,
            dies_at: None,
        }
    }

    /// A node with `count` one-core executors offering `context`.
    pub fn uniform(
        name: impl Into<String>,
        site: usize,
        count: usize,
        context: ExecutorContext,
    ) -> Self {
        Self::new(name, site, vec![ExecutorSpec::new(context); count])
    }

    /// This node joining at `seconds`.
    pub fn joining_at(mut self, seconds: f64) -> Self {
        self.joins_at = seconds;
        self
    }

    /// This node dying at `seconds`.
    pub fn dying_at(mut self, seconds: f64) -> Self {
        self.dies_at = Some(seconds);
        self
    }
}

/// The scheduler time a node spends on one steal request: a fixed part
/// and a part per activity it hands over. A victim answers its requests
/// one after another, so requests that arrive faster than it answers them
/// wait; this is what makes a master saturate.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct AnswerCost {
    /// Seconds per request, whatever it carries.
    pub per_request: f64,
    /// Seconds per activity handed over (taking it from the queue,
    /// keeping a copy, encoding it).
    pub per_activity: f64,
}

impl AnswerCost {
    /// Seconds to answer a request that hands over `activities`.
    pub fn seconds(&self, activities: usize) -> f64 {
        self.per_request + self.per_activity * activities as f64
    }
}

/// Everything about the simulated platform; the workload is separate
/// ([`Workload`](super::Workload)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Model {
    /// The sites, indexed by [`NodeSpec::site`] and data replicas.
    pub sites: Vec<Site>,
    /// The link between any two different sites, unless [`site_links`](Self::site_links) says otherwise.
    pub wide_area: Link,
    /// Links between particular pairs of sites.
    pub site_links: Vec<SiteLink>,
    /// The nodes.
    pub nodes: Vec<NodeSpec>,
    /// How idle executors find work on other nodes.
    pub strategy: Strategy,
    /// The node where the workload's roots are submitted when it joins,
    /// and the master that master-worker stealing asks.
    pub master: usize,
    /// The most activities one steal reply carries (the net driver's
    /// `max_steal`).
    pub max_steal: usize,
    /// How much a hierarchical steal from another site asks for.
    #[serde(default)]
    pub wide_steal: WideSteal,
    /// What answering steal requests costs a victim, which answers them one
    /// at a time: nothing by default, so a node answers any number at once.
    #[serde(default)]
    pub answer_cost: AnswerCost,
    /// How many times an activity may be handed out before it is given up
    /// when the nodes running it die.
    pub max_attempts: u32,
    /// Seconds a member that failed a membership probe has to refute the
    /// suspicion before it is declared dead (SWIM's suspicion timeout, the
    /// net driver's `failure_timeout`). A node that dies is found out when
    /// someone next probes it, and declared dead this long after the probe
    /// failed: between `failure_timeout` and `failure_timeout` + about
    /// three [`probe_period`](Self::probe_period)s after it died. Gossip
    /// then spreads the news. (Before the simulator ran SWIM, every node
    /// declared a dead node dead exactly `failure_timeout` after it died.)
    pub failure_timeout: f64,
    /// Seconds between a node's membership probes, each of a member chosen
    /// in turn; 1.5 s by default, as the net driver probes with its default
    /// failure timeout (it probes every half failure timeout).
    #[serde(default = "default_probe_period")]
    pub probe_period: f64,
    /// Seconds an event waits at a node for its activity to arrive there.
    pub early_event_wait: f64,
    /// Seconds without any call starting or ending, with nothing running
    /// and no node still to join, after which the run is declared stalled.
    pub stall_timeout: f64,
    /// Virtual seconds after which the run is given up: idle executors
    /// keep asking for work every 50 ms at most, so a run whose calls last
    /// for ages would cost the simulator ages too.
    pub horizon: f64,
    /// Bytes of a steal request or a notice on the wire.
    pub message_bytes: u64,
    /// Seconds an idle executor group pauses after a full round of empty
    /// steal replies, first and at most; it doubles in between. The net
    /// driver's [`MIN_BACKOFF`](crate::protocol::strategy::MIN_BACKOFF) and
    /// [`MAX_BACKOFF`](crate::protocol::strategy::MAX_BACKOFF) by default.
    #[serde(default = "default_backoff")]
    pub steal_backoff: (f64, f64),
    /// Whether a node keeps the input data it fetched, so that later
    /// activities there that need it do not fetch it again.
    pub cache_inputs: bool,
    /// The seed of every random choice; the same seed gives the same run.
    pub seed: u64,
}

fn default_probe_period() -> f64 {
    1.5
}

fn default_backoff() -> (f64, f64) {
    use crate::protocol::strategy::{MAX_BACKOFF, MIN_BACKOFF};
    (MIN_BACKOFF.as_secs_f64(), MAX_BACKOFF.as_secs_f64())
}

impl Model {
    /// A model of these sites and nodes with the net driver's defaults:
    /// random stealing, node 0 as master, 256 activities per steal, 3
    /// attempts, a 3 s failure timeout, probes every 1.5 s,
    /// [`Link::wide_area`] between sites.
    pub fn new(sites: Vec<Site>, nodes: Vec<NodeSpec>) -> Self {
        Model {
            sites,
            wide_area: Link::wide_area(),
            site_links: Vec::new(),
            nodes,
            strategy: Strategy::Random,
            master: 0,
            max_steal: 256,
            wide_steal: WideSteal::default(),
            answer_cost: AnswerCost::default(),
            max_attempts: 3,
            failure_timeout: 3.0,
            probe_period: default_probe_period(),
            early_event_wait: 10.0,
            stall_timeout: 60.0,
            horizon: 1e7,
            message_bytes: 128,
            steal_backoff: default_backoff(),
            cache_inputs: true,
            seed: 0,
        }
    }

    /// This model with a steal strategy.
    pub fn with_strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// This model with a seed.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The number of executors of all nodes.
    pub fn executor_count(&self) -> usize {
        self.nodes.iter().map(|node| node.executors.len()).sum()
    }

    /// Checks indices, times and rates, so that the run itself cannot
    /// meet nonsense.
    pub fn validate(&self) -> Result<(), SimError> {
        let bad = |text: String| Err(SimError::Model(text));
        if self.sites.is_empty() {
            return bad("the model has no sites".into());
        }
        if self.nodes.is_empty() {
            return bad("the model has no nodes".into());
        }
        if self.nodes.len() >= u32::MAX as usize {
            return bad(format!("too many nodes ({})", self.nodes.len()));
        }
        for (index, site) in self.sites.iter().enumerate() {
            site.within
                .validate(&format!("site {index} ({})", site.name))?;
        }
        self.wide_area.validate("the wide-area link")?;
        for link in &self.site_links {
            if link.a >= self.sites.len() || link.b >= self.sites.len() {
                return bad(format!(
                    "a site link names site {} or {}, but there are {} sites",
                    link.a,
                    link.b,
                    self.sites.len()
                ));
            }
            link.link
                .validate(&format!("the link between sites {} and {}", link.a, link.b))?;
        }
        for (index, node) in self.nodes.iter().enumerate() {
            let what = format!("node {index} ({})", node.name);
            if node.site >= self.sites.len() {
                return bad(format!(
                    "{what} is on site {}, but there are {} sites",
                    node.site,
                    self.sites.len()
                ));
            }
            if node.executors.len() >= u32::MAX as usize {
                return bad(format!("{what} has too many executors"));
            }
            for (e, executor) in node.executors.iter().enumerate() {
                if executor.cores == 0 {
                    return bad(format!("{what}, executor {e}: it needs at least one core"));
                }
                if !(executor.speed.is_finite() && executor.speed > 0.0) {
                    return bad(format!(
                        "{what}, executor {e}: speed must be positive, not {}",
                        executor.speed
                    ));
                }
                if executor.context.contexts.is_empty() {
                    return bad(format!("{what}, executor {e}: it offers no context"));
                }
            }
            non_negative(node.joins_at, &format!("{what}: join time"))?;
            if let Some(dies) = node.dies_at {
                non_negative(dies, &format!("{what}: death time"))?;
                if dies < node.joins_at {
                    return bad(format!("{what} dies at {dies} s, before it joins"));
                }
            }
        }
        if self.master >= self.nodes.len() {
            return bad(format!(
                "the master is node {}, but there are {} nodes",
                self.master,
                self.nodes.len()
            ));
        }
        if self.max_steal == 0 {
            return bad("max_steal must be at least 1".into());
        }
        non_negative(self.answer_cost.per_request, "the answer cost per request")?;
        non_negative(
            self.answer_cost.per_activity,
            "the answer cost per activity",
        )?;
        if self.max_attempts == 0 {
            return bad("max_attempts must be at least 1".into());
        }
        non_negative(self.failure_timeout, "the failure timeout")?;
        non_negative(self.probe_period, "the probe period")?;
        // Probes at no interval would fire again and again at one instant.
        if self.probe_period == 0.0 {
            return bad("the probe period must be positive".into());
        }
        non_negative(self.early_event_wait, "the early-event wait")?;
        non_negative(self.stall_timeout, "the stall timeout")?;
        if self.stall_timeout == 0.0 {
            return bad("the stall timeout must be positive".into());
        }
        non_negative(self.horizon, "the horizon")?;
        let (first, most) = self.steal_backoff;
        non_negative(first, "the first steal backoff")?;
        non_negative(most, "the longest steal backoff")?;
        // A zero pause never grows, and idle executors would ask again
        // and again at the same instant.
        if first == 0.0 || most < first {
            return bad(format!(
                "the steal backoff must start above zero and not exceed its longest, \
                 not {first} to {most} s"
            ));
        }
        Ok(())
    }
}

/// Checks that `value` is a usable time in seconds.
pub(super) fn non_negative(value: f64, what: &str) -> Result<(), SimError> {
    // About 584 years of nanoseconds fit in a u64; keep well inside.
    if value.is_finite() && (0.0..=1e9).contains(&value) {
        Ok(())
    } else {
        Err(SimError::Model(format!(
            "{what} must be between 0 and 1e9 seconds, not {value}"
        )))
    }
}

/// Seconds as whole nanoseconds; callers have checked the range.
pub(super) fn nanos(seconds: f64) -> u64 {
    (seconds * 1e9).round() as u64
}
