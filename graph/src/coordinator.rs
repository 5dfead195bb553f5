//! Running a graph as activities: a [`Coordinator`] submits each node as a
//! shell activity as soon as the nodes it runs after have succeeded, and
//! reports every node it settles to an observer.
//!
//! The coordinator is an ordinary activity, so a graph runs wherever the
//! pool runs it; only its [`NodeReport`] events go back to whoever watches
//! the run (the `constellation run` command, which journals them).
//!
//! Its state is a few numbers per node (a waiting count, a settled bit)
//! and queues of node numbers per context; a command is rendered from the
//! [`Graph`] only when it is submitted, and at most [`WINDOW`] are
//! submitted per context at a time.
//!
//! On a pool, where a node that runs a command can die with it, a
//! coordinator may also report executions
//! ([`Coordinator::report_executions`]): each attempt as it starts, and
//! each result for a node already settled (its command ran again, after
//! the notice that it finished was lost with its node), so that the
//! journal can count every execution.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;

use constellation::{Activity, ActivityCx, ActivityId, Context, ContextList, Event, Pool, Step};
use executors::shell::{Capture, ShellActivity, ShellReport, ShellResult};
use serde::{Deserialize, Serialize};

use crate::graph::Graph;

/// What the coordinator tells its observer: one report per node that it
/// settles, in the order they settle.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum NodeReport {
    /// The node's command ran, successfully or not (after its retries).
    Finished {
        /// The node's number in the [`Graph`].
        node: usize,
        /// What the shell activity reported.
        result: Box<ShellResult>,
    },
    /// The node will never run: a node it depends on, directly or not, failed.
    Cancelled {
        /// The node's number in the [`Graph`].
        node: usize,
        /// The failed node that caused it.
        because: usize,
    },
    /// No executor of the pool can run the node; it was not submitted.
    Refused {
        /// The node's number in the [`Graph`].
        node: usize,
        /// The scheduler's reason.
        reason: String,
    },
    /// The pool gave the node's activity up: the nodes running it died on
    /// every attempt it allows, or it could never leave the runner for an
    /// agent ([`Coordinator::given_up`]). Its executions, if any, were
    /// reported as they started.
    Lost {
        /// The node's number in the [`Graph`].
        node: usize,
        /// The pool's reason.
        reason: String,
    },
}

impl NodeReport {
    /// The node the report is about.
    pub fn node(&self) -> usize {
        match self {
            NodeReport::Finished { node, .. }
            | NodeReport::Cancelled { node, .. }
            | NodeReport::Refused { node, .. }
            | NodeReport::Lost { node, .. } => *node,
        }
    }

    /// Whether the node succeeded.
    pub fn is_success(&self) -> bool {
        matches!(self, NodeReport::Finished { result, .. } if result.is_success())
    }
}

/// Shell activities a coordinator keeps submitted per context at once.
///
/// Submitting every ready node at once would put a million activities, each
/// with its rendered command, into the pool's queues: gigabytes for work
/// that two executors take an hour to get through. A window keeps the
/// pool's queues short and the commands rendered only shortly before they
/// run, while staying far above what any pool runs in parallel, so
/// executors never wait for the coordinator. It is per context so that work
/// waiting for labels no executor offers fills only its own window and
/// never holds back work that can run.
pub const WINDOW: usize = 4096;

/// Per context of the graph ([`Graph::contexts`]), counts the coordinator
/// publishes while it runs, for the runner to read from another thread.
#[derive(Debug, Default)]
pub struct ReleasedCounts {
    /// Released (all they run after has succeeded) and not yet settled.
    released: Vec<AtomicUsize>,
    /// Submitted to the pool and not yet finished.
    in_flight: Vec<AtomicUsize>,
    /// The most ever submitted and not finished at once.
    most_in_flight: Vec<AtomicUsize>,
}

