//! The executor side: MPI start-up, rank 0's serving loop, the other ranks'
//! loop, and the agreement steps that keep all ranks in step.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use ::mpi::environment::Universe;
use ::mpi::request::{scope, Request, Scope};
use ::mpi::topology::SimpleCommunicator;
use ::mpi::traits::*;
use ::mpi::Threading;
use constellation::panic_message;
use constellation::{Context, ExecutorContext, Payload, PayloadError, PoolBuilder, Resources};

use super::{MpiActivity, MpiError, MpiLink, MpiOutcome, MpiReport, RankFailure, Request as Job};
use super::{MpiValue, MPI_LABEL, RANKS_LABEL};

/// First word of the header rank 0 broadcasts before each step.
const HEADER_SHUTDOWN: u64 = 0;
/// Header: an encoded M-task of the length in the second word follows.
const HEADER_RUN: u64 = 1;

/// Tag of the failure messages ranks send to rank 0 on the control
/// communicator; the only point-to-point traffic there.
const FAILURE_TAG: i32 = 17;

/// Failure messages are cut to this many bytes, so that a runaway error
/// text cannot make the report huge.
const MAX_MESSAGE: usize = 4096;

/// The exit code of an MPI job aborted because a panicking rank was left
/// alone (see [`MpiExecutor::with_panic_grace`]).
const PANIC_ABORT_CODE: i32 = 70;

/// Idle ranks poll for the next header at most this far apart: a blocking
/// broadcast would keep one core per rank busy in MPI's progress loop while
/// the partition has nothing to do.
const MAX_IDLE_POLL: Duration = Duration::from_millis(1);

/// Why the MPI executor could not start or finish.
#[derive(Debug, thiserror::Error)]
pub enum MpiStartError {
    /// MPI was initialized (or finalized) before; it starts once per process.
    #[error(
        "MPI was already initialized in this process; the MPI executor starts it exactly once"
    )]
    AlreadyInitialized,
    /// The operating system refused the thread for the main program. The
    /// other ranks were told to shut down.
    #[error("could not start the main program's thread on rank 0: {0}")]
    Spawn(std::io::Error),
    /// The main program panicked on rank 0. The other ranks were shut down
    /// cleanly all the same.
    #[error("the main program panicked on rank 0: {0}")]
    MainPanicked(String),
}

/// One rank's end of an MPI partition that serves as one Constellation
/// executor.
///
/// Start it on every rank, from the main thread, with [`init`](Self::init),
/// then call [`run`](Self::run); [`run_ranks`] does both.
pub struct MpiExecutor {
    /// The executor's own traffic: headers, work, agreements, failures.
    control: SimpleCommunicator,
    /// What M-tasks get, apart from `control` so that their messages and
    /// collectives can never match the executor's.
    work: SimpleCommunicator,
    rank: usize,
    ranks: usize,
    panic_grace: Duration,
    /// Declared last so that it drops last: `MPI_Finalize` comes after the
    /// communicators above are freed.
    _universe: Universe,
}

