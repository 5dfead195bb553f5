//! Recovery after a restart: a pool node started again on a state
//! directory finds jobs `running` in the job journal. A job whose runner
//! still runs is adopted (the supervisor waits for it); a job whose runner
//! is gone is settled as [`super::decide::settle`] says for a runner not
//! seen to end: ended from its journal, or resumed.

use super::decide::Exit;
use super::runner::{live_runner, RunnerProcess};
use super::supervisor::Supervisor;

impl Supervisor {
    /// After a restart: adopts the runners that still run, and settles or
    /// restarts the jobs whose runner is gone.
    pub(super) fn recover(&self) -> anyhow::Result<()> {
        let mut state = self.lock();
        for job in state.store.running()? {
            if let Some(pid) = live_runner(&job) {
                let whose = pid.map_or(String::new(), |pid| format!(" (pid {pid})"));
                eprintln!(
                    "job {} ({}): its runner{whose} still runs; waiting for it",
                    job.id, job.name
                );
                state.runners.insert(
                    job.id,
                    RunnerProcess {
                        child: None,
                        pid,
                        journal: job.journal.clone(),
                    },
                );
            } else {
                self.settle(&mut state, job.id, Exit::Unseen)?;
            }
        }
        Ok(())
    }
}
