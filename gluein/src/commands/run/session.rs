//! One run of a graph as an object that owns its state. Set up from the
//! parsed arguments ([`RunSession::new`]), it submits the coordinator
//! ([`RunSession::start`]), then takes what the pool reports through one
//! path ([`RunSession::on_batch`], each [`Input`] by
//! [`RunSession::on_input`]) and, at every turn, commits to the journal,
//! shows progress and looks for a reason to stop ([`RunSession::on_tick`]);
//! once the graph is done or the run stops, it kills what still runs
//! ([`RunSession::on_stop`]) and ends the run ([`RunSession::finish`]).
//!
//! Reports are committed in groups at most [`COMMIT_EVERY`] apart: one
//! transaction per report would cost more than a short command. A runner
//! killed in between loses at most that much of the record, and those
//! activities run again on resume (at-least-once).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use constellation::collect::MultiEventCollector;
use constellation::{ActivityId, Context, ContextList};
use executors::shell::Capture;
use gluein::signals::OnStop;
use graph::{Coordinator, Graph, ReleasedCounts, COORDINATOR_LABEL};
use journal::{Journal, RunStatus};

use super::census::Census;
use super::executions::Executions;
use super::full_disk;
use super::inputs::{Input, Inputs};
use super::pool::{local_pool, unoffered, RunPool};
use super::progress::{JobProgressFile, Progress};
use super::record::{NodeNames, Recorder};
use super::setup::{begin, prepare};
use super::stop::{cancel_on_agents, PoolNodeWatch, Stop, KILLED_REPORTS_WAIT, KILL_GRACE};
use super::summary::{self, RunEnd};
use super::RunArgs;

/// The longest a settled activity waits to be committed to the journal.
const COMMIT_EVERY: Duration = Duration::from_millis(50);

/// How often the run compares what released work needs with what the
/// executors offer (a relabel can take a label away at any time).
const OFFER_CHECK_EVERY: Duration = Duration::from_secs(1);

/// How long a pool run whose nodes have all settled waits for the report of
/// an execution at a time, while some still run.
const DRAIN_POLL: Duration = Duration::from_millis(20);

/// A run of a graph, from its set-up to its end: see the module's notes.
pub(super) struct RunSession {
    args: RunArgs,
    /// Shared with the coordinator, which renders each command from it.
    graph: Arc<Graph>,
    /// Per node: whether this run skips it, done before.
    skip: Vec<bool>,
    /// Where the commands' output goes, until the coordinator takes it.
    capture: Option<Capture>,
    journal: Journal,
    journal_path: PathBuf,
    /// The run's number in the journal.
    run: i64,
    census: Census,
    names: NodeNames,
    pool: RunPool,
    recorder: Recorder,
    started: Instant,
    /// How many nodes settle in this run: those not skipped.
    expected: usize,
    /// Why the run stops early, once it does.
    stop: Option<Stop>,
    /// While the coordinator runs.
    live: Option<Live>,
}

/// What a run keeps while its coordinator runs.
struct Live {
    /// The run's one source of reports.
    inputs: Inputs,
    /// The coordinator's address.
    coordinator: ActivityId,
    released: Arc<ReleasedCounts>,
    progress: Progress,
    last_commit: Instant,
    last_offer_check: Option<Instant>,
    pool_node: PoolNodeWatch,
    /// Why the journal could not be written, when its disk is full.
    full: Option<String>,
    /// Every node has settled ([`Input::AllSettled`]).
    all_settled: bool,
    /// Every node has settled and nothing more will be reported.
    finished: bool,
}

impl Live {
    /// Keeps why the journal write that gave `result` failed, if its disk
    /// is full; any other error ends the run.
    fn note_full(&mut self, result: anyhow::Result<()>) -> anyhow::Result<()> {
        let full = full_disk::unless_full(result)?;
        self.full = self.full.take().or(full);
        Ok(())
    }
}

