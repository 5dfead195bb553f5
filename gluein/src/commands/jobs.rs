//! `constellation jobs` and `constellation job ID`: the pool's jobs as its
//! job service lists them, and one job's activities as its journal has
//! them.
//!
//! A job's journal is read read-only, where the pool node keeps it (on a
//! file system this machine shares), so that looking never disturbs the
//! runner that writes it.

use std::collections::HashMap;
use std::path::Path;
use std::process::ExitCode;

use anyhow::bail;
use clap::Args;
use gluein::service::{JobState, JobSummary, ServiceRequest, ServiceResponse};
use journal::{Journal, JournalError};
use serde::Serialize;

use super::{unexpected_answer, ServiceAddress};

/// Arguments of `constellation jobs`.
#[derive(Args)]
#[command(after_help = "\
Examples:
  constellation jobs
  constellation jobs --all
  constellation jobs --json | jq -r '.jobs[] | select(.state == \"failed\") | .id'

WAIT counts activities not finished and not running, RUN those running
now, DONE, FAIL and CANC those that succeeded, failed, or were cancelled
(after a failure upstream, or with the job), TOTAL all of the graph's.
Times are UTC. `constellation job ID` lists a job's activities.")]
pub(crate) struct JobsArgs {
    #[command(flatten)]
    service: ServiceAddress,
    /// Also list jobs that ended (succeeded, failed, cancelled).
    #[arg(long)]
    all: bool,
    /// Print `{"jobs": [...]}` instead of a table, for scripts.
    #[arg(long)]
    json: bool,
}

/// Arguments of `constellation job`.
#[derive(Args)]
#[command(after_help = "\
Examples:
  constellation job 3
  constellation job 3 --json | jq -r '.activities[] | select(.state == \"failed\") | .id'
  constellation report --job 3 --plot job3.svg

The activities come from the job's journal, read-only, on the file system
the pool node writes it to. ATTEMPTS counts every execution in every run of
the journal (a resume after a restart adds a run); NODE is where the last
one ran.")]
pub(crate) struct JobArgs {
    /// The job's id, as `submit` printed it.
    id: u64,
    #[command(flatten)]
    service: ServiceAddress,
    /// Print `{"job": {...}, "activities": [...]}` instead of text.
    #[arg(long)]
    json: bool,
}

/// What `jobs --json` prints.
#[derive(Serialize)]
struct JobsJson<'a> {
    jobs: &'a [JobSummary],
}

/// Lists the jobs.
pub(crate) fn jobs_main(args: JobsArgs) -> anyhow::Result<ExitCode> {
    let request = ServiceRequest::Jobs { all: args.all };
    let jobs = match args.service.ask(&request)? {
        ServiceResponse::Jobs { jobs } => jobs,
        other => return Err(unexpected_answer("a list of jobs", &other)),
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&JobsJson { jobs: &jobs })?
        );
    } else if jobs.is_empty() {
        eprintln!(
            "no jobs {}on the pool {}",
            if args.all { "" } else { "queued or running " },
            args.service.address.pool
        );
    } else {
        print!("{}", render_jobs(&jobs));
    }
    Ok(ExitCode::SUCCESS)
}

/// The table of `jobs`.
fn render_jobs(jobs: &[JobSummary]) -> String {
    let mut rows = vec![[
        "ID",
        "NAME",
        "STATE",
        "WAIT",
        "RUN",
        "DONE",
        "FAIL",
        "CANC",
        "TOTAL",
        "SUBMITTED",
        "STARTED",
        "ENDED",
    ]
    .map(String::from)
    .to_vec()];
    for job in jobs {
        let counts = &job.counts;
        rows.push(vec![
            job.id.to_string(),
            job.name.clone(),
            job.state.to_string(),
            counts.waiting.to_string(),
            counts.running.to_string(),
            counts.done.to_string(),
            counts.failed.to_string(),
            counts.cancelled.to_string(),
            counts.total.to_string(),
            time(Some(job.submitted)),
            time(job.started),
            time(job.ended),
        ]);
    }
    clitools::columns(&rows)
}

/// A time of a job in UTC, or `-`.
fn time(unix_secs: Option<f64>) -> String {
    unix_secs.map_or_else(|| "-".to_string(), timefmt::format_unix_timestamp)
}

/// One activity of a job, as `job` lists it.
#[derive(Serialize)]
struct ActivityJson {
    id: String,
    state: &'static str,
    attempts: u64,
    /// Where its last attempt ran.
    node: Option<String>,
    message: Option<String>,
}

/// What `job --json` prints.
#[derive(Serialize)]
struct JobJson<'a> {
    job: &'a JobSummary,
    activities: Vec<ActivityJson>,
}

/// Shows one job and its activities.
pub(crate) fn job_main(args: JobArgs) -> anyhow::Result<ExitCode> {
    let request = ServiceRequest::Job { id: args.id };
    let job = match args.service.ask(&request)? {
        ServiceResponse::Job { job } => job,
        other => return Err(unexpected_answer("a job", &other)),
    };
    // A queued job has no journal yet, and one whose runner has just
    // started may have none, or an empty file, for a moment.
    let activities = match activities(&job.journal) {
        Err(error) if !job.state.is_final() && not_made_yet(&error) => Ok(Vec::new()),
        read => read,
    };
    let (activities, problem) = match activities {
        Ok(activities) => (activities, None),
        Err(error) => (Vec::new(), Some(error)),
    };
    if args.json {
        let json = JobJson {
            job: &job,
            activities,
        };
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        print!("{}", render_job(&job, &activities));
    }
    match problem {
        Some(error) => bail!(
            "cannot read the activities of job {} from its journal: {error:#}; the journal is \
             on the pool node's machine, readable here only on a shared file system",
            job.id
        ),
        None => Ok(ExitCode::SUCCESS),
    }
}

