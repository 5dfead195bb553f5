//! The paper's three evaluation scenarios as simulator models: the
//! platform ([`Model`]) and the application ([`Workload`]) of each, built
//! from a dataset plan and the [`StepModel`].
//!
//! The application is the real one's shape: the monolithic version is one
//! activity per pair, whose time on an executor with `k` cores is
//! [`StepModel::monolithic_seconds`]; the many-task version is one
//! `detect-nova` activity per pair that submits the pipeline's steps stage
//! by stage through the core and waits for their events, with one compare
//! activity per tile, all kept on the pair's node as in the paper
//! ("activities belonging to a single image pair [do not] leave a
//! machine"). Contexts come from [`Placement`], as in real runs.

use constellation::net::Strategy;
use constellation::sim::{
    ActivitySpec, Data, ExecutorSpec, Kind, Link, Model, NodeSpec, Placement as Confine, Site,
    Workload,
};
use constellation::{Context, ContextList, ExecutorContext, Preference};

use super::steps::{pixels, Step, StepModel};
use crate::contexts::Placement;
use crate::generate::GenerateConfig;
use crate::manifest::{Manifest, PairEntry};

/// Pairs in the paper's dataset.
pub const PAPER_PAIRS: usize = 1052;

/// Bytes of the paper's dataset: 73 GB.
pub const PAPER_BYTES: f64 = 73e9;

/// The simulated dataset: the layout of the paper's Table 2 over four
/// sites, image sides drawn between 512 and 4096 px, and file sizes scaled
/// so that the whole set is [`PAPER_BYTES`].
pub fn paper_dataset(seed: u64) -> Manifest {
    let config = GenerateConfig {
        seed,
        pairs: PAPER_PAIRS,
        min_size: 512,
        max_size: 4096,
        ..GenerateConfig::default()
    };
    let mut manifest = Manifest::plan(&config);
    let total: u64 = manifest.pairs.iter().map(|p| p.bytes).sum();
    let factor = PAPER_BYTES / total.max(1) as f64;
    for pair in &mut manifest.pairs {
        pair.bytes = (pair.bytes as f64 * factor) as u64;
    }
    manifest
}

/// How executors find work in every scenario. Ibis Constellation steals
/// from the node that holds the work; the application submits all pairs
/// at one node, so the others ask it.
pub const STRATEGY: Strategy = Strategy::MasterWorker;

/// The label that tells a pair's monolithic kind how many cores an
/// executor has (`cores:8`).
fn cores_label(cores: u32) -> String {
    format!("cores:{cores}")
}

/// Core counts the monolithic kinds know speedups for.
const CORE_COUNTS: [u32; 8] = [2, 4, 6, 8, 12, 16, 24, 48];

/// Adds one monolithic activity per pair as roots: its time on one core is
/// the pipeline's, and an executor labelled `cores:k` runs it in
/// [`StepModel::monolithic_seconds`] for `k`.
fn add_monolithic(
    workload: &mut Workload,
    steps: &StepModel,
    pairs: &[PairEntry],
    sites: &[String],
    contexts: impl Fn(&PairEntry) -> ContextList,
) {
    for pair in pairs {
        let one = steps.monolithic_seconds(pair, 1);
        let mut kind = Kind::new("nova-detection");
        for cores in CORE_COUNTS {
            let on = steps.monolithic_seconds(pair, cores);
            if on > 0.0 {
                kind = kind.with_speedup(&cores_label(cores), one / on);
            }
        }
        let kind = workload.add_kind(kind);
        let data = workload.add_data(pair_data(pair, sites));
        workload.add_root(
            ActivitySpec::new(kind, one)
                .with_contexts(contexts(pair))
                .with_input(data),
        );
    }
}

fn pair_data(pair: &PairEntry, sites: &[String]) -> Data {
    let replicas: Vec<usize> = (pair.sites.iter())
        .filter_map(|name| sites.iter().position(|s| s == name))
        .collect();
    Data {
        bytes: pair.bytes,
        replicas: if replicas.is_empty() {
            vec![0]
        } else {
            replicas
        },
    }
}

/// Where a many-task pair's step 7.2 runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Compare {
    /// One CPU activity per tile.
    Cpu,
    /// Per tile, a CPU activity (reading and preparing the tile, the share
    /// `1 - gpu_share` of the work) and then a `gpu` activity for the
    /// rest, which a GPU executor runs `speedup` times faster.
    Gpu {
        /// The share of 7.2's work that moves to the GPU.
        gpu_share: f64,
        /// How much faster a GPU executor runs it than one core.
        speedup: f64,
    },
}

