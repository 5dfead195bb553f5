//! What a run says at its end, on stdout: the summary as text, or as one
//! JSON object with `--json`.

use std::path::Path;
use std::time::Duration;

use journal::RunStatus;

use super::progress::Tally;

/// How a run ended, for its summary.
pub(super) struct RunEnd<'a> {
    /// The run's number in its journal.
    pub(super) run: i64,
    /// Where the journal is.
    pub(super) journal_path: &'a Path,
    /// The graph file, as given.
    pub(super) graph_path: &'a Path,
    /// How the run ended in the journal.
    pub(super) status: RunStatus,
    /// The activities counted by how the run left them.
    pub(super) tally: &'a Tally,
    /// On a pool run: executions lost with their agent, and extra ones.
    pub(super) re_executions: Option<(usize, usize)>,
    /// Since the run began.
    pub(super) elapsed: Duration,
}

/// Prints the summary of `end`: as JSON if `json`, else as text.
pub(super) fn print(end: &RunEnd<'_>, json: bool) -> anyhow::Result<()> {
    if !json {
        print_summary(end.tally, end.re_executions, end.journal_path, end.elapsed);
        return Ok(());
    }
    let tally = end.tally;
    let summary = RunJson {
        run: end.run,
        journal: end.journal_path.display().to_string(),
        graph: end.graph_path.display().to_string(),
        status: end.status.as_str(),
        activities: ActivityCountsJson {
            total: tally.total,
            skipped: tally.skipped,
            done: tally.done,
            failed: tally.failed,
            cancelled: tally.cancelled,
            interrupted: tally.interrupted,
            retried: tally.retried,
        },
        re_executions: (end.re_executions).map(|(lost, extra)| ReExecutionsJson { lost, extra }),
        failures: tally.failures.clone(),
        wall_s: end.elapsed.as_secs_f64(),
    };
    println!("{}", serde_json::to_string_pretty(&summary)?);
    Ok(())
}

/// The end-of-run summary as text: counts, durations per kind, failures,
/// re-executions (lost with their agent, or extra results) and the journal.
fn print_summary(
    tally: &Tally,
    re_executions: Option<(usize, usize)>,
    journal_path: &Path,
    elapsed: Duration,
) {
    print!("{}", tally.summary(elapsed));
    if let Some((lost, extra)) = re_executions.filter(|(lost, extra)| lost + extra > 0) {
        println!(
            "re-executions: {} ({lost} lost with their agent, {extra} extra results), each an attempt in the journal",
            lost + extra,
        );
    }
    println!("journal: {}", journal_path.display());
}

/// What `run --json` prints at the end: one object, in the style of
/// `status --json` and `jobs --json`.
#[derive(serde::Serialize)]
struct RunJson {
    run: i64,
    journal: String,
    graph: String,
    status: &'static str,
    activities: ActivityCountsJson,
    /// Executions beyond one per activity, on a pool run: lost with their
    /// agent, or extra results after the activity settled.
    re_executions: Option<ReExecutionsJson>,
    failures: Vec<String>,
    wall_s: f64,
}

/// The graph's activities by how this run left them.
#[derive(serde::Serialize)]
struct ActivityCountsJson {
    total: usize,
    skipped: usize,
    done: usize,
    failed: usize,
    cancelled: usize,
    interrupted: usize,
    retried: usize,
}

/// See [`RunJson::re_executions`].
#[derive(serde::Serialize)]
struct ReExecutionsJson {
    lost: usize,
    extra: usize,
}
