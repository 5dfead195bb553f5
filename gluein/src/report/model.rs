//! The report's figures, computed from a journal's rows.

use std::collections::{BTreeMap, HashMap, HashSet};

use journal::{ActivityRow, ActivityState, AttemptRow, ExecutorRow, Journal, RunRow};
use serde::Serialize;

use super::bins::{mean, median, Bins};
use super::error::ReportError;

/// How many time bins a report samples utilization in, unless told otherwise.
pub const DEFAULT_BINS: usize = 200;

/// What one run of a journal did: its summary, utilization over time, and
/// durations per activity kind. Print it (it implements `Display`) or draw
/// it with [`plot`](super::plot).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The run itself.
    pub run: RunSummary,
    /// Every run number in the journal, oldest first, for context.
    pub runs_in_journal: Vec<i64>,
    /// What this run's attempts came to.
    pub attempts: AttemptCounts,
    /// Activity states after the latest run.
    pub states: StateCounts,
    /// The run's executors, by node then index, with any that only the
    /// attempts mention (marked as not listed).
    pub executors: Vec<ExecutorSummary>,
    /// Utilization over time, of executors and of cores.
    pub timeline: Timeline,
    /// Utilization over time per group of executors sharing a first
    /// (highest-priority) label, largest group first.
    pub lanes: Vec<Lane>,
    /// Duration figures per activity kind, most total time first (see
    /// [`KindStats::graph_order`] for the order the graph gives them).
    pub kinds: Vec<KindStats>,
    /// Every attempt of the run as a bar on its executor, in start order.
    pub bars: Vec<Bar>,
}

/// A run's identity and extent.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    /// The run number (1 for the first run, then one more per resume).
    pub run: i64,
    /// The graph file as given to the runner.
    pub graph_path: String,
    /// Hash of the expanded graph.
    pub graph_hash: String,
    /// Where the runner ran.
    pub host: String,
    /// `running`, `succeeded`, `failed` or `interrupted`, as recorded.
    pub status: String,
    /// The runner's command line.
    pub command_line: String,
    /// When the run started, Unix seconds.
    pub started: f64,
    /// When the run ended, Unix seconds, if it recorded an end.
    pub ended: Option<f64>,
    /// Seconds from start to end, or to the last attempt's end when no end
    /// was recorded (see `wall_end`).
    pub wall_seconds: f64,
    /// Where `wall_seconds` stops.
    pub wall_end: WallEnd,
    /// Seconds from the first attempt's start to the last one's end; zero
    /// without attempts.
    pub makespan: f64,
}

/// Where a run's wall time was measured to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum WallEnd {
    /// The end the run recorded.
    Recorded,
    /// No end was recorded (the runner was killed, or is still running), so
    /// the wall time stops at the end of the last attempt.
    LastAttempt,
    /// No end was recorded and there are no attempts: the wall time is zero.
    Unknown,
}

/// What a run's attempts came to.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AttemptCounts {
    /// Attempts in the run.
    pub total: usize,
    /// Attempts that did not exit with status 0.
    pub failed: usize,
    /// Attempts after an activity's first (attempt number above 1).
    pub retries: usize,
    /// Distinct activities attempted.
    pub activities: usize,
    /// Attempts whose CPU time is known.
    pub with_cpu_seconds: usize,
}

/// How many activities are in each state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StateTally {
    /// Finished successfully.
    pub done: usize,
    /// Failed on their last attempt.
    pub failed: usize,
    /// Never ran because something they depend on failed.
    pub cancelled: usize,
    /// Not finished in any run.
    pub pending: usize,
}

impl StateTally {
    /// All activities counted.
    pub fn total(&self) -> usize {
        self.done + self.failed + self.cancelled + self.pending
    }

    fn add(&mut self, state: ActivityState) {
        match state {
            ActivityState::Done => self.done += 1,
            ActivityState::Failed => self.failed += 1,
            ActivityState::Cancelled => self.cancelled += 1,
            ActivityState::Pending => self.pending += 1,
        }
    }
}

