//! `constellation runs`: the runs in a directory of runs, newest last,
//! with what each one is doing or how it ended.
//!
//! Journals are opened read-only, so listing never disturbs a run. Whether
//! a run is live comes from its journal's writer lock, not from the
//! journal's status column: a runner killed with `kill -9` leaves the
//! column at `running` but lets go of the lock as it dies.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use clap::Args;
use journal::{unix_seconds, ActivityState, Journal, RunRow, Writer};
use report::run_dir;
use serde::Serialize;

/// Arguments of `constellation runs`.
#[derive(Args)]
#[command(after_help = "\
Examples:
  constellation runs
  constellation runs --json | jq -r '.[] | select(.status == \"failed\") | .journal'
  constellation runs ~/projects/survey/constellation-runs
  constellation report constellation-runs/latest/journal.db

STATUS is that of the journal's latest run (a resume adds a run):
  running (pid N)        its runner is alive (it holds the journal's lock)
  succeeded, failed      it ended so
  interrupted            it was stopped with Ctrl-C or SIGTERM
  stopped (runner gone)  its runner died (kill -9, a crash, a lost node)
                         before it could say how the run ended;
                         `constellation run GRAPH --resume JOURNAL` carries on
STARTED and DURATION are the latest run's; DONE, FAILED and TOTAL count the
journal's activities as they stand. constellation-runs/latest names the
newest run directory.")]
pub(crate) struct RunsArgs {
    /// The directory of runs to list.
    #[arg(default_value = run_dir::RUNS_DIR, value_name = "DIR")]
    dir: PathBuf,
    /// Print a JSON array (one object per run, oldest first) instead of a
    /// table, for scripts.
    #[arg(long)]
    json: bool,
}

/// One run directory, as listed; its fields are the `--json` keys.
#[derive(Debug, Serialize)]
struct RunListing {
    /// The run directory, as DIR/NAME.
    run_dir: String,
    /// Its journal.
    journal: String,
    /// The graph file of the latest run, as given to `constellation run`.
    graph: Option<String>,
    /// `running`, `succeeded`, `failed`, `interrupted`, `stopped` (the
    /// runner is gone), `empty` (no run recorded), `no journal` or
    /// `unreadable`.
    status: String,
    /// The live runner's process id, while `running`.
    pid: Option<u32>,
    /// The live runner's host, while `running`.
    host: Option<String>,
    /// Runs recorded in the journal: 1, and one more per resume.
    runs: usize,
    /// When the latest run started (RFC 3339, UTC).
    started: Option<String>,
    /// When the latest run ended (RFC 3339, UTC), once it has.
    ended: Option<String>,
    /// Seconds the latest run took, or has taken so far while running;
    /// unknown for a run whose runner is gone.
    duration_s: Option<f64>,
    /// Activities done.
    done: u64,
    /// Activities that failed.
    failed: u64,
    /// Activities cancelled because work they depend on failed.
    cancelled: u64,
    /// Activities not finished yet.
    pending: u64,
    /// All the journal's activities.
    total: u64,
    /// Why the journal could not be read, for `unreadable`.
    error: Option<String>,
    /// When the run directory's first run started (Unix seconds), to
    /// order the list; the directory's own time for one with none.
    #[serde(skip)]
    order: f64,
}

/// Lists the runs.
pub(crate) fn main(args: RunsArgs) -> anyhow::Result<ExitCode> {
    let dirs = run_dir::run_dirs(&args.dir)
        .with_context(|| format!("cannot list the runs in {}", args.dir.display()))?;
    let mut listings: Vec<RunListing> = dirs.iter().map(|dir| listing(dir)).collect();
    listings.sort_by(|a, b| a.order.total_cmp(&b.order).then(a.run_dir.cmp(&b.run_dir)));
    if args.json {
        println!("{}", serde_json::to_string_pretty(&listings)?);
    } else if listings.is_empty() {
        eprintln!(
            "no runs in {}; `constellation run GRAPH` makes one there",
            args.dir.display()
        );
    } else {
        print!("{}", render(&listings));
    }
    Ok(ExitCode::SUCCESS)
}

/// What the run directory `dir` holds.
fn listing(dir: &Path) -> RunListing {
    let journal_path = dir.join("journal.db");
    let mut listing = RunListing {
        run_dir: dir.display().to_string(),
        journal: journal_path.display().to_string(),
        graph: None,
        status: String::new(),
        pid: None,
        host: None,
        runs: 0,
        started: None,
        ended: None,
        duration_s: None,
        done: 0,
        failed: 0,
        cancelled: 0,
        pending: 0,
        total: 0,
        error: None,
        order: modified(dir),
    };
    if !journal_path.exists() {
        // A run that stopped before it made its journal.
        listing.status = "no journal".to_string();
        return listing;
    }
    // Asked before the journal is read: a runner that ends in between is
    // then seen as running with its final status, not as gone.
    let read = Journal::writer(&journal_path)
        .and_then(|writer| read_journal(&journal_path, &mut listing).map(|()| writer));
    let writer = match read {
        Ok(writer) => writer,
        Err(error) => {
            listing.status = "unreadable".to_string();
            listing.error = Some(error.to_string());
            return listing;
        }
    };
    listing.status = status(writer.as_ref(), listing.status.as_str()).to_string();
    if listing.status == "stopped" {
        // It ended when its runner died, and nothing says when.
        listing.duration_s = None;
    }
    if let Some(writer) = writer {
        listing.pid = writer.pid;
        listing.host = writer.host;
    }
    listing
}

/// Fills `listing` in from the journal at `path`: its runs (the latest
/// run's status goes into `listing.status`) and activity counts.
fn read_journal(path: &Path, listing: &mut RunListing) -> Result<(), journal::JournalError> {
    let journal = Journal::open_read_only(path)?;
    let runs = journal.runs()?;
    listing.runs = runs.len();
    if let Some(first) = runs.first() {
        listing.order = first.started;
    }
    if let Some(last) = runs.last() {
        describe_run(last, listing);
    }
    for count in journal.state_counts()? {
        let tally = match count.state {
            ActivityState::Done => &mut listing.done,
            ActivityState::Failed => &mut listing.failed,
            ActivityState::Cancelled => &mut listing.cancelled,
            ActivityState::Pending => &mut listing.pending,
        };
        *tally += count.count;
        listing.total += count.count;
    }
    Ok(())
}

/// The latest run's graph, status and times.
fn describe_run(run: &RunRow, listing: &mut RunListing) {
    listing.graph = Some(run.graph_path.clone());
    listing.status = run.status.clone();
    listing.started = Some(timefmt::format_unix_timestamp(run.started));
    listing.ended = run.ended.map(timefmt::format_unix_timestamp);
    listing.duration_s = match run.ended {
        Some(ended) => Some((ended - run.started).max(0.0)),
        // Still going, if its runner is: settled in `status`.
        None => Some((unix_seconds(SystemTime::now()) - run.started).max(0.0)),
    };
}

/// The status to show, from the journal's `recorded` one and whether a
/// runner holds the journal.
fn status(writer: Option<&Writer>, recorded: &str) -> &'static str {
    match (writer, recorded) {
        (Some(_), _) => "running",
        (None, "running") => "stopped",
        (None, "") => "empty",
        (None, "succeeded") => "succeeded",
        (None, "failed") => "failed",
        (None, "interrupted") => "interrupted",
        // A status this build does not know (a newer one's).
        (None, _) => "unknown",
    }
}

