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

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::DirBuilderExt as _;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context as _;
use journal::{ActivityState, ActivityUpdate, Journal, RunStatus};

use super::store::{JobRow, JobStore};
use crate::service::{
    JobCounts, JobState, JobSubmission, JobSummary, ServiceRequest, ServiceResponse, SubmittedFiles,
};

/// How often the supervisor looks at its jobs when nothing pokes it.
pub const TICK: Duration = Duration::from_millis(200);

/// `pool start --max-jobs`'s default: jobs whose runners run at once.
pub const DEFAULT_MAX_JOBS: usize = 4;

/// How long a job's runner waits for a pool node that is gone (`run
/// --reconnect`): a pool node killed and started again within it finds
/// the runner still there, and its work still going.
pub const RUNNER_RECONNECT: &str = "10m";

/// How many lines of its log a runner that ended badly leaves in its
/// job's message.
const LOG_TAIL_LINES: usize = 5;

/// How often a job whose runner died before its run ended is resumed, in
/// the life of one pool node, before it fails instead: a runner that keeps
/// dying (a graph that exhausts the machine) is not restarted forever.
pub const MAX_RESUMES: u32 = 3;

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
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// What the service's handle, its request handlers and its thread share.
struct Shared {
    config: ServiceConfig,
    /// The exclusive lock on `STATE/jobs.db.lock`, held while the service
    /// lives: two pool nodes on one state directory (each with its own
    /// pool file) would start every job twice.
    _owner: std::fs::File,
    /// The state directory as it was at the start: one removed or
    /// replaced under the running service is told by it.
    state_identity: trust::Identity,
    /// Set once the state directory is found gone, so that it is said
    /// once.
    state_lost: AtomicBool,
    state: Mutex<State>,
    /// Set by a submit or a cancel, so that the thread acts at once.
    poked: Mutex<bool>,
    poke: Condvar,
    stopping: AtomicBool,
}

/// The jobs and their runners, under one lock: whoever changes a job's
/// state also knows its runner.
struct State {
    store: JobStore,
    /// The runners of running jobs, by job id.
    runners: HashMap<u64, Runner>,
    /// How often each job was resumed after its runner died, in this pool
    /// node's life (at most [`MAX_RESUMES`]).
    resumes: HashMap<u64, u32>,
}

/// A job's runner process.
struct Runner {
    /// The process, when this pool node started it.
    child: Option<Child>,
    /// Its process id, if known (an adopted runner's comes from its run
    /// journal's lock file).
    pid: Option<u32>,
    /// The job's run journal, whose lock the runner holds while it runs.
    journal: PathBuf,
}

/// How a runner ended.
enum Exit {
    /// With this status: a runner this pool node started.
    Status(ExitStatus),
    /// Unknown: a runner a previous pool node started, or one not found
    /// at a restart. Its run journal tells how the run went.
    Unseen,
}