/// Activity states as the journal holds them after its latest run. The
/// journal keeps one state per activity, not one per run, so these are the
/// only per-run figures it can give.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct StateCounts {
    /// Activities whose state this run set last.
    pub set_by_run: StateTally,
    /// Every activity in the journal, whichever run set its state.
    pub journal: StateTally,
}

/// One executor of the run.
#[derive(Debug, Clone, Serialize)]
pub struct ExecutorSummary {
    /// The node's host name.
    pub node: String,
    /// Index within the node.
    pub executor: i64,
    /// Its contexts, comma separated, highest priority first.
    pub labels: String,
    /// Its first label, which names its lane.
    pub lane: String,
    /// Cores it may use; `None` for an executor only the attempts mention.
    pub cores: Option<i64>,
    /// Whether the run's executor list has it (attempts may name others if
    /// the list was not recorded).
    pub listed: bool,
    /// Attempts it ran.
    pub attempts: usize,
    /// Seconds it spent running attempts.
    pub busy_seconds: f64,
}

impl ExecutorSummary {
    /// `node/executor`, as rows and legends name it.
    pub fn name(&self) -> String {
        format!("{}/{}", self.node, self.executor)
    }
}

/// Utilization sampled in equal bins over the run, from its start (or the
/// first attempt's, if earlier) to its end (or the last attempt's, if later).
#[derive(Debug, Clone, Serialize)]
pub struct Timeline {
    /// Time zero of the bins and of every [`Bar`], Unix seconds.
    pub origin: f64,
    /// Seconds the bins cover.
    pub span: f64,
    /// Seconds per bin.
    pub bin_seconds: f64,
    /// Per bin, the fraction of the run's executors busy (0 to 1; more only
    /// if the journal has overlapping attempts on one executor).
    pub executors_busy: Vec<f64>,
    /// Per bin, CPU seconds used over core seconds available, spreading each
    /// attempt's CPU time evenly over its span. `None` when no attempt has
    /// CPU time or no executor has cores; a lower bound when only some do.
    pub cores_busy: Option<Vec<f64>>,
    /// Total cores of the run's listed executors.
    pub cores: i64,
    /// Executors busy on average over the whole span (0 to 1).
    pub mean_executors_busy: f64,
    /// Cores busy on average over the whole span, where known.
    pub mean_cores_busy: Option<f64>,
}

impl Timeline {
    /// The start of bin `i`, in seconds since the origin.
    pub fn bin_start(&self, i: usize) -> f64 {
        i as f64 * self.bin_seconds
    }
}

/// Utilization of the executors that share a first label.
#[derive(Debug, Clone, Serialize)]
pub struct Lane {
    /// The first label, e.g. `cpu` or `gpu`.
    pub label: String,
    /// Executors in the group.
    pub executors: usize,
    /// Per bin (as in [`Timeline`]), the fraction of the group busy.
    pub busy: Vec<f64>,
    /// The group's mean utilization over the span.
    pub mean_busy: f64,
}

/// Durations of the attempts of one activity kind (failed ones included).
#[derive(Debug, Clone, Serialize)]
pub struct KindStats {
    /// The graph entry's id template, e.g. `detect-{pair}`.
    pub kind: String,
    /// Where the kind comes in graph order, 0 first: the order in which the
    /// run's recorded graph first names each kind, so that legends read
    /// like the graph file. Kinds the recorded graph does not name (journals
    /// written without one, such as simulated runs) follow it, in the order
    /// of their first attempt's start.
    pub graph_order: usize,
    /// Attempts of this kind.
    pub attempts: usize,
    /// Of those, the ones that failed.
    pub failed: usize,
    /// Shortest attempt, seconds.
    pub min: f64,
    /// Median attempt, seconds.
    pub median: f64,
    /// Longest attempt, seconds.
    pub max: f64,
    /// All attempts together, seconds.
    pub total: f64,
    /// CPU seconds of the attempts whose CPU time is known; `None` if none is.
    pub cpu_seconds: Option<f64>,
}

