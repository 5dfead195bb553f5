//! Shell activities: a command or script run as an activity.
//!
//! A [`ShellActivity`] runs its [`ShellSpec`] on whichever executor takes it,
//! then sends a [`ShellResult`] to its parent — success or not, so a parent
//! waiting for results never hangs on a failed command.
//!
//! - The command starts in a process group of its own, and in a cgroup v2
//!   of its own where this process may create one (else this process is a
//!   child subreaper that adopts the command's orphans; see
//!   [`ProcessTracking`]). When it exits, or its timeout passes, everything
//!   it started is killed, also what left its process group with `setsid`,
//!   so nothing it started in the background outlives the activity.
//! - Output goes to `stdout` and `stderr` files in a directory per activity
//!   (the default, under [`default_output_dir`]), to a few [`stream`] files
//!   shared by many commands, to memory up to a limit, or nowhere. A file
//!   the command wrote nothing to is removed when it ends
//!   ([`Output::Empty`]), and so is the activity's directory if that leaves
//!   it empty: commands that print nothing leave no files, and write no
//!   stream records.
//! - Failed attempts are retried as the [`RetryPolicy`] says.
//! - One that reports its starts ([`ShellActivity::report_starts`]) tells
//!   its parent of each attempt just before its command runs: a parent on
//!   another node then knows of every execution, also of one lost with its
//!   node, whose result never comes.
//! - While it runs, the command is registered by its process group, so a
//!   process told to stop can kill every command it started and start no
//!   more ([`kill_all_running`], [`stop_starting`]), and an agent can kill
//!   the commands of one runner's work and start none of it
//!   ([`cancel_origin`]).
//! - The command sees the executor's resources as environment variables,
//!   the way a batch job does: `CONSTELLATION_EXECUTOR` (the executor's
//!   index on its node), `CONSTELLATION_LABELS` (its contexts, comma
//!   separated), `CONSTELLATION_ACTIVITY`, `CONSTELLATION_ATTEMPT`, and
//!   whatever the executor was given, e.g. `CUDA_VISIBLE_DEVICES`; and
//!   [`TOKEN_VAR`], by which its orphans are known.
//!
//! ```no_run
//! use constellation::collect::SingleEventCollector;
//! use constellation::Pool;
//! use executors::shell::{ShellActivity, ShellResult, ShellSpec};
//! use std::time::Duration;
//!
//! let pool = Pool::builder().executors(2).start()?;
//! let (collector, results) = SingleEventCollector::new();
//! let parent = pool.submit(collector)?;
//! let spec = ShellSpec::script("gzip -c input.fits > input.fits.gz")
//!     .name("compress")
//!     .timeout(Duration::from_secs(600));
//! pool.submit(ShellActivity::new(spec).reply_to(parent))?;
//! let result: ShellResult = results.wait_one()?.take()?;
//! let result = result.check()?; // an error that names the command and its stderr file
//! println!("took {:?}, output in {:?}", result.duration, result.stdout.path());
//! pool.done()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

// The modules depend on each other one way, from the leaves up: `spec`,
// `launch`, `exit`, `spawn` and `running` need none of the others;
// `stream` (format, reader, writer, pump) needs `spec` and `exit`;
// `output` needs `stream`; `result` needs `output`; `tracking` needs
// `launch` and `exit`; `process` needs all of these; and this module puts
// them together as an activity.
mod exit;
mod launch;
mod mpi_program;
mod output;
mod process;
mod result;
mod running;
pub mod spawn;
mod spec;
pub mod stream;
mod tracking;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use constellation::{Activity, ActivityCx, ActivityId, ContextList, Event, Step};
use serde::{Deserialize, Serialize};

pub use mpi_program::{MpiLauncher, MpiProgram};
pub use output::Output;
pub use result::{
    AttemptRecord, ShellFailure, ShellOutcome, ShellReport, ShellResult, ShellStarted,
};
pub use running::{
    cancel_origin, kill_all_running, origin_cancelled, origin_text, parse_origin, restore_origin,
    running_count, running_from, stop_starting, stopped, waiting_to_retry, Cancelled,
};
pub use spec::{
    default_output_dir, output_folder_name, Capture, Program, RetryOn, RetryPolicy, ShellSpec,
    MAX_FOLDER_NAME, OUTPUT_DIR_VAR,
};
pub use stream::StreamPlace;
pub use tracking::{ProcessTracking, TOKEN_VAR, TRACKING_VAR};