/// Whether `error` says the journal is not there yet, or not yet made
/// (its runner creates it).
fn not_made_yet(error: &anyhow::Error) -> bool {
    matches!(
        error.downcast_ref::<JournalError>(),
        Some(JournalError::Missing(_) | JournalError::NotAJournal { .. })
    )
}

/// Every activity of the journal at `path`, with its attempts in every run.
fn activities(path: &Path) -> anyhow::Result<Vec<ActivityJson>> {
    let journal = Journal::open_read_only(path)?;
    // By start time, so that the last one seen of an activity is its last.
    let mut attempts: HashMap<String, (u64, String)> = HashMap::new();
    for attempt in journal.attempts(None)? {
        let entry = attempts.entry(attempt.activity).or_default();
        entry.0 += 1;
        entry.1 = attempt.recorded.node;
    }
    Ok((journal.activities()?.into_iter())
        .map(|row| {
            let (count, node) = attempts.remove(&row.id).unwrap_or_default();
            ActivityJson {
                state: row.state.as_str(),
                attempts: count,
                node: (count > 0).then_some(node),
                message: row.message,
                id: row.id,
            }
        })
        .collect())
}

/// The text of `job`: the job, then a table of its activities.
fn render_job(job: &JobSummary, activities: &[ActivityJson]) -> String {
    let counts = &job.counts;
    let mut out = format!(
        "job {} ({}): {}, priority {}\n",
        job.id,
        clitools::printable(&job.name),
        job.state,
        job.priority
    );
    let mut fields = vec![
        ("graph", job.graph.display().to_string()),
        (
            "submitter",
            clitools::printable(&job.submitter).into_owned(),
        ),
        ("submitted", time(Some(job.submitted))),
        ("started", time(job.started)),
        ("ended", time(job.ended)),
        (
            "activities",
            format!(
                "{} waiting, {} running, {} done, {} failed, {} cancelled, {} in all",
                counts.waiting,
                counts.running,
                counts.done,
                counts.failed,
                counts.cancelled,
                counts.total
            ),
        ),
        ("journal", job.journal.display().to_string()),
    ];
    if let Some(message) = &job.message {
        fields.push(("message", message.clone()));
    }
    for (field, value) in fields {
        out.push_str(&format!("  {field:<11}{value}\n"));
    }
    if activities.is_empty() {
        match job.state {
            JobState::Queued => out.push_str("\n(queued: no activity has run yet)\n"),
            JobState::Running => out.push_str("\n(its runner is starting)\n"),
            _ => {}
        }
        return out;
    }
    out.push('\n');
    let mut rows = vec![["ACTIVITY", "STATE", "ATTEMPTS", "NODE", "MESSAGE"]
        .map(String::from)
        .to_vec()];
    for activity in activities {
        rows.push(vec![
            activity.id.clone(),
            activity.state.to_string(),
            activity.attempts.to_string(),
            activity.node.clone().unwrap_or_else(|| "-".into()),
            // One line per activity: a message may hold a command's
            // last lines of error output.
            (activity.message.as_deref())
                .map(|message| message.lines().next().unwrap_or_default().to_string())
                .unwrap_or_default(),
        ]);
    }
    out.push_str(&clitools::columns(&rows));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gluein::service::JobCounts;

    fn job(id: u64, state: JobState) -> JobSummary {
        JobSummary {
            id,
            name: format!("graph-{id}"),
            state,
            priority: 0,
            counts: JobCounts {
                waiting: 1,
                running: 2,
                done: 3,
                failed: 4,
                cancelled: 5,
                total: 15,
            },
            submitted: 1_800_000_000.0,
            started: (state != JobState::Queued).then_some(1_800_000_060.0),
            ended: None,
            graph: "/home/u/graph.toml".into(),
            journal: "/state/jobs/1/journal.db".into(),
            submitter: "u@h".into(),
            message: None,
        }
    }

    #[test]
    fn the_jobs_table_has_a_row_per_job_with_utc_times() {
        let table = render_jobs(&[job(1, JobState::Running), job(2, JobState::Queued)]);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3, "{table}");
        let header: Vec<&str> = lines[0].split_whitespace().collect();
        assert_eq!(
            header,
            [
                "ID",
                "NAME",
                "STATE",
                "WAIT",
                "RUN",
                "DONE",
                "FAIL",
                "CANC",
                "TOTAL",
                "SUBMITTED",
                "STARTED",
                "ENDED"
            ]
        );
        let running: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(
            running,
            [
                "1",
                "graph-1",
                "running",
                "1",
                "2",
                "3",
                "4",
                "5",
                "15",
                "2027-01-15T08:00:00Z",
                "2027-01-15T08:01:00Z",
                "-"
            ]
        );
        assert!(lines[2].contains("queued"), "{table}");
    }

    #[test]
    fn a_queued_job_says_nothing_ran_yet() {
        let text = render_job(&job(7, JobState::Queued), &[]);
        assert!(
            text.starts_with("job 7 (graph-7): queued, priority 0\n"),
            "{text}"
        );
        assert!(text.contains("no activity has run yet"), "{text}");
    }
}