/// One attempt, placed on its executor's row of a Gantt chart.
#[derive(Debug, Clone, Serialize)]
pub struct Bar {
    /// Index into [`Report::executors`].
    pub executor: usize,
    /// Index into [`Report::kinds`].
    pub kind: usize,
    /// The activity's graph id.
    pub activity: String,
    /// 1, 2, ... within the run.
    pub attempt: i64,
    /// Seconds since [`Timeline::origin`].
    pub start: f64,
    /// Seconds since [`Timeline::origin`].
    pub end: f64,
    /// Whether the attempt failed.
    pub failed: bool,
}

/// The kind of attempts whose activity the journal does not list.
const UNKNOWN_KIND: &str = "(unknown kind)";

/// The lane of executors with no labels at all.
const NO_LABEL: &str = "(no label)";

impl Report {
    /// Reads run `run` of `journal` (the latest when `None`) and computes its
    /// report with [`DEFAULT_BINS`] time bins.
    pub fn from_journal(journal: &Journal, run: Option<i64>) -> Result<Report, ReportError> {
        Report::from_journal_with_bins(journal, run, DEFAULT_BINS)
    }

    /// Like [`Report::from_journal`], with `bins` time bins (at least one).
    pub fn from_journal_with_bins(
        journal: &Journal,
        run: Option<i64>,
        bins: usize,
    ) -> Result<Report, ReportError> {
        let path = journal.path().to_path_buf();
        let runs = journal.runs()?;
        let Some(latest) = runs.last() else {
            return Err(ReportError::NoRuns(path));
        };
        let chosen = match run {
            None => latest,
            Some(number) => {
                runs.iter()
                    .find(|r| r.run == number)
                    .ok_or_else(|| ReportError::NoSuchRun {
                        path: path.clone(),
                        run: number,
                        existing: describe_runs(&runs),
                    })?
            }
        };
        let executors = journal.executors(chosen.run)?;
        let activities = journal.activities()?;
        let attempts = journal.attempts(Some(chosen.run))?;
        let numbers: Vec<i64> = runs.iter().map(|r| r.run).collect();
        let graph = journal.graph_spec(chosen.run)?.unwrap_or_default();
        let rows = Rows {
            executors: &executors,
            activities: &activities,
            attempts: &attempts,
            graph_kinds: &graph_kinds(&graph),
        };
        build(chosen, &numbers, &rows, bins).map_err(|detail| ReportError::Corrupt { path, detail })
    }

    /// Indices into [`Report::kinds`] in graph order (see
    /// [`KindStats::graph_order`]), the order legends name the kinds in.
    pub fn kinds_in_graph_order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.kinds.len()).collect();
        order.sort_by_key(|&i| self.kinds[i].graph_order);
        order
    }
}

/// The kinds of a recorded graph (the JSON `constellation run` keeps in the
/// journal: `{"activities": [{"kind": ...}, ...]}`) in the order the graph
/// first names them. A graph that is missing or in another shape gives
/// none: the order then falls back to the attempts', which is no reason to
/// refuse the report.
fn graph_kinds(spec: &str) -> Vec<String> {
    let Ok(graph) = serde_json::from_str::<serde_json::Value>(spec) else {
        return Vec::new();
    };
    let Some(activities) = graph.get("activities").and_then(|a| a.as_array()) else {
        return Vec::new();
    };
    let mut seen = HashSet::new();
    activities
        .iter()
        .filter_map(|a| a.get("kind").and_then(|k| k.as_str()))
        .filter(|kind| seen.insert(*kind))
        .map(str::to_string)
        .collect()
}

