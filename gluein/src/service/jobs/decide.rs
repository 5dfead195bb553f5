//! The job service's decisions, apart from their effects: what becomes of
//! a job whose runner ended, and what a cancel does, from what is known of
//! the job and its runner. Nothing here starts, signals or reads anything;
//! the supervisor ([`super::supervise`]) gathers the facts and carries the
//! decisions out.

use std::process::ExitStatus;

use crate::service::{JobCounts, JobState};

/// How many times a job whose runner died before its run ended is
/// resumed, in the life of one pool node, before it fails instead: a
/// runner that keeps dying (a graph that exhausts the machine) is not
/// restarted forever.
pub const MAX_RESUMES: u32 = 3;

/// How a runner ended.
#[derive(Debug, Clone, Copy)]
pub(super) enum Exit {
    /// With this status: a runner this pool node started.
    Status(ExitStatus),
    /// Unknown: a runner a previous pool node started, or one not found
    /// at a restart. Its run journal tells how the run went.
    Unseen,
}

/// What becomes of a job whose runner ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Settlement {
    /// A cancel was asked for: the job ends cancelled.
    FinishCancel,
    /// The run succeeded.
    Succeeded,
    /// The run ended with failed activities: the job failed.
    ActivitiesFailed,
    /// The runner failed by itself, as `how` says (its log tells why): the
    /// job failed.
    RunnerFailed {
        /// The exit status in words ([`describe`]).
        how: String,
    },
    /// The runner died before its run ended (`why`): the job goes on from
    /// its journal, for the `attempt`th time.
    Resume {
        /// Why, in words.
        why: String,
        /// Which resume this is, from 1 to [`MAX_RESUMES`].
        attempt: u32,
    },
    /// As [`Settlement::Resume`], but the job was resumed
    /// [`MAX_RESUMES`] times already: it fails instead.
    GiveUp {
        /// Why its runner ended, in words.
        why: String,
    },
}

/// What becomes of a job whose runner ended as `exit`, whose run
/// journal's last run stands as `last_run` (`succeeded`, `failed`,
/// `interrupted`, `running`, or none), for which a cancel was asked with
/// `cancel_requested`, and that was `resumed` times already.
pub(super) fn settle(
    exit: Exit,
    last_run: Option<&str>,
    cancel_requested: bool,
    resumed: u32,
) -> Settlement {
    if cancel_requested {
        return Settlement::FinishCancel;
    }
    let why = match exit {
        Exit::Status(exit) if exit.success() => return Settlement::Succeeded,
        Exit::Status(exit) if exit.code() == Some(1) && last_run == Some("failed") => {
            return Settlement::ActivitiesFailed;
        }
        // Killed by a signal before its run ended: not the runner's own
        // verdict on the job, so the job goes on from its journal.
        Exit::Status(exit) if exit.code().is_none() && !run_ended(last_run) => {
            format!("its runner {}", describe(exit))
        }
        Exit::Status(exit) => {
            return Settlement::RunnerFailed {
                how: describe(exit),
            }
        }
        Exit::Unseen => match last_run {
            Some("succeeded") => return Settlement::Succeeded,
            Some("failed") => return Settlement::ActivitiesFailed,
            // Interrupted, or killed mid-run: what did not finish runs
            // again (at-least-once).
            _ => "its runner is gone".to_string(),
        },
    };
    if resumed >= MAX_RESUMES {
        Settlement::GiveUp { why }
    } else {
        Settlement::Resume {
            why,
            attempt: resumed + 1,
        }
    }
}

/// What a cancel of a job does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum CancelStep {
    /// A queued job: it ends cancelled at once, and never starts.
    EndQueued,
    /// A running job whose runner has this pid: SIGINT to it; the cancel
    /// finishes once it has exited.
    SignalRunner(u32),
    /// A running job whose runner's pid is unknown (its lock file did not
    /// tell): the cancel finishes when the runner ends.
    AwaitRunner,
    /// A running job with no runner: the cancel finishes now.
    FinishNow,
    /// A job that has ended already: nothing to cancel.
    Refuse(JobState),
}

/// What a cancel of a job in `state` does, whose runner is `runner`: none,
/// or one whose pid is known or not.
pub(super) fn cancel(state: JobState, runner: Option<Option<u32>>) -> CancelStep {
    match (state, runner) {
        (JobState::Queued, _) => CancelStep::EndQueued,
        (JobState::Running, Some(Some(pid))) => CancelStep::SignalRunner(pid),
        (JobState::Running, Some(None)) => CancelStep::AwaitRunner,
        (JobState::Running, None) => CancelStep::FinishNow,
        (done, _) => CancelStep::Refuse(done),
    }
}

