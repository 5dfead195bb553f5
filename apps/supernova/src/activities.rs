//! The pipeline as Constellation activities.
//!
//! - [`NovaDetection`]: the monolithic version (the paper's Figure 5), one
//!   activity per pair that runs every step itself on as many threads as
//!   its executor allows ([`Threads`]).
//! - [`DetectNova`] and [`PairStep`]: the many-task version (Figure 6).
//!   `DetectNova` steers one pair: it submits each stage's steps as
//!   activities (2 and 3 together, 5 and 6 together, one 7.2 per tile),
//!   suspends until their events come back, then submits the next stage.
//!   Step 7.2 can hand its numeric part to a GPU executor
//!   ([`crate::gpu::SignificanceWork`], labelled `gpu`).
//!
//! Every activity of a pair carries the pair's context, so the placement
//! strategy ([`crate::contexts::Placement`]) steers all of them.

use std::path::PathBuf;

use constellation::{Activity, ActivityCx, ActivityId, ContextList, Event, Step};
use executors::gpu::{GpuOutcome, OnGpu};
use serde::{Deserialize, Serialize};

use crate::catalog::Candidate;
use crate::compare::Significance;
use crate::contexts::{self, Engine};
use crate::pipeline::{self, now, PairJob, PairOutcome, StepKind, StepTiming};
use crate::steps::{self, Epoch, Prepared, TileInputs};

/// How many threads an executor lets one activity use: a resource handle
/// given to the executor (`Resources::with_handle(Threads(8))`). Executors
/// without one allow one thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Threads(pub usize);

fn threads_of(cx: &ActivityCx<'_>) -> usize {
    cx.resource::<Threads>().map_or(1, |t| t.0.max(1))
}

/// Fills in where a timing ran.
fn placed(mut timing: StepTiming, cx: &ActivityCx<'_>) -> StepTiming {
    timing.executor = Some(cx.executor_index());
    timing.labels = cx.executor_context().label_list();
    timing
}

/// The copy policy of `job` as seen from the executor running it: remote
/// copies are those from a site other than the executor's.
fn job_here(job: &PairJob, cx: &ActivityCx<'_>) -> PairJob {
    let mut job = job.clone();
    job.copy.executor_site = contexts::site_of(cx.executor_context());
    job
}

/// The monolithic version: one pair, every step, in one activity.
#[derive(Serialize, Deserialize)]
pub struct NovaDetection {
    job: PairJob,
    context: ContextList,
    parent: ActivityId,
}

impl NovaDetection {
    /// Processes `job` where `context` allows and sends a [`PairOutcome`]
    /// to `parent`.
    pub fn new(job: PairJob, context: ContextList, parent: ActivityId) -> Self {
        NovaDetection {
            job,
            context,
            parent,
        }
    }
}

#[typetag::serde]
impl Activity for NovaDetection {
    fn context(&self) -> ContextList {
        self.context.clone()
    }

    fn initialize(&mut self, cx: &mut ActivityCx<'_>) -> Step {
        let started = now();
        let mut outcome = pipeline::run_pair(&job_here(&self.job, cx), threads_of(cx));
        // The platform's view is one activity per pair; the steps inside
        // keep their own timings for the per-step table.
        outcome.steps.insert(
            0,
            placed(
                StepTiming {
                    id: self.job.pair.id.clone(),
                    kind: "pair".into(),
                    started,
                    ended: now(),
                    executor: None,
                    labels: String::new(),
                    error: outcome.result.as_ref().err().cloned(),
                },
                cx,
            ),
        );
        cx.send(self.parent, outcome);
        Step::Finish
    }

    fn process(&mut self, _cx: &mut ActivityCx<'_>, _event: Event) -> Step {
        Step::Finish
    }
}

/// What one step of the many-task version produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum StepOutput {
    /// Step 1: where the images came from.
    Prepared(Prepared),
    /// Step 7.1: the indices of the tiles to compare.
    Tiles(Vec<usize>),
    /// Step 8: the pair's candidates.
    Candidates(Vec<Candidate>),
    /// Any other step: done, its result is in the work directory.
    Done,
}

/// A step's event to its [`DetectNova`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepReport {
    /// Which step.
    pub kind: StepKind,
    /// When and where it ran.
    pub timing: StepTiming,
    /// What it produced, or why it failed.
    pub output: Result<StepOutput, String>,
}

/// The pipeline's stages (Figure 3 of the paper): [`DetectNova`] waits
/// for each stage's steps before it submits the next, and the evaluation's
/// workload model ([`crate::eval::steps`]) times them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Stage {
    /// 1: copy the pair from a site that holds it.
    Prepare,
    /// 2, 3: detect sources, one activity per image.
    Detect,
    /// 4: align B onto A.
    Align,
    /// 5, 6: equalize, one activity per image.
    Equalize,
    /// 7.1: cut the pair into tiles.
    Split,
    /// 7.2: compare one tile.
    Compare,
    /// 7.3: merge the tiles' residuals.
    Recombine,
    /// 8: classify the candidates.
    Extract,
    /// 9: remove the work directory.
    Cleanup,
}