/// Set once this process is being taken down around its activities, as
/// when a batch system cancels a pilot job: it signals every process of
/// the job, the commands included.
static PREEMPTED: AtomicBool = AtomicBool::new(false);

/// How long a command killed by a signal waits to learn whether its whole
/// process is being taken down: the batch system signals the command and
/// the agent at about the same moment, in no fixed order.
const PREEMPTION_GRACE: Duration = Duration::from_millis(500);

/// Marks this process as taken down (an agent's SIGTERM handler calls it;
/// it only stores to an atomic, so it is safe in a signal handler). From
/// then on a command that a signal kills is not reported as failed: the
/// activity stays unfinished, and when its node leaves, the node it came
/// from runs it again elsewhere, as for a node that died.
pub fn mark_preempted() {
    PREEMPTED.store(true, Ordering::SeqCst);
}

/// Whether [`mark_preempted`] was called.
pub fn preempted() -> bool {
    PREEMPTED.load(Ordering::SeqCst)
}

/// Whether a command that ended as `outcome` was killed because its whole
/// process is being taken down.
fn killed_by_preemption(outcome: &ShellOutcome) -> bool {
    if !matches!(outcome, ShellOutcome::Signalled { signal } if *signal == libc::SIGTERM || *signal == libc::SIGKILL)
    {
        return false;
    }
    let deadline = Instant::now() + PREEMPTION_GRACE;
    while !preempted() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    preempted()
}

/// An activity that runs a [`ShellSpec`] and reports a [`ShellResult`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShellActivity {
    spec: ShellSpec,
    parent: Option<ActivityId>,
    /// Whether the parent hears of each attempt as it starts
    /// ([`report_starts`](Self::report_starts)).
    #[serde(default)]
    report_starts: bool,
    /// Where a reporting activity stands between its calls: it announces
    /// an attempt, returns so that the announcement goes out, and starts
    /// the command when its own wake-up event comes back. Never sent
    /// anywhere: an activity that has started stays on its executor.
    #[serde(skip)]
    progress: Option<Box<Progress>>,
}

/// The attempts of a shell activity so far, kept between its calls.
#[derive(Debug, Clone)]
struct Progress {
    /// The attempt to run next.
    attempt: u32,
    /// The last attempt announced to the parent; 0 for none.
    announced: u32,
    /// Whether it holds its executor's start ([`running::claim_start`])
    /// from the announcement until its command starts.
    claimed: bool,
    /// Every attempt that ran, first to last.
    history: Vec<AttemptRecord>,
    /// The result so far, while a retry waits.
    last: Option<ShellResult>,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            attempt: 1,
            announced: 0,
            claimed: false,
            history: Vec::new(),
            last: None,
        }
    }
}

/// The event a reporting shell activity sends itself to be called again:
/// after announcing an attempt (it comes back once the call has returned,
/// and with it the announcement has gone out, so the command starts on the
/// next call), or to let an attempt announced on its executor start first.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct CallAgain;

impl ShellActivity {
    /// An activity running `spec`. Without [`reply_to`](Self::reply_to) the
    /// result is only logged.
    pub fn new(spec: ShellSpec) -> Self {
        ShellActivity {
            spec,
            parent: None,
            report_starts: false,
            progress: None,
        }
    }

    /// Sends the [`ShellResult`] to `parent` when the command is done.
    pub fn reply_to(mut self, parent: ActivityId) -> Self {
        self.parent = Some(parent);
        self
    }

    /// Tells the parent of each attempt just before its command starts,
    /// with a [`ShellStarted`], and sends everything to the parent as a
    /// [`ShellReport`] (the result too), so that a parent on another node
    /// knows of every execution, also of one lost with its node.
    ///
    /// An event goes out only when the call that sends it returns, so
    /// each attempt costs one more call: the activity announces it,
    /// returns, and runs it when its own wake-up event arrives, on the
    /// same executor. Meanwhile that executor may take up other work
    /// (an activity that came from another node has its events delivered
    /// after the executor looked for its next call): a reporting activity
    /// that finds an attempt announced on its executor waits for it to
    /// start, so each announcement is followed by its command at once,
    /// and an announced attempt that never started is rare. The one
    /// waiting stays on that executor: at most one activity per executor
    /// is held back this way, as a prefetch.
    ///
    /// For work spread over a pool; a local run of many short commands
    /// has no node to lose, and leaves it off.
    pub fn report_starts(mut self) -> Self {
        self.report_starts = true;
        self
    }

