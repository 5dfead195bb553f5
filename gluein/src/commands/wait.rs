//! `constellation wait ID...`: waits until jobs on the pool have ended,
//! for scripts: exits 0 if every one succeeded, 1 if any failed or was
//! cancelled.
//!
//! It joins the pool as an observer and asks the pool node's job service
//! twice a second. Every step is bounded: each request has its own
//! timeout, and a pool node that is gone ends the wait with exit status 2
//! and a message that says so, at once or, with `--reconnect`, when it has
//! not come back in time. SIGINT and SIGTERM end only the waiting: the
//! jobs are the pool's and go on.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use constellation::net::{MasterState, Node};
use gluein::service::{self, JobState, JobSummary, ServiceRequest, ServiceResponse};

use super::{ask_master, join_as_observer, unexpected_answer, PoolAddress, ServiceError};

/// Arguments of `constellation wait`.
#[derive(Args)]
#[command(after_help = "\
Examples:
  constellation wait 3
  constellation wait 3 4 5 --progress
  constellation wait 3 --reconnect 10m --timeout 12h
  id=$(constellation submit pipeline.toml --json | jq .id) && constellation wait \"$id\" && echo ok

Exit status: 0 when every job succeeded; 1 when any failed or was
cancelled; 2 when the wait could not go on (an unknown job, the pool node
gone, --timeout reached); 130 on SIGINT or SIGTERM, which stop only the
waiting, never the jobs.

Without --reconnect, a pool node that dies or stops ends the wait at once
with exit status 2 (the jobs' runners keep going, and a pool node
restarted on its state directory carries on with them: wait again then).
With --reconnect DURATION, the wait carries on when the pool node comes
back within DURATION.")]
pub(crate) struct WaitArgs {
    /// The jobs' ids, as `submit` printed them.
    #[arg(required = true, value_name = "ID")]
    ids: Vec<u64>,
    #[command(flatten)]
    address: PoolAddress,
    /// Print a line to stderr whenever a job's state or counts change.
    #[arg(long)]
    progress: bool,
    /// How long to wait for a pool node that is gone (or not there yet) to
    /// come back, e.g. `60s`, `10m`. Default: give up at once.
    #[arg(long, value_parser = timefmt::parse_duration, value_name = "DURATION")]
    reconnect: Option<Duration>,
    /// Give up (exit status 2) if the jobs have not ended in this long.
    /// Default: wait as long as they run.
    #[arg(long, value_parser = timefmt::parse_duration, value_name = "DURATION")]
    timeout: Option<Duration>,
    /// How long each request may take: joining the pool, and each question
    /// to the pool node.
    #[arg(long, default_value = "10s", value_parser = timefmt::parse_duration, value_name = "DURATION")]
    request_timeout: Duration,
}

/// How often the pool node is asked.
const POLL_EVERY: Duration = Duration::from_millis(500);

/// How long leaving the pool may take before the command ends anyway.
const LEAVE_WAIT: Duration = Duration::from_secs(3);

/// [`LEAVE_WAIT`] once --timeout has been reached.
const LEAVE_WAIT_PAST_TIMEOUT: Duration = Duration::from_millis(500);