impl RunSession {
    /// Sets the run up as `args` ask: loads and checks the graph, joins
    /// the pool or starts the embedded one, and begins the run in its
    /// journal. Catches SIGINT and SIGTERM before any command starts, so
    /// that none escapes a stop.
    pub(super) fn new(args: RunArgs) -> anyhow::Result<RunSession> {
        args.progress.check()?;
        let (graph, executors, node) = prepare(&args)?;
        let begun = begin(&args, &graph, &executors, node.as_ref())?;
        eprintln!(
            "run {} of {}: {} activities{}, {} executor(s); journal {}",
            begun.run,
            args.graph.display(),
            graph.len(),
            if begun.skipped > 0 {
                format!(" ({} done before, skipped)", begun.skipped)
            } else {
                String::new()
            },
            executors.len(),
            begun.journal_path.display()
        );
        let pool = match node {
            Some(node) => RunPool::Node(node),
            None => RunPool::Local(local_pool(&executors)?),
        };
        let started = Instant::now();
        let expected = graph.len() - begun.skipped;
        let recorder = Recorder::new(&graph, begun.keys, begun.skipped, begun.names);
        // Ctrl-C stops the commands this process started and ends the run
        // with its summary, which names what still waits.
        gluein::signals::catch_stop_signals_as(OnStop::Interrupt)
            .context("cannot catch SIGINT and SIGTERM")?;
        Ok(RunSession {
            args,
            graph: Arc::new(graph),
            skip: begun.skip,
            capture: Some(begun.capture),
            journal: begun.journal,
            journal_path: begun.journal_path,
            run: begun.run,
            census: begun.census,
            names: begun.names,
            pool,
            recorder,
            started,
            expected,
            stop: None,
            live: None,
        })
    }

    /// Submits the coordinator, and the collector of its reports; `false`
    /// when nothing is left to run.
    pub(super) fn start(&mut self) -> anyhow::Result<bool> {
        if self.expected == 0 {
            return Ok(false);
        }
        let pool = self.pool.pool();
        let (collector, reports) = MultiEventCollector::new(self.expected);
        let coordination = ContextList::single(Context::new(COORDINATOR_LABEL));
        let observer = pool.submit(collector.on(coordination))?;
        let capture = self.capture.take().expect("started once");
        let mut coordinator =
            Coordinator::new(Arc::clone(&self.graph), &self.skip, observer).with_capture(capture);
        let mut inputs = Inputs::new(reports);
        if let RunPool::Node(_) = &self.pool {
            // Agents can die with their commands: every execution is
            // reported, so that each is an attempt in the journal.
            (inputs, coordinator) = inputs.with_executions_of(coordinator, pool.address());
            self.recorder.executions = Some(Executions::new(self.graph.len(), self.names));
        }
        let released = coordinator.released();
        debug_assert_eq!(coordinator.reports_expected(), self.expected);
        let coordinator = pool.submit(coordinator)?;
        let mut progress = Progress::new(self.args.progress, self.expected as u64);
        if let Some(path) = &self.args.job_progress {
            progress = progress.with_job_file(path);
        }
        self.live = Some(Live {
            inputs,
            coordinator,
            released,
            progress,
            last_commit: Instant::now(),
            last_offer_check: None,
            pool_node: PoolNodeWatch::default(),
            full: None,
            all_settled: false,
            finished: false,
        });
        Ok(true)
    }

    /// Whether the coordinator runs and the run goes on: not every node
    /// has settled and been drained, and nothing stopped it.
    pub(super) fn running(&self) -> bool {
        self.live.as_ref().is_some_and(|live| !live.finished) && self.stop.is_none()
    }

    fn live(&mut self) -> &mut Live {
        self.live.as_mut().expect("the session has started")
    }

    /// Takes what the pool reported, waiting at most until the next
    /// commit is due.
    pub(super) fn on_batch(&mut self) -> anyhow::Result<()> {
        let live = self.live();
        let wait = COMMIT_EVERY.saturating_sub(live.last_commit.elapsed());
        for input in live.inputs.next(wait.max(Duration::from_millis(1)))? {
            self.on_input(input);
        }
        Ok(())
    }

    /// Takes one input from the pool: executions reported, or nodes
    /// settled, whose rows are journaled at the next commit.
    pub(super) fn on_input(&mut self, input: Input) {
        match input {
            Input::Executions(reports) => self.recorder.on_executions(reports),
            Input::Settled(reports) => {
                for report in reports {
                    self.recorder.take(&self.graph, report);
                }
            }
            Input::AllSettled => self.live().all_settled = true,
        }
    }

