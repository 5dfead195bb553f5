//! The report's figures, computed from a journal's rows: the report's
//! types and the reading of the rows here, the figures computed from the
//! rows in `build`.

mod build;

use std::collections::HashMap;
use std::ops::ControlFlow;

use journal::{ActivityState, AttemptFacts, ExecutorSlot, Journal, RunRow};
use serde::Serialize;

use build::build;

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
    /// Executions lost with their agent (outcome `lost`), and extra ones
    /// after their activity had settled: what ran more than once besides
    /// retries.
    pub lost: usize,
    /// See [`lost`](Self::lost).
    pub extra: usize,
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

    fn add(&mut self, state: ActivityState, count: usize) {
        match state {
            ActivityState::Done => self.done += count,
            ActivityState::Failed => self.failed += count,
            ActivityState::Cancelled => self.cancelled += count,
            ActivityState::Pending => self.pending += count,
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
    /// journal's graphs first declared each kind (the graph file's order),
    /// so that legends read like the graph file.
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

/// The kind of attempts whose activity's kind the journal does not list.
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
    ///
    /// Reads the run's attempts once, as numbers (executor, kind) with
    /// the activity's id, and counts activity states in SQLite: a million
    /// attempts take seconds and a few tens of bytes each besides their bars.
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
        let corrupt = |detail| ReportError::Corrupt {
            path: path.clone(),
            detail,
        };
        let slots = journal.executor_slots(chosen.run)?;
        let kinds = journal.kinds()?;
        let states = journal.state_counts()?;
        check(chosen, &slots).map_err(corrupt)?;
        let mut executors = Executors::new(&slots);
        let kind_index: HashMap<i64, usize> = (kinds.iter().enumerate())
            .map(|(i, k)| (k.kind, i))
            .collect();
        let mut attempts = Vec::new();
        let mut bad = None;
        journal.scan_attempts(chosen.run, |a| {
            match Attempt::read(&a, &executors, &kind_index) {
                Ok(attempt) => {
                    attempts.push(attempt);
                    ControlFlow::Continue(())
                }
                Err(detail) => {
                    bad = Some(detail);
                    ControlFlow::Break(())
                }
            }
        })?;
        if let Some(detail) = bad {
            return Err(corrupt(detail));
        }
        executors.drop_unused(&mut attempts);
        let numbers: Vec<i64> = runs.iter().map(|r| r.run).collect();
        let kind_names: Vec<&str> = kinds.iter().map(|k| k.name.as_str()).collect();
        let re_executions = journal.re_executions(chosen.run)?;
        let mut report = build(
            chosen,
            &numbers,
            executors.summaries,
            &kind_names,
            &states,
            attempts,
            bins,
        )
        .map_err(corrupt)?;
        report.attempts.lost = re_executions.lost;
        report.attempts.extra = re_executions.extra;
        Ok(report)
    }

    /// Indices into [`Report::kinds`] in graph order (see
    /// [`KindStats::graph_order`]), the order legends name the kinds in.
    pub fn kinds_in_graph_order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.kinds.len()).collect();
        order.sort_by_key(|&i| self.kinds[i].graph_order);
        order
    }
}

/// One attempt as the report keeps it while it reads them all: numbers for
/// its executor and kind, and its activity's id for its bar.
struct Attempt {
    activity: i64,
    id: String,
    attempt: i64,
    /// Index into the executor summaries.
    executor: usize,
    /// Index into the journal's kinds; `None` for a kind it lacks.
    kind: Option<usize>,
    started: f64,
    ended: f64,
    failed: bool,
    cpu_seconds: Option<f64>,
}

impl Attempt {
    /// The attempt of `a`, checked for values no runner writes, so that the
    /// arithmetic below never sees NaN or negative lengths.
    fn read(
        a: &AttemptFacts<'_>,
        executors: &Executors,
        kinds: &HashMap<i64, usize>,
    ) -> Result<Attempt, String> {
        let name = || format!("attempt {} of activity {:?}", a.attempt, a.id);
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
        let executor = (executors.by_slot.get(&a.slot).copied())
            .ok_or_else(|| format!("{} ran on an unknown executor", name()))?;
        Ok(Attempt {
            activity: a.activity,
            id: a.id.to_string(),
            attempt: a.attempt,
            executor,
            kind: kinds.get(&a.kind).copied(),
            started: a.started,
            ended: a.ended,
            failed: !(a.outcome == "exited" && a.exit_code == Some(0)),
            cpu_seconds: a.cpu_seconds,
        })
    }
}