/// The journal rows one report is computed from.
pub(crate) struct Rows<'a> {
    /// The run's executors.
    pub(crate) executors: &'a [ExecutorRow],
    /// Every activity of the journal.
    pub(crate) activities: &'a [ActivityRow],
    /// The run's attempts, in start order.
    pub(crate) attempts: &'a [AttemptRow],
    /// The kinds of the run's recorded graph, in graph order.
    pub(crate) graph_kinds: &'a [String],
}

/// "run 1" or "runs 1, 2, 3", for the error that names a missing run.
fn describe_runs(runs: &[RunRow]) -> String {
    let numbers: Vec<String> = runs.iter().map(|r| r.run.to_string()).collect();
    match numbers.len() {
        0 => "no runs".to_string(),
        1 => format!("only run {}", numbers[0]),
        _ => format!("runs {}", numbers.join(", ")),
    }
}

fn attempt_failed(a: &AttemptRow) -> bool {
    !(a.outcome == "exited" && a.exit_code == Some(0))
}

fn first_label(labels: &str) -> String {
    labels
        .split(',')
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or(NO_LABEL)
        .to_string()
}

/// Checks the rows for values no runner writes, so that the arithmetic
/// below never sees NaN or negative lengths.
fn check(run: &RunRow, executors: &[ExecutorRow], attempts: &[AttemptRow]) -> Result<(), String> {
    if !run.started.is_finite() {
        return Err(format!("run {} has start time {}", run.run, run.started));
    }
    if let Some(ended) = run.ended.filter(|e| !e.is_finite()) {
        return Err(format!("run {} has end time {ended}", run.run));
    }
    if let Some(e) = executors.iter().find(|e| e.cores < 0) {
        return Err(format!(
            "executor {}/{} of run {} has {} cores",
            e.node, e.executor, run.run, e.cores
        ));
    }
    for a in attempts {
        let name = || format!("attempt {} of activity {:?}", a.attempt, a.activity);
        if !a.started.is_finite() || !a.ended.is_finite() {
            return Err(format!("{} has times {} to {}", name(), a.started, a.ended));
        }
        if a.ended < a.started {
            return Err(format!(
                "{} ends {:.3} s before it starts",
                name(),
                a.started - a.ended
            ));
        }
        if let Some(cpu) = a.cpu_seconds.filter(|c| !c.is_finite() || *c < 0.0) {
            return Err(format!("{} has {cpu} CPU seconds", name()));
        }
    }
    Ok(())
}

