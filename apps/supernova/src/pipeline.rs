//! One pair, start to finish, without the platform: the sequential
//! reference (one thread) and the body of the monolithic activity (the
//! threads its executor allows).

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::catalog::Candidate;
use crate::manifest::PairEntry;
use crate::steps::{self, CopyPolicy, Epoch, Prepared, StepError};

/// Everything a pair's processing needs to know, wherever it runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairJob {
    /// The dataset directory (with `manifest.json` and `sites/`).
    pub dataset: PathBuf,
    /// The pair, as the manifest lists it.
    pub pair: PairEntry,
    /// Where work directories go; the pair's is `work_root/<pair id>`.
    pub work_root: PathBuf,
    /// Where step 8 writes `<pair id>.json`.
    pub results: PathBuf,
    /// How step 1 copies the images in.
    pub copy: CopyPolicy,
    /// Skip step 9, leaving the work directory for inspection.
    pub keep_work: bool,
}

impl PairJob {
    /// The pair's work directory.
    pub fn work(&self) -> PathBuf {
        steps::work_dir(&self.work_root, &self.pair.id)
    }
}

/// A step of the pipeline, as the many-task version runs it: one activity each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StepKind {
    /// 1: copy in.
    Prepare,
    /// 2 and 3: detect in A or B.
    Detect(Epoch),
    /// 4: match and fit.
    Align,
    /// 5 and 6: equalize A or B.
    Equalize(Epoch),
    /// 7.1: tiles.
    Split,
    /// 7.2: one tile pair.
    Compare(usize),
    /// 7.3: merge.
    Recombine,
    /// 8: candidates.
    Extract,
    /// 9: clean up.
    Cleanup,
}

impl StepKind {
    /// The step's kind, as reports group it: `prepare`, `detect`, …
    pub fn name(self) -> &'static str {
        match self {
            StepKind::Prepare => "1-prepare",
            StepKind::Detect(_) => "2,3-detect",
            StepKind::Align => "4-align",
            StepKind::Equalize(_) => "5,6-equalize",
            StepKind::Split => "7.1-split",
            StepKind::Compare(_) => "7.2-compare",
            StepKind::Recombine => "7.3-recombine",
            StepKind::Extract => "8-extract",
            StepKind::Cleanup => "9-cleanup",
        }
    }

    /// A unique id for this step of `pair`: `pair-0003/detect-a`.
    pub fn id(self, pair: &str) -> String {
        match self {
            StepKind::Detect(epoch) => format!("{pair}/detect-{}", epoch.letter()),
            StepKind::Equalize(epoch) => format!("{pair}/equalize-{}", epoch.letter()),
            StepKind::Compare(tile) => format!("{pair}/compare-{tile:04}"),
            other => format!(
                "{pair}/{}",
                &other.name()[other.name().find('-').unwrap() + 1..]
            ),
        }
    }
}

/// When and where one step (or one monolithic pair) ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepTiming {
    /// A unique id, e.g. `pair-0003/compare-0007`.
    pub id: String,
    /// The kind, e.g. `7.2-compare`.
    pub kind: String,
    /// Unix seconds.
    pub started: f64,
    /// Unix seconds.
    pub ended: f64,
    /// The executor, on the pool; `None` in the sequential reference.
    pub executor: Option<usize>,
    /// The executor's labels.
    pub labels: String,
    /// Why it failed, if it did.
    pub error: Option<String>,
}

/// Unix seconds now.
pub fn now() -> f64 {
    journal::unix_seconds(SystemTime::now())
}

/// What became of one pair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairOutcome {
    /// The pair.
    pub pair: String,
    /// Its candidates, or why it failed.
    pub result: Result<Vec<Candidate>, String>,
    /// Where its images came from.
    pub prepared: Option<Prepared>,
    /// Every step it ran.
    pub steps: Vec<StepTiming>,
}