impl MpiExecutor {
    /// Initializes MPI for this rank, asking for
    /// [`Threading::Funneled`](::mpi::Threading): rank 0 runs the main
    /// program on another thread, and only this one calls MPI.
    ///
    /// Collective over all ranks: every rank must call it.
    pub fn init() -> Result<MpiExecutor, MpiStartError> {
        if ::mpi::is_finalized() {
            return Err(MpiStartError::AlreadyInitialized);
        }
        let (universe, provided) = ::mpi::initialize_with_threading(Threading::Funneled)
            .ok_or(MpiStartError::AlreadyInitialized)?;
        if provided < Threading::Funneled {
            // Rank 0's other threads never call MPI, which is all Funneled
            // promises, so this works with every MPI we know of; say so in
            // case one does not.
            tracing::warn!(
                ?provided,
                "MPI offers less than Threading::Funneled; rank 0 runs its main program on a second thread that makes no MPI calls"
            );
        }
        let world = universe.world();
        let control = world.duplicate();
        let work = world.duplicate();
        let rank = usize::try_from(world.rank()).unwrap_or(0);
        let ranks = usize::try_from(world.size()).unwrap_or(1);
        Ok(MpiExecutor {
            control,
            work,
            rank,
            ranks,
            panic_grace: Duration::from_secs(30),
            _universe: universe,
        })
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// How many ranks the partition has.
    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// How long a rank whose M-task panicked waits for the others to finish
    /// that M-task before it aborts the MPI job; see the
    /// [module docs](super). Set it above the longest time one rank may
    /// still compute after another stopped; 30 s by default.
    pub fn with_panic_grace(mut self, grace: Duration) -> Self {
        self.panic_grace = grace;
        self
    }

    /// Runs this rank until the job ends.
    ///
    /// On rank 0, `main` runs on a new thread with an [`MpiRoot`], while this
    /// thread serves M-tasks; when `main` returns, every rank is told to shut
    /// down, and its value comes back as `Some`. Other ranks serve M-tasks
    /// until then, never call `main`, and return `None`.
    pub fn run<T, F>(self, main: F) -> Result<Option<T>, MpiStartError>
    where
        F: FnOnce(MpiRoot) -> T + Send + 'static,
        T: Send + 'static,
    {
        if self.rank != 0 {
            self.serve_worker();
            return Ok(None);
        }
        let (requests, jobs) = mpsc::channel();
        let root = MpiRoot {
            link: MpiLink {
                requests: requests.clone(),
                ranks: self.ranks,
            },
        };
        let spawned = thread::Builder::new()
            .name("mpi-main".into())
            .spawn(move || {
                // Sent also when `main` panics, so that no rank waits forever.
                let _shutdown = ShutdownOnDrop(requests);
                main(root)
            });
        let main = match spawned {
            Ok(main) => main,
            Err(error) => {
                self.broadcast_header(HEADER_SHUTDOWN, 0);
                return Err(MpiStartError::Spawn(error));
            }
        };
        self.serve_root(jobs);
        match main.join() {
            Ok(value) => Ok(Some(value)),
            Err(panic) => Err(MpiStartError::MainPanicked(panic_message(panic.as_ref()))),
        }
    }

    /// Rank 0: takes requests from the pool in order, until the main program
    /// says it is done.
    fn serve_root(&self, jobs: mpsc::Receiver<Job>) {
        loop {
            // All senders gone cannot happen while `main` runs (its thread
            // holds one), but it would mean the same thing.
            match jobs.recv().unwrap_or(Job::Shutdown) {
                Job::Shutdown => {
                    self.broadcast_header(HEADER_SHUTDOWN, 0);
                    return;
                }
                Job::Run { mut bytes, reply } => {
                    // `MpiLink::run` refused anything longer than an MPI count.
                    self.broadcast_header(HEADER_RUN, bytes.len() as u64);
                    self.control
                        .process_at_rank(0)
                        .broadcast_into(&mut bytes[..]);
                    let outcome = self.job(&bytes);
                    // The asker may have gone (its pool was dropped); the
                    // M-task ran all the same.
                    let _ = reply.send(outcome.unwrap_or(Err(MpiError::ShutDown)));
                }
            }
        }
    }

    /// Ranks other than 0: run what rank 0 broadcasts, until it says stop.
    fn serve_worker(&self) {
        loop {
            let [kind, length] = self.receive_header();
            match kind {
                HEADER_SHUTDOWN => return,
                HEADER_RUN => {
                    let Ok(length) = usize::try_from(length) else {
                        self.protocol_broken("a work length that does not fit in memory");
                    };
                    let mut bytes = vec![0_u8; length];
                    self.control
                        .process_at_rank(0)
                        .broadcast_into(&mut bytes[..]);
                    self.job(&bytes);
                }
                _ => self.protocol_broken("an unknown header"),
            }
        }
    }

    /// Rank 0's broadcast of the next step. Non-blocking like the other
    /// ranks' side, because blocking and non-blocking collectives never match.
    fn broadcast_header(&self, kind: u64, length: u64) {
        let mut header = [kind, length];
        scope(|scope| {
            self.control
                .process_at_rank(0)
                .immediate_broadcast_into(scope, &mut header)
                .wait_without_status();
        });
    }

    /// Waits for rank 0's next header, sleeping in between polls.
    fn receive_header(&self) -> [u64; 2] {
        let mut header = [HEADER_SHUTDOWN, 0];
        scope(|scope| {
            let request = self
                .control
                .process_at_rank(0)
                .immediate_broadcast_into(scope, &mut header);
            // Without a deadline `poll` only returns once the request is done.
            if let Err(request) = poll(request, None) {
                request.wait_without_status();
            }
        });
        header
    }

    /// Runs one M-task on this rank, in step with the others. Returns the
    /// outcome on rank 0 and `None` elsewhere.
    fn job(&self, bytes: &[u8]) -> Option<MpiOutcome> {
        let started = Instant::now();
        // Rank 0 decodes too, so every rank runs the very same state (fields
        // that skip serialization are reset everywhere alike).
        let decoded = Payload::from_encoded(bytes.to_vec()).take::<Box<dyn MpiActivity>>();
        let (mut work, failure) = match decoded {
            Ok(work) => (Some(work), None),
            Err(PayloadError::Decode { source, .. }) => {
                let message = format!(
                    "cannot decode the MPI activity (do all ranks run the same build?): {source}"
                );
                (None, Some((false, message)))
            }
            Err(error) => (None, Some((false, error.to_string()))),
        };
        let verdict = self.agree(failure, false);
        if verdict.failed {
            return self.on_root(|| Err(MpiError::Decode(verdict.failures)));
        }
        // Every rank decoded, this one included, so `work` is there.
        let work = work.as_mut()?;
        let ran = catch_unwind(AssertUnwindSafe(|| work.run(&self.work)));
        let (value, failure) = match ran {
            Ok(Ok(value)) => (Some(value), None),
            Ok(Err(message)) => (None, Some((false, message))),
            Err(panic) => (None, Some((true, panic_message(panic.as_ref())))),
        };
        let panicked = matches!(failure, Some((true, _)));
        let verdict = self.agree(failure, panicked);
        self.on_root(|| {
            if verdict.failed {
                return Err(MpiError::Failed(verdict.failures));
            }
            Ok(MpiReport {
                ranks: self.ranks,
                value: value.unwrap_or_else(MpiValue::default),
                elapsed: started.elapsed(),
            })
        })
    }

    fn on_root(&self, outcome: impl FnOnce() -> MpiOutcome) -> Option<MpiOutcome> {
        (self.rank == 0).then(outcome)
    }

    /// Every rank says whether its step worked; rank 0 learns each failing
    /// rank's message. All ranks learn the verdict, so they take the same
    /// branch next.
    ///
    /// A rank that panicked waits only `panic_grace` for the others and
    /// aborts the job if they do not come: they are stuck in a collective.
    fn agree(&self, failure: Option<(bool, String)>, panicked: bool) -> Verdict {
        let mine = u8::from(failure.is_some());
        let mut verdicts = vec![0_u8; self.ranks];
        scope(|scope| {
            let request = self
                .control
                .immediate_all_gather_into(scope, &mine, &mut verdicts[..]);
            if panicked {
                let deadline = Instant::now() + self.panic_grace;
                if let Err(request) = poll(request, Some(deadline)) {
                    eprintln!(
                        "executors::mpi: rank {}: the MPI activity panicked and the other ranks did not finish it within {:?}; they are most likely waiting in a collective this rank will never join. Aborting the MPI job so that it does not hang.",
                        self.rank, self.panic_grace
                    );
                    // Never returns; the pending request is never dropped.
                    let _pending = request;
                    self.control.abort(PANIC_ABORT_CODE);
                }
            } else {
                request.wait_without_status();
            }
        });
        let failed = verdicts.iter().any(|&v| v != 0);
        if self.rank != 0 {
            if let Some((panicked, message)) = failure {
                let mut text = vec![u8::from(panicked)];
                text.extend_from_slice(truncate(&message).as_bytes());
                self.control
                    .process_at_rank(0)
                    .send_with_tag(&text[..], FAILURE_TAG);
            }
            return Verdict {
                failed,
                failures: Vec::new(),
            };
        }
        let mut failures = Vec::new();
        if let Some((panicked, message)) = failure {
            failures.push(RankFailure {
                rank: 0,
                panicked,
                message: truncate(&message).to_string(),
            });
        }
        for (rank, _) in verdicts.iter().enumerate().filter(|(_, v)| **v != 0) {
            if rank == 0 {
                continue;
            }
            let Ok(from) = i32::try_from(rank) else {
                continue;
            };
            let (text, _) = self
                .control
                .process_at_rank(from)
                .receive_vec_with_tag::<u8>(FAILURE_TAG);
            let (flag, message) = text.split_first().map_or((0, &[][..]), |(f, m)| (*f, m));
            failures.push(RankFailure {
                rank,
                panicked: flag != 0,
                message: String::from_utf8_lossy(message).into_owned(),
            });
        }
        Verdict { failed, failures }
    }

    /// The ranks disagree about the protocol itself, which only different
    /// builds of the program on different ranks can cause. Nothing sensible
    /// can follow, and waiting would hang the others.
    fn protocol_broken(&self, what: &str) -> ! {
        eprintln!(
            "executors::mpi: rank {} received {what} from rank 0; are all ranks running the same build? Aborting the MPI job.",
            self.rank
        );
        self.control.abort(PANIC_ABORT_CODE)
    }
}

/// What the ranks agreed on after a step.
struct Verdict {
    /// Some rank failed; the same on every rank.
    failed: bool,
    /// Who failed and why; filled in on rank 0 only.
    failures: Vec<RankFailure>,
}

/// Polls `request` until it completes, sleeping a little longer each time up
/// to [`MAX_IDLE_POLL`]; gives it back unfinished once `deadline` passes.
fn poll<'a, D: ?Sized, S: Scope<'a>>(
    mut request: Request<'a, D, S>,
    deadline: Option<Instant>,
) -> Result<(), Request<'a, D, S>> {
    let mut pause = Duration::from_micros(1);
    loop {
        request = match request.test() {
            Ok(_) => return Ok(()),
            Err(pending) => pending,
        };
        if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            return Err(request);
        }
        thread::sleep(pause);
        pause = (pause * 2).min(MAX_IDLE_POLL);
    }
}