    /// The command this activity runs.
    pub fn spec(&self) -> &ShellSpec {
        &self.spec
    }

    /// Runs every attempt the retry policy allows, on the calling thread.
    /// No command runs once this process stopped starting them
    /// ([`stop_starting`]) or the activity's origin was cancelled
    /// ([`cancel_origin`]); after either, an attempt that ended is not
    /// retried, and its result is the last. A reporting activity returns
    /// [`Ran::Later`] before each attempt, and goes on from there on its
    /// next call.
    fn run(&mut self, cx: &mut ActivityCx<'_>) -> Ran {
        let activity = cx.id();
        let labels = cx.executor_context().label_list();
        let mut env = executor_env(cx, activity, &labels);
        let mut progress = self.progress.take().map(|p| *p).unwrap_or_default();
        let executor = (cx.node(), cx.executor_index());
        if progress.claimed {
            // Announced in the last call: it starts now, or never.
            running::release_start(executor);
        }
        loop {
            if let Some(refusal) = running::refusal(Some(activity)) {
                return Ran::refused(progress.last, refusal);
            }
            if let (true, Some(parent), true) = (
                self.report_starts,
                self.parent,
                progress.announced < progress.attempt,
            ) {
                return self.announce(cx, parent, labels, progress);
            }
            let attempt = progress.attempt;
            progress.announced = attempt;
            let done = self.run_attempt(activity, attempt, &mut env);
            if let Some(refusal) = never_started(&done.outcome) {
                return Ran::refused(progress.last, refusal);
            }
            progress.history.push(attempt_record(attempt, &done));
            if !self.retries_after(activity, attempt, &done.outcome) {
                let result = self.result(cx, &labels, done, attempt, progress.history);
                return Ran::Done(Box::new(result));
            }
            let outcome = done.outcome.clone();
            let history = progress.history.clone();
            progress.last = Some(self.result(cx, &labels, done, attempt, history));
            progress.attempt += 1;
            if !self.pause_before_retry(activity, progress.attempt, &outcome) {
                return Ran::refused(progress.last, running::Refusal::Stopping);
            }
        }
    }

    /// Tells `parent` that attempt `progress.attempt` is about to start,
    /// once this executor's start is claimed, and asks to be called again
    /// to run it; without the claim (another activity announced an
    /// attempt here and has not started it, so that one runs first) it
    /// only asks to be called again.
    fn announce(
        &mut self,
        cx: &mut ActivityCx<'_>,
        parent: ActivityId,
        labels: String,
        progress: Progress,
    ) -> Ran {
        let activity = cx.id();
        let claimed = running::claim_start((cx.node(), cx.executor_index()));
        cx.send(activity, CallAgain);
        if !claimed {
            self.progress = Some(Box::new(Progress {
                claimed,
                ..progress
            }));
            return Ran::Later;
        }
        let started = ShellStarted {
            activity,
            name: self.spec.name.clone(),
            attempt: progress.attempt,
            node: cx.node(),
            host: crate::probe::host_name().to_string(),
            executor: cx.executor_index(),
            labels,
            started: std::time::SystemTime::now(),
        };
        cx.send(parent, ShellReport::Started(started));
        self.progress = Some(Box::new(Progress {
            announced: progress.attempt,
            claimed,
            ..progress
        }));
        Ran::Later
    }

    /// Runs attempt `attempt` once, with `env` and the attempt's number in
    /// its environment, its output where the spec's capture says.
    fn run_attempt(
        &self,
        activity: ActivityId,
        attempt: u32,
        env: &mut Vec<(String, String)>,
    ) -> process::Attempt {
        let spec = &self.spec;
        let files = match &spec.capture {
            Capture::Files { dir } => output_files(spec, dir, activity, attempt).map(Some),
            _ => Ok(None),
        };
        env.push(("CONSTELLATION_ATTEMPT".to_string(), attempt.to_string()));
        let done = match files {
            Ok(Some(files)) => {
                process::run_once(activity, spec, env, process::Destination::Files(&files))
            }
            Ok(None) if matches!(spec.capture, Capture::Stream { .. }) => {
                let id;
                let name = match &spec.name {
                    Some(name) => name.as_str(),
                    None => {
                        id = activity.to_string();
                        &id
                    }
                };
                let destination = process::Destination::Stream { name, attempt };
                process::run_once(activity, spec, env, destination)
            }
            Ok(None) => process::run_once(activity, spec, env, process::Destination::Unprepared),
            Err(reason) => process::Attempt {
                outcome: ShellOutcome::StartFailed { reason },
                started: std::time::SystemTime::now(),
                duration: Default::default(),
                cpu: None,
                stdout: Output::Discarded,
                stderr: Output::Discarded,
            },
        };
        env.pop();
        done
    }

