//! Running the pipeline over a dataset: the sequential reference, or the
//! monolithic or many-task version on the embedded pool.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use constellation::collect::MultiEventCollector;
use constellation::{Context, ContextList, ExecutorContext, Pool, Resources};
use serde::{Deserialize, Serialize};

use crate::activities::{DetectNova, NovaDetection, Threads};
use crate::contexts::{Engine, Placement};
use crate::manifest::{Manifest, PairEntry};
use crate::pipeline::{self, now, PairJob, PairOutcome};
use crate::steps::CopyPolicy;

/// Which implementation runs the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Version {
    /// One pair after another, one thread, no platform.
    Sequential,
    /// One activity per pair, using its executor's threads (Figure 5).
    Monolithic,
    /// One activity per step, 7.2 per tile (Figure 6).
    ManyTask,
}

impl Version {
    /// The flag's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Version::Sequential => "sequential",
            Version::Monolithic => "monolithic",
            Version::ManyTask => "many-task",
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Version {
    type Err = String;

    fn from_str(text: &str) -> Result<Version, String> {
        [Version::Sequential, Version::Monolithic, Version::ManyTask]
            .into_iter()
            .find(|v| v.name() == text)
            .ok_or_else(|| {
                format!("unknown version `{text}`; choose sequential, monolithic or many-task")
            })
    }
}

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The dataset directory.
    pub dataset: PathBuf,
    /// Where pairs' work directories go.
    pub work_root: PathBuf,
    /// Where each pair's candidate list goes.
    pub results: PathBuf,
    /// Which implementation.
    pub version: Version,
    /// Which context strategy (Table 1).
    pub placement: Placement,
    /// Where step 7.2's numeric work runs (many-task only).
    pub engine: Engine,
    /// CPU executors on the pool.
    pub executors: usize,
    /// Threads each executor allows an activity (monolithic).
    pub threads: usize,
    /// Emulated wide-area bandwidth for copies from another site.
    pub wan_bytes_per_second: Option<f64>,
    /// Keep work directories (skip step 9).
    pub keep_work: bool,
}

/// An executor of a run, for the journal and the plot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorInfo {
    /// Index on the pool.
    pub index: usize,
    /// Its labels.
    pub labels: String,
    /// Threads (cores) it may use.
    pub cores: usize,
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct RunRecord {
    /// Every pair, in manifest order.
    pub outcomes: Vec<PairOutcome>,
    /// The executors (one pseudo-executor for the sequential reference).
    pub executors: Vec<ExecutorInfo>,
    /// Unix seconds.
    pub started: f64,
    /// Unix seconds.
    pub ended: f64,
}

/// Why a run could not start or finish.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The options cannot work on this machine or this data.
    #[error("{0}")]
    Options(String),
    /// The pool failed.
    #[error("the pool failed: {0}")]
    Pool(String),
}

fn job(options: &RunOptions, pair: &PairEntry) -> PairJob {
    PairJob {
        dataset: options.dataset.clone(),
        pair: pair.clone(),
        work_root: options.work_root.clone(),
        results: options.results.clone(),
        copy: CopyPolicy {
            executor_site: None,
            wan_bytes_per_second: options.wan_bytes_per_second,
        },
        keep_work: options.keep_work,
    }
}

/// Runs `pairs` of `manifest` as `options` say, calling `progress` as each
/// pair ends (with how many have ended and how many there are).
pub fn run(
    manifest: &Manifest,
    pairs: &[PairEntry],
    options: &RunOptions,
    progress: &mut dyn FnMut(&PairOutcome, usize, usize),
) -> Result<RunRecord, RunError> {
    let started = now();
    let (mut outcomes, executors) = match options.version {
        Version::Sequential => {
            let mut outcomes = Vec::new();
            for pair in pairs {
                let outcome = pipeline::run_pair(&job(options, pair), 1);
                progress(&outcome, outcomes.len() + 1, pairs.len());
                outcomes.push(outcome);
            }
            let only = ExecutorInfo {
                index: 0,
                labels: "sequential".into(),
                cores: 1,
            };
            (outcomes, vec![only])
        }
        Version::Monolithic | Version::ManyTask => on_pool(manifest, pairs, options, progress)?,
    };
    let order = |o: &PairOutcome| pairs.iter().position(|p| p.id == o.pair);
    outcomes.sort_by_key(order);
    Ok(RunRecord {
        outcomes,
        executors,
        started,
        ended: now(),
    })
}