/// Computes the report from the journal's rows; the error is a description
/// of a corrupt row.
pub(crate) fn build(
    run: &RunRow,
    runs_in_journal: &[i64],
    rows: &Rows<'_>,
    bins: usize,
) -> Result<Report, String> {
    let Rows {
        executors: executor_rows,
        activities,
        attempts,
        graph_kinds,
    } = *rows;
    check(run, executor_rows, attempts)?;

    let first_start = attempts.iter().map(|a| a.started).reduce(f64::min);
    let last_end = attempts.iter().map(|a| a.ended).reduce(f64::max);
    let (wall_seconds, wall_end) = match (run.ended, last_end) {
        (Some(ended), _) => (ended - run.started, WallEnd::Recorded),
        (None, Some(last)) => (last - run.started, WallEnd::LastAttempt),
        (None, None) => (0.0, WallEnd::Unknown),
    };
    let makespan = match (first_start, last_end) {
        (Some(first), Some(last)) => last - first,
        _ => 0.0,
    };

    // Bins start at the earlier of the run's start and the first attempt's,
    // and end at the later of its end and the last attempt's, so that a
    // node's clock a little ahead or behind loses no attempt.
    let origin = first_start.map_or(run.started, |f| f.min(run.started));
    let end = [Some(run.started), run.ended, last_end]
        .into_iter()
        .flatten()
        .fold(origin, f64::max);
    let span = end - origin;
    if !span.is_finite() {
        return Err(format!(
            "run {} spans from {origin} to {end}, too far apart to draw",
            run.run
        ));
    }

    let mut executors: Vec<ExecutorSummary> = executor_rows
        .iter()
        .map(|e| ExecutorSummary {
            node: e.node.clone(),
            executor: e.executor,
            labels: e.labels.clone(),
            lane: first_label(&e.labels),
            cores: Some(e.cores),
            listed: true,
            attempts: 0,
            busy_seconds: 0.0,
        })
        .collect();
    let mut seen: HashSet<(String, i64)> = executors
        .iter()
        .map(|e| (e.node.clone(), e.executor))
        .collect();
    for a in attempts {
        if seen.insert((a.node.clone(), a.executor)) {
            executors.push(ExecutorSummary {
                node: a.node.clone(),
                executor: a.executor,
                labels: a.labels.clone(),
                lane: first_label(&a.labels),
                cores: None,
                listed: false,
                attempts: 0,
                busy_seconds: 0.0,
            });
        }
    }
    // Rows of the Gantt chart go by node, then executor index as a number.
    executors.sort_by(|a, b| (&a.node, a.executor).cmp(&(&b.node, b.executor)));
    let index: HashMap<(String, i64), usize> = executors
        .iter()
        .enumerate()
        .map(|(i, e)| ((e.node.clone(), e.executor), i))
        .collect();

    let kind_of: HashMap<&str, &str> = activities
        .iter()
        .map(|a| (a.id.as_str(), a.kind.as_str()))
        .collect();

    let mut all_busy = Bins::new(span, bins);
    let mut cpu = Bins::new(span, bins);
    let mut lane_busy: BTreeMap<String, Bins> = BTreeMap::new();
    let mut counts = AttemptCounts::default();
    let mut attempted: HashSet<&str> = HashSet::new();
    let mut per_kind: BTreeMap<&str, (Vec<f64>, usize, Option<f64>)> = BTreeMap::new();
    let mut bars = Vec::with_capacity(attempts.len());
    let mut bar_kinds = Vec::with_capacity(attempts.len());

    for a in attempts {
        let (start, stop) = (a.started - origin, a.ended - origin);
        let failed = attempt_failed(a);
        let slot = index
            .get(&(a.node.clone(), a.executor))
            .copied()
            .ok_or_else(|| format!("attempt of {:?} on an unknown executor", a.activity))?;
        let executor = &mut executors[slot];
        executor.attempts += 1;
        executor.busy_seconds += stop - start;
        all_busy.cover(start, stop);
        lane_busy
            .entry(executor.lane.clone())
            .or_insert_with(|| Bins::new(span, bins))
            .cover(start, stop);
        if let Some(seconds) = a.cpu_seconds {
            cpu.spread(start, stop, seconds);
            counts.with_cpu_seconds += 1;
        }

        counts.total += 1;
        counts.failed += usize::from(failed);
        counts.retries += usize::from(a.attempt > 1);
        attempted.insert(a.activity.as_str());

        let kind = kind_of
            .get(a.activity.as_str())
            .copied()
            .unwrap_or(UNKNOWN_KIND);
        let entry = per_kind.entry(kind).or_insert((Vec::new(), 0, None));
        entry.0.push(stop - start);
        entry.1 += usize::from(failed);
        if let Some(seconds) = a.cpu_seconds {
            entry.2 = Some(entry.2.unwrap_or(0.0) + seconds);
        }
        bar_kinds.push(kind);
        bars.push(Bar {
            executor: slot,
            kind: 0,
            activity: a.activity.clone(),
            attempt: a.attempt,
            start,
            end: stop,
            failed,
        });
    }
    counts.activities = attempted.len();

    // Graph order: the recorded graph's, then first attempts' (attempts
    // come in start order); ranks are made dense over the kinds attempted.
    let mut position: HashMap<&str, usize> = HashMap::new();
    for kind in graph_kinds
        .iter()
        .map(String::as_str)
        .chain(bar_kinds.iter().copied())
    {
        let next = position.len();
        position.entry(kind).or_insert(next);
    }
    let mut by_position: Vec<&str> = per_kind.keys().copied().collect();
    by_position.sort_by_key(|kind| position.get(kind).copied().unwrap_or(usize::MAX));
    let graph_order: HashMap<&str, usize> = by_position
        .iter()
        .enumerate()
        .map(|(rank, kind)| (*kind, rank))
        .collect();

    let mut kinds: Vec<KindStats> = per_kind
        .into_iter()
        .map(|(kind, (mut durations, failed, cpu_seconds))| {
            let total = durations.iter().sum();
            let median = median(&mut durations).unwrap_or(0.0);
            KindStats {
                kind: kind.to_string(),
                graph_order: graph_order.get(kind).copied().unwrap_or(0),
                attempts: durations.len(),
                failed,
                min: durations.first().copied().unwrap_or(0.0),
                median,
                max: durations.last().copied().unwrap_or(0.0),
                total,
                cpu_seconds,
            }
        })
        .collect();
    kinds.sort_by(|a, b| {
        b.total
            .total_cmp(&a.total)
            .then_with(|| a.kind.cmp(&b.kind))
    });
    let kind_index: HashMap<&str, usize> = kinds
        .iter()
        .enumerate()
        .map(|(i, k)| (k.kind.as_str(), i))
        .collect();
    for (bar, kind) in bars.iter_mut().zip(bar_kinds) {
        bar.kind = kind_index.get(kind).copied().unwrap_or(0);
    }

    let executors_busy = all_busy.fractions(executors.len() as f64);
    let cores: i64 = executors.iter().filter_map(|e| e.cores).sum();
    let cores_busy =
        (counts.with_cpu_seconds > 0 && cores > 0).then(|| cpu.fractions(cores as f64));
    let mut lanes: Vec<Lane> = lane_busy
        .into_iter()
        .map(|(label, bins)| {
            let size = executors.iter().filter(|e| e.lane == label).count();
            let busy = bins.fractions(size as f64);
            Lane {
                mean_busy: mean(&busy),
                label,
                executors: size,
                busy,
            }
        })
        .collect();
    // Groups that ran nothing still get a (flat) lane: idle capacity is news.
    for e in &executors {
        if !lanes.iter().any(|l| l.label == e.lane) {
            let size = executors.iter().filter(|x| x.lane == e.lane).count();
            lanes.push(Lane {
                label: e.lane.clone(),
                executors: size,
                busy: vec![0.0; executors_busy.len()],
                mean_busy: 0.0,
            });
        }
    }
    lanes.sort_by(|a, b| {
        b.executors
            .cmp(&a.executors)
            .then_with(|| a.label.cmp(&b.label))
    });

    let mut states = StateCounts::default();
    for activity in activities {
        states.journal.add(activity.state);
        if activity.run == run.run {
            states.set_by_run.add(activity.state);
        }
    }

    Ok(Report {
        run: RunSummary {
            run: run.run,
            graph_path: run.graph_path.clone(),
            graph_hash: run.graph_hash.clone(),
            host: run.host.clone(),
            status: run.status.clone(),
            command_line: run.command_line.clone(),
            started: run.started,
            ended: run.ended,
            wall_seconds,
            wall_end,
            makespan,
        },
        runs_in_journal: runs_in_journal.to_vec(),
        attempts: counts,
        states,
        executors,
        timeline: Timeline {
            origin,
            span,
            bin_seconds: all_busy.width(),
            mean_executors_busy: mean(&executors_busy),
            mean_cores_busy: cores_busy.as_deref().map(mean),
            executors_busy,
            cores_busy,
            cores,
        },
        lanes,
        kinds,
        bars,
    })
}
