//! The job service: answers `submit`, `jobs`, `job` and `cancel`, and
//! starts and watches each job's runner.
//!
//! A thread looks at the jobs every [`TICK`] (and at once after a submit
//! or a cancel): it starts queued jobs while fewer than `max_jobs` run,
//! highest priority first, then in submit order; it reaps runners that
//! ended and sets their job's state from the exit status and the run
//! journal's last run.
//!
//! A pool node killed and started again finds jobs `running` in the job
//! journal ([`JobService::start`]). A job whose runner still runs (it
//! holds its run journal's lock, or its process is still there) is
//! adopted: the service waits for the lock to be free, then reads how the
//! run ended. A job whose runner is gone is resumed (`run --resume`), or
//! started afresh if it never wrote a journal. So is a job whose runner
//! this pool node started and that was killed by a signal (`kill -9`, the
//! OOM killer) before its run ended: at most [`MAX_RESUMES`] times in the
//! pool node's life, after which the job fails with the reason. A runner
//! that exits by itself, with a failure status, fails its job. A clean stop
//! ([`JobService::stop`]) sends SIGTERM to the runners, which journal
//! their run as interrupted, and leaves their jobs `running`: the next
//! start resumes them.
//!
//! This module holds the service's handle ([`JobService`]), what its
//! handle, request handlers and thread share (`Supervisor`), the thread
//! itself and the service's lock on the state directory. What becomes of
//! a job is decided in `decide`, without processes; `supervise` (the tick),
//! `recovery` (after a restart) and `handlers` (requests) carry the
//! decisions out, through `runner` for everything done to a runner.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use trust::lock::{LockError, LockFile};

use super::counts::summary;
use super::handlers::text;
use super::intake::IncomingFiles;
use super::runner::{signal, RunnerProcess};
use super::store::JobStore;
use crate::service::{ServiceRequest, ServiceResponse};

pub use super::decide::MAX_RESUMES;

/// How often the supervisor looks at its jobs when nothing pokes it.
pub const TICK: Duration = Duration::from_millis(200);

/// `pool start --max-jobs`'s default: jobs whose runners run at once.
pub const DEFAULT_MAX_JOBS: usize = 4;

/// How long a job's runner waits for a pool node that is gone (`run
/// --reconnect`): a pool node killed and started again within it finds
/// the runner still there, and its work still going.
pub const RUNNER_RECONNECT: &str = "10m";

/// The message of every activity a cancel leaves unfinished.
pub const CANCELLED_ACTIVITY: &str = "job cancelled";

/// What the job service needs to know of its pool node.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// The pool's state directory, absolute: `jobs.db` and `jobs/ID/`.
    pub state_dir: PathBuf,
    /// The pool file, absolute: runners join the pool with it, from the
    /// submitter's working directory.
    pub pool_file: PathBuf,
    /// How many jobs' runners run at once.
    pub max_jobs: usize,
    /// The runner program: this `constellation` binary.
    pub program: PathBuf,
    /// Arguments before the runner's `run`: none for `constellation`
    /// (a wrapper, such as a shell running a script, takes its own).
    pub program_args: Vec<OsString>,
}

impl ServiceConfig {
    /// The service of a pool node with `state_dir` and `pool_file` (made
    /// absolute here: runners start elsewhere), whose runners are this
    /// very binary.
    pub fn new(state_dir: &Path, pool_file: &Path, max_jobs: usize) -> anyhow::Result<Self> {
        let absolute = |path: &Path| {
            std::path::absolute(path)
                .with_context(|| format!("cannot make {} absolute", path.display()))
        };
        Ok(ServiceConfig {
            state_dir: absolute(state_dir)?,
            pool_file: absolute(pool_file)?,
            max_jobs,
            program: std::env::current_exe()
                .context("cannot find this program, to start job runners with")?,
            program_args: Vec::new(),
        })
    }
}