/// The run's executors as the report lists them: the ones the run listed,
/// by node then index, with the ones only attempts name (an executor that
/// changed labels is still one executor), and which summary each journal
/// slot counts for.
struct Executors {
    summaries: Vec<ExecutorSummary>,
    by_slot: HashMap<i64, usize>,
}

impl Executors {
    fn new(slots: &[ExecutorSlot]) -> Executors {
        // Listed ones first, so that an attempt's own labels do not
        // replace the labels the run listed for the executor.
        let mut ordered: Vec<&ExecutorSlot> = slots.iter().collect();
        ordered.sort_by_key(|s| (s.cores.is_none(), s.slot));
        let mut summaries: Vec<ExecutorSummary> = Vec::new();
        let mut index: HashMap<(&str, i64), usize> = HashMap::new();
        let mut slot_summary = Vec::new();
        for s in ordered {
            let at = *index.entry((&s.node, s.executor)).or_insert_with(|| {
                summaries.push(ExecutorSummary {
                    node: s.node.clone(),
                    executor: s.executor,
                    labels: s.labels.clone(),
                    lane: first_label(&s.labels),
                    cores: s.cores,
                    listed: s.cores.is_some(),
                    attempts: 0,
                    busy_seconds: 0.0,
                });
                summaries.len() - 1
            });
            slot_summary.push((s.slot, at));
        }
        // Rows of the Gantt chart go by node, then executor index as a number.
        let mut order: Vec<usize> = (0..summaries.len()).collect();
        order.sort_by(|&a, &b| {
            let (a, b) = (&summaries[a], &summaries[b]);
            (&a.node, a.executor).cmp(&(&b.node, b.executor))
        });
        let mut rank = vec![0; summaries.len()];
        for (position, &i) in order.iter().enumerate() {
            rank[i] = position;
        }
        let mut sorted: Vec<Option<ExecutorSummary>> = vec![None; summaries.len()];
        for (i, summary) in summaries.into_iter().enumerate() {
            sorted[rank[i]] = Some(summary);
        }
        Executors {
            summaries: sorted.into_iter().flatten().collect(),
            by_slot: (slot_summary.into_iter())
                .map(|(slot, at)| (slot, rank[at]))
                .collect(),
        }
    }

    /// Drops executors that are neither listed nor ran an attempt (an
    /// executor row can outlive an attempt rewritten on another), and
    /// renumbers the attempts' executors to match.
    fn drop_unused(&mut self, attempts: &mut [Attempt]) {
        let mut used = vec![false; self.summaries.len()];
        for a in attempts.iter() {
            used[a.executor] = true;
        }
        let mut renumber = vec![0; self.summaries.len()];
        let mut kept = 0;
        for (i, summary) in self.summaries.iter().enumerate() {
            renumber[i] = kept;
            kept += usize::from(summary.listed || used[i]);
        }
        if kept == self.summaries.len() {
            return;
        }
        let mut i = 0;
        self.summaries.retain(|summary| {
            let keep = summary.listed || used[i];
            i += 1;
            keep
        });
        for a in attempts.iter_mut() {
            a.executor = renumber[a.executor];
        }
    }
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

fn first_label(labels: &str) -> String {
    labels
        .split(',')
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or(NO_LABEL)
        .to_string()
}

/// Checks the run and its executors for values no runner writes.
fn check(run: &RunRow, slots: &[ExecutorSlot]) -> Result<(), String> {
    if !run.started.is_finite() {
        return Err(format!("run {} has start time {}", run.run, run.started));
    }
    if let Some(ended) = run.ended.filter(|e| !e.is_finite()) {
        return Err(format!("run {} has end time {ended}", run.run));
    }
    if let Some(e) = slots.iter().find(|e| e.cores.is_some_and(|c| c < 0)) {
        return Err(format!(
            "executor {}/{} of run {} has {} cores",
            e.node,
            e.executor,
            run.run,
            e.cores.unwrap_or_default()
        ));
    }
    Ok(())
}