impl ReleasedCounts {
    fn new(contexts: usize) -> ReleasedCounts {
        let zeros = || (0..contexts).map(|_| AtomicUsize::new(0)).collect();
        ReleasedCounts {
            released: zeros(),
            in_flight: zeros(),
            most_in_flight: zeros(),
        }
    }

    /// How many contexts are counted.
    pub fn len(&self) -> usize {
        self.released.len()
    }

    /// Whether no context is counted.
    pub fn is_empty(&self) -> bool {
        self.released.is_empty()
    }

    /// Activities of `context` released and not settled: waiting in the
    /// coordinator's queue, queued in the pool, or running.
    pub fn released(&self, context: usize) -> usize {
        self.released[context].load(Ordering::Relaxed)
    }

    /// Activities of `context` submitted to the pool and not finished.
    pub fn in_flight(&self, context: usize) -> usize {
        self.in_flight[context].load(Ordering::Relaxed)
    }

    /// The most activities of `context` that were ever in flight at once:
    /// never more than the window.
    pub fn most_in_flight(&self, context: usize) -> usize {
        self.most_in_flight[context].load(Ordering::Relaxed)
    }
}

/// The activity that runs a graph: it submits ready nodes and collects
/// their results, releasing dependants as soon as their inputs are done.
pub struct Coordinator {
    graph: Arc<Graph>,
    /// Where each command's output goes.
    capture: Capture,
    /// Per context, the most submitted and unfinished at once.
    window: usize,
    /// For each node, how many of its dependencies have not succeeded yet:
    /// a group counts as one.
    waiting: Vec<u32>,
    /// For each group, members that have not succeeded yet.
    remaining: Vec<u32>,
    /// Groups with a member that failed: their consumers are cancelled once.
    broken: Vec<bool>,
    /// Nodes that need no more reports: skipped, finished or cancelled; a bit each.
    settled: Vec<u64>,
    /// Per context, released nodes not yet submitted, in node order.
    ready: Vec<VecDeque<u32>>,
    /// Per context, submitted nodes not yet finished.
    in_flight: Vec<usize>,
    /// Shell activities in flight, by id.
    running: HashMap<ActivityId, u32>,
    /// Nodes still to report.
    unsettled: usize,
    counts: Arc<ReleasedCounts>,
    observer: ActivityId,
    /// Where executions are reported, if they are.
    executions: Option<ExecutionReports>,
}

/// Where a coordinator that reports executions sends them, and whether
/// its runner has said that no more will come.
struct ExecutionReports {
    /// Each report with its node's number in the graph. A channel, not
    /// events to the observer: the observer counts one event per node, and
    /// the coordinator never leaves the runner's process.
    to: Sender<(usize, ShellReport)>,
    /// The address the runner's main program sends from: an event from it
    /// closes the reports ([`Coordinator::close`]) or gives an activity up
    /// ([`Coordinator::given_up`]).
    closer: ActivityId,
    /// The runner closed the reports: once every node is settled, the
    /// coordinator finishes.
    closed: bool,
}

/// What the runner's main program tells a coordinator that reports
/// executions, from the address it closes with.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum FromRunner {
    /// No more executions will be reported ([`Coordinator::close`]).
    Close,
    /// The pool gave up this shell activity ([`Coordinator::given_up`]).
    GivenUp {
        /// The shell activity.
        activity: ActivityId,
        /// Why, as the pool said.
        reason: String,
    },
}