/// Adds the many-task version of every pair: a `detect-nova` root per pair
/// with `root_contexts`, whose steps run where `step_contexts` says (the
/// GPU part of 7.2 under `gpu`), kept on the pair's node.
///
/// Steps carry their pair's size rank like the root: executors that take
/// the largest first then finish the pairs they started before they start
/// smaller ones, and pairs they have not started stay free for other
/// nodes to take. With unranked steps a node would start every pair it
/// holds at once (a root's own call is short) and keep them all.
fn add_many_task(
    workload: &mut Workload,
    steps: &StepModel,
    pairs: &[PairEntry],
    sites: &[String],
    root_contexts: impl Fn(&PairEntry) -> ContextList,
    step_contexts: impl Fn(&PairEntry) -> ContextList,
    compare: Compare,
) {
    let kinds: Vec<u32> = (Step::ALL.iter())
        .map(|step| workload.add_kind(Kind::new(step.name())))
        .collect();
    let gpu_kind = workload.add_kind(match compare {
        Compare::Gpu { speedup, .. } => Kind::new("compare-gpu").with_speedup("gpu", speedup),
        Compare::Cpu => Kind::new("compare-gpu"),
    });
    let root_kind = workload.add_kind(Kind::new("detect-nova"));
    let gpu = ContextList::single(Context::new("gpu"));
    for pair in pairs {
        let px = pixels(pair);
        let data = workload.add_data(pair_data(pair, sites));
        let step_contexts = step_contexts(pair);
        let mut spec = |step: Step, seconds: f64| {
            let mut activity = ActivitySpec::new(kinds[step as usize], seconds)
                .with_contexts(step_contexts.clone())
                .with_placement(Confine::Node);
            if step == Step::Prepare {
                activity = activity.with_input(data);
            }
            workload.add(activity)
        };
        let one = |step: Step| steps.seconds(step, px);
        let prepare = spec(Step::Prepare, one(Step::Prepare));
        let detect = spec(Step::Detect, one(Step::Detect));
        let align = spec(Step::Align, one(Step::Align));
        let equalize = spec(Step::Equalize, one(Step::Equalize));
        let split = spec(Step::Split, one(Step::Split));
        let recombine = spec(Step::Recombine, one(Step::Recombine));
        let extract = spec(Step::Extract, one(Step::Extract));
        let cleanup = spec(Step::Cleanup, one(Step::Cleanup));
        let tiles = steps.count(Step::Compare, pair);
        let compare_stage = match compare {
            Compare::Cpu => vec![spec(Step::Compare, one(Step::Compare)); tiles],
            Compare::Gpu { gpu_share, .. } => {
                let on_gpu = workload.add(
                    ActivitySpec::new(gpu_kind, one(Step::Compare) * gpu_share)
                        .with_contexts(gpu.clone())
                        .with_placement(Confine::Node),
                );
                // The CPU part submits the GPU part and waits for it.
                let cpu_part = workload.add(
                    ActivitySpec::new(
                        kinds[Step::Compare as usize],
                        one(Step::Compare) * (1.0 - gpu_share),
                    )
                    .with_contexts(step_contexts.clone())
                    .with_placement(Confine::Node)
                    .with_stage(vec![on_gpu]),
                );
                vec![cpu_part; tiles]
            }
        };
        let root = ActivitySpec::new(root_kind, 0.0)
            .with_contexts(root_contexts(pair))
            .with_stage(vec![prepare])
            .with_stage(vec![detect, detect])
            .with_stage(vec![align])
            .with_stage(vec![equalize, equalize])
            .with_stage(vec![split])
            .with_stage(compare_stage)
            .with_stage(vec![recombine])
            .with_stage(vec![extract])
            .with_stage(vec![cleanup]);
        workload.add_root(root);
    }
}

/// One configuration of scenario 1 (Tables 2 and 3): four clusters, one
/// monolithic executor per node, inter-site copies at 1 MB/s each.
pub fn scenario1(
    manifest: &Manifest,
    steps: &StepModel,
    placement: Placement,
    seed: u64,
) -> (Model, Workload) {
    // (site, nodes, cores per node), as in Table 2.
    let clusters = [
        ("lu", 20, 2),
        ("uva", 20, 4),
        ("vu3", 20, 4),
        ("vu4", 20, 8),
    ];
    let sites: Vec<String> = clusters.iter().map(|c| c.0.to_string()).collect();
    let mut nodes = Vec::new();
    for (site_index, (site, count, cores)) in clusters.iter().enumerate() {
        for n in 0..*count {
            let mut context = placement.executor_context(Some(site));
            context.contexts.push(Context::new(&cores_label(*cores)));
            let executor = ExecutorSpec::new(context).with_cores(*cores);
            nodes.push(NodeSpec::new(
                format!("{site}-{n:02}"),
                site_index,
                vec![executor],
            ));
        }
    }
    // The application starts on the first VU3 node, as the master.
    let master = nodes.iter().position(|n| n.site == 2).unwrap_or(0);
    let mut model = Model::new(sites.iter().map(Site::new).collect(), nodes)
        .with_seed(seed)
        .with_strategy(STRATEGY);
    model.master = master;
    model.max_steal = 1;
    let mut workload = Workload::new();
    add_monolithic(&mut workload, steps, &manifest.pairs, &sites, |pair| {
        placement.activity_context(pair)
    });
    (model, workload)
}