/// The many-task version's steering activity for one pair.
#[derive(Serialize, Deserialize)]
pub struct DetectNova {
    job: PairJob,
    context: ContextList,
    engine: Engine,
    parent: ActivityId,
    stage: Stage,
    waiting: usize,
    /// Step 7.1's kept tiles, until stage 7.2 submits them.
    tiles: Vec<usize>,
    outcome: PairOutcome,
}

impl DetectNova {
    /// Processes `job` as separate step activities with `context`, step 7.2
    /// on `engine`, and sends a [`PairOutcome`] to `parent`.
    pub fn new(job: PairJob, context: ContextList, engine: Engine, parent: ActivityId) -> Self {
        let outcome = PairOutcome {
            pair: job.pair.id.clone(),
            result: Ok(Vec::new()),
            prepared: None,
            steps: Vec::new(),
        };
        DetectNova {
            job,
            context,
            engine,
            parent,
            stage: Stage::Prepare,
            waiting: 0,
            tiles: Vec::new(),
            outcome,
        }
    }

    fn start(&mut self, cx: &mut ActivityCx<'_>, stage: Stage, kinds: &[StepKind]) -> Step {
        self.stage = stage;
        self.waiting = kinds.len();
        for &kind in kinds {
            let step = PairStep {
                job: self.job.clone(),
                kind,
                context: self.context.clone(),
                engine: self.engine,
                parent: cx.id(),
                gpu: None,
            };
            if let Err(error) = cx.submit(step) {
                // Nothing can run this step; record it as the step's failure.
                self.waiting -= 1;
                self.fail(format!(
                    "{}: cannot submit: {error}",
                    kind.id(&self.job.pair.id)
                ));
            }
        }
        if self.waiting == 0 {
            return self.advance(cx);
        }
        Step::Suspend
    }

    fn fail(&mut self, message: String) {
        if self.outcome.result.is_ok() {
            self.outcome.result = Err(message);
        }
    }

    /// Moves on once the current stage's steps have all reported.
    fn advance(&mut self, cx: &mut ActivityCx<'_>) -> Step {
        let failed = self.outcome.result.is_err();
        let next = match (self.stage, failed) {
            (Stage::Cleanup, _) => None,
            (_, true) => Some(Stage::Cleanup),
            (Stage::Prepare, _) => Some(Stage::Detect),
            (Stage::Detect, _) => Some(Stage::Align),
            (Stage::Align, _) => Some(Stage::Equalize),
            (Stage::Equalize, _) => Some(Stage::Split),
            (Stage::Split, _) => Some(Stage::Compare),
            (Stage::Compare, _) => Some(Stage::Recombine),
            (Stage::Recombine, _) => Some(Stage::Extract),
            (Stage::Extract, _) => Some(Stage::Cleanup),
        };
        let next = next.filter(|s| *s != Stage::Cleanup || !self.job.keep_work);
        let kinds: Vec<StepKind> = match next {
            None => {
                self.outcome
                    .steps
                    .sort_by(|a, b| a.started.total_cmp(&b.started));
                let outcome = std::mem::replace(
                    &mut self.outcome,
                    PairOutcome {
                        pair: String::new(),
                        result: Ok(Vec::new()),
                        prepared: None,
                        steps: Vec::new(),
                    },
                );
                cx.send(self.parent, outcome);
                return Step::Finish;
            }
            Some(Stage::Detect) => vec![StepKind::Detect(Epoch::A), StepKind::Detect(Epoch::B)],
            Some(Stage::Align) => vec![StepKind::Align],
            Some(Stage::Equalize) => {
                vec![StepKind::Equalize(Epoch::A), StepKind::Equalize(Epoch::B)]
            }
            Some(Stage::Split) => vec![StepKind::Split],
            Some(Stage::Compare) => self.tiles.drain(..).map(StepKind::Compare).collect(),
            Some(Stage::Recombine) => vec![StepKind::Recombine],
            Some(Stage::Extract) => vec![StepKind::Extract],
            Some(Stage::Cleanup) => vec![StepKind::Cleanup],
            Some(Stage::Prepare) => vec![StepKind::Prepare],
        };
        self.start(cx, next.unwrap(), &kinds)
    }
}

#[typetag::serde]
impl Activity for DetectNova {
    fn context(&self) -> ContextList {
        self.context.clone()
    }

    fn initialize(&mut self, cx: &mut ActivityCx<'_>) -> Step {
        self.start(cx, Stage::Prepare, &[StepKind::Prepare])
    }

    fn process(&mut self, cx: &mut ActivityCx<'_>, event: Event) -> Step {
        let report = match event.take::<StepReport>() {
            Ok(report) => report,
            Err(error) => {
                tracing::error!(pair = %self.job.pair.id, %error, "unexpected event");
                return Step::Suspend;
            }
        };
        self.outcome.steps.push(report.timing);
        match report.output {
            Ok(StepOutput::Prepared(prepared)) => self.outcome.prepared = Some(prepared),
            Ok(StepOutput::Tiles(tiles)) => self.tiles = tiles,
            Ok(StepOutput::Candidates(candidates)) => {
                if self.outcome.result.is_ok() {
                    self.outcome.result = Ok(candidates);
                }
            }
            Ok(StepOutput::Done) => {}
            Err(message) => self.fail(message),
        }
        self.waiting = self.waiting.saturating_sub(1);
        if self.waiting > 0 {
            return Step::Suspend;
        }
        self.advance(cx)
    }
}