/// The directory's modification time in Unix seconds, or 0.
fn modified(dir: &Path) -> f64 {
    std::fs::metadata(dir)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The table, a header then a row per run.
fn render(listings: &[RunListing]) -> String {
    let mut rows = vec![[
        "RUN DIR", "GRAPH", "STATUS", "STARTED", "DURATION", "DONE", "FAILED", "TOTAL",
    ]
    .map(String::from)
    .to_vec()];
    let this_host = executors::probe::hostname();
    for run in listings {
        let status = match run.status.as_str() {
            "running" => match (&run.pid, &run.host) {
                (Some(pid), Some(host)) if *host != this_host => {
                    format!("running (pid {pid} on {host})")
                }
                (Some(pid), _) => format!("running (pid {pid})"),
                _ => "running".to_string(),
            },
            "stopped" => "stopped (runner gone)".to_string(),
            "unreadable" => format!(
                "unreadable: {}",
                run.error.as_deref().unwrap_or("unknown error")
            ),
            other => other.to_string(),
        };
        let status = match run.runs {
            0 | 1 => status,
            n => format!("{status}, run {n}"),
        };
        let duration = run.duration_s.map_or("-".to_string(), duration_text);
        rows.push(vec![
            run.run_dir.clone(),
            run.graph.clone().unwrap_or_else(|| "-".to_string()),
            status,
            run.started.clone().unwrap_or_else(|| "-".to_string()),
            duration,
            run.done.to_string(),
            run.failed.to_string(),
            run.total.to_string(),
        ]);
    }
    clitools::columns(&rows)
}

/// A run's duration: tenths of a second under a minute (most test runs),
/// `HH:MM:SS` (with days, `D-HH:MM:SS`) from a minute up.
fn duration_text(seconds: f64) -> String {
    if seconds < 59.95 {
        format!("{seconds:.1}s")
    } else {
        timefmt::format_clock(Duration::from_secs_f64(seconds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_means_running_whatever_the_journal_says() {
        let writer = Writer::default();
        for recorded in ["", "running", "succeeded", "failed"] {
            assert_eq!(status(Some(&writer), recorded), "running");
        }
        assert_eq!(status(None, "running"), "stopped");
        assert_eq!(status(None, "failed"), "failed");
        assert_eq!(status(None, ""), "empty");
        assert_eq!(status(None, "paused"), "unknown");
    }

    #[test]
    fn durations_read_as_seconds_then_as_a_clock() {
        assert_eq!(duration_text(0.023), "0.0s");
        assert_eq!(duration_text(12.34), "12.3s");
        assert_eq!(duration_text(59.96), "00:01:00");
        assert_eq!(duration_text(3_725.0), "01:02:05");
    }
}
