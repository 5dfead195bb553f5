//! Scenario 1 on the real runtime, at reduced scale: how the simulator
//! earns trust.
//!
//! One process per site, all on loopback, joined into one pool by the net
//! driver; each simulated node is one executor of its site's process,
//! labelled as in [`scenarios::scenario1`]. Each pair is an
//! [`EmulatedPair`] activity that sleeps for its modelled time on its
//! executor's core count, after sleeping out the modelled copy when its
//! executor's site holds no replica. Everything is scaled by one time
//! factor. The same reduced platform is then simulated, and the two
//! makespans compared.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use constellation::collect::MultiEventCollector;
use constellation::net::{Multiaddr, Node, NodeConfig};
use constellation::protocol::strategy::{MAX_BACKOFF, MIN_BACKOFF};
use constellation::sim::{ExecutorSpec, Model, NodeSpec, Site, Workload};
use constellation::{
    Activity, ActivityCx, ActivityId, Context, ContextList, Event, ExecutorContext, Step,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::scenarios::{self, STRATEGY};
use super::steps::StepModel;
use crate::contexts::Placement;
use crate::manifest::{Manifest, PairEntry};

/// The reduced platform: (site, nodes, cores per node). Two nodes per
/// cluster of the paper's Table 2.
pub const SITES: [(&str, usize, u32); 4] =
    [("lu", 2, 2), ("uva", 2, 4), ("vu3", 2, 4), ("vu4", 2, 8)];

/// The master's site, where the pairs are submitted.
pub const MASTER_SITE: &str = "vu3";

/// Bytes per second of one copy between sites (the paper's 1 MB/s).
pub const WIDE_AREA_RATE: f64 = 1e6;

/// Bytes per second of a read within a site ([`constellation::sim::Link::cluster`]).
pub const LOCAL_RATE: f64 = 1.25e9;

/// The label an executor's core count travels in: `cores:4`.
const CORES_PREFIX: &str = "cores:";

/// The label of the master's extra executor, which collects the reports
/// and submits the pairs; no pair asks for it.
const COLLECTOR_LABEL: &str = "emulated-collector";

/// One pair of the monolithic version, emulated: it sleeps instead of
/// working, for as long as the model says, scaled.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EmulatedPair {
    /// The pair.
    pub pair: String,
    /// Where it may run.
    pub contexts: ContextList,
    /// Modelled seconds on an executor with this many cores.
    pub seconds_by_cores: Vec<(u32, f64)>,
    /// Bytes to copy when the executor's site holds no replica.
    pub bytes: u64,
    /// Sites holding a replica.
    pub replicas: Vec<String>,
    /// Real seconds per modelled second.
    pub scale: f64,
    /// Where to report.
    pub reply_to: ActivityId,
}

#[typetag::serde]
impl Activity for EmulatedPair {
    fn context(&self) -> ContextList {
        self.contexts.clone()
    }

    fn initialize(&mut self, cx: &mut ActivityCx<'_>) -> Step {
        let executor = cx.executor_context();
        let cores = (executor.contexts.iter())
            .find_map(|c| {
                c.label
                    .name()
                    .strip_prefix(CORES_PREFIX)?
                    .parse::<u32>()
                    .ok()
            })
            .unwrap_or(1);
        let site = site_of_executor(executor);
        let local = site.as_ref().is_some_and(|s| self.replicas.contains(s));
        let rate = if local { LOCAL_RATE } else { WIDE_AREA_RATE };
        let copy = self.bytes as f64 / rate;
        let work = (self.seconds_by_cores.iter())
            .find(|(c, _)| *c == cores)
            .or_else(|| self.seconds_by_cores.first())
            .map_or(0.0, |(_, s)| *s);
        std::thread::sleep(Duration::from_secs_f64((copy + work) * self.scale));
        cx.send(self.reply_to, PairReport::Ran(self.pair.clone()));
        Step::Finish
    }

    fn process(&mut self, _cx: &mut ActivityCx<'_>, _event: Event) -> Step {
        Step::Finish
    }
}

/// What the collector hears about each pair: exactly one report per pair.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum PairReport {
    /// The pair ran.
    Ran(String),
    /// The pair could not be submitted, and why.
    NotSubmitted(String, String),
}