/// The executor configurations of scenario 2 (Figure 9): executors ×
/// cores each, on one 48-core machine.
pub const SCENARIO2_CONFIGS: [(u32, u32); 6] =
    [(1, 48), (2, 24), (6, 8), (12, 4), (24, 2), (48, 1)];

/// The `count` largest pairs of `manifest`.
pub fn largest(manifest: &Manifest, count: usize) -> Vec<PairEntry> {
    let mut pairs = manifest.pairs.clone();
    pairs.sort_by_key(|p| std::cmp::Reverse((p.width * p.height, p.id.clone())));
    pairs.truncate(count);
    pairs
}

/// Scenario 2, monolithic: `executors` executors of `cores` cores on one
/// machine, pairs ranked by size, largest first, all data local.
pub fn scenario2_monolithic(
    pairs: &[PairEntry],
    steps: &StepModel,
    executors: u32,
    cores: u32,
    seed: u64,
) -> (Model, Workload) {
    let sites = vec!["machine".to_string()];
    let mut context = Placement::AnywhereSorted.executor_context(None);
    context.contexts.push(Context::new(&cores_label(cores)));
    let specs = (0..executors)
        .map(|_| ExecutorSpec::new(context.clone()).with_cores(cores))
        .collect();
    let model = Model::new(
        vec![Site::new("machine")],
        vec![NodeSpec::new("machine", 0, specs)],
    )
    .with_seed(seed);
    let mut workload = Workload::new();
    add_monolithic(&mut workload, steps, pairs, &sites, |pair| {
        Placement::AnywhereSorted.activity_context(pair)
    });
    (model, workload)
}

/// Scenario 2, many-task: 48 one-core executors on one machine.
pub fn scenario2_many_task(pairs: &[PairEntry], steps: &StepModel, seed: u64) -> (Model, Workload) {
    let sites = vec!["machine".to_string()];
    let context = Placement::AnywhereSorted.executor_context(None);
    let model = Model::new(
        vec![Site::new("machine")],
        vec![NodeSpec::uniform("machine", 0, 48, context)],
    )
    .with_seed(seed);
    let mut workload = Workload::new();
    add_many_task(
        &mut workload,
        steps,
        pairs,
        &sites,
        |pair| Placement::AnywhereSorted.activity_context(pair),
        |pair| Placement::AnywhereSorted.activity_context(pair),
        Compare::Cpu,
    );
    (model, workload)
}

/// Scenario 3 (Figure 11): 18 nodes of 8 executors, the data on the
/// cluster's file server (1 Gbit/s shared), the many-task version; with
/// `compare` on the GPU, each node has 7 `cpu` executors and one `gpu`.
pub fn scenario3(
    manifest: &Manifest,
    steps: &StepModel,
    compare: Compare,
    seed: u64,
) -> (Model, Workload) {
    let sites = vec!["das4".to_string()];
    // Roots are ranked by size: CPU executors take the largest pair first.
    let cpu = ExecutorContext::new([Context::new("cpu")]).with_preference(Preference::Biggest);
    let gpu = ExecutorContext::new([Context::new("gpu")]);
    let nodes = (0..18)
        .map(|n| {
            let mut executors: Vec<ExecutorSpec> = Vec::new();
            let cpus = if matches!(compare, Compare::Cpu) {
                8
            } else {
                7
            };
            executors.extend((0..cpus).map(|_| ExecutorSpec::new(cpu.clone())));
            if cpus == 7 {
                executors.push(ExecutorSpec::new(gpu.clone()));
            }
            NodeSpec::new(format!("node{n:03}"), 0, executors)
        })
        .collect();
    let file_server = Link::latency(0.0001).with_bandwidth(125e6);
    let mut site = Site::new("das4");
    site.within = file_server;
    let mut model = Model::new(vec![site], nodes)
        .with_seed(seed)
        .with_strategy(STRATEGY);
    // A node takes one pair at a time; its idle executors come back for
    // more, so a node works on as many pairs as keep it busy.
    model.max_steal = 1;
    let mut workload = Workload::new();
    let ranked = |pair: &PairEntry| {
        ContextList::single(Context::new("cpu").with_rank(crate::contexts::size_rank(pair)))
    };
    add_many_task(
        &mut workload,
        steps,
        &manifest.pairs,
        &sites,
        ranked,
        ranked,
        compare,
    );
    (model, workload)
}