/// `message` cut to at most [`MAX_MESSAGE`] bytes, on a character boundary.
fn truncate(message: &str) -> &str {
    if message.len() <= MAX_MESSAGE {
        return message;
    }
    let mut end = MAX_MESSAGE;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message[..end]
}

/// Tells rank 0's MPI thread that the main program is done, however it ended.
struct ShutdownOnDrop(mpsc::Sender<Job>);

impl Drop for ShutdownOnDrop {
    fn drop(&mut self) {
        // Fails only if the MPI thread stopped serving already.
        let _ = self.0.send(Job::Shutdown);
    }
}

/// Rank 0's main program's view of the MPI partition: what to add to a
/// [`Pool`](constellation::Pool) so that it gets an MPI executor.
#[derive(Debug, Clone)]
pub struct MpiRoot {
    link: MpiLink,
}

impl MpiRoot {
    /// How many ranks the partition has.
    pub fn ranks(&self) -> usize {
        self.link.ranks()
    }

    /// The MPI executor's context: `mpi`, then `mpi:ranks=N`. It offers no
    /// `anywhere`, so that its thread stays free for M-tasks; add ordinary
    /// executors for the rest of the work.
    pub fn context(&self) -> ExecutorContext {
        let ranks = i64::try_from(self.ranks()).unwrap_or(i64::MAX);
        ExecutorContext::new([
            Context::new(MPI_LABEL),
            Context::new(RANKS_LABEL).with_rank(ranks),
        ])
    }