/// Waits for the jobs.
pub(crate) fn main(args: WaitArgs) -> anyhow::Result<ExitCode> {
    gluein::signals::catch_stop_signals()?;
    let started = Instant::now();
    let deadline = args.timeout.map(|timeout| started + timeout);
    let pool = args.address.pool.clone();
    let reconnect = args.reconnect.unwrap_or_default();
    // No wait for the pool node, joining included, outlasts --timeout.
    let join_timeout = within(args.request_timeout.max(reconnect), deadline);
    let node = match join_as_observer(&args.address, "wait", join_timeout) {
        Ok(node) => Arc::new(node),
        Err(_) if gluein::signals::stop_requested() => return Ok(stopped_waiting()),
        Err(error) if deadline.is_some_and(|d| Instant::now() >= d) => {
            return Err(error.context(format!(
                "gave up after {} (--timeout) while joining the pool",
                timefmt::format_seconds(args.timeout.unwrap_or_default())
            )))
        }
        Err(error) => return Err(error),
    };
    let mut waiting = Waiting::new(&args.ids);
    // Since when the pool node has been gone or silent.
    let mut trouble: Option<Instant> = None;
    let outcome = loop {
        if gluein::signals::stop_requested() {
            break Ok(stopped_waiting());
        }
        if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            break Err(timed_out(&args, &waiting));
        }
        match poll(&node, &mut waiting, &args, deadline) {
            Ok(Some(code)) => break Ok(code),
            Ok(None) => {
                if trouble.take().is_some() {
                    eprintln!("the pool node is back; still waiting");
                }
            }
            Err(Polled::Stopped) => break Ok(stopped_waiting()),
            Err(Polled::Starting) => {}
            Err(Polled::Failed(error)) => break Err(error),
            Err(Polled::Lost(_)) if deadline.is_some_and(|d| Instant::now() >= d) => {
                break Err(timed_out(&args, &waiting));
            }
            Err(Polled::Lost(why)) => {
                let since = match &trouble {
                    Some(since) => *since,
                    None => {
                        if !reconnect.is_zero() {
                            eprintln!(
                                "{why}; waiting up to {} for it to come back (--reconnect)",
                                timefmt::format_seconds(reconnect)
                            );
                        }
                        Instant::now()
                    }
                };
                if since.elapsed() >= reconnect {
                    break Err(lost(&pool, &why, reconnect, &waiting));
                }
                trouble = Some(since);
            }
        }
        pause(within(POLL_EVERY, deadline));
    };
    // Past --timeout, the goodbye gets a moment, not the usual wait.
    let leave_wait = match deadline {
        Some(deadline) if Instant::now() >= deadline => LEAVE_WAIT_PAST_TIMEOUT,
        _ => LEAVE_WAIT,
    };
    leave_within(node, leave_wait);
    outcome
}

/// `duration`, or less if `deadline` comes sooner.
fn within(duration: Duration, deadline: Option<Instant>) -> Duration {
    match deadline {
        Some(deadline) => duration.min(deadline.saturating_duration_since(Instant::now())),
        None => duration,
    }
}

/// The error of a wait that reached --timeout.
fn timed_out(args: &WaitArgs, waiting: &Waiting) -> anyhow::Error {
    anyhow::anyhow!(
        "gave up after {} (--timeout): {}",
        timefmt::format_seconds(args.timeout.unwrap_or_default()),
        waiting.unfinished()
    )
}

/// The jobs waited for: the last answer about each, and which have ended.
struct Waiting {
    /// By id: the last summary, once one came.
    jobs: BTreeMap<u64, Option<JobSummary>>,
}

impl Waiting {
    fn new(ids: &[u64]) -> Waiting {
        Waiting {
            jobs: ids.iter().map(|&id| (id, None)).collect(),
        }
    }

    /// The ids of the jobs not known to have ended.
    fn pending(&self) -> Vec<u64> {
        (self.jobs.iter())
            .filter(|(_, job)| !job.as_ref().is_some_and(|job| job.state.is_final()))
            .map(|(&id, _)| id)
            .collect()
    }

    /// Takes an answer about a job: says what changed (with `--progress`)
    /// and when it ended (always).
    fn update(&mut self, job: JobSummary, progress: bool) {
        let Some(last) = self.jobs.get_mut(&job.id) else {
            return;
        };
        let changed = last
            .as_ref()
            .is_none_or(|last| last.state != job.state || last.counts != job.counts);
        if progress && changed && !job.state.is_final() {
            eprintln!("{}", progress_line(&job));
        }
        if job.state.is_final() && last.as_ref().is_none_or(|last| !last.state.is_final()) {
            if progress {
                eprintln!("{}", progress_line(&job));
            }
            println!("{}", ended_line(&job));
        }
        *last = Some(job);
    }

    /// `job 3 (pipeline) running, job 4 queued`, for a message.
    fn unfinished(&self) -> String {
        let unfinished: Vec<String> = (self.jobs.iter())
            .filter(|(_, job)| !job.as_ref().is_some_and(|job| job.state.is_final()))
            .map(|(id, job)| match job {
                Some(job) => format!(
                    "job {id} ({}) {}",
                    clitools::printable(&job.name),
                    job.state
                ),
                None => format!("job {id}"),
            })
            .collect();
        format!("not ended: {}", unfinished.join(", "))
    }