/// Runs one step and times it.
fn timed<T>(
    kind: StepKind,
    pair: &str,
    steps: &Mutex<Vec<StepTiming>>,
    work: impl FnOnce() -> Result<T, StepError>,
) -> Result<T, StepError> {
    let started = now();
    let result = work();
    steps.lock().unwrap().push(StepTiming {
        id: kind.id(pair),
        kind: kind.name().to_string(),
        started,
        ended: now(),
        executor: None,
        labels: String::new(),
        error: result.as_ref().err().map(ToString::to_string),
    });
    result
}

/// Runs the whole pipeline on one pair with up to `threads` threads: steps
/// 2 and 3 side by side, 5 and 6 side by side, and the tiles of 7.2 spread
/// over the threads. With one thread it is the sequential reference.
pub fn run_pair(job: &PairJob, threads: usize) -> PairOutcome {
    let log = Mutex::new(Vec::new());
    let mut prepared = None;
    let result = stages(job, threads.max(1), &log, &mut prepared);
    let work = job.work();
    if !job.keep_work {
        // Cleanup runs after a failure too: a failed pair must not leave
        // gigabytes behind on a scratch disk.
        let _ = timed(StepKind::Cleanup, &job.pair.id, &log, || {
            steps::cleanup(&work)
        });
    }
    let mut steps = log.into_inner().unwrap();
    steps.sort_by(|a, b| a.started.total_cmp(&b.started));
    PairOutcome {
        pair: job.pair.id.clone(),
        result: result.map_err(|e| e.to_string()),
        prepared,
        steps,
    }
}

fn stages(
    job: &PairJob,
    threads: usize,
    log: &Mutex<Vec<StepTiming>>,
    prepared: &mut Option<Prepared>,
) -> Result<Vec<Candidate>, StepError> {
    let pair = job.pair.id.as_str();
    let work = job.work();
    let work = work.as_path();
    *prepared = Some(timed(StepKind::Prepare, pair, log, || {
        steps::prepare(&job.dataset, &job.pair, &job.copy, work)
    })?);
    both(threads, |epoch| {
        timed(StepKind::Detect(epoch), pair, log, || {
            steps::detect(work, epoch)
        })
        .map(drop)
    })?;
    timed(StepKind::Align, pair, log, || steps::align(work))?;
    both(threads, |epoch| {
        timed(StepKind::Equalize(epoch), pair, log, || {
            steps::equalize(work, epoch)
        })
    })?;
    let plan = timed(StepKind::Split, pair, log, || steps::split(work))?;
    let indices: Vec<usize> = plan.tiles.iter().map(|t| t.index).collect();
    spread(threads, &indices, |index| {
        timed(StepKind::Compare(index), pair, log, || {
            steps::compare(work, index)
        })
        .map(drop)
    })?;
    timed(StepKind::Recombine, pair, log, || steps::recombine(work))?;
    timed(StepKind::Extract, pair, log, || {
        steps::extract(work, pair, &job.results)
    })
}

/// Runs `step` for A and B, side by side when there are threads for it.
fn both(
    threads: usize,
    step: impl Fn(Epoch) -> Result<(), StepError> + Sync,
) -> Result<(), StepError> {
    spread(threads, &[Epoch::A, Epoch::B], step)
}

/// Runs `work` for every item on up to `threads` threads; the first error
/// (in item order) wins, after all items have run.
fn spread<T: Copy + Sync>(
    threads: usize,
    items: &[T],
    work: impl Fn(T) -> Result<(), StepError> + Sync,
) -> Result<(), StepError> {
    if threads <= 1 || items.len() <= 1 {
        return items.iter().try_for_each(|&item| work(item));
    }
    let next = AtomicUsize::new(0);
    let errors: Mutex<Vec<(usize, StepError)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads.min(items.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&item) = items.get(i) else { break };
                if let Err(error) = work(item) {
                    errors.lock().unwrap().push((i, error));
                }
            });
        }
    });
    let mut errors = errors.into_inner().unwrap();
    errors.sort_by_key(|(i, _)| *i);
    match errors.into_iter().next() {
        Some((_, error)) => Err(error),
        None => Ok(()),
    }
}