    /// Takes the executions reported, waiting up to `wait` for one.
    fn take_executions(&mut self, wait: Duration) {
        if let Some(input) = self.live().inputs.executions(wait) {
            self.on_input(input);
        }
    }

    /// One turn of the run after its inputs: notes whether it is done,
    /// watches the pool, looks for a reason to stop, checks what the
    /// executors offer, commits when due and shows progress.
    pub(super) fn on_tick(&mut self) -> anyhow::Result<()> {
        // Once every node is settled, executions may still end.
        let finished = self.live().all_settled && self.drained();
        self.watch_pool()?;
        if gluein::signals::stop_requested() {
            self.stop = Some(Stop::Signal);
        } else if let RunPool::Node(node) = &self.pool {
            let live = self.live.as_mut().expect("the session has started");
            let reconnect = self.args.reconnect.unwrap_or_default();
            self.stop = live.pool_node.check(node, reconnect, &live.progress);
        }
        self.check_offers()?;
        let live = self.live.as_mut().expect("the session has started");
        if finished || self.stop.is_some() || live.last_commit.elapsed() >= COMMIT_EVERY {
            let committed = self.recorder.commit(&mut self.journal, self.run);
            live.note_full(committed)?;
            live.last_commit = Instant::now();
            let running = self.pool.running_now(&live.released);
            (live.progress).show(&self.recorder.tally, running, self.started.elapsed());
        }
        if let (None, false, Some(why)) = (&self.stop, finished, &live.full) {
            live.progress.say(&format!(
                "the disk holding the journal {} is full ({why}): no command starts any more",
                self.journal_path.display()
            ));
            self.stop = Some(Stop::DiskFull);
        }
        live.finished = finished;
        Ok(())
    }

    /// Whether nothing more will be reported, once every node has settled:
    /// no execution runs on the pool or anywhere it sent work to. Then the
    /// coordinator is told so, and finishes. Waits a little for reports
    /// when there may be more.
    fn drained(&mut self) -> bool {
        if self.recorder.executions.is_none() {
            return true;
        }
        // Read before the reports are taken: whatever was reported before
        // the pool was seen idle is taken below.
        let idle = self.pool.pool().outstanding() == 0;
        self.take_executions(Duration::ZERO);
        if idle && self.recorder.executions_drained() {
            let coordinator = self.live().coordinator;
            Coordinator::close(self.pool.pool(), coordinator);
            return true;
        }
        self.take_executions(DRAIN_POLL);
        false
    }

    /// On a pool: settles the work the pool gave up, journals executions
    /// lost with their agent, and lists the nodes attempts ran on.
    fn watch_pool(&mut self) -> anyhow::Result<()> {
        let (RunPool::Node(node), Some(live)) = (&self.pool, &mut self.live) else {
            return Ok(());
        };
        // Work the pool gave up never reports: its node fails, and what
        // runs after it is cancelled.
        for (activity, reason) in node.take_lost() {
            let reason = format!("lost: {reason}");
            Coordinator::given_up(node.pool(), live.coordinator, activity, reason);
        }
        if let Some(executions) = &mut self.recorder.executions {
            executions.check_members(node);
        }
        // Before the attempts are committed, so that they find their
        // executors listed, with cores.
        for (id, host) in self.recorder.new_nodes.drain(..) {
            let listed = (self.census).ran_on(node, id, &host, &mut self.journal, self.run);
            live.note_full(listed)?;
        }
        Ok(())
    }

    /// Every [`OFFER_CHECK_EVERY`], and as the run stops: which released
    /// work no executor offers to run, for progress; on a pool, the agents
    /// that joined or were relabelled since, for the journal.
    fn check_offers(&mut self) -> anyhow::Result<()> {
        let live = self.live.as_mut().expect("the session has started");
        let checking = (live.last_offer_check).is_none_or(|at| at.elapsed() >= OFFER_CHECK_EVERY);
        if !checking && self.stop.is_none() {
            return Ok(());
        }
        live.last_offer_check = Some(Instant::now());
        let tally = &mut self.recorder.tally;
        tally.unoffered = unoffered(&self.graph, &live.released, &self.pool.offered());
        live.progress.unoffered(&tally.unoffered);
        if let (RunPool::Node(node), true) = (&self.pool, self.stop.is_none()) {
            // Agents that joined since, or were relabelled.
            let listed = self.census.record_new(node, &mut self.journal, self.run);
            live.note_full(listed)?;
        }
        Ok(())
    }