/// Submits every pair of the run in one step, so all of them are queued
/// before any executor asks for one.
///
/// The simulator queues the whole bag at time 0, as the paper's master
/// does. Submitted one by one from outside the pool, the first pairs were
/// taken while the rest were still arriving: at a clock of 0.002 the 30 ms
/// that 24 submissions took were 15 modelled seconds, enough for a site to
/// take a small pair of its own and leave its biggest to a slow site
/// that took it "anywhere". The submissions of one step reach the
/// scheduler together.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SubmitPairs {
    pairs: Vec<EmulatedPair>,
    reply_to: ActivityId,
}

#[typetag::serde]
impl Activity for SubmitPairs {
    fn context(&self) -> ContextList {
        ContextList::single(Context::new(COLLECTOR_LABEL))
    }

    fn initialize(&mut self, cx: &mut ActivityCx<'_>) -> Step {
        for pair in std::mem::take(&mut self.pairs) {
            let name = pair.pair.clone();
            if let Err(error) = cx.submit(pair) {
                cx.send(
                    self.reply_to,
                    PairReport::NotSubmitted(name, error.to_string()),
                );
            }
        }
        Step::Finish
    }

    fn process(&mut self, _cx: &mut ActivityCx<'_>, _event: Event) -> Step {
        Step::Finish
    }
}

/// The site in an executor's `emulated-site:` label. Placements without
/// site labels still need to know where an executor is.
fn site_of_executor(executor: &ExecutorContext) -> Option<String> {
    executor.contexts.iter().find_map(|c| {
        c.label
            .name()
            .strip_prefix("emulated-site:")
            .map(str::to_string)
    })
}

/// The executors of one site's process.
fn site_executors(
    placement: Placement,
    site: &str,
    nodes: usize,
    cores: u32,
) -> Vec<ExecutorContext> {
    (0..nodes)
        .map(|_| {
            let mut context = placement.executor_context(Some(site));
            context
                .contexts
                .push(Context::new(&format!("{CORES_PREFIX}{cores}")));
            context
                .contexts
                .push(Context::new(&format!("emulated-site:{site}")));
            context
        })
        .collect()
}

fn node_config(site: &str, bootstrap: Vec<Multiaddr>, master: bool) -> NodeConfig {
    NodeConfig {
        bootstrap,
        site: Some(site.to_string()),
        strategy: STRATEGY,
        master,
        max_steal: 1,
        role: "emulated-site".into(),
        ..NodeConfig::default()
    }
}

/// A site's process (`supernova eval-site`): joins `join` and serves until
/// the master leaves.
pub fn serve_site(site: &str, join: &str, placement: Placement) -> Result<()> {
    let Some(&(_, nodes, cores)) = SITES.iter().find(|s| s.0 == site) else {
        bail!("unknown site {site:?}");
    };
    let join: Multiaddr = join.parse().with_context(|| format!("--join {join:?}"))?;
    let builder = (site_executors(placement, site, nodes, cores).into_iter())
        .fold(constellation::Pool::builder(), |b, c| b.executor(c));
    let node = Node::start(node_config(site, vec![join], false), builder)?;
    node.wait_for_master_gone(Some(Duration::from_secs(600)));
    node.leave();
    Ok(())
}

/// The pairs of the reduced run: the first `count` of the plan.
pub fn pairs(manifest: &Manifest, count: usize) -> Vec<PairEntry> {
    manifest.pairs.iter().take(count).cloned().collect()
}

