//! The job service's answers to requests: `submit` (checked and stored
//! queued), `job` and `cancel`. Which way a cancel goes is decided in
//! [`super::decide::cancel`]; this carries it out.

use std::sync::atomic::Ordering;

use super::counts::counts_of;
use super::decide::{self, CancelStep};
use super::intake::{check_submission, IncomingFiles};
use super::runner::signal;
use super::store::JobRow;
use super::supervisor::Supervisor;
use crate::service::{JobState, JobSubmission};

impl Supervisor {
    pub(super) fn job(&self, id: u64) -> Result<JobRow, String> {
        (self.lock().store.get(id).map_err(text)?)
            .ok_or_else(|| format!("no job {id} in this pool"))
    }

    /// Why the service takes no more jobs, when its state directory is no
    /// longer the one it started on (removed, or replaced): it is not
    /// made again, since a new job journal would give ids that its
    /// users' scripts, and any `jobs/ID` folder made since, already use.
    pub(super) fn state_lost(&self) -> Option<String> {
        let state_dir = &self.config.state_dir;
        if self.state_identity.still_at(state_dir) {
            return None;
        }
        let message = format!(
            "the pool's state directory {} was removed or replaced while the pool node ran; \
             it is not made again (it held the job journal). No job starts and submits are \
             refused: stop this pool node and start it again",
            state_dir.display()
        );
        if !self.state_lost.swap(true, Ordering::SeqCst) {
            eprintln!("error: {message}");
        }
        Some(message)
    }

    /// Checks a submission, keeps its files in the job's folder and
    /// stores it, queued. A submit token seen before gets its job back.
    pub(super) fn submit(&self, job: JobSubmission) -> Result<u64, String> {
        if let Some(lost) = self.state_lost() {
            return Err(lost);
        }
        if let Some(id) = self.job_with_token(&job)? {
            return Ok(id);
        }
        let name = match job.name.as_deref().map(str::trim) {
            Some(name) if !name.is_empty() => name.to_string(),
            _ => (job.graph.file_stem())
                .map_or("job".into(), |stem| stem.to_string_lossy().into_owned()),
        };
        crate::service::check_job_name(&name)?;
        let incoming = IncomingFiles::new(&self.config.state_dir.join("jobs"))?;
        let (job, activities) = check_submission(job, &incoming)?;
        let mut state = self.lock();
        // Asked again under the lock: a retry may have come in meanwhile.
        if let Some(id) = (job.token.as_deref())
            .map(|token| state.store.job_with_token(token))
            .transpose()
            .map_err(text)?
            .flatten()
        {
            return Ok(id);
        }
        let jobs = self.config.state_dir.join("jobs");
        let id = (state.store)
            .submit(&job, &name, activities, |id| {
                incoming.place(&jobs.join(id.to_string()))
            })
            .map_err(text)?;
        drop(state);
        eprintln!(
            "job {id} ({}) submitted by {}: {}",
            clitools::printable(&name),
            clitools::printable(&job.submitter),
            job.graph.display()
        );
        self.wake();
        Ok(id)
    }

    /// The job a submission's token made before, if any.
    fn job_with_token(&self, job: &JobSubmission) -> Result<Option<u64>, String> {
        match &job.token {
            Some(token) => self.lock().store.job_with_token(token).map_err(text),
            None => Ok(None),
        }
    }

    /// Cancels job `id`: a queued one at once, a running one by SIGINT to
    /// its runner (the thread finishes the cancel once it has exited).
    pub(super) fn cancel(&self, id: u64) -> Result<JobRow, String> {
        let mut state = self.lock();
        let job = (state.store.get(id).map_err(text)?)
            .ok_or_else(|| format!("no job {id} in this pool"))?;
        let runner = state.runners.get(&id).map(|runner| runner.pid);
        let step = decide::cancel(job.state, runner);
        if let CancelStep::Refuse(done) = step {
            return Err(format!("job {id} has already ended: {done}"));
        }
        if step == CancelStep::EndQueued {
            let counts = counts_of(&job);
            (state.store)
                .set_ended(
                    id,
                    JobState::Cancelled,
                    Some("cancelled before it started"),
                    Some(&counts),
                )
                .map_err(text)?;
            eprintln!("job {id} ({}) cancelled before it started", job.name);
            drop(state);
            return self.job(id);
        }
        state.store.set_cancel_requested(id).map_err(text)?;
        match step {
            CancelStep::SignalRunner(pid) => {
                eprintln!(
                    "job {id} ({}) cancelled: stopping its runner (pid {pid})",
                    job.name
                );
                signal(pid, libc::SIGINT);
            }
            CancelStep::AwaitRunner => eprintln!(
                "job {id} ({}) cancelled; its runner's pid is unknown, \
                 so it is cancelled once the runner ends",
                job.name
            ),
            _ => {
                let job = (state.store.get(id).map_err(text)?).unwrap_or(job);
                self.finish_cancel(&mut state, &job).map_err(text)?;
            }
        }
        self.wake();
        drop(state);
        self.job(id)
    }
}

/// An error as a request's refusal, in words.
pub(super) fn text(error: anyhow::Error) -> String {
    format!("{error:#}")
}