impl Runner {
    /// How it ended, once it has.
    fn ended(&mut self) -> Option<Exit> {
        match &mut self.child {
            Some(child) => match child.try_wait() {
                Ok(Some(status)) => Some(Exit::Status(status)),
                Ok(None) => None,
                // Not a child any more (cannot happen for one we spawned
                // and did not reap): the journal decides.
                Err(_) => Some(Exit::Unseen),
            },
            None => runner_gone(self.pid, &self.journal).then_some(Exit::Unseen),
        }
    }
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
        let shared = Arc::new(Shared {
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
        shared.recover()?;
        let worker = Arc::clone(&shared);
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
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Answers one service request; a refusal says why in words.
    pub fn handle(&self, request: ServiceRequest) -> Result<ServiceResponse, String> {
        if self.shared.stopping.load(Ordering::SeqCst) {
            return Err("the pool node is stopping".to_string());
        }
        let shared = &self.shared;
        match request {
            ServiceRequest::Submit(job) => shared
                .submit(job)
                .map(|id| ServiceResponse::Submitted { id }),
            ServiceRequest::Jobs { all } => {
                let rows = shared.lock().store.list(all).map_err(text)?;
                Ok(ServiceResponse::Jobs {
                    jobs: rows.iter().map(summary).collect(),
                })
            }
            ServiceRequest::Job { id } => Ok(ServiceResponse::Job {
                job: summary(&shared.job(id)?),
            }),
            ServiceRequest::Cancel { id } => shared
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
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.shared.wake();
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
        let mut state = self.shared.lock();
        if state.runners.is_empty() {
            return;
        }
        eprintln!(
            "stopping the runners of {} job(s); they resume when the pool starts again on {}",
            state.runners.len(),
            self.shared.config.state_dir.display()
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
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.shared.wake();
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes the supervisor thread.
    fn wake(&self) {
        *self.poked.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.poke.notify_all();
    }

    /// Sleeps until the next tick, or a poke.
    fn nap(&self) {
        let mut poked = self.poked.lock().unwrap_or_else(|p| p.into_inner());
        if !*poked {
            poked = (self.poke.wait_timeout(poked, TICK))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        *poked = false;
    }

    fn job(&self, id: u64) -> Result<JobRow, String> {
        (self.lock().store.get(id).map_err(text)?)
            .ok_or_else(|| format!("no job {id} in this pool"))
    }

    /// Why the service takes no more jobs, when its state directory is no
    /// longer the one it started on (removed, or replaced): it is not
    /// made again, since a new job journal would give ids that its
    /// users' scripts, and any `jobs/ID` folder made since, already use.
    fn state_lost(&self) -> Option<String> {
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
    fn submit(&self, job: JobSubmission) -> Result<u64, String> {
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
    fn cancel(&self, id: u64) -> Result<JobRow, String> {
        let mut state = self.lock();
        let job = (state.store.get(id).map_err(text)?)
            .ok_or_else(|| format!("no job {id} in this pool"))?;
        match job.state {
            JobState::Queued => {
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
            }
            JobState::Running => {
                state.store.set_cancel_requested(id).map_err(text)?;
                match state.runners.get(&id).map(|runner| runner.pid) {
                    Some(Some(pid)) => {
                        eprintln!(
                            "job {id} ({}) cancelled: stopping its runner (pid {pid})",
                            job.name
                        );
                        signal(pid, libc::SIGINT);
                    }
                    // A runner whose pid its lock file did not tell: the
                    // cancel ends when it does.
                    Some(None) => eprintln!(
                        "job {id} ({}) cancelled; its runner's pid is unknown, \
                         so it is cancelled once the runner ends",
                        job.name
                    ),
                    None => {
                        let job = (state.store.get(id).map_err(text)?).unwrap_or(job);
                        self.finish_cancel(&mut state, &job).map_err(text)?;
                    }
                }
                self.wake();
            }
            done => return Err(format!("job {id} has already ended: {done}")),
        }
        drop(state);
        self.job(id)
    }

    /// One look at the jobs: reaps runners that ended, starts queued jobs
    /// while slots are free.
    fn tick(&self) {
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

    /// After a restart: adopts the runners that still run, and settles or
    /// restarts the jobs whose runner is gone.
    fn recover(&self) -> anyhow::Result<()> {
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
                    Runner {
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

    /// Job `id`'s runner ended (`exit`): sets the job's state, or resumes
    /// the job (at most [`MAX_RESUMES`] times) when its runner died before
    /// its run ended: killed by a signal, or a runner of a previous pool
    /// node that is gone.
    fn settle(&self, state: &mut State, id: u64, exit: Exit) -> anyhow::Result<()> {
        let Some(job) = state.store.get(id)? else {
            return Ok(());
        };
        if job.state.is_final() {
            return Ok(());
        }
        if job.cancel_requested {
            return self.finish_cancel(state, &job);
        }
        let status = last_run_status(&job.journal);
        let counts = ended_counts(&job);
        let failed_message = || {
            format!(
                "{} activit{} failed, {} cancelled; see `constellation job {id}`",
                counts.failed,
                if counts.failed == 1 { "y" } else { "ies" },
                counts.cancelled
            )
        };
        let why = match exit {
            Exit::Status(exit) if exit.success() => {
                return self.end(state, &job, JobState::Succeeded, None);
            }
            Exit::Status(exit) if exit.code() == Some(1) && status.as_deref() == Some("failed") => {
                return self.end(state, &job, JobState::Failed, Some(failed_message()));
            }
            // Killed by a signal before its run ended: not the runner's
            // own verdict on the job, so the job goes on from its journal.
            Exit::Status(exit) if exit.code().is_none() && !run_ended(status.as_deref()) => {
                format!("its runner {}", describe(exit))
            }
            Exit::Status(exit) => {
                let message = format!(
                    "its runner {}: {}",
                    describe(exit),
                    log_tail(&runner_log(&job))
                );
                return self.end(state, &job, JobState::Failed, Some(message));
            }
            Exit::Unseen => match status.as_deref() {
                Some("succeeded") => return self.end(state, &job, JobState::Succeeded, None),
                Some("failed") => {
                    return self.end(state, &job, JobState::Failed, Some(failed_message()));
                }
                // Interrupted, or killed mid-run: what did not finish runs
                // again (at-least-once).
                _ => "its runner is gone".to_string(),
            },
        };
        let resumed = state.resumes.entry(id).or_default();
        if *resumed >= MAX_RESUMES {
            let message = format!(
                "{why}, and it was resumed {MAX_RESUMES} times already, the most a job is \
                 (its runner keeps dying: see {}; `constellation submit` it again once the \
                 cause is fixed): {}",
                runner_log(&job).display(),
                log_tail(&runner_log(&job))
            );
            return self.end(state, &job, JobState::Failed, Some(message));
        }
        *resumed += 1;
        let resume = job.journal.exists();
        eprintln!(
            "job {id} ({}): {why}; {} (resume {resumed} of at most {MAX_RESUMES})",
            job.name,
            if resume {
                "resuming it"
            } else {
                "starting it again"
            },
        );
        self.launch(state, &job, resume)
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
    fn finish_cancel(&self, state: &mut State, job: &JobRow) -> anyhow::Result<()> {
        let message = match cancel_pending(&job.journal) {
            Ok(0) => "cancelled".to_string(),
            Ok(n) => format!(
                "cancelled; {n} unfinished activit{} cancelled with it",
                if n == 1 { "y" } else { "ies" }
            ),
            Err(error) => format!(
                "cancelled, but its journal's unfinished activities could not be marked: {error:#}"
            ),
        };
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
        match self.spawn_runner(job, resume) {
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
                    Runner {
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

    /// `constellation run` for the job, in the submitter's directory, in a
    /// process group of its own, its output appended to the runner log.
    fn spawn_runner(&self, job: &JobRow, resume: bool) -> anyhow::Result<Child> {
        let config = &self.config;
        // Made at submit; a job queued by an older pool node has none yet.
        // Never its parents: a state directory removed under the pool is
        // not silently made again.
        let dir = job_dir(job);
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Err(error) if error.kind() != std::io::ErrorKind::AlreadyExists => {
                return Err(error).with_context(|| format!("cannot create {}", dir.display()))
            }
            _ => {}
        }
        let log_path = runner_log(job);
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("cannot open {}", log_path.display()))?;
        let progress = progress_file(job);
        let _ = std::fs::remove_file(&progress);
        // The copy kept at submit; a job submitted by an older build has
        // none and runs its graph file where it is.
        let kept = dir.join(kept_graph_name(&job.graph));
        let kept = kept.exists().then_some(kept);
        let mut args: Vec<OsString> = config.program_args.clone();
        let graph = kept.as_ref().unwrap_or(&job.graph);
        args.extend(["run".into(), graph.clone().into_os_string()]);
        args.extend(["--pool".into(), config.pool_file.clone().into_os_string()]);
        let journal_flag = if resume { "--resume" } else { "--journal" };
        args.extend([journal_flag.into(), job.journal.clone().into_os_string()]);
        for (flag, value) in [
            ("--wait-agents", "0"),
            ("--reconnect", RUNNER_RECONNECT),
            ("--progress", "lines"),
        ] {
            args.extend([flag.into(), value.into()]);
        }
        args.extend(["--job-progress".into(), progress.into_os_string()]);
        for rule in &job.relabel {
            // One argument, so that a rule is never taken for a flag.
            args.push(format!("--relabel={rule}").into());
        }
        if kept.is_some() {
            args.extend([
                "--kept-sweeps".into(),
                dir.join(KEPT_SWEEPS).into_os_string(),
            ]);
        }
        if let Some(file) = &job.context_file {
            let file = match kept {
                Some(_) => dir.join(KEPT_CONTEXT_FILE),
                None => file.clone(),
            };
            args.extend(["--context-file".into(), file.into_os_string()]);
        }
        // A resumed job was accepted once with the agents it had then; the
        // runner of a restarted pool node may start before they are back,
        // and must wait for them rather than refuse their work.
        if job.wait_for_labels || resume {
            args.push("--wait-for-labels".into());
        }
        let shown: Vec<String> = (args.iter())
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect();
        writeln!(
            log,
            "== {} job {}: {} {} {} (in {})",
            timefmt::format_timestamp(SystemTime::now()),
            job.id,
            if resume { "resuming:" } else { "starting:" },
            config.program.display(),
            shown.join(" "),
            job.cwd.display()
        )
        .with_context(|| format!("cannot write {}", log_path.display()))?;
        let output = log
            .try_clone()
            .with_context(|| format!("cannot share {}", log_path.display()))?;
        Command::new(&config.program)
            .args(&args)
            .current_dir(&job.cwd)
            .stdin(Stdio::null())
            .stdout(output)
            .stderr(log)
            // Its own group: Ctrl-C in the pool's terminal is not for it.
            .process_group(0)
            .spawn()
            .with_context(|| {
                format!(
                    "cannot start {} in {}",
                    config.program.display(),
                    job.cwd.display()
                )
            })
    }
}

/// Takes the job service's lock on the state directory, or says which
/// pool node holds it. The operating system lets go when the process
/// ends, `kill -9` included.
fn claim_state_dir(state_dir: &Path) -> anyhow::Result<std::fs::File> {
    let path = state_dir.join("jobs.db.lock");
    // Never through a link, nor another user's file: the pid goes in it.
    let mut file = trust::open_trusted(&path, trust::Access::Lock)
        .map_err(crate::poolfile::trusted_error)
        .with_context(|| format!("cannot open {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            anyhow::bail!(
                "another pool node (pid {}) runs the jobs of the state directory {}; \
                 give this pool its own --state-dir",
                holder.trim(),
                state_dir.display()
            );
        }
        Err(std::fs::TryLockError::Error(error)) => {
            return Err(error).with_context(|| format!("cannot lock {}", path.display()))
        }
    }
    let written = file
        .set_len(0)
        .and_then(|()| file.write_all(std::process::id().to_string().as_bytes()));
    written.with_context(|| format!("cannot write {}", path.display()))?;
    Ok(file)
}

/// Checks a submission: absolute paths (relative ones are taken from its
/// working directory), a graph that loads, a context file that reads,
/// relabel rules that parse. The graph, its sweep files and the context
/// file are written to `incoming` as the job will run them: as sent, or,
/// from a client that sent only paths, as read here now. Returns the
/// submission with absolute paths, and its graph's size.
fn check_submission(
    mut job: JobSubmission,
    incoming: &IncomingFiles,
) -> Result<(JobSubmission, u64), String> {
    if !job.cwd.is_absolute() {
        return Err(format!(
            "the working directory {} is not an absolute path",
            job.cwd.display()
        ));
    }
    if !job.cwd.is_dir() {
        return Err(format!(
            "the working directory {} is not a directory on the pool node's machine \
             (jobs run on a file system the submitter shares with the pool node)",
            job.cwd.display()
        ));
    }
    job.graph = job.cwd.join(&job.graph);
    job.context_file = job.context_file.map(|file| job.cwd.join(file));
    let paths = std::iter::once(&job.graph).chain(&job.context_file);
    for path in paths.chain([&job.cwd]) {
        if path.to_str().is_none() {
            return Err(format!("{} is not a UTF-8 path", path.display()));
        }
    }
    let files = match job.files.take() {
        Some(files) => *files,
        None => read_submitted_files(&job)?,
    };
    incoming.write(&job.graph, &files)?;
    let options = graph::LoadOptions {
        kept_sweeps: Some(incoming.sweeps()),
        ..graph::LoadOptions::default()
    };
    let file = job.graph.display().to_string();
    let graph = graph::Graph::parse_with(
        &files.graph,
        graph::Format::of(&job.graph),
        &file,
        Path::new("."),
        &options,
    )
    .map_err(|errors| {
        format!(
            "{errors}\n{} error(s) in the graph file {file}",
            errors.0.len()
        )
    })?;
    if let (Some(text), Some(path)) = (&files.context, &job.context_file) {
        graph::parse_context_rules(text).map_err(|error| format!("{}: {error}", path.display()))?;
    }
    for rule in &job.relabel {
        rule.parse::<graph::Relabel>()
            .map_err(|error| format!("--relabel {error}"))?;
    }
    Ok((job, graph.len() as u64))
}

/// The files of a submission that sent only their paths, read on the pool
/// node's machine now, within the default size limit.
fn read_submitted_files(job: &JobSubmission) -> Result<SubmittedFiles, String> {
    let shared = "(jobs run on a file system the submitter shares with the pool node)";
    let graph = graph::Graph::load(&job.graph).map_err(|errors| {
        format!(
            "{errors}\n{} error(s) in the graph file {shared}",
            errors.0.len()
        )
    })?;
    let context = match &job.context_file {
        Some(path) => Some(
            graph::read_bounded(path, "context file", graph::DEFAULT_MAX_INPUT_BYTES, "")
                .map_err(|error| format!("{error} {shared}"))?,
        ),
        None => None,
    };
    let mut sources = graph.sources().to_vec();
    let graph_text = sources.remove(0).1;
    Ok(SubmittedFiles {
        graph: graph_text,
        sweeps: sources,
        context,
    })
}

/// A job's files on their way into its folder: written to a folder of
/// their own under `STATE/jobs`, mode 0700, files 0600, checked there,
/// then moved to `STATE/jobs/ID` with the job's row; removed if the job
/// is not stored.
struct IncomingFiles {
    dir: PathBuf,
    placed: std::cell::Cell<bool>,
}

impl IncomingFiles {
    fn new(jobs: &Path) -> Result<IncomingFiles, String> {
        use std::os::unix::fs::DirBuilderExt as _;
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = jobs.join(format!("{INCOMING}{}-{n}", std::process::id()));
        // A folder left by a pool node killed mid-submit: its job was never
        // stored, and this name is ours now.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|error| format!("cannot create {}: {error}", dir.display()))?;
        Ok(IncomingFiles {
            dir,
            placed: std::cell::Cell::new(false),
        })
    }

    /// Removes the folders of submits that a pool node killed mid-submit
    /// left: their jobs were never stored. Called with the state
    /// directory's lock held, so no submit of another node is under way.
    fn remove_stale(jobs: &Path) {
        let Ok(entries) = std::fs::read_dir(jobs) else {
            return;
        };
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(INCOMING) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }

    /// Where the sweep files go.
    fn sweeps(&self) -> PathBuf {
        self.dir.join(KEPT_SWEEPS)
    }

    /// Writes the graph (named as [`kept_graph_name`] says for `graph`),
    /// the sweep files and the context file.
    fn write(&self, graph: &Path, files: &SubmittedFiles) -> Result<(), String> {
        use std::os::unix::fs::DirBuilderExt as _;
        let sweeps = self.sweeps();
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&sweeps)
            .map_err(|error| format!("cannot create {}: {error}", sweeps.display()))?;
        write_private(&self.dir.join(kept_graph_name(graph)), &files.graph)?;
        for (name, text) in &files.sweeps {
            write_private(&sweeps.join(graph::kept_sweep_name(name)), text)?;
        }
        if let Some(text) = &files.context {
            write_private(&self.dir.join(KEPT_CONTEXT_FILE), text)?;
        }
        Ok(())
    }

    /// Moves the files to `job_dir`, the new job's folder.
    fn place(&self, job_dir: &Path) -> anyhow::Result<()> {
        // `job_dir` was made empty for this job by `JobStore::submit`,
        // which never reuses a folder already there; a rename replaces an
        // empty directory.
        std::fs::rename(&self.dir, job_dir).with_context(|| {
            format!(
                "cannot move {} to {}",
                self.dir.display(),
                job_dir.display()
            )
        })?;
        self.placed.set(true);
        Ok(())
    }
}

impl Drop for IncomingFiles {
    fn drop(&mut self) {
        if !self.placed.get() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// How the name of a folder of [`IncomingFiles`] begins.
const INCOMING: &str = ".incoming-";

/// Where a job keeps its sweep files, under its folder.
const KEPT_SWEEPS: &str = "sweeps";

/// Where a job keeps its context file, under its folder.
const KEPT_CONTEXT_FILE: &str = "contexts.toml";

/// The name of a job's copy of its graph: `graph.json` for a JSON graph
/// (the runner tells the format by the extension), `graph.toml` else.
fn kept_graph_name(graph: &Path) -> &'static str {
    match graph::Format::of(graph) {
        graph::Format::Json => "graph.json",
        graph::Format::Toml => "graph.toml",
    }
}

/// Writes `text` to a new file at `path`, mode 0600, refusing to follow
/// a link or to reuse a file someone put there.
fn write_private(path: &Path, text: &str) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt as _;
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .map_err(|error| format!("cannot write {}: {error}", path.display()))
}

/// The job as `jobs` and `job` show it.
fn summary(job: &JobRow) -> JobSummary {
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
fn counts_of(job: &JobRow) -> JobCounts {
    tally(job, job.state == JobState::Running)
}

/// The counts job `job` ends with: as [`counts_of`], with nothing running.
fn ended_counts(job: &JobRow) -> JobCounts {
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
fn last_run_status(path: &Path) -> Option<String> {
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
fn cancel_pending(path: &Path) -> anyhow::Result<usize> {
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

/// The runner of a job the job journal calls running, if it still runs:
/// the process that holds its run journal's lock, or, before it has one,
/// the process the job journal names if it is still that job's runner.
/// `Some(None)` for a lock holder that did not say its pid.
fn live_runner(job: &JobRow) -> Option<Option<u32>> {
    if let Ok(Some(writer)) = Journal::writer(&job.journal) {
        return Some(writer.pid.or(job.runner_pid));
    }
    let pid = job.runner_pid?;
    runs_with(pid, &job.journal).then_some(Some(pid))
}

/// Whether an adopted runner has ended: its run journal's lock is free
/// and its process (if known) is gone.
fn runner_gone(pid: Option<u32>, journal: &Path) -> bool {
    !matches!(Journal::writer(journal), Ok(Some(_)))
        && pid.is_none_or(|pid| !runs_with(pid, journal))
}

/// Whether process `pid` runs (not a zombie) with `journal` among its
/// arguments: a job's runner, and not some process that got its pid
/// since.
fn runs_with(pid: u32, journal: &Path) -> bool {
    let running = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'))
    });
    let Some(journal) = journal.to_str() else {
        return false;
    };
    running
        && std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|line| line.split(|&b| b == 0).any(|arg| arg == journal.as_bytes()))
}

/// Sends `signal` to process `pid`.
fn signal(pid: u32, signal: i32) {
    let Ok(pid) = i32::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) has no memory effects; the pid is a runner's.
    unsafe { libc::kill(pid, signal) };
}

/// Whether a run journal's last run `status` says the run ended by
/// itself: its runner's verdict stands, however the runner then exited.
fn run_ended(status: Option<&str>) -> bool {
    matches!(status, Some("succeeded" | "failed"))
}

/// An exit status in words.
fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => status.to_string(),
    }
}

/// The last lines of the log at `path`, joined, or a note that it has
/// none.
fn log_tail(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut file) = std::fs::File::open(path) {
        let length = file.metadata().map_or(0, |m| m.len());
        let _ = file.seek(SeekFrom::Start(length.saturating_sub(8192)));
        let mut bytes = Vec::new();
        let _ = file.read_to_end(&mut bytes);
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    let lines: Vec<&str> = (text.lines())
        .filter(|line| !line.trim().is_empty() && !line.starts_with("== "))
        .collect();
    if lines.is_empty() {
        return format!("it printed nothing (see {})", path.display());
    }
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
}

fn job_dir(job: &JobRow) -> PathBuf {
    job.journal
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn runner_log(job: &JobRow) -> PathBuf {
    job_dir(job).join("runner.log")
}

fn progress_file(job: &JobRow) -> PathBuf {
    job_dir(job).join("progress.json")
}

fn text(error: anyhow::Error) -> String {
    format!("{error:#}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use journal::NewRun;

    /// A stand-in for `constellation run`, run by `/bin/sh`: it notes how
    /// it was started in `CWD/launches`, its pid and the signals it gets
    /// beside the job's journal, and ends once `CWD/go` exists, with the
    /// status in `CWD/exit-code` (0 without one), after printing
    /// `CWD/last-words` if there is one. While `CWD/die` exists it kills
    /// itself with SIGKILL at once, as the OOM killer would.
    const FAKE_RUNNER: &str = r#"
dir=$(dirname "$6")
echo "$5 $6" >> "$PWD/launches"
echo $$ > "$dir/fake.pid"
if [ -e "$PWD/die" ]; then echo "dying" >&2; kill -9 $$; fi
trap 'echo interrupted >> "$dir/fake.signals"; exit 130' INT
trap 'echo terminated >> "$dir/fake.signals"; exit 130' TERM
while [ ! -e "$PWD/go" ]; do sleep 0.05; done
if [ -e "$PWD/last-words" ]; then cat "$PWD/last-words" >&2; fi
exit "$(cat "$PWD/exit-code" 2>/dev/null || echo 0)"
"#;

    /// Far more than anything here takes on an idle machine.
    const LIMIT: Duration = Duration::from_secs(30);

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "gluein-jobs-supervisor-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("state")).expect("scratch directory");
        std::fs::write(dir.join("fake-runner.sh"), FAKE_RUNNER).expect("fake runner");
        std::fs::write(
            dir.join("graph.toml"),
            "[[activity]]\nid = \"a-{n}\"\nfor = { n = \"1..=3\" }\nscript = \"true\"\n",
        )
        .expect("graph file");
        dir
    }

    fn config(dir: &Path, max_jobs: usize) -> ServiceConfig {
        ServiceConfig {
            state_dir: dir.join("state"),
            pool_file: dir.join("pool.json"),
            max_jobs,
            program: PathBuf::from("/bin/sh"),
            program_args: vec![dir.join("fake-runner.sh").into_os_string()],
        }
    }

    fn submission(dir: &Path, priority: i32) -> JobSubmission {
        JobSubmission {
            graph: PathBuf::from("graph.toml"),
            cwd: dir.to_path_buf(),
            name: None,
            relabel: Vec::new(),
            context_file: None,
            priority,
            wait_for_labels: false,
            submitter: "tester@here".to_string(),
            files: None,
            token: None,
        }
    }

    fn submit(service: &JobService, job: JobSubmission) -> u64 {
        match service.handle(ServiceRequest::Submit(job)) {
            Ok(ServiceResponse::Submitted { id }) => id,
            other => panic!("not submitted: {other:?}"),
        }
    }

    fn job(service: &JobService, id: u64) -> JobSummary {
        match service.handle(ServiceRequest::Job { id }) {
            Ok(ServiceResponse::Job { job }) => job,
            other => panic!("no job {id}: {other:?}"),
        }
    }

    fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + LIMIT;
        while !done() {
            assert!(Instant::now() < deadline, "{what} within {LIMIT:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn launches(dir: &Path) -> Vec<String> {
        std::fs::read_to_string(dir.join("launches"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn journal_of(dir: &Path, id: u64) -> PathBuf {
        dir.join(format!("state/jobs/{id}/journal.db"))
    }

    /// A run journal at `path` with activities `a`, `b`, `c` (`a` done)
    /// and one run, ended with `status` unless `None`.
    fn write_journal(path: &Path, status: Option<RunStatus>) -> Journal {
        let mut journal = Journal::create(path).unwrap();
        let run = journal.begin_run(&NewRun::default()).unwrap();
        let declared = ["a", "b", "c"].map(|id| journal::ActivityDecl {
            id,
            kind: 0,
            context: 0,
            spec_hash: 1,
            rerun: true,
        });
        let keys = journal
            .declare(run, &["k".to_string()], &["cpu".to_string()], declared)
            .unwrap();
        let done = ActivityUpdate {
            activity: keys[0],
            state: ActivityState::Done,
            message: None,
            attempts: Vec::new(),
        };
        journal.record(run, &[done]).unwrap();
        if let Some(status) = status {
            journal.end_run(run, status).unwrap();
        }
        journal
    }

    #[test]
    fn submissions_are_checked_before_they_are_stored() {
        let dir = scratch("checks");
        std::fs::write(dir.join("broken.toml"), "[[activity]]\nscript = 3\n").unwrap();
        let service = JobService::start(config(&dir, 0)).unwrap();
        let refused = |job: JobSubmission| match service.handle(ServiceRequest::Submit(job)) {
            Err(reason) => reason,
            other => panic!("accepted: {other:?}"),
        };
        let missing = JobSubmission {
            graph: "nowhere.toml".into(),
            ..submission(&dir, 0)
        };
        let missing = refused(missing);
        assert!(
            missing.contains("cannot read the graph file")
                && missing.contains("nowhere.toml")
                && missing.contains("shares with the pool node"),
            "{missing}"
        );
        let broken = JobSubmission {
            graph: "broken.toml".into(),
            ..submission(&dir, 0)
        };
        assert!(refused(broken).contains("error(s) in the graph file"));
        let gone = JobSubmission {
            cwd: dir.join("gone"),
            ..submission(&dir, 0)
        };
        assert!(refused(gone).contains("is not a directory"));
        let relative = JobSubmission {
            cwd: "here".into(),
            ..submission(&dir, 0)
        };
        assert!(refused(relative).contains("not an absolute path"));
        let relabel = JobSubmission {
            relabel: vec!["cpu".to_string()],
            ..submission(&dir, 0)
        };
        assert!(refused(relabel).contains("--relabel `cpu` is not FROM=TO"));
        let context = JobSubmission {
            context_file: Some("contexts.toml".into()),
            ..submission(&dir, 0)
        };
        let context = refused(context);
        assert!(
            context.contains("cannot read the context file") && context.contains("contexts.toml"),
            "{context}"
        );
        let long_name = JobSubmission {
            name: Some("n".repeat(100_000)),
            ..submission(&dir, 0)
        };
        assert!(refused(long_name).contains("at most 200 are allowed"));
        let forged = JobSubmission {
            name: Some("x\n7  forged  succeeded".to_string()),
            ..submission(&dir, 0)
        };
        assert!(refused(forged).contains("control character"));
        assert!(
            std::fs::read_dir(dir.join("state/jobs"))
                .unwrap()
                .next()
                .is_none(),
            "refused submissions leave no files"
        );

        // No slots (max_jobs 0): it stays queued, with its graph's size.
        let id = submit(&service, submission(&dir, 0));
        assert_eq!(id, 1, "refused submissions take no id");
        let queued = job(&service, id);
        assert_eq!(
            (queued.state, queued.name.as_str()),
            (JobState::Queued, "graph")
        );
        assert_eq!(queued.graph, dir.join("graph.toml"));
        assert_eq!((queued.counts.waiting, queued.counts.total), (3, 3));
        assert_eq!(queued.journal, journal_of(&dir, 1));
        match service.handle(ServiceRequest::Jobs { all: false }) {
            Ok(ServiceResponse::Jobs { jobs }) => assert_eq!(jobs, vec![queued]),
            other => panic!("{other:?}"),
        }
        let unknown = service.handle(ServiceRequest::Job { id: 9 }).unwrap_err();
        assert_eq!(unknown, "no job 9 in this pool");
        let kill = ServiceRequest::KillOrigin {
            origin: "n1".to_string(),
        };
        assert!(service.handle(kill).unwrap_err().contains("not an agent"));
        service.stop(LIMIT);
        assert!(launches(&dir).is_empty(), "nothing started");
    }

    #[test]
    fn queued_jobs_take_free_slots_by_priority_then_submit_order() {
        let dir = scratch("slots");
        let service = JobService::start(config(&dir, 1)).unwrap();
        let first = submit(&service, submission(&dir, 0));
        wait_until("the first job starts", || launches(&dir).len() == 1);
        let low = submit(&service, submission(&dir, 0));
        let high = submit(&service, submission(&dir, 5));
        let high2 = submit(&service, submission(&dir, 5));
        std::thread::sleep(4 * TICK);
        assert_eq!(launches(&dir).len(), 1, "one slot: the others wait");
        assert_eq!(job(&service, first).state, JobState::Running);
        assert_eq!(job(&service, high).state, JobState::Queued);
        std::fs::write(dir.join("go"), "").unwrap();
        wait_until("every job succeeds", || {
            [first, low, high, high2]
                .iter()
                .all(|&id| job(&service, id).state == JobState::Succeeded)
        });
        let started: Vec<String> = [first, high, high2, low]
            .iter()
            .map(|&id| format!("--journal {}", journal_of(&dir, id).display()))
            .collect();
        assert_eq!(launches(&dir), started);
        let done = job(&service, low);
        assert!(done.started.is_some() && done.ended.is_some() && done.message.is_none());
        service.stop(LIMIT);
    }

    #[test]
    fn a_cancel_stops_a_running_job_and_a_queued_one_never_starts() {
        let dir = scratch("cancel");
        let service = JobService::start(config(&dir, 1)).unwrap();
        let running = submit(&service, submission(&dir, 0));
        let queued = submit(&service, submission(&dir, 0));
        wait_until("the first job starts", || launches(&dir).len() == 1);

        let answer = service.handle(ServiceRequest::Cancel { id: queued });
        let Ok(ServiceResponse::Job { job: cancelled }) = answer else {
            panic!("{answer:?}");
        };
        assert_eq!(cancelled.state, JobState::Cancelled);
        assert_eq!(
            cancelled.message.as_deref(),
            Some("cancelled before it started")
        );

        let answer = service.handle(ServiceRequest::Cancel { id: running });
        let Ok(ServiceResponse::Job { job: stopping }) = answer else {
            panic!("{answer:?}");
        };
        assert!(matches!(
            stopping.state,
            JobState::Running | JobState::Cancelled
        ));
        wait_until("the running job is cancelled", || {
            job(&service, running).state == JobState::Cancelled
        });
        let signals = std::fs::read_to_string(dir.join("state/jobs/1/fake.signals")).unwrap();
        assert_eq!(signals, "interrupted\n", "its runner got SIGINT");
        let again = service.handle(ServiceRequest::Cancel { id: running });
        assert_eq!(again.unwrap_err(), "job 1 has already ended: cancelled");
        std::thread::sleep(4 * TICK);
        assert_eq!(
            launches(&dir).len(),
            1,
            "the cancelled queued job never ran"
        );
        service.stop(LIMIT);
    }

    #[test]
    fn a_runner_that_fails_fails_its_job_with_its_last_words() {
        let dir = scratch("fails");
        std::fs::write(dir.join("go"), "").unwrap();
        std::fs::write(dir.join("exit-code"), "2").unwrap();
        std::fs::write(
            dir.join("last-words"),
            "noise\nerror: the pool is on fire\n",
        )
        .unwrap();
        let service = JobService::start(config(&dir, 2)).unwrap();
        let id = submit(&service, submission(&dir, 0));
        wait_until("the job fails", || {
            job(&service, id).state == JobState::Failed
        });
        let message = job(&service, id).message.unwrap_or_default();
        assert!(
            message.contains("its runner exited with status 2"),
            "{message}"
        );
        assert!(message.contains("error: the pool is on fire"), "{message}");
        let log = std::fs::read_to_string(dir.join("state/jobs/1/runner.log")).unwrap();
        assert!(log.starts_with("== "), "each start is headed: {log}");
        assert!(log.contains("run "), "with its command line: {log}");
        service.stop(LIMIT);
    }

    #[test]
    fn a_runner_killed_by_a_signal_is_resumed_a_few_times_then_fails_its_job() {
        let dir = scratch("killed");
        std::fs::write(dir.join("die"), "").unwrap();
        std::fs::write(dir.join("go"), "").unwrap();
        let service = JobService::start(config(&dir, 2)).unwrap();
        let id = submit(&service, submission(&dir, 0));
        wait_until("the job fails", || {
            job(&service, id).state == JobState::Failed
        });
        assert_eq!(
            launches(&dir).len(),
            1 + MAX_RESUMES as usize,
            "started once, resumed {MAX_RESUMES} times: {:?}",
            launches(&dir)
        );
        let message = job(&service, id).message.unwrap_or_default();
        assert!(
            message.starts_with("its runner was killed by signal 9, and it was resumed 3 times"),
            "{message}"
        );
        assert!(message.contains("dying"), "with its last words: {message}");

        // One that dies and is resumed goes on, once its runner lives.
        let second = submit(&service, submission(&dir, 0));
        wait_until("the second job is resumed", || launches(&dir).len() >= 6);
        std::fs::remove_file(dir.join("die")).unwrap();
        wait_until("the second job succeeds", || {
            job(&service, second).state == JobState::Succeeded
        });
        service.stop(LIMIT);
    }

    #[test]
    fn a_restart_settles_resumes_restarts_or_waits_for_the_jobs_left_running() {
        let dir = scratch("restart");
        let dead = std::process::Command::new("true").spawn().unwrap();
        let dead_pid = dead.id();
        drop(dead.wait_with_output());
        {
            // As the job service makes it before it opens the store.
            std::fs::create_dir(dir.join("state/jobs")).unwrap();
            let mut store = JobStore::open(&dir.join("state")).unwrap();
            for _ in 0..4 {
                let id = store
                    .submit(&submission(&dir, 0), "left", 3, |_| Ok(()))
                    .unwrap();
                store.set_running(id, dead_pid).unwrap();
            }
        }
        drop(write_journal(
            &journal_of(&dir, 1),
            Some(RunStatus::Succeeded),
        ));
        drop(write_journal(
            &journal_of(&dir, 2),
            Some(RunStatus::Interrupted),
        ));
        // Job 3 never wrote a journal; job 4's runner still writes its own.
        let mut busy = write_journal(&journal_of(&dir, 4), None);

        let service = JobService::start(config(&dir, 4)).unwrap();
        assert_eq!(
            job(&service, 1).state,
            JobState::Succeeded,
            "settled at once"
        );
        wait_until("jobs 2 and 3 start again", || launches(&dir).len() == 2);
        let mut again = launches(&dir);
        again.sort();
        assert_eq!(
            again,
            vec![
                format!("--journal {}", journal_of(&dir, 3).display()),
                format!("--resume {}", journal_of(&dir, 2).display()),
            ]
        );
        let adopted = job(&service, 4);
        assert_eq!(adopted.state, JobState::Running, "waits for its runner");
        assert_eq!((adopted.counts.done, adopted.counts.waiting), (1, 2));
        let failed = ActivityUpdate {
            activity: 2,
            state: ActivityState::Failed,
            message: Some("exit 1".to_string()),
            attempts: Vec::new(),
        };
        busy.record(1, &[failed]).unwrap();
        busy.end_run(1, RunStatus::Failed).unwrap();
        drop(busy);
        wait_until("the adopted job ends", || {
            job(&service, 4).state == JobState::Failed
        });
        let message = job(&service, 4).message.unwrap_or_default();
        assert!(
            message.starts_with("1 activity failed, 0 cancelled"),
            "{message}"
        );

        // A clean stop: the runners get SIGTERM, their jobs stay running.
        service.stop(LIMIT);
        for id in [2, 3] {
            let signals = dir.join(format!("state/jobs/{id}/fake.signals"));
            assert_eq!(std::fs::read_to_string(signals).unwrap(), "terminated\n");
        }
        let store = JobStore::open(&dir.join("state")).unwrap();
        let left: Vec<u64> = store.running().unwrap().iter().map(|j| j.id).collect();
        assert_eq!(left, vec![2, 3], "left running, to resume");
    }

    #[test]
    fn one_job_service_per_state_directory() {
        let dir = scratch("owner");
        let service = JobService::start(config(&dir, 1)).unwrap();
        let error = JobService::start(config(&dir, 1)).err().expect("refused");
        let text = format!("{error:#}");
        assert!(text.contains("another pool node"), "{text}");
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
        service.stop(LIMIT);
        drop(service);
        JobService::start(config(&dir, 1))
            .expect("free again")
            .stop(LIMIT);
    }

    #[test]
    fn a_cancel_marks_what_the_journal_still_has_pending() {
        let dir = scratch("cancel-pending");
        let path = journal_of(&dir, 1);
        drop(write_journal(&path, None));
        assert_eq!(cancel_pending(&path).unwrap(), 2);
        let journal = Journal::open_read_only(&path).unwrap();
        let states: Vec<(String, ActivityState, Option<String>)> = (journal.activities().unwrap())
            .into_iter()
            .map(|a| (a.id, a.state, a.message))
            .collect();
        let cancelled = Some(CANCELLED_ACTIVITY.to_string());
        assert_eq!(
            states,
            vec![
                ("a".to_string(), ActivityState::Done, None),
                ("b".to_string(), ActivityState::Cancelled, cancelled.clone()),
                ("c".to_string(), ActivityState::Cancelled, cancelled),
            ]
        );
        assert_eq!(journal.runs().unwrap()[0].status, "interrupted");
        assert_eq!(cancel_pending(&dir.join("none.db")).unwrap(), 0);
    }

    #[test]
    fn a_submit_sent_twice_with_one_token_makes_one_job() {
        let dir = scratch("token");
        let service = JobService::start(config(&dir, 0)).unwrap();
        let job = JobSubmission {
            token: Some("5eed".to_string()),
            ..submission(&dir, 0)
        };
        let first = submit(&service, job.clone());
        let again = submit(&service, job.clone());
        assert_eq!(first, again, "the retry gets the job the first try made");
        let other = submit(
            &service,
            JobSubmission {
                token: Some("f00d".to_string()),
                ..job
            },
        );
        assert_ne!(other, first);
        match service.handle(ServiceRequest::Jobs { all: true }) {
            Ok(ServiceResponse::Jobs { jobs }) => assert_eq!(jobs.len(), 2),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_job_keeps_the_files_it_was_submitted_with_private() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = scratch("kept");
        let service = JobService::start(config(&dir, 0)).unwrap();
        let sent =
            "[[activity]]\nid = \"p-{n}\"\nfor = { n = { file = \"n.txt\" } }\nscript = \"true\"\n";
        let sending = JobSubmission {
            files: Some(Box::new(SubmittedFiles {
                graph: sent.to_string(),
                sweeps: vec![("n.txt".to_string(), "1\n2\n".to_string())],
                context: None,
            })),
            ..submission(&dir, 0)
        };
        let id = submit(&service, sending);
        let kept = dir.join(format!("state/jobs/{id}"));
        assert_eq!(
            std::fs::read_to_string(kept.join("graph.toml")).unwrap(),
            sent
        );
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&kept.join("graph.toml")), 0o600);
        assert_eq!(mode(&kept), 0o700);
        let sweep = kept.join("sweeps").join(graph::kept_sweep_name("n.txt"));
        assert_eq!(std::fs::read_to_string(sweep).unwrap(), "1\n2\n");
        assert_eq!(
            job(&service, id).counts.total,
            2,
            "the sent graph counts, not the file graph.toml beside it"
        );
    }
}