impl Coordinator {
    /// A coordinator for `graph` that reports to `observer`. Nodes marked
    /// in `skip` count as already succeeded: they are neither run nor
    /// reported (a resumed run skips what it finished before).
    ///
    /// # Panics
    /// If `skip` is not one flag per node.
    pub fn new(graph: Arc<Graph>, skip: &[bool], observer: ActivityId) -> Coordinator {
        assert_eq!(skip.len(), graph.len(), "one skip flag per node");
        let nodes = graph.len();
        let mut remaining = vec![0u32; graph.group_count()];
        for (g, left) in remaining.iter_mut().enumerate() {
            *left = graph.group_members(g).filter(|&m| !skip[m]).count() as u32;
        }
        let waiting: Vec<u32> = (0..nodes)
            .map(|n| {
                let groups = (graph.entry_groups(n).iter())
                    .filter(|&&g| remaining[g as usize] > 0)
                    .count();
                let after = (graph.after_of(n).iter())
                    .filter(|&&m| !skip[m as usize])
                    .count();
                (groups + after) as u32
            })
            .collect();
        let mut settled = vec![0u64; nodes.div_ceil(64)];
        for (n, _) in skip.iter().enumerate().filter(|(_, &s)| s) {
            settled[n / 64] |= 1 << (n % 64);
        }
        let contexts = graph.contexts().len();
        let mut coordinator = Coordinator {
            capture: Capture::default(),
            window: WINDOW,
            broken: vec![false; remaining.len()],
            remaining,
            waiting,
            settled,
            ready: vec![VecDeque::new(); contexts],
            in_flight: vec![0; contexts],
            running: HashMap::new(),
            unsettled: skip.iter().filter(|&&s| !s).count(),
            counts: Arc::new(ReleasedCounts::new(contexts)),
            observer,
            executions: None,
            graph,
        };
        for (n, &skipped) in skip.iter().enumerate() {
            if coordinator.waiting[n] == 0 && !skipped {
                coordinator.release(n as u32);
            }
        }
        coordinator
    }

    /// Where the commands' output goes (the default of [`Capture`] until set).
    pub fn with_capture(mut self, capture: Capture) -> Coordinator {
        self.capture = capture;
        self
    }

    /// A window other than [`WINDOW`] (at least 1): for tests, and pools
    /// far larger than any today.
    pub fn with_window(mut self, window: usize) -> Coordinator {
        self.window = window.max(1);
        self
    }

    /// Has every shell activity report each attempt as it starts
    /// ([`ShellActivity::report_starts`]), and sends `to`, with the node's
    /// number, each such start and each result for a node already settled
    /// (an extra execution: its first result came, and the command ran
    /// again, as when the node that ran it died before telling the node it
    /// came from that it finished). Settling reports still go to the
    /// observer, one per node.
    ///
    /// Results may come after the last node settled, so the coordinator
    /// does not finish by itself: it finishes once every node is settled
    /// and `closer`, the address the runner's main program sends from
    /// ([`Pool::address`]), has called [`close`](Self::close).
    pub fn report_executions(
        mut self,
        to: Sender<(usize, ShellReport)>,
        closer: ActivityId,
    ) -> Coordinator {
        self.executions = Some(ExecutionReports {
            to,
            closer,
            closed: false,
        });
        self
    }

    /// Tells the coordinator `coordinator` on `pool`, from the pool's main
    /// program, that no more executions will be reported: it finishes once
    /// every node is settled. For a coordinator that reports executions
    /// ([`report_executions`](Self::report_executions)); `false` if it is
    /// gone already.
    pub fn close(pool: &Pool, coordinator: ActivityId) -> bool {
        pool.send(coordinator, FromRunner::Close).is_ok()
    }

    /// Tells the coordinator `coordinator` on `pool`, from the pool's main
    /// program, that the pool gave up `activity` (`NodeEvent::Lost` at its
    /// origin: its nodes died on every attempt allowed, or it cannot
    /// travel): the node it ran for settles as [`NodeReport::Lost`] with
    /// `reason`, and what runs after it is cancelled, as for a failure.
    /// Without this, the node would wait forever for a result that cannot
    /// come. An activity no longer in flight (its result came first) is
    /// left as it is. For a coordinator that reports executions, like
    /// [`close`](Self::close); `false` if it is gone already.
    pub fn given_up(
        pool: &Pool,
        coordinator: ActivityId,
        activity: ActivityId,
        reason: String,
    ) -> bool {
        pool.send(coordinator, FromRunner::GivenUp { activity, reason })
            .is_ok()
    }