/// The label every executor offers last, so the collector that gathers
/// the pairs' outcomes can run whatever the placement.
const MAIN_LABEL: &str = "main";

/// The executors for `options`: their contexts and resources.
fn executor_plan(
    manifest: &Manifest,
    pairs: &[PairEntry],
    options: &RunOptions,
) -> Result<Vec<(ExecutorContext, Resources, ExecutorInfo)>, RunError> {
    let threads = match options.version {
        Version::Monolithic => options.threads.max(1),
        _ => 1,
    };
    let sites: Vec<&String> = manifest
        .sites
        .iter()
        .filter(|s| pairs.iter().any(|p| p.sites.contains(s)))
        .collect();
    let mut count = options.executors.max(1);
    if options.placement.uses_sites() && count < sites.len() {
        // Location strategies need someone at every site that holds data,
        // or that data would never be processed.
        eprintln!(
            "note: placement {} needs an executor at each of {} sites; using {} executors",
            options.placement,
            sites.len(),
            sites.len()
        );
        count = sites.len();
    }
    let mut plan = Vec::new();
    for index in 0..count {
        let site = sites.get(index % sites.len().max(1)).map(|s| s.as_str());
        let mut context = options.placement.executor_context(site);
        context.contexts.push(Context::new(MAIN_LABEL));
        let info = ExecutorInfo {
            index,
            labels: context.label_list(),
            cores: threads,
        };
        let resources = Resources::new()
            .with_handle(Threads(threads))
            .with_env("OMP_NUM_THREADS", threads.to_string());
        plan.push((context, resources, info));
    }
    if options.engine == Engine::Gpu && options.version == Version::ManyTask {
        let gpus = executors::gpu::cuda_executors().unwrap_or_default();
        if gpus.is_empty() {
            let why = executors::gpu::no_gpu_reason().unwrap_or_else(|| "no CUDA devices".into());
            return Err(RunError::Options(format!(
                "--step72 gpu needs a GPU executor, and this machine has none ({why}); \
                 run with --step72 cpu, which gives the same candidates"
            )));
        }
        for (context, resources) in gpus {
            let index = plan.len();
            let info = ExecutorInfo {
                index,
                labels: context.label_list(),
                cores: 1,
            };
            plan.push((context, resources, info));
        }
    }
    Ok(plan)
}

fn on_pool(
    manifest: &Manifest,
    pairs: &[PairEntry],
    options: &RunOptions,
    progress: &mut dyn FnMut(&PairOutcome, usize, usize),
) -> Result<(Vec<PairOutcome>, Vec<ExecutorInfo>), RunError> {
    let plan = executor_plan(manifest, pairs, options)?;
    let mut builder = Pool::builder();
    let mut executors = Vec::new();
    for (context, resources, info) in plan {
        builder = builder.executor_with_resources(context, resources);
        executors.push(info);
    }
    let pool = builder.start().map_err(|e| RunError::Pool(e.to_string()))?;
    let (collector, results) = MultiEventCollector::new(pairs.len());
    let collector = collector.on(ContextList::single(Context::new(MAIN_LABEL)));
    let main = pool
        .submit(collector)
        .map_err(|e| RunError::Pool(e.to_string()))?;
    for pair in pairs {
        let context = options.placement.activity_context(pair);
        let job = job(options, pair);
        let submitted = match options.version {
            Version::Monolithic => pool.submit(NovaDetection::new(job, context, main)),
            _ => pool.submit(DetectNova::new(job, context, options.engine, main)),
        };
        submitted.map_err(|e| {
            RunError::Options(format!(
                "no executor can process {} (context {}): {e}",
                pair.id,
                options.placement.activity_context(pair)
            ))
        })?;
    }
    let mut outcomes = Vec::new();
    while let Some(batch) = results
        .next_batch(Duration::from_secs(1))
        .map_err(|e| RunError::Pool(e.to_string()))?
    {
        for event in batch {
            let outcome: PairOutcome = event
                .take()
                .map_err(|e| RunError::Pool(format!("unexpected event: {e}")))?;
            progress(&outcome, outcomes.len() + 1, pairs.len());
            outcomes.push(outcome);
        }
    }
    pool.done().map_err(|e| RunError::Pool(e.to_string()))?;
    Ok((outcomes, executors))
}
