//! The supervisor's tick: reaps the runners that ended and settles their
//! jobs as [`super::decide::settle`] says (ended, or resumed), then starts
//! queued jobs while slots are free.

use super::counts::{cancel_pending, ended_counts, last_run_status};
use super::decide::{self, Exit, Settlement, MAX_RESUMES};
use super::runner::{log_tail, progress_file, runner_log, spawn_runner, RunnerProcess};
use super::store::JobRow;
use super::supervisor::{State, Supervisor};
use crate::service::JobState;

impl Supervisor {
    /// One look at the jobs: reaps runners that ended, starts queued jobs
    /// while slots are free.
    pub(super) fn tick(&self) {
        let mut state = self.lock();
        if let Err(error) = self.tick_locked(&mut state) {
            eprintln!("job service: {error:#}");
        }
    }

    fn tick_locked(&self, state: &mut State) -> anyhow::Result<()> {
        let mut ended = Vec::new();
        for (&id, runner) in &mut state.runners {
            if let Some(exit) = runner.ended() {
                ended.push((id, exit));
            }
        }
        for (id, exit) in ended {
            state.runners.remove(&id);
            self.settle(state, id, exit)?;
        }
        if self.state_lost().is_some() {
            return Ok(());
        }
        while state.runners.len() < self.config.max_jobs {
            let Some(job) = state.store.next_to_start()? else {
                break;
            };
            self.launch(state, &job, false)?;
        }
        Ok(())
    }

    /// Job `id`'s runner ended (`exit`): sets the job's state, or resumes
    /// the job (at most [`MAX_RESUMES`] times) when its runner died before
    /// its run ended: killed by a signal, or a runner of a previous pool
    /// node that is gone.
    pub(super) fn settle(&self, state: &mut State, id: u64, exit: Exit) -> anyhow::Result<()> {
        let Some(job) = state.store.get(id)? else {
            return Ok(());
        };
        if job.state.is_final() {
            return Ok(());
        }
        let last_run = (!job.cancel_requested)
            .then(|| last_run_status(&job.journal))
            .flatten();
        let resumed = state.resumes.get(&id).copied().unwrap_or(0);
        match decide::settle(exit, last_run.as_deref(), job.cancel_requested, resumed) {
            Settlement::FinishCancel => self.finish_cancel(state, &job),
            Settlement::Succeeded => self.end(state, &job, JobState::Succeeded, None),
            Settlement::ActivitiesFailed => {
                let message = decide::failed_message(id, &ended_counts(&job));
                self.end(state, &job, JobState::Failed, Some(message))
            }
            Settlement::RunnerFailed { how } => {
                let message = format!("its runner {how}: {}", log_tail(&runner_log(&job)));
                self.end(state, &job, JobState::Failed, Some(message))
            }
            Settlement::GiveUp { why } => {
                let message = format!(
                    "{why}, and it was resumed {MAX_RESUMES} times already, the most a job is \
                     (its runner keeps dying: see {}; `constellation submit` it again once the \
                     cause is fixed): {}",
                    runner_log(&job).display(),
                    log_tail(&runner_log(&job))
                );
                self.end(state, &job, JobState::Failed, Some(message))
            }
            Settlement::Resume { why, attempt } => {
                state.resumes.insert(id, attempt);
                let resume = job.journal.exists();
                eprintln!(
                    "job {id} ({}): {why}; {} (resume {attempt} of at most {MAX_RESUMES})",
                    job.name,
                    if resume {
                        "resuming it"
                    } else {
                        "starting it again"
                    },
                );
                self.launch(state, &job, resume)
            }
        }
    }

    /// Ends job `job` as `end`, with `message`, and its counts as its
    /// journal has them.
    fn end(
        &self,
        state: &mut State,
        job: &JobRow,
        end: JobState,
        message: Option<String>,
    ) -> anyhow::Result<()> {
        let (id, counts) = (job.id, ended_counts(job));
        let _ = std::fs::remove_file(progress_file(job));
        state
            .store
            .set_ended(id, end, message.as_deref(), Some(&counts))?;
        match &message {
            Some(message) => eprintln!("job {id} ({}) {end}: {message}", job.name),
            None => eprintln!("job {id} ({}) {end}", job.name),
        }
        Ok(())
    }

    /// Ends a cancelled job whose runner is gone: what its journal still
    /// has pending is cancelled, and so is the job.
    pub(super) fn finish_cancel(&self, state: &mut State, job: &JobRow) -> anyhow::Result<()> {
        let message = decide::cancelled_message(cancel_pending(&job.journal));
        let _ = std::fs::remove_file(progress_file(job));
        let counts = ended_counts(job);
        (state.store).set_ended(job.id, JobState::Cancelled, Some(&message), Some(&counts))?;
        eprintln!("job {} ({}) {message}", job.id, job.name);
        Ok(())
    }

    /// Starts job `job`'s runner, resuming its journal with `resume`. A
    /// runner that cannot start fails the job; only the job journal's
    /// errors are errors.
    fn launch(&self, state: &mut State, job: &JobRow, resume: bool) -> anyhow::Result<()> {
        match spawn_runner(&self.config, job, resume) {
            Ok(child) => {
                let pid = child.id();
                state.store.set_running(job.id, pid)?;
                eprintln!(
                    "job {} ({}) {}: runner pid {pid}",
                    job.id,
                    job.name,
                    if resume { "resumed" } else { "started" }
                );
                state.runners.insert(
                    job.id,
                    RunnerProcess {
                        child: Some(child),
                        pid: Some(pid),
                        journal: job.journal.clone(),
                    },
                );
            }
            Err(error) => {
                let message = format!("its runner could not start: {error:#}");
                let counts = ended_counts(job);
                (state.store).set_ended(job.id, JobState::Failed, Some(&message), Some(&counts))?;
                eprintln!("job {} ({}) failed: {message}", job.id, job.name);
            }
        }
        Ok(())
    }
}