    /// How many reports the observer will receive: one per node not skipped.
    pub fn reports_expected(&self) -> usize {
        self.unsettled
    }

    /// The counts per context this coordinator publishes as it runs.
    pub fn released(&self) -> Arc<ReleasedCounts> {
        Arc::clone(&self.counts)
    }

    fn is_settled(&self, n: u32) -> bool {
        self.settled[n as usize / 64] & (1 << (n % 64)) != 0
    }

    /// Everything `n` runs after has succeeded: it joins its context's queue.
    fn release(&mut self, n: u32) {
        let context = self.graph.context_of(n as usize);
        self.ready[context].push_back(n);
        self.counts.released[context].fetch_add(1, Ordering::Relaxed);
    }

    /// Submits released nodes while their context's window has room.
    fn pump(&mut self, cx: &mut ActivityCx<'_>) {
        for context in 0..self.ready.len() {
            while self.in_flight[context] < self.window {
                let Some(n) = self.ready[context].pop_front() else {
                    break;
                };
                self.submit(cx, n, context);
            }
        }
    }

    fn submit(&mut self, cx: &mut ActivityCx<'_>, n: u32, context: usize) {
        let mut spec = self.graph.spec(n as usize);
        spec.capture = self.capture.clone();
        let parent = cx.id();
        let mut activity = ShellActivity::new(spec).reply_to(parent);
        if self.executions.is_some() {
            activity = activity.report_starts();
        }
        match cx.submit(activity) {
            Ok(child) => {
                self.running.insert(child, n);
                self.in_flight[context] += 1;
                let counts = &self.counts;
                counts.in_flight[context].store(self.in_flight[context], Ordering::Relaxed);
                counts.most_in_flight[context]
                    .fetch_max(self.in_flight[context], Ordering::Relaxed);
            }
            Err(error) => {
                self.settle(
                    cx,
                    NodeReport::Refused {
                        node: n as usize,
                        reason: error.to_string(),
                    },
                );
                self.cancel_dependants(cx, n);
            }
        }
    }

    fn settle(&mut self, cx: &mut ActivityCx<'_>, report: NodeReport) {
        let n = report.node();
        debug_assert!(!self.is_settled(n as u32), "node {n} settled twice");
        self.settled[n / 64] |= 1 << (n % 64);
        self.unsettled -= 1;
        if !matches!(report, NodeReport::Cancelled { .. }) {
            // Only released nodes run or are refused.
            let context = self.graph.context_of(n);
            self.counts.released[context].fetch_sub(1, Ordering::Relaxed);
        }
        cx.send(self.observer, report);
    }

    /// One dependency of `m` has succeeded.
    fn one_less(&mut self, m: usize) {
        self.waiting[m] -= 1;
        if self.waiting[m] == 0 && !self.is_settled(m as u32) {
            self.release(m as u32);
        }
    }

    fn release_dependants(&mut self, n: u32) {
        let graph = Arc::clone(&self.graph);
        for g in graph.member_of(n as usize) {
            self.remaining[g] -= 1;
            if self.remaining[g] == 0 {
                for m in graph.group_consumers(g) {
                    self.one_less(m);
                }
            }
        }
        for &m in graph.dependants_of(n as usize) {
            self.one_less(m as usize);
        }
    }