/// The job service of a pool node; see the module's documentation.
pub struct JobService {
    supervisor: Arc<Supervisor>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// The job service's insides, which its handle ([`JobService`]), its
/// request handlers and its supervisor thread share.
pub(super) struct Supervisor {
    pub(super) config: ServiceConfig,
    /// The exclusive lock on `STATE/jobs.db.lock`, held while the service
    /// lives: two pool nodes on one state directory (each with its own
    /// pool file) would start every job twice.
    pub(super) _owner: LockFile,
    /// The state directory as it was at the start: one removed or
    /// replaced under the running service is told by it.
    pub(super) state_identity: trust::Identity,
    /// Set once the state directory is found gone, so that it is said
    /// once.
    pub(super) state_lost: AtomicBool,
    pub(super) state: Mutex<State>,
    /// Set by a submit or a cancel, so that the thread acts at once.
    pub(super) poked: Mutex<bool>,
    pub(super) poke: Condvar,
    pub(super) stopping: AtomicBool,
}

/// The jobs and their runners, under one lock: whoever changes a job's
/// state also knows its runner.
pub(super) struct State {
    pub(super) store: JobStore,
    /// The runners of running jobs, by job id.
    pub(super) runners: HashMap<u64, RunnerProcess>,
    /// How often each job was resumed after its runner died, in this pool
    /// node's life (at most [`MAX_RESUMES`]).
    pub(super) resumes: HashMap<u64, u32>,
}

impl JobService {
    /// Opens the job journal in the state directory, takes over the jobs
    /// a previous pool node left running (see the module's
    /// documentation), and starts the supervisor thread.
    pub fn start(config: ServiceConfig) -> anyhow::Result<JobService> {
        let state_identity = trust::Identity::of(&config.state_dir).with_context(|| {
            format!(
                "cannot use the state directory {}",
                config.state_dir.display()
            )
        })?;
        let jobs_dir = config.state_dir.join("jobs");
        trust::create_dir(&jobs_dir, 0o700)
            .map_err(crate::poolfile::trusted_error)
            .with_context(|| format!("cannot use {}", jobs_dir.display()))?;
        let owner = claim_state_dir(&config.state_dir)?;
        IncomingFiles::remove_stale(&jobs_dir);
        let store = JobStore::open(&config.state_dir)?;
        let supervisor = Arc::new(Supervisor {
            config,
            _owner: owner,
            state_identity,
            state_lost: AtomicBool::new(false),
            state: Mutex::new(State {
                store,
                runners: HashMap::new(),
                resumes: HashMap::new(),
            }),
            poked: Mutex::new(false),
            poke: Condvar::new(),
            stopping: AtomicBool::new(false),
        });
        supervisor.recover()?;
        let worker = Arc::clone(&supervisor);
        let thread = std::thread::Builder::new()
            .name("job-supervisor".to_string())
            .spawn(move || {
                while !worker.stopping.load(Ordering::SeqCst) {
                    worker.tick();
                    worker.nap();
                }
            })
            .context("cannot start the job supervisor's thread")?;
        Ok(JobService {
            supervisor,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Answers one service request; a refusal says why in words.
    pub fn handle(&self, request: ServiceRequest) -> Result<ServiceResponse, String> {
        if self.supervisor.stopping.load(Ordering::SeqCst) {
            return Err("the pool node is stopping".to_string());
        }
        let supervisor = &self.supervisor;
        match request {
            ServiceRequest::Submit(job) => supervisor
                .submit(job)
                .map(|id| ServiceResponse::Submitted { id }),
            ServiceRequest::Jobs { all } => {
                let rows = supervisor.lock().store.list(all).map_err(text)?;
                Ok(ServiceResponse::Jobs {
                    jobs: rows.iter().map(summary).collect(),
                })
            }
            ServiceRequest::Job { id } => Ok(ServiceResponse::Job {
                job: summary(&supervisor.job(id)?),
            }),
            ServiceRequest::Cancel { id } => supervisor
                .cancel(id)
                .map(|job| ServiceResponse::Job { job: summary(&job) }),
            ServiceRequest::KillOrigin { .. } => Err(
                "not an agent: the pool node runs no commands; kill requests go to agents"
                    .to_string(),
            ),
        }
    }

    /// Stops the service for a clean stop of the pool node: no job starts
    /// from now on, the runners get SIGTERM (they kill their commands and
    /// journal the run as interrupted), and the service waits up to
    /// `wait` for them. Their jobs stay `running` in the job journal, for
    /// the next start on this state directory to resume.
    pub fn stop(&self, wait: Duration) {
        self.supervisor.stopping.store(true, Ordering::SeqCst);
        self.supervisor.wake();
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
        let mut state = self.supervisor.lock();
        if state.runners.is_empty() {
            return;
        }
        eprintln!(
            "stopping the runners of {} job(s); they resume when the pool starts again on {}",
            state.runners.len(),
            self.supervisor.config.state_dir.display()
        );
        for runner in state.runners.values() {
            if let Some(pid) = runner.pid {
                signal(pid, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + wait;
        loop {
            state.runners.retain(|_, runner| runner.ended().is_none());
            if state.runners.is_empty() || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if !state.runners.is_empty() {
            let mut ids: Vec<u64> = state.runners.keys().copied().collect();
            ids.sort_unstable();
            eprintln!(
                "warning: the runners of job(s) {ids:?} still run after {} s; \
                 the next pool start waits for them",
                wait.as_secs()
            );
        }
    }
}

impl Drop for JobService {
    /// A service dropped without [`JobService::stop`] (a pool node that
    /// fails) still ends its thread; the runners keep running, as after
    /// a crash, for the next start to adopt.
    fn drop(&mut self) {
        self.supervisor.stopping.store(true, Ordering::SeqCst);
        self.supervisor.wake();
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

impl Supervisor {
    /// The jobs and their runners, locked.
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes the supervisor thread.
    pub(super) fn wake(&self) {
        *self.poked.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.poke.notify_all();
    }

    /// Sleeps until the next tick, or a poke.
    pub(super) fn nap(&self) {
        let mut poked = self.poked.lock().unwrap_or_else(|p| p.into_inner());
        if !*poked {
            poked = (self.poke.wait_timeout(poked, TICK))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        *poked = false;
    }
}

/// Takes the job service's lock on the state directory, or says which
/// pool node holds it. The operating system lets go when the process
/// ends, `kill -9` included.
fn claim_state_dir(state_dir: &Path) -> anyhow::Result<LockFile> {
    let path = state_dir.join("jobs.db.lock");
    // Never through a link, nor another user's file: the pid goes in it.
    match LockFile::claim(&path) {
        Ok(lock) => Ok(lock),
        Err(LockError::Held(holder)) => anyhow::bail!(
            "another pool node (pid {}) runs the jobs of the state directory {}; \
             give this pool its own --state-dir",
            holder.trim(),
            state_dir.display()
        ),
        Err(error) => Err(crate::poolfile::lock_failure(&path, error, "cannot open")),
    }
}
