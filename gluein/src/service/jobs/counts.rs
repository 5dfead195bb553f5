//! What the job service reads of a job's run journal and progress file:
//! its counts, its last run's status, and, at a cancel, what it marks
//! cancelled.

use std::path::Path;

use journal::{ActivityState, ActivityUpdate, Journal, RunStatus};

use super::runner::progress_file;
use super::store::JobRow;
use super::supervisor::CANCELLED_ACTIVITY;
use crate::service::{JobCounts, JobState, JobSummary};

/// The job as `jobs` and `job` show it.
pub(super) fn summary(job: &JobRow) -> JobSummary {
    let message = match (&job.message, job.state, job.cancel_requested) {
        (Some(message), ..) => Some(message.clone()),
        (None, JobState::Running, true) => Some("cancelling: its runner is stopping".to_string()),
        (None, ..) => None,
    };
    JobSummary {
        id: job.id,
        name: job.name.clone(),
        state: job.state,
        priority: job.priority,
        counts: counts_of(job),
        submitted: job.submitted,
        started: job.started,
        ended: job.ended,
        graph: job.graph.clone(),
        journal: job.journal.clone(),
        submitter: job.submitter.clone(),
        message,
    }
}

/// Job `job`'s activities by state: as they were when it ended; from its
/// run journal (and, while it runs, the runner's progress file for what
/// runs now); or, before its runner has journaled them, all waiting.
pub(super) fn counts_of(job: &JobRow) -> JobCounts {
    tally(job, job.state == JobState::Running)
}

/// The counts job `job` ends with: as [`counts_of`], with nothing running.
pub(super) fn ended_counts(job: &JobRow) -> JobCounts {
    tally(job, false)
}

/// [`counts_of`], taking what runs now from the runner's progress file
/// with `running`.
fn tally(job: &JobRow, running: bool) -> JobCounts {
    if let Some(counts) = job.final_counts {
        return counts;
    }
    let mut counts = JobCounts {
        waiting: job.activities,
        total: job.activities,
        ..JobCounts::default()
    };
    let Some(states) = (job.journal.exists())
        .then(|| Journal::open_read_only(&job.journal).and_then(|j| j.state_counts()))
        .and_then(Result::ok)
        .filter(|states| !states.is_empty())
    else {
        return counts;
    };
    let mut pending = 0;
    counts = JobCounts::default();
    for state in states {
        match state.state {
            ActivityState::Pending => pending += state.count,
            ActivityState::Done => counts.done += state.count,
            ActivityState::Failed => counts.failed += state.count,
            ActivityState::Cancelled => counts.cancelled += state.count,
        }
        counts.total += state.count;
    }
    if running {
        // The progress file may lag the journal: what it calls running is
        // at most what the journal still has pending.
        counts.running = read_progress(&progress_file(job)).map_or(0, |p| p.running.min(pending));
    }
    counts.waiting = pending - counts.running;
    counts
}

/// The runner's progress file, if it wrote one that reads.
fn read_progress(path: &Path) -> Option<JobCounts> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// How the last run in the journal at `path` stands (`running`,
/// `succeeded`, `failed`, `interrupted`), if the journal has a run.
pub(super) fn last_run_status(path: &Path) -> Option<String> {
    if !path.exists() {
        return None;
    }
    let journal = Journal::open_read_only(path).ok()?;
    Some(journal.runs().ok()?.pop()?.status)
}

/// Marks every activity still pending in the journal at `path` as
/// cancelled by its last run, and ends a run its runner left `running`
/// as interrupted; returns how many were pending. A job that wrote no
/// journal has none.
pub(super) fn cancel_pending(path: &Path) -> anyhow::Result<usize> {
    if !path.exists() {
        return Ok(0);
    }
    let mut journal = Journal::open(path)?;
    let Some(last) = journal.runs()?.pop() else {
        return Ok(0);
    };
    let updates: Vec<ActivityUpdate> = (journal.activities()?.into_iter())
        .filter(|activity| activity.state == ActivityState::Pending)
        .map(|activity| ActivityUpdate {
            activity: activity.activity,
            state: ActivityState::Cancelled,
            message: Some(CANCELLED_ACTIVITY.to_string()),
            attempts: Vec::new(),
        })
        .collect();
    journal.record(last.run, &updates)?;
    if last.status == RunStatus::Running.as_str() {
        journal.end_run(last.run, RunStatus::Interrupted)?;
    }
    Ok(updates.len())
}