    /// Cancels everything that runs after `failed`, directly or not. None
    /// of it can have started: each waits for `failed` somewhere upstream.
    /// A group is followed once, however many of its members fail.
    fn cancel_dependants(&mut self, cx: &mut ActivityCx<'_>, failed: u32) {
        let graph = Arc::clone(&self.graph);
        let mut stack = vec![failed];
        let mut first = true;
        while let Some(n) = stack.pop() {
            if !first {
                if self.is_settled(n) {
                    continue;
                }
                self.settle(
                    cx,
                    NodeReport::Cancelled {
                        node: n as usize,
                        because: failed as usize,
                    },
                );
            }
            first = false;
            for g in graph.member_of(n as usize) {
                if !std::mem::replace(&mut self.broken[g], true) {
                    stack.extend(graph.group_consumers(g).map(|m| m as u32));
                }
            }
            stack.extend_from_slice(graph.dependants_of(n as usize));
        }
    }

    fn step(&self) -> Step {
        let closed = self.executions.as_ref().is_none_or(|e| e.closed);
        if self.unsettled == 0 && closed {
            Step::Finish
        } else {
            Step::Suspend
        }
    }

    /// The node a shell activity of this graph ran for, from the result's
    /// or announcement's name once the activity is no longer in flight.
    fn node_named(&self, name: Option<&str>) -> Option<u32> {
        name.and_then(|name| self.graph.index_of(name))
            .map(|n| n as u32)
    }

    /// Handles one event of a coordinator that reports executions.
    fn process_reported(&mut self, cx: &mut ActivityCx<'_>, event: Event) -> Step {
        let source = event.source;
        let Some(executions) = &mut self.executions else {
            unreachable!("called only when reporting executions");
        };
        if source == executions.closer {
            match event.take::<FromRunner>() {
                Ok(FromRunner::Close) => executions.closed = true,
                Ok(FromRunner::GivenUp { activity, reason }) => self.lost(cx, activity, reason),
                Err(error) => {
                    tracing::error!(%source, %error, "the graph coordinator got a message from its runner it does not understand; ignored");
                }
            }
            return self.step();
        }
        let report = match event.take::<ShellReport>() {
            Ok(report) => report,
            Err(error) => {
                tracing::error!(%source, %error, "the graph coordinator got an event it does not understand; ignored");
                return self.step();
            }
        };
        let in_flight = self.running.get(&report.activity()).copied();
        let Some(n) = in_flight.or_else(|| self.node_named(report.name())) else {
            tracing::error!(activity = %report.activity(), "a shell report for no node of this graph; ignored");
            return self.step();
        };
        match report {
            ShellReport::Ended(result) if in_flight.is_some() => {
                self.running.remove(&result.activity);
                self.finished(cx, n, *result);
            }
            report => {
                let executions = self.executions.as_ref().expect("reporting");
                // The runner gone, nobody is left to tell.
                let _ = executions.to.send((n as usize, report));
            }
        }
        self.step()
    }

    /// The pool gave up shell activity `activity`: settles its node as
    /// lost, as a failure, if it is still in flight.
    fn lost(&mut self, cx: &mut ActivityCx<'_>, activity: ActivityId, reason: String) {
        let Some(n) = self.running.remove(&activity) else {
            tracing::debug!(%activity, "given up after its result came; nothing to settle");
            return;
        };
        self.ended(n);
        self.settle(
            cx,
            NodeReport::Lost {
                node: n as usize,
                reason,
            },
        );
        self.cancel_dependants(cx, n);
        self.pump(cx);
    }

    /// Node `n`'s activity is no longer in flight.
    fn ended(&mut self, n: u32) {
        let context = self.graph.context_of(n as usize);
        self.in_flight[context] -= 1;
        self.counts.in_flight[context].store(self.in_flight[context], Ordering::Relaxed);
    }

    /// The shell activity of node `n` ended with `result`: settles `n` and
    /// releases or cancels what runs after it.
    fn finished(&mut self, cx: &mut ActivityCx<'_>, n: u32, result: ShellResult) {
        self.ended(n);
        let success = result.is_success();
        self.settle(
            cx,
            NodeReport::Finished {
                node: n as usize,
                result: Box::new(result),
            },
        );
        if success {
            self.release_dependants(n);
        } else {
            self.cancel_dependants(cx, n);
        }
        self.pump(cx);
    }
}