    /// Exit status once every job has ended: 0 if all succeeded, else 1.
    fn exit_code(&self) -> ExitCode {
        let all_succeeded = (self.jobs.values()).all(|job| {
            job.as_ref()
                .is_some_and(|job| job.state == JobState::Succeeded)
        });
        match all_succeeded {
            true => ExitCode::SUCCESS,
            false => ExitCode::from(1),
        }
    }
}

/// How a poll went wrong.
enum Polled {
    /// SIGINT or SIGTERM while asking.
    Stopped,
    /// The pool node is gone or does not answer: it may come back.
    Lost(String),
    /// The pool node answers but its job service is still starting (it has
    /// just restarted): no news, so the wait asks again at the next poll.
    Starting,
    /// An answer that ends the wait: an unknown job, or one of the wrong kind.
    Failed(anyhow::Error),
}

/// Asks about the jobs not ended yet: one request for the queued and
/// running ones, and one for each waited-for job that is not among them
/// (it ended, or there is no such job). `Some` exit status once all have
/// ended.
fn poll(
    node: &Arc<Node>,
    waiting: &mut Waiting,
    args: &WaitArgs,
    deadline: Option<Instant>,
) -> Result<Option<ExitCode>, Polled> {
    if !node.master_known() {
        return Err(Polled::Lost(match node.master_state() {
            MasterState::Left => "the pool node stopped".to_string(),
            MasterState::NotYetSeen => "the pool node is not reachable".to_string(),
            _ => "the pool node is gone (no member sees it any more)".to_string(),
        }));
    }
    // Each request within what is left of --timeout: the request's own
    // timeout must not make the wait outlast it.
    let timeout = within(args.request_timeout, deadline);
    let active = match ask(node, ServiceRequest::Jobs { all: false }, timeout)? {
        ServiceResponse::Jobs { jobs } => jobs,
        other => return Err(Polled::Failed(unexpected_answer("a list of jobs", &other))),
    };
    let mut active: BTreeMap<u64, JobSummary> =
        active.into_iter().map(|job| (job.id, job)).collect();
    for id in waiting.pending() {
        let job = match active.remove(&id) {
            Some(job) => job,
            None => match ask(
                node,
                ServiceRequest::Job { id },
                within(args.request_timeout, deadline),
            )? {
                ServiceResponse::Job { job } => job,
                other => return Err(Polled::Failed(unexpected_answer("a job", &other))),
            },
        };
        waiting.update(job, args.progress);
    }
    Ok(waiting.pending().is_empty().then(|| waiting.exit_code()))
}

/// Asks the pool node on a thread of its own, so that SIGINT and SIGTERM
/// end the wait at once rather than after the request's timeout.
fn ask(
    node: &Arc<Node>,
    request: ServiceRequest,
    timeout: Duration,
) -> Result<ServiceResponse, Polled> {
    let (answered, answer) = std::sync::mpsc::channel();
    let asking = Arc::clone(node);
    std::thread::Builder::new()
        .name("ask-pool".to_string())
        .spawn(move || {
            let _ = answered.send(ask_master(&asking, &request, timeout));
        })
        .map_err(|error| Polled::Failed(anyhow::anyhow!("cannot start a thread: {error}")))?;
    loop {
        if gluein::signals::stop_requested() {
            return Err(Polled::Stopped);
        }
        match answer.recv_timeout(Duration::from_millis(50)) {
            Ok(Ok(response)) => return Ok(response),
            Ok(Err(ServiceError::Refused(reason))) if reason == service::SERVICE_STARTING => {
                return Err(Polled::Starting)
            }
            Ok(Err(ServiceError::Refused(reason))) => {
                return Err(Polled::Failed(anyhow::anyhow!("{reason}")))
            }
            Ok(Err(ServiceError::NoAnswer(why))) => return Err(Polled::Lost(why)),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err(Polled::Lost(
                    "the request to the pool node failed".to_string(),
                ))
            }
        }
    }
}

/// Sleeps `duration`, waking early on SIGINT or SIGTERM.
fn pause(duration: Duration) {
    let until = Instant::now() + duration;
    while Instant::now() < until && !gluein::signals::stop_requested() {
        std::thread::sleep(Duration::from_millis(20).min(until - Instant::now()));
    }
}