/// Whether a run journal's last run `status` says the run ended by
/// itself: its runner's verdict stands, however the runner then exited.
fn run_ended(status: Option<&str>) -> bool {
    matches!(status, Some("succeeded" | "failed"))
}

/// An exit status in words.
pub(super) fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => status.to_string(),
    }
}

/// The message of job `id` whose run ended with failed activities.
pub(super) fn failed_message(id: u64, counts: &JobCounts) -> String {
    format!(
        "{} activit{} failed, {} cancelled; see `constellation job {id}`",
        counts.failed,
        if counts.failed == 1 { "y" } else { "ies" },
        counts.cancelled
    )
}

/// The message of a cancelled job whose journal's unfinished activities
/// were marked (`marked`: how many, or why they could not be).
pub(super) fn cancelled_message(marked: anyhow::Result<usize>) -> String {
    match marked {
        Ok(0) => "cancelled".to_string(),
        Ok(n) => format!(
            "cancelled; {n} unfinished activit{} cancelled with it",
            if n == 1 { "y" } else { "ies" }
        ),
        Err(error) => format!(
            "cancelled, but its journal's unfinished activities could not be marked: {error:#}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt as _;

    fn exited(code: i32) -> Exit {
        Exit::Status(ExitStatus::from_raw(code << 8))
    }

    fn killed(signal: i32) -> Exit {
        Exit::Status(ExitStatus::from_raw(signal))
    }

    #[test]
    fn a_cancel_asked_for_decides_whatever_the_runner_did() {
        for exit in [exited(0), exited(1), killed(9), Exit::Unseen] {
            assert_eq!(settle(exit, None, true, 0), Settlement::FinishCancel);
        }
    }

    #[test]
    fn a_runner_that_exits_by_itself_gives_its_verdict() {
        assert_eq!(settle(exited(0), None, false, 0), Settlement::Succeeded);
        assert_eq!(
            settle(exited(1), Some("failed"), false, 0),
            Settlement::ActivitiesFailed
        );
        assert_eq!(
            settle(exited(2), Some("running"), false, 0),
            Settlement::RunnerFailed {
                how: "exited with status 2".to_string()
            }
        );
        // Killed after its run ended: its run's verdict stands.
        assert_eq!(
            settle(killed(9), Some("failed"), false, 0),
            Settlement::RunnerFailed {
                how: "was killed by signal 9".to_string()
            }
        );
    }

    #[test]
    fn a_runner_killed_mid_run_is_resumed_at_most_max_resumes_times() {
        let why = "its runner was killed by signal 9".to_string();
        for resumed in 0..MAX_RESUMES {
            assert_eq!(
                settle(killed(9), Some("running"), false, resumed),
                Settlement::Resume {
                    why: why.clone(),
                    attempt: resumed + 1
                }
            );
        }
        assert_eq!(
            settle(killed(9), None, false, MAX_RESUMES),
            Settlement::GiveUp { why }
        );
    }

    #[test]
    fn an_unseen_runner_is_judged_by_its_journal() {
        assert_eq!(
            settle(Exit::Unseen, Some("succeeded"), false, 0),
            Settlement::Succeeded
        );
        assert_eq!(
            settle(Exit::Unseen, Some("failed"), false, 0),
            Settlement::ActivitiesFailed
        );
        for last_run in [None, Some("interrupted"), Some("running")] {
            assert_eq!(
                settle(Exit::Unseen, last_run, false, 1),
                Settlement::Resume {
                    why: "its runner is gone".to_string(),
                    attempt: 2
                }
            );
        }
    }

    #[test]
    fn a_cancel_acts_by_the_job_state_and_its_runner() {
        assert_eq!(cancel(JobState::Queued, None), CancelStep::EndQueued);
        assert_eq!(
            cancel(JobState::Running, Some(Some(42))),
            CancelStep::SignalRunner(42)
        );
        assert_eq!(
            cancel(JobState::Running, Some(None)),
            CancelStep::AwaitRunner
        );
        assert_eq!(cancel(JobState::Running, None), CancelStep::FinishNow);
        assert_eq!(
            cancel(JobState::Succeeded, None),
            CancelStep::Refuse(JobState::Succeeded)
        );
    }

    #[test]
    fn messages_count_in_words() {
        let counts = JobCounts {
            failed: 1,
            cancelled: 2,
            ..JobCounts::default()
        };
        assert_eq!(
            failed_message(7, &counts),
            "1 activity failed, 2 cancelled; see `constellation job 7`"
        );
        assert_eq!(cancelled_message(Ok(0)), "cancelled");
        assert_eq!(
            cancelled_message(Ok(3)),
            "cancelled; 3 unfinished activities cancelled with it"
        );
    }
}