    /// Whether attempt `attempt`, which ended as `outcome`, is followed by
    /// another: the retry policy allows one, and nothing stopped the work.
    fn retries_after(&self, activity: ActivityId, attempt: u32, outcome: &ShellOutcome) -> bool {
        let retry = &self.spec.retry;
        attempt < retry.max_attempts
            && running::refusal(Some(activity)).is_none()
            && match (outcome, retry.retry_on) {
                (ShellOutcome::Exited { code: 0 }, _) => false,
                (_, RetryOn::AnyFailure) => true,
                (ShellOutcome::TimedOut { .. } | ShellOutcome::Signalled { .. }, _) => true,
                (_, RetryOn::TimeoutOrSignal) => false,
            }
    }

    /// Waits as the retry policy says before attempt `next`, the last
    /// having ended as `outcome`; false if this process stopped starting
    /// commands meanwhile.
    fn pause_before_retry(&self, activity: ActivityId, next: u32, outcome: &ShellOutcome) -> bool {
        let spec = &self.spec;
        let pause = spec.retry.delay_before(next);
        tracing::warn!(
            activity = %activity,
            command = %spec.program.describe(),
            outcome = %outcome,
            "attempt {} of {} failed; retrying in {pause:?}",
            next - 1,
            spec.retry.max_attempts
        );
        running::pause_before_retry(activity, pause)
    }

    /// The result whose last attempt, number `attempt`, ended as `done`.
    fn result(
        &self,
        cx: &ActivityCx<'_>,
        labels: &str,
        done: process::Attempt,
        attempt: u32,
        history: Vec<AttemptRecord>,
    ) -> ShellResult {
        let activity = cx.id();
        // Read when the attempt has ended: a command killed by the cancel
        // sees it, and so does one that ended by itself as the cancel came.
        let cancelled = running::origin_cancelled(activity.origin()).then(|| {
            format!(
                "cancelled: the work of node {} (the run that created it) was cancelled here",
                activity.origin()
            )
        });
        ShellResult {
            activity,
            name: self.spec.name.clone(),
            command: self.spec.program.describe(),
            outcome: done.outcome,
            attempts: attempt,
            duration: done.duration,
            stdout: done.stdout,
            stderr: done.stderr,
            executor_labels: labels.to_string(),
            node: cx.node(),
            host: crate::probe::host_name().to_string(),
            executor: cx.executor_index(),
            history,
            cancelled,
        }
    }
}

/// How [`ShellActivity::run`] ended.
enum Ran {
    /// With this result, to report: the last attempt's.
    Done(Box<ShellResult>),
    /// Before an attempt, which it announced to its parent, or which waits
    /// for one announced on its executor to start: it goes on in the next
    /// call.
    Later,
    /// Without running a command: this process stopped starting them.
    Stopping,
    /// Without running a command: the work of the activity's origin was
    /// cancelled.
    Cancelled,
}

impl Ran {
    /// The end of a run that stops now, for `refusal`: with the last
    /// result if an attempt ran, else [`Ran::Stopping`] or
    /// [`Ran::Cancelled`]. A result taken before a cancel is marked as
    /// cancelled if the cancel has come since.
    fn refused(last: Option<ShellResult>, refusal: running::Refusal) -> Ran {
        match last {
            Some(mut result) => {
                if result.cancelled.is_none() && running::origin_cancelled(result.activity.origin())
                {
                    result.cancelled = Some(format!(
                        "cancelled: the work of node {} (the run that created it) was cancelled \
                         here while it waited to retry",
                        result.activity.origin()
                    ));
                }
                Ran::Done(Box::new(result))
            }
            None => match refusal {
                running::Refusal::Stopping => Ran::Stopping,
                running::Refusal::Cancelled => Ran::Cancelled,
            },
        }
    }
}

/// The environment an executor gives its commands: its resources'
/// variables, then its index, its `labels` and the `activity`.
fn executor_env(cx: &ActivityCx<'_>, activity: ActivityId, labels: &str) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = cx
        .resources()
        .env()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    env.push((
        "CONSTELLATION_EXECUTOR".to_string(),
        cx.executor_index().to_string(),
    ));
    env.push(("CONSTELLATION_LABELS".to_string(), labels.to_string()));
    env.push(("CONSTELLATION_ACTIVITY".to_string(), activity.to_string()));
    env
}