/// The error that ends a wait whose pool node is gone.
fn lost(pool: &str, why: &str, reconnect: Duration, waiting: &Waiting) -> anyhow::Error {
    let after = match reconnect.is_zero() {
        true => "wait again once it is back (a pool node restarted on its state directory \
                 carries on with the jobs), or give --reconnect DURATION to wait for it"
            .to_string(),
        false => format!(
            "it did not come back within {} (--reconnect)",
            timefmt::format_seconds(reconnect)
        ),
    };
    anyhow::anyhow!(
        "lost the pool {pool}: {why}; {}; {after}",
        waiting.unfinished()
    )
}

/// Says the wait stopped, and gives its exit status, 130.
fn stopped_waiting() -> ExitCode {
    eprintln!("stopped waiting (SIGINT or SIGTERM); the jobs go on");
    ExitCode::from(130)
}

/// Leaves the pool with a goodbye, so that no member declares this one
/// dead, but at most `limit`: the wait must end even if the pool does not
/// answer, or a request still holds the node.
fn leave_within(node: Arc<Node>, limit: Duration) {
    let Ok(node) = Arc::try_unwrap(node) else {
        return;
    };
    let (left, leaving) = std::sync::mpsc::channel();
    let went = std::thread::Builder::new()
        .name("leave".to_string())
        .spawn(move || {
            node.leave();
            let _ = left.send(());
        });
    if went.is_ok() {
        let _ = leaving.recv_timeout(limit);
    }
}

/// `job 3 (pipeline): running, 4/10 done, 2 running, 3 waiting`.
fn progress_line(job: &JobSummary) -> String {
    let counts = &job.counts;
    let mut line = format!(
        "job {} ({}): {}, {}/{} done, {} running, {} waiting",
        job.id,
        clitools::printable(&job.name),
        job.state,
        counts.done,
        counts.total,
        counts.running,
        counts.waiting
    );
    for (count, what) in [(counts.failed, "failed"), (counts.cancelled, "cancelled")] {
        if count > 0 {
            line.push_str(&format!(", {count} {what}"));
        }
    }
    line
}

/// `job 3 (pipeline) succeeded`, or failed with why.
fn ended_line(job: &JobSummary) -> String {
    let name = clitools::printable(&job.name);
    let mut line = format!("job {} ({name}) {}", job.id, job.state);
    if job.state != JobState::Succeeded {
        if let Some(message) = &job.message {
            line.push_str(&format!(": {message}"));
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use gluein::service::JobCounts;

    fn job(id: u64, state: JobState) -> JobSummary {
        JobSummary {
            id,
            name: "g".into(),
            state,
            priority: 0,
            counts: JobCounts::default(),
            submitted: 0.0,
            started: None,
            ended: None,
            graph: "/g.toml".into(),
            journal: "/j.db".into(),
            submitter: "u@h".into(),
            message: (state == JobState::Failed).then(|| "1 activity failed".into()),
        }
    }

    #[test]
    fn the_wait_ends_when_every_job_has_and_fails_if_one_did() {
        let mut waiting = Waiting::new(&[1, 2]);
        assert_eq!(waiting.pending(), [1, 2]);
        waiting.update(job(1, JobState::Succeeded), false);
        waiting.update(job(2, JobState::Running), false);
        assert_eq!(waiting.pending(), [2]);
        assert!(waiting.unfinished().contains("job 2 (g) running"));
        waiting.update(job(2, JobState::Cancelled), false);
        assert!(waiting.pending().is_empty());
        assert_eq!(waiting.exit_code(), ExitCode::from(1));
        let mut all_good = Waiting::new(&[4]);
        all_good.update(job(4, JobState::Succeeded), false);
        assert_eq!(all_good.exit_code(), ExitCode::SUCCESS);
    }

    #[test]
    fn an_ended_job_says_why_it_failed() {
        assert_eq!(
            ended_line(&job(3, JobState::Failed)),
            "job 3 (g) failed: 1 activity failed"
        );
        assert_eq!(
            ended_line(&job(3, JobState::Succeeded)),
            "job 3 (g) succeeded"
        );
    }
}