    /// The MPI executor's resources: the [`MpiLink`], and `MPI_RANKS` in the
    /// environment of programs it starts.
    pub fn resources(&self) -> Resources {
        Resources::new()
            .with_env("MPI_RANKS", self.ranks().to_string())
            .with_handle(self.link.clone())
    }

    /// The link itself, to run M-tasks without a pool.
    pub fn link(&self) -> &MpiLink {
        &self.link
    }

    /// `builder` with the MPI executor added. One is enough: M-tasks run one
    /// at a time on a partition anyway.
    pub fn add_executor(&self, builder: PoolBuilder) -> PoolBuilder {
        builder.executor_with_resources(self.context(), self.resources())
    }
}

/// Starts the MPI executor on this rank and runs it until the job ends:
/// [`MpiExecutor::init`] then [`MpiExecutor::run`]. Call it on every rank,
/// from the main thread; `main` runs on rank 0 only, and its value comes
/// back there as `Some`.
pub fn run_ranks<T, F>(main: F) -> Result<Option<T>, MpiStartError>
where
    F: FnOnce(MpiRoot) -> T + Send + 'static,
    T: Send + 'static,
{
    MpiExecutor::init()?.run(main)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        let message = "é".repeat(MAX_MESSAGE);
        let cut = truncate(&message);
        assert!(cut.len() <= MAX_MESSAGE && cut.len() >= MAX_MESSAGE - 1);
        assert_eq!(truncate("short"), "short");
    }
}