/// One step of one pair, as an activity of its own.
#[derive(Serialize, Deserialize)]
pub struct PairStep {
    job: PairJob,
    kind: StepKind,
    context: ContextList,
    engine: Engine,
    parent: ActivityId,
    /// Step 7.2 on a GPU, between handing the kernel off and its answer:
    /// the tile and when the step started. Never travels: the activity
    /// has started, so it stays put.
    #[serde(skip)]
    gpu: Option<(TileInputs, f64)>,
}

impl PairStep {
    fn work(&self) -> PathBuf {
        self.job.work()
    }

    fn run(&self, cx: &ActivityCx<'_>) -> Result<StepOutput, String> {
        let work = self.work();
        let pair = self.job.pair.id.as_str();
        let done = |result: Result<(), steps::StepError>| {
            result.map(|()| StepOutput::Done).map_err(|e| e.to_string())
        };
        match self.kind {
            StepKind::Prepare => {
                let job = job_here(&self.job, cx);
                steps::prepare(&job.dataset, &job.pair, &job.copy, &work)
                    .map(StepOutput::Prepared)
                    .map_err(|e| e.to_string())
            }
            StepKind::Detect(epoch) => done(steps::detect(&work, epoch).map(drop)),
            StepKind::Align => done(steps::align(&work).map(drop)),
            StepKind::Equalize(epoch) => done(steps::equalize(&work, epoch)),
            StepKind::Split => steps::split(&work)
                .map(|plan| StepOutput::Tiles(plan.tiles.iter().map(|t| t.index).collect()))
                .map_err(|e| e.to_string()),
            StepKind::Compare(tile) => done(steps::compare(&work, tile).map(drop)),
            StepKind::Recombine => done(steps::recombine(&work).map(drop)),
            StepKind::Extract => steps::extract(&work, pair, &self.job.results)
                .map(StepOutput::Candidates)
                .map_err(|e| e.to_string()),
            StepKind::Cleanup => done(steps::cleanup(&work)),
        }
    }

    fn report(
        &self,
        cx: &mut ActivityCx<'_>,
        started: f64,
        output: Result<StepOutput, String>,
    ) -> Step {
        let timing = placed(
            StepTiming {
                id: self.kind.id(&self.job.pair.id),
                kind: self.kind.name().to_string(),
                started,
                ended: now(),
                executor: None,
                labels: String::new(),
                error: output.as_ref().err().cloned(),
            },
            cx,
        );
        let report = StepReport {
            kind: self.kind,
            timing,
            output,
        };
        cx.send(self.parent, report);
        Step::Finish
    }

    /// Step 7.2 with the numeric part on a GPU: read the tile here, hand
    /// the arrays to a `gpu` activity, and wait for its answer.
    fn hand_to_gpu(&mut self, cx: &mut ActivityCx<'_>, tile: usize, started: f64) -> Step {
        let inputs = match steps::tile_inputs(&self.work(), tile) {
            Ok(inputs) => inputs,
            Err(error) => return self.report(cx, started, Err(error.to_string())),
        };
        let work = crate::gpu::SignificanceWork::new(&inputs);
        if let Err(error) = cx.submit(OnGpu::new(cx.id(), work)) {
            let message = format!(
                "step 7.2 of {} asks for a GPU executor, and this pool has none ({error}); \
                 run step 7.2 on the CPU instead (--step72 cpu)",
                self.job.pair.id
            );
            return self.report(cx, started, Err(message));
        }
        self.gpu = Some((inputs, started));
        Step::Suspend
    }
}

#[typetag::serde]
impl Activity for PairStep {
    fn context(&self) -> ContextList {
        self.context.clone()
    }

    fn initialize(&mut self, cx: &mut ActivityCx<'_>) -> Step {
        let started = now();
        if let (StepKind::Compare(tile), Engine::Gpu) = (self.kind, self.engine) {
            return self.hand_to_gpu(cx, tile, started);
        }
        let output = self.run(cx);
        self.report(cx, started, output)
    }

    fn process(&mut self, cx: &mut ActivityCx<'_>, event: Event) -> Step {
        let Some((inputs, started)) = self.gpu.take() else {
            return Step::Finish;
        };
        let significance = event
            .take::<GpuOutcome>()
            .map_err(|e| e.to_string())
            .and_then(|outcome| {
                outcome
                    .take::<crate::gpu::SignificanceMaps>()
                    .map_err(|e| e.to_string())
            })
            .map(|maps| maps.into_significance(&inputs));
        let output = significance.and_then(|significance: Significance| {
            steps::finish_compare(&self.work(), &inputs, &significance)
                .map(|_| StepOutput::Done)
                .map_err(|e| e.to_string())
        });
        self.report(cx, started, output)
    }
}