/// Runs the reduced scenario 1 on the real runtime and returns the
/// makespan in modelled seconds. `exe` is the `supernova` binary.
pub fn emulate(
    exe: &Path,
    pairs: &[PairEntry],
    steps: &StepModel,
    placement: Placement,
    scale: f64,
) -> Result<f64> {
    let (_, nodes, cores) = SITES
        .iter()
        .find(|s| s.0 == MASTER_SITE)
        .copied()
        .expect("listed");
    let mut builder = (site_executors(placement, MASTER_SITE, nodes, cores).into_iter())
        .fold(constellation::Pool::builder(), |b, c| b.executor(c));
    builder = builder.executor(ExecutorContext::new([Context::new(COLLECTOR_LABEL)]));
    let master = Node::start(node_config(MASTER_SITE, Vec::new(), true), builder)?;
    let join = master.join_address().to_string();
    let mut children = Vec::new();
    for (site, _, _) in SITES.iter().filter(|s| s.0 != MASTER_SITE) {
        let child = Command::new(exe)
            .args([
                "eval-site",
                "--site",
                site,
                "--join",
                &join,
                "--placement",
                placement.name(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .with_context(|| format!("starting the {site} process"))?;
        children.push(KillOnDrop(child));
    }
    master
        .wait_for_members(SITES.len(), Duration::from_secs(30))
        .context("the site processes did not join")?;
    // Members learn each other's executors in a moment; submissions check them.
    std::thread::sleep(Duration::from_millis(300));
    let (collector, results) = MultiEventCollector::new(pairs.len());
    let collector =
        master.submit(collector.on(ContextList::single(Context::new(COLLECTOR_LABEL))))?;
    let pairs = (pairs.iter())
        .map(|pair| EmulatedPair {
            pair: pair.id.clone(),
            contexts: placement.activity_context(pair),
            seconds_by_cores: [1, 2, 4, 8]
                .into_iter()
                .map(|c| (c, steps.monolithic_seconds(pair, c)))
                .collect(),
            bytes: pair.bytes,
            replicas: pair.sites.clone(),
            scale,
            reply_to: collector,
        })
        .collect();
    let started = Instant::now();
    master.submit(SubmitPairs {
        pairs,
        reply_to: collector,
    })?;
    let limit = Duration::from_secs(600);
    let reports = results
        .wait_timeout(limit)
        .with_context(|| format!("the emulated run did not finish within {limit:?}"))?;
    let makespan = started.elapsed().as_secs_f64() / scale;
    for report in reports {
        if let PairReport::NotSubmitted(pair, reason) =
            report.take().context("a pair's report could not be read")?
        {
            bail!("{pair} could not be submitted: {reason}");
        }
    }
    master
        .done()
        .context("the master's run did not end cleanly")?;
    drop(children);
    Ok(makespan)
}

/// The same reduced platform in the simulator: one node per site with
/// one executor per emulated node, as it runs at clock `scale`.
///
/// The runtime's real-time pauses do not shrink with the emulated clock,
/// so the model stretches them by `1 / scale`: an idle executor group's
/// steal backoff, and the moment each other site's first request reaches
/// the master. Those site processes wait out their longest backoff while
/// the pairs are submitted, so their first request lands anywhere in it;
/// `seed` draws where. Over several seeds the simulator thus gives the
/// spread of orders in which the real run may hand out its first pairs.
pub fn simulated(
    pairs: &[PairEntry],
    steps: &StepModel,
    placement: Placement,
    seed: u64,
    scale: f64,
) -> (Model, Workload) {
    let manifest = Manifest {
        seed,
        sites: SITES.iter().map(|s| s.0.to_string()).collect(),
        pairs: pairs.to_vec(),
    };
    let (_, workload) = scenarios::scenario1(&manifest, steps, placement, seed);
    let sites: Vec<Site> = SITES.iter().map(|s| Site::new(s.0)).collect();
    let stretch = |pause: Duration| pause.as_secs_f64() / scale;
    let mut first_request = ChaCha8Rng::seed_from_u64(seed);
    let nodes: Vec<NodeSpec> = (SITES.iter().enumerate())
        .map(|(index, (site, count, cores))| {
            let executors = (site_executors(placement, site, *count, *cores).into_iter())
                .map(|c| ExecutorSpec::new(c).with_cores(*cores))
                .collect();
            let mut node = NodeSpec::new(*site, index, executors);
            if *site != MASTER_SITE {
                node.joins_at = first_request.gen_range(0.0..stretch(MAX_BACKOFF));
            }
            node
        })
        .collect();
    let mut model = Model::new(sites, nodes)
        .with_seed(seed)
        .with_strategy(STRATEGY);
    model.master = SITES.iter().position(|s| s.0 == MASTER_SITE).unwrap_or(0);
    model.max_steal = 1;
    model.steal_backoff = (stretch(MIN_BACKOFF), stretch(MAX_BACKOFF));
    (model, workload)
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // The site processes leave on their own once the master is gone;
        // give them a moment, then make sure.
        for _ in 0..50 {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
