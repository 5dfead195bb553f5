//! The report's figures from the run's rows, one step each: the run's
//! extent in time, one pass over the attempts (utilization bins, counts,
//! per-kind totals), the kinds' statistics, the Gantt bars, the lanes by
//! first label, and the activity states.

use journal::{RunRow, StateCount};

use super::{
    Attempt, AttemptCounts, Bar, ExecutorSummary, KindStats, Lane, Report, RunSummary, StateCounts,
    Timeline, WallEnd, UNKNOWN_KIND,
};
use crate::bins::{mean, median, Bins};

/// Computes the report from the run's rows: `executors` as
/// [`Executors`](super::Executors) lists them, the journal's `kinds` in
/// graph order, its activity `states` and the run's checked `attempts` (in
/// any order). The error describes a row no run could have written.
pub(super) fn build(
    run: &RunRow,
    runs_in_journal: &[i64],
    mut executors: Vec<ExecutorSummary>,
    kinds: &[&str],
    states: &[StateCount],
    attempts: Vec<Attempt>,
    bins: usize,
) -> Result<Report, String> {
    let extent = Extent::of(run, &attempts)?;
    let lanes = LaneIndex::of(&executors);
    let tally = Tally::of(
        &attempts,
        &extent,
        &lanes,
        &mut executors,
        kinds.len(),
        bins,
    );
    let (kind_stats, kind_position) = kind_stats(tally.per_kind, kinds);
    let bars = bars(attempts, &kind_position, kinds.len(), extent.origin);

    let executors_busy = tally.all_busy.fractions(executors.len() as f64);
    let cores: i64 = executors.iter().filter_map(|e| e.cores).sum();
    let cores_busy =
        (tally.counts.with_cpu_seconds > 0 && cores > 0).then(|| tally.cpu.fractions(cores as f64));
    let lanes = lanes.into_lanes(tally.lane_busy, executors_busy.len());
    Ok(Report {
        run: extent.summary(run),
        runs_in_journal: runs_in_journal.to_vec(),
        attempts: tally.counts,
        states: state_counts(states, run.run),
        executors,
        timeline: Timeline {
            origin: extent.origin,
            span: extent.span,
            bin_seconds: tally.all_busy.width(),
            mean_executors_busy: mean(&executors_busy),
            mean_cores_busy: cores_busy.as_deref().map(mean),
            executors_busy,
            cores_busy,
            cores,
        },
        lanes,
        kinds: kind_stats,
        bars,
    })
}

/// When the run and its attempts began and ended: its wall time, its
/// makespan, and the span its time bins cover.
struct Extent {
    wall_seconds: f64,
    wall_end: WallEnd,
    makespan: f64,
    /// Where the bins start, in the journal's clock.
    origin: f64,
    /// How long the bins cover, in seconds.
    span: f64,
}

impl Extent {
    /// The extent of `run` and its `attempts`; the error names a run whose
    /// times are too far apart to draw.
    fn of(run: &RunRow, attempts: &[Attempt]) -> Result<Extent, String> {
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
        Ok(Extent {
            wall_seconds,
            wall_end,
            makespan,
            origin,
            span,
        })
    }

    /// The summary of `run`, with its measured times.
    fn summary(&self, run: &RunRow) -> RunSummary {
        RunSummary {
            run: run.run,
            graph_path: run.graph_path.clone(),
            graph_hash: run.graph_hash.clone(),
            host: run.host.clone(),
            status: run.status.clone(),
            command_line: run.command_line.clone(),
            started: run.started,
            ended: run.ended,
            wall_seconds: self.wall_seconds,
            wall_end: self.wall_end,
            makespan: self.makespan,
        }
    }
}

/// The lanes, by first label in name order, and each executor's lane by
/// number.
struct LaneIndex {
    labels: Vec<String>,
    /// By executor, the index of its lane into `labels`.
    of_executor: Vec<usize>,
}

impl LaneIndex {
    fn of(executors: &[ExecutorSummary]) -> LaneIndex {
        let mut labels: Vec<String> = executors.iter().map(|e| e.lane.clone()).collect();
        labels.sort();
        labels.dedup();
        let of_executor: Vec<usize> = (executors.iter())
            .map(|e| labels.binary_search(&e.lane).unwrap_or(0))
            .collect();
        LaneIndex {
            labels,
            of_executor,
        }
    }

    /// The lanes with their busy fractions from `busy` (by lane; `None` for
    /// one that ran nothing), the largest first. Groups that ran nothing
    /// still get a (flat) lane of `bin_count` bins: idle capacity is news.
    fn into_lanes(self, busy: Vec<Option<Bins>>, bin_count: usize) -> Vec<Lane> {
        let of_executor = self.of_executor;
        let mut lanes: Vec<Lane> = (self.labels.into_iter().zip(busy))
            .enumerate()
            .map(|(i, (label, bins))| {
                let size = of_executor.iter().filter(|&&l| l == i).count();
                let busy = match bins {
                    Some(bins) => bins.fractions(size as f64),
                    None => vec![0.0; bin_count],
                };
                Lane {
                    mean_busy: mean(&busy),
                    label,
                    executors: size,
                    busy,
                }
            })
            .collect();
        lanes.sort_by(|a, b| {
            b.executors
                .cmp(&a.executors)
                .then_with(|| a.label.cmp(&b.label))
        });
        lanes
    }
}

/// Per kind, what its attempts came to.
#[derive(Default)]
struct KindTotals {
    durations: Vec<f64>,
    failed: usize,
    cpu_seconds: Option<f64>,
}