    /// The loop has ended, the graph done or the run stopped: shows the
    /// last progress; a stopped run kills what still runs and takes the
    /// reports of what it killed. Then commits everything taken, also
    /// what a full disk held back, waiting for room.
    pub(super) fn on_stop(&mut self) -> anyhow::Result<()> {
        let live = self.live.as_mut().expect("the session has started");
        live.progress.finish(&self.recorder.tally);
        if let Some(stop) = &self.stop {
            eprintln!("{}", stop.stopping());
            self.kill_commands()?;
        }
        full_disk::when_room(&self.journal_path, "the attempts made", || {
            self.recorder.commit(&mut self.journal, self.run)
        })
    }

    /// Kills the commands of the stopping run, on the agents and here,
    /// and waits for their reports, so that every execution is an attempt
    /// in the journal; what never reports is journaled as lost.
    fn kill_commands(&mut self) -> anyhow::Result<()> {
        // The agents kill this run's commands too, asked first so that
        // their grace runs alongside this process's.
        let on_agents = self.pool.node().map_or(0, cancel_on_agents);
        let killed = executors::shell::kill_all_running(KILL_GRACE);
        self.recorder.killed(&killed);
        self.recorder.cancelled_awaited += on_agents;
        let deadline = Instant::now() + KILLED_REPORTS_WAIT;
        'waiting: while self.recorder.awaiting() && Instant::now() < deadline {
            for input in self.live().inputs.next(Duration::from_millis(50))? {
                let all_settled = matches!(input, Input::AllSettled);
                self.on_input(input);
                if all_settled {
                    break 'waiting;
                }
            }
        }
        self.take_executions(Duration::ZERO);
        if let Some(executions) = &mut self.recorder.executions {
            executions.unreported();
        }
        if self.recorder.awaiting() {
            eprintln!(
                "warning: {} killed command(s) did not report within {} s; \
                 the journal has no attempt for them",
                self.recorder.awaited.len() + self.recorder.cancelled_awaited,
                KILLED_REPORTS_WAIT.as_secs()
            );
        }
        Ok(())
    }

    /// Ends the run in the journal, prints its summary and ends the pool:
    /// exit code 0 if every activity succeeded and 1 if some failed; a
    /// stopped run leaves its pool and ends as [`Stop::exit`] says.
    pub(super) fn finish(mut self) -> anyhow::Result<ExitCode> {
        // Nothing more is taken from the pool.
        self.live = None;
        let tally = &self.recorder.tally;
        let status = if self.stop.is_some() {
            RunStatus::Interrupted
        } else if tally.failed + tally.cancelled > 0 {
            RunStatus::Failed
        } else {
            RunStatus::Succeeded
        };
        let (journal, run) = (&mut self.journal, self.run);
        full_disk::when_room(&self.journal_path, "the run's end", || {
            Ok(journal.end_run(run, status)?)
        })?;
        if let Some(path) = &self.args.job_progress {
            // Nothing runs any more, whatever the last update said.
            JobProgressFile::new(path).write(tally, 0);
        }
        let end = RunEnd {
            run,
            journal_path: &self.journal_path,
            graph_path: &self.args.graph,
            status,
            tally,
            re_executions: self.recorder.executions.as_ref().map(|e| (e.lost, e.extra)),
            elapsed: self.started.elapsed(),
        };
        summary::print(&end, self.args.json)?;
        let Some(stop) = self.stop else {
            self.pool.done();
            return Ok(match status {
                RunStatus::Succeeded => ExitCode::SUCCESS,
                _ => ExitCode::from(1),
            });
        };
        self.pool.leave();
        let unfinished = self.expected - self.recorder.tally.settled();
        stop.exit(&self.args, &self.journal_path, unfinished)
    }
}