/// Why an attempt that ended as `outcome` never started, if it was
/// refused: this process stopped starting commands, or the activity's
/// origin was cancelled. Such an attempt is not counted.
fn never_started(outcome: &ShellOutcome) -> Option<running::Refusal> {
    match outcome {
        ShellOutcome::StartFailed { reason } if reason == process::STOPPING => {
            Some(running::Refusal::Stopping)
        }
        ShellOutcome::StartFailed { reason } if reason == process::CANCELLED => {
            Some(running::Refusal::Cancelled)
        }
        _ => None,
    }
}

/// The journal's record of attempt `attempt`, which ended as `done`.
fn attempt_record(attempt: u32, done: &process::Attempt) -> AttemptRecord {
    AttemptRecord {
        attempt,
        started: done.started,
        duration: done.duration,
        outcome: done.outcome.clone(),
        cpu: done.cpu,
        stdout: done.stdout.path().cloned(),
        stderr: done.stderr.path().cloned(),
        stdout_bytes: done.stdout.bytes(),
        stderr_bytes: done.stderr.bytes(),
        stream: (done.stdout.stream_place())
            .or(done.stderr.stream_place())
            .cloned(),
    }
}

/// Creates the activity's output directory and names the attempt's files:
/// `stdout` and `stderr` for the first attempt, `stdout.N` and `stderr.N`
/// for attempt N, so a retry keeps the evidence of the failure before it.
fn output_files(
    spec: &ShellSpec,
    root: &std::path::Path,
    activity: ActivityId,
    attempt: u32,
) -> Result<output::OutputFiles, String> {
    output::OutputFiles::prepare(spec.output_dir_for(root, &activity.to_string()), attempt)
}

#[typetag::serde]
impl Activity for ShellActivity {
    fn context(&self) -> ContextList {
        self.spec.context.clone()
    }

    fn restartable(&self) -> bool {
        self.spec.restartable
    }

    fn initialize(&mut self, cx: &mut ActivityCx<'_>) -> Step {
        self.step(cx)
    }

    fn process(&mut self, cx: &mut ActivityCx<'_>, event: Event) -> Step {
        if self.progress.is_some() {
            if event.source == cx.id() && event.take::<CallAgain>().is_ok() {
                return self.step(cx);
            }
            // Its own wake-up event is on its way: nothing else may start
            // or end it meanwhile.
            return Step::Suspend;
        }
        // Nothing else sends a shell activity events; one that arrives
        // anyway does not restart the command.
        Step::Finish
    }
}

impl ShellActivity {
    /// One call: runs the command (or, for a reporting activity, its next
    /// attempt), and reports the result.
    fn step(&mut self, cx: &mut ActivityCx<'_>) -> Step {
        let result = match self.run(cx) {
            Ran::Done(result) => *result,
            Ran::Later => return Step::Suspend,
            Ran::Stopping => {
                // This process stopped starting commands: the activity
                // stays unfinished, to run when the work is resumed.
                tracing::debug!(command = %self.spec.program.describe(), "not started: this process is stopping");
                return Step::Suspend;
            }
            Ran::Cancelled => {
                // Its origin's work was cancelled: it ends here, never
                // having run, and tells nobody. Its parent is a stopping
                // runner, which keeps it pending, or gone.
                tracing::info!(
                    activity = %cx.id(),
                    command = %self.spec.program.describe(),
                    "not started: the work of node {} was cancelled",
                    cx.id().origin()
                );
                return Step::Finish;
            }
        };
        if result.cancelled.is_none() && killed_by_preemption(&result.outcome) {
            tracing::warn!(command = %self.spec.program.describe(), "killed as this node is taken down; it will run again elsewhere");
            // Never finishes here: no result, no `Finished` notice. A
            // parent told of its start learns of its loss when this node
            // leaves.
            return Step::Suspend;
        }
        match self.parent {
            Some(parent) if self.report_starts => {
                cx.send(parent, ShellReport::Ended(Box::new(result)))
            }
            Some(parent) => cx.send(parent, result),
            None if result.is_success() => {}
            None => tracing::error!("{}", ShellFailure(Box::new(result))),
        }
        Step::Finish
    }
}