/// What the run's attempts add up to, in one pass over them: busy
/// executors and CPU seconds per time bin, overall and per lane, the
/// attempt counts, and totals per kind.
struct Tally {
    all_busy: Bins,
    cpu: Bins,
    /// By lane; `None` for a lane that ran nothing.
    lane_busy: Vec<Option<Bins>>,
    counts: AttemptCounts,
    /// By index into the journal's kinds, and one more for kinds it lacks.
    per_kind: Vec<KindTotals>,
}

impl Tally {
    /// Tallies `attempts` into `bins` time bins over the `extent`, and
    /// each attempt into its executor's summary in `executors`.
    fn of(
        attempts: &[Attempt],
        extent: &Extent,
        lanes: &LaneIndex,
        executors: &mut [ExecutorSummary],
        kind_count: usize,
        bins: usize,
    ) -> Tally {
        let (origin, span) = (extent.origin, extent.span);
        let mut tally = Tally {
            all_busy: Bins::new(span, bins),
            cpu: Bins::new(span, bins),
            lane_busy: (0..lanes.labels.len()).map(|_| None).collect(),
            counts: AttemptCounts::default(),
            per_kind: (0..=kind_count).map(|_| KindTotals::default()).collect(),
        };
        let mut activities: Vec<i64> = Vec::with_capacity(attempts.len());
        for a in attempts {
            let (start, stop) = (a.started - origin, a.ended - origin);
            let executor = &mut executors[a.executor];
            executor.attempts += 1;
            executor.busy_seconds += stop - start;
            tally.all_busy.cover(start, stop);
            tally.lane_busy[lanes.of_executor[a.executor]]
                .get_or_insert_with(|| Bins::new(span, bins))
                .cover(start, stop);
            if let Some(seconds) = a.cpu_seconds {
                tally.cpu.spread(start, stop, seconds);
                tally.counts.with_cpu_seconds += 1;
            }
            tally.counts.total += 1;
            tally.counts.failed += usize::from(a.failed);
            tally.counts.retries += usize::from(a.attempt > 1);
            activities.push(a.activity);

            let totals = &mut tally.per_kind[a.kind.unwrap_or(kind_count)];
            totals.durations.push(stop - start);
            totals.failed += usize::from(a.failed);
            if let Some(seconds) = a.cpu_seconds {
                totals.cpu_seconds = Some(totals.cpu_seconds.unwrap_or(0.0) + seconds);
            }
        }
        activities.sort_unstable();
        activities.dedup();
        tally.counts.activities = activities.len();
        tally
    }
}

/// The statistics of the kinds attempted, most total time first, and by
/// index into the journal's `kinds` (one more for kinds it lacks) each
/// kind's position among them.
fn kind_stats(per_kind: Vec<KindTotals>, kinds: &[&str]) -> (Vec<KindStats>, Vec<usize>) {
    // Graph order: the journal's kinds are numbered in the order graphs
    // declared them; ranks are made dense over the kinds attempted.
    let name = |k: usize| kinds.get(k).copied().unwrap_or(UNKNOWN_KIND);
    let mut stats: Vec<(usize, KindStats)> = Vec::new();
    for (k, mut totals) in per_kind.into_iter().enumerate() {
        if totals.durations.is_empty() {
            continue;
        }
        let total = totals.durations.iter().sum();
        let median = median(&mut totals.durations).unwrap_or(0.0);
        stats.push((
            k,
            KindStats {
                kind: name(k).to_string(),
                graph_order: stats.len(),
                attempts: totals.durations.len(),
                failed: totals.failed,
                min: totals.durations.first().copied().unwrap_or(0.0),
                median,
                max: totals.durations.last().copied().unwrap_or(0.0),
                total,
                cpu_seconds: totals.cpu_seconds,
            },
        ));
    }
    stats.sort_by(|(_, a), (_, b)| {
        b.total
            .total_cmp(&a.total)
            .then_with(|| a.kind.cmp(&b.kind))
    });
    let mut kind_position = vec![0; kinds.len() + 1];
    for (position, (k, _)) in stats.iter().enumerate() {
        kind_position[*k] = position;
    }
    (stats.into_iter().map(|(_, s)| s).collect(), kind_position)
}

/// The attempts as bars in start order, as the Gantt chart and the JSON
/// list them: times from `origin`, kinds by their position in
/// `kind_position` (`unknown_kind` stands for a kind the journal lacks).
fn bars(
    mut attempts: Vec<Attempt>,
    kind_position: &[usize],
    unknown_kind: usize,
    origin: f64,
) -> Vec<Bar> {
    attempts.sort_unstable_by(|a, b| {
        (a.started.total_cmp(&b.started))
            .then_with(|| a.id.cmp(&b.id))
            .then_with(|| a.attempt.cmp(&b.attempt))
    });
    (attempts.into_iter())
        .map(|a| Bar {
            executor: a.executor,
            kind: kind_position[a.kind.unwrap_or(unknown_kind)],
            start: a.started - origin,
            end: a.ended - origin,
            activity: a.id,
            attempt: a.attempt,
            failed: a.failed,
        })
        .collect()
}

/// The activity states in the whole journal and as `run` last set them.
fn state_counts(states: &[StateCount], run: i64) -> StateCounts {
    let mut counts = StateCounts::default();
    for count in states {
        let n = count.count as usize;
        counts.journal.add(count.state, n);
        if count.run == run {
            counts.set_by_run.add(count.state, n);
        }
    }
    counts
}