/// A coordinator is never moved to another executor or node
/// ([`Activity::may_be_stolen`] is false), so it is never serialized: its
/// graph and state stay in the process that runs the graph. Serializing
/// one says so instead of writing a state that could not be resumed.
impl Serialize for Coordinator {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom(
            "a graph coordinator stays in the process that runs its graph and is never serialized",
        ))
    }
}

impl<'de> Deserialize<'de> for Coordinator {
    fn deserialize<D: serde::Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
        Err(serde::de::Error::custom(
            "a graph coordinator is never sent between processes",
        ))
    }
}

/// The label of the executor that a graph run keeps for its coordinator
/// (and for whoever collects its reports). An activity handles each event
/// on the executor it started on, so a coordinator sharing an executor with
/// hour-long commands would release their dependants an hour late.
pub const COORDINATOR_LABEL: &str = "constellation:coordinator";

#[typetag::serde]
impl Activity for Coordinator {
    fn context(&self) -> ContextList {
        ContextList::single(Context::new(COORDINATOR_LABEL))
    }

    fn may_be_stolen(&self) -> bool {
        false
    }

    fn initialize(&mut self, cx: &mut ActivityCx<'_>) -> Step {
        self.pump(cx);
        self.step()
    }

    fn process(&mut self, cx: &mut ActivityCx<'_>, event: Event) -> Step {
        if self.executions.is_some() {
            return self.process_reported(cx, event);
        }
        let source = event.source;
        let result = match event.take::<ShellResult>() {
            Ok(result) => result,
            Err(error) => {
                tracing::error!(%source, %error, "the graph coordinator got an event it does not understand; ignored");
                return self.step();
            }
        };
        let Some(n) = self.running.remove(&result.activity) else {
            let settled = self.node_named(result.name.as_deref()).is_some();
            tracing::error!(activity = %result.activity, settled, "a shell result for no node of this graph in flight; ignored");
            return self.step();
        };
        self.finished(cx, n, result);
        self.step()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::mpsc::Receiver;
    use std::time::{Duration, Instant};

    use constellation::collect::MultiEventCollector;
    use constellation::{ExecutorContext, Pool};

    use super::*;
    use crate::graph::Format;

    /// Generous for a loaded machine; the commands take milliseconds.
    const PATIENCE: Duration = Duration::from_secs(120);

    /// The next `count` execution reports, or a clear failure.
    fn next_reports(
        from: &Receiver<(usize, ShellReport)>,
        count: usize,
    ) -> Vec<(usize, ShellReport)> {
        let deadline = Instant::now() + PATIENCE;
        (0..count)
            .map(|k| {
                let left = deadline.saturating_duration_since(Instant::now());
                from.recv_timeout(left)
                    .unwrap_or_else(|e| panic!("execution report {} of {count}: {e}", k + 1))
            })
            .collect()
    }

    /// A graph of two nodes run by a coordinator that reports executions,
    /// on a pool of one executor for the work and one for it.
    struct Bench {
        graph: Arc<Graph>,
        pool: Pool,
        /// The observer's reports, one per node.
        settled: constellation::collect::Results,
        executions: Receiver<(usize, ShellReport)>,
        coordinator: ActivityId,
    }

    impl Bench {
        fn start(text: &str) -> Bench {
            let graph =
                Arc::new(Graph::parse(text, Format::Toml, "g.toml", Path::new(".")).unwrap());
            let pool = Pool::builder()
                .executor(ExecutorContext::anywhere())
                .executor(ExecutorContext::new([Context::new(COORDINATOR_LABEL)]))
                .start()
                .unwrap();
            let coordination = ContextList::single(Context::new(COORDINATOR_LABEL));
            let (collector, settled) = MultiEventCollector::new(graph.len());
            let observer = pool.submit(collector.on(coordination)).unwrap();
            let (to, executions) = std::sync::mpsc::channel();
            let coordinator = Coordinator::new(Arc::clone(&graph), &[false, false], observer)
                .with_capture(Capture::Discard)
                .report_executions(to, pool.address());
            let id = pool.submit(coordinator).unwrap();
            Bench {
                graph,
                pool,
                settled,
                executions,
                coordinator: id,
            }
        }
    }

    #[test]
    fn executions_are_reported_and_an_extra_result_is_kept_until_closed() {
        let text = "[[activity]]\nid = \"a\"\ncommand = \"true\"\n\n\
                    [[activity]]\nid = \"b\"\ncommand = \"true\"\nafter = [\"a\"]\n";
        let Bench {
            graph,
            pool,
            settled,
            executions,
            coordinator: id,
        } = Bench::start(text);

        let reports: Vec<NodeReport> = (settled.wait_timeout(PATIENCE).unwrap().into_iter())
            .map(|event| event.take().unwrap())
            .collect();
        assert_eq!(reports.len(), 2);
        assert!(reports.iter().all(NodeReport::is_success), "{reports:?}");
        let starts = next_reports(&executions, 2);
        for (k, (node, report)) in starts.iter().enumerate() {
            assert_eq!(*node, k, "a starts before b: {starts:?}");
            let ShellReport::Started(started) = report else {
                panic!("a start: {report:?}");
            };
            assert_eq!(started.attempt, 1);
            assert_eq!(started.name.as_deref(), Some(graph.id(k)));
        }

        // A second copy of `a`, as when the notice that it finished was
        // lost and it ran again: both nodes are settled by now.
        let copy = ShellActivity::new(graph.spec(0).capture(Capture::Discard))
            .reply_to(id)
            .report_starts();
        pool.submit(copy).unwrap();
        let extra = next_reports(&executions, 2);
        assert!(
            matches!(&extra[0], (0, ShellReport::Started(s)) if s.attempt == 1),
            "{extra:?}"
        );
        let (0, ShellReport::Ended(result)) = &extra[1] else {
            panic!("the copy's result, for node 0: {extra:?}");
        };
        assert!(result.is_success(), "{result:?}");
        assert!(
            Coordinator::close(&pool, id),
            "the coordinator waits for its runner to close its reports"
        );
        pool.done().unwrap();
        assert!(executions.try_recv().is_err(), "nothing more is reported");
    }

    #[test]
    fn an_activity_given_up_settles_lost_and_cancels_what_runs_after_it() {
        let text = "[[activity]]\nid = \"a\"\ncommand = \"sleep\"\nargs = [\"1\"]\n\n\
                    [[activity]]\nid = \"b\"\ncommand = \"true\"\nafter = [\"a\"]\n";
        let bench = Bench::start(text);
        let started = next_reports(&bench.executions, 1);
        let (0, ShellReport::Started(started)) = &started[0] else {
            panic!("a starts: {started:?}");
        };

        let reason = "the nodes running it died 3 times (the limit is 3)".to_string();
        let (pool, coordinator) = (&bench.pool, bench.coordinator);
        assert!(Coordinator::given_up(
            pool,
            coordinator,
            started.activity,
            reason.clone()
        ));
        let reports: Vec<NodeReport> = (bench.settled.wait_timeout(PATIENCE).unwrap())
            .into_iter()
            .map(|event| event.take().unwrap())
            .collect();
        assert!(
            matches!(&reports[..], [
                NodeReport::Lost { node: 0, reason: lost },
                NodeReport::Cancelled { node: 1, because: 0 },
            ] if *lost == reason),
            "{reports:?}"
        );
        // The command still ran here: its result is an extra execution.
        let ended = next_reports(&bench.executions, 1);
        assert!(matches!(&ended[0], (0, ShellReport::Ended(_))), "{ended:?}");
        assert!(Coordinator::close(pool, coordinator));
        bench.pool.done().unwrap();
    }
}
