//! Reference workloads, ported from the scenarios the original Constellation
//! tests: divide-and-conquer Fibonacci with events, fork-join, a pipeline
//! with unbalanced stages, ping-pong, and small activities for checking
//! context matching. The scenario tests, the `fib` demo and the benchmarks
//! all run these.

#![warn(unreachable_pub)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use constellation::{Activity, ActivityCx, ActivityId, ContextList, Event, Step};
use serde::{Deserialize, Serialize};

/// fib(n) by divide and conquer: each activity submits fib(n-1) and fib(n-2)
/// and sums the two events they send back. fib(n) creates 2·fib(n+1)−1 activities.
#[derive(Serialize, Deserialize)]
pub struct Fib {
    n: u32,
    parent: ActivityId,
    sum: u64,
    waiting: u8,
}

impl Fib {
    /// fib(`n`), whose result goes to `parent` as a `u64` event.
    pub fn new(n: u32, parent: ActivityId) -> Self {
        Fib {
            n,
            parent,
            sum: 0,
            waiting: 0,
        }
    }
}

/// The number of activities `Fib::new(n, _)` creates.
pub fn fib_activities(n: u32) -> u64 {
    2 * fib_sequential(n + 1) - 1
}

/// fib(n) computed directly, to check results against.
pub fn fib_sequential(n: u32) -> u64 {
    let (mut a, mut b) = (0u64, 1u64);
    for _ in 0..n {
        (a, b) = (b, a + b);
    }
    a
}

#[typetag::serde]
impl Activity for Fib {
    fn initialize(&mut self, cx: &mut ActivityCx<'_>) -> Step {
        if self.n < 2 {
            cx.send(self.parent, u64::from(self.n));
            return Step::Finish;
        }
        let me = cx.id();
        for n in [self.n - 1, self.n - 2] {
            cx.submit(Fib::new(n, me)).expect("fib runs anywhere");
        }
        self.waiting = 2;
        Step::Suspend
    }

    fn process(&mut self, cx: &mut ActivityCx<'_>, event: Event) -> Step {
        self.sum += event.take::<u64>().expect("children send u64");
        self.waiting -= 1;
        if self.waiting > 0 {
            return Step::Suspend;
        }
        cx.send(self.parent, self.sum);
        Step::Finish
    }
}

/// An activity that does nothing and finishes: measures pure overhead.
#[derive(Serialize, Deserialize, Default)]
pub struct Trivial;

#[typetag::serde]
impl Activity for Trivial {
    fn initialize(&mut self, _cx: &mut ActivityCx<'_>) -> Step {
        Step::Finish
    }

    fn process(&mut self, _cx: &mut ActivityCx<'_>, _event: Event) -> Step {
        Step::Finish
    }
}

/// Burns CPU for about `micros` microseconds, the way a real step would.
pub fn spin_for(micros: u64) {
    let until = Instant::now() + Duration::from_micros(micros);
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// Fork-join: submits `children` squarers and sends the sum of their answers
/// to `parent`.
#[derive(Serialize, Deserialize)]
pub struct ForkJoin {
    children: u64,
    parent: ActivityId,
    received: u64,
    sum: u64,
}

impl ForkJoin {
    /// Forks `children` activities; the sum of i² for i in 0..children goes to `parent`.
    pub fn new(children: u64, parent: ActivityId) -> Self {
        ForkJoin {
            children,
            parent,
            received: 0,
            sum: 0,
        }
    }
}

#[typetag::serde]
impl Activity for ForkJoin {
    fn initialize(&mut self, cx: &mut ActivityCx<'_>) -> Step {
        let me = cx.id();
        for i in 0..self.children {
            cx.submit(Square { x: i, reply_to: me })
                .expect("squares run anywhere");
        }
        if self.children == 0 {
            cx.send(self.parent, 0u64);
            return Step::Finish;
        }
        Step::Suspend
    }

    fn process(&mut self, cx: &mut ActivityCx<'_>, event: Event) -> Step {
        self.sum += event.take::<u64>().expect("squares send u64");
        self.received += 1;
        if self.received < self.children {
            return Step::Suspend;
        }
        cx.send(self.parent, self.sum);
        Step::Finish
    }
}

/// Sends x² to `reply_to`.
#[derive(Serialize, Deserialize)]
pub struct Square {
    x: u64,
    reply_to: ActivityId,
}

#[typetag::serde]
impl Activity for Square {
    fn initialize(&mut self, cx: &mut ActivityCx<'_>) -> Step {
        cx.send(self.reply_to, self.x * self.x);
        Step::Finish
    }

    fn process(&mut self, _cx: &mut ActivityCx<'_>, _event: Event) -> Step {
        Step::Finish
    }
}

/// Cost of each pipeline stage in microseconds: the middle stage dominates,
/// like step 7 of the supernova pipeline.
pub const STAGE_COST_MICROS: [u64; 3] = [20, 400, 20];

/// One item at one stage of a three-stage pipeline. Each stage burns its
/// cost, transforms the value and submits the next stage; the last stage
/// sends `(item, value)` to `sink`.
#[derive(Serialize, Deserialize)]
pub struct PipelineStage {
    item: u64,
    stage: usize,
    value: u64,
    sink: ActivityId,
}

impl PipelineStage {
    /// Item `item` entering the first stage.
    pub fn first(item: u64, sink: ActivityId) -> Self {
        PipelineStage {
            item,
            stage: 0,
            value: item,
            sink,
        }
    }
}

/// What the pipeline computes for `item`: ((item + 1) · 3) − 2.
pub fn pipeline_expected(item: u64) -> u64 {
    (item + 1) * 3 - 2
}

#[typetag::serde]
impl Activity for PipelineStage {
    fn initialize(&mut self, cx: &mut ActivityCx<'_>) -> Step {
        spin_for(STAGE_COST_MICROS[self.stage]);
        let value = match self.stage {
            0 => self.value + 1,
            1 => self.value * 3,
            _ => self.value - 2,
        };
        if self.stage + 1 < STAGE_COST_MICROS.len() {
            cx.submit(PipelineStage {
                item: self.item,
                stage: self.stage + 1,
                value,
                sink: self.sink,
            })
            .expect("stages run anywhere");
        } else {
            cx.send(self.sink, (self.item, value));
        }
        Step::Finish
    }

    fn process(&mut self, _cx: &mut ActivityCx<'_>, _event: Event) -> Step {
        Step::Finish
    }
}

/// One side of a ping-pong: whoever receives `k > 0` returns `k − 1` to the
/// sender; a player finishes once the count is down to zero on its side,
/// and then tells `done`.
#[derive(Serialize, Deserialize)]
pub struct Player {
    contexts: ContextList,
    serve: Option<(ActivityId, u64)>,
    done: ActivityId,
}

impl Player {
    /// A player that waits for the ball.
    pub fn receiver(contexts: ContextList, done: ActivityId) -> Self {
        Player {
            contexts,
            serve: None,
            done,
        }
    }

    /// A player that serves `rounds` to `peer` when it starts.
    pub fn server(contexts: ContextList, peer: ActivityId, rounds: u64, done: ActivityId) -> Self {
        Player {
            contexts,
            serve: Some((peer, rounds)),
            done,
        }
    }
}

#[typetag::serde]
impl Activity for Player {
    fn context(&self) -> ContextList {
        self.contexts.clone()
    }

    fn initialize(&mut self, cx: &mut ActivityCx<'_>) -> Step {
        if let Some((peer, rounds)) = self.serve {
            cx.send(peer, rounds);
        }
        Step::Suspend
    }

    fn process(&mut self, cx: &mut ActivityCx<'_>, event: Event) -> Step {
        let from = event.source;
        let count = event.take::<u64>().expect("players send u64");
        if count > 0 {
            cx.send(from, count - 1);
        }
        if count <= 1 {
            cx.send(self.done, cx.executor_index() as u64);
            return Step::Finish;
        }
        Step::Suspend
    }
}

/// A shared gate: activities that wait on it hold their executor until the
/// test opens it, so the test can queue work before anything is taken.
#[derive(Default, Clone)]
pub struct Gate(Arc<(std::sync::Mutex<GateState>, std::sync::Condvar)>);

#[derive(Default)]
struct GateState {
    open: bool,
    waiting: usize,
}

impl Gate {
    /// Blocks until `count` activities are waiting at the gate.
    pub fn until_waiting(&self, count: usize) {
        let (state, changed) = &*self.0;
        let mut guard = state.lock().expect("gate lock");
        while guard.waiting < count {
            guard = changed.wait(guard).expect("gate lock");
        }
    }

    /// Lets every waiter through.
    pub fn open(&self) {
        let (state, changed) = &*self.0;
        state.lock().expect("gate lock").open = true;
        changed.notify_all();
    }

    fn wait(&self) {
        let (state, changed) = &*self.0;
        let mut guard = state.lock().expect("gate lock");
        guard.waiting += 1;
        changed.notify_all();
        while !guard.open {
            guard = changed.wait(guard).expect("gate lock");
        }
    }
}

/// Waits at a gate, occupying one executor; never travels.
#[derive(Serialize, Deserialize)]
pub struct HoldAtGate {
    contexts: ContextList,
    #[serde(skip)]
    gate: Gate,
}

impl HoldAtGate {
    /// Holds an executor matching `contexts` until `gate` opens.
    pub fn new(contexts: ContextList, gate: Gate) -> Self {
        HoldAtGate { contexts, gate }
    }
}

#[typetag::serde]
impl Activity for HoldAtGate {
    fn context(&self) -> ContextList {
        self.contexts.clone()
    }

    fn may_be_stolen(&self) -> bool {
        false
    }

    fn initialize(&mut self, _cx: &mut ActivityCx<'_>) -> Step {
        self.gate.wait();
        Step::Finish
    }

    fn process(&mut self, _cx: &mut ActivityCx<'_>, _event: Event) -> Step {
        Step::Finish
    }
}

/// Reports `(name, executor context)` to `reply_to`, so a test can see where
/// and in which order activities ran.
#[derive(Serialize, Deserialize)]
pub struct WhereDidIRun {
    name: String,
    contexts: ContextList,
    reply_to: ActivityId,
}

impl WhereDidIRun {
    /// An activity called `name` that needs `contexts`.
    pub fn new(name: impl Into<String>, contexts: ContextList, reply_to: ActivityId) -> Self {
        WhereDidIRun {
            name: name.into(),
            contexts,
            reply_to,
        }
    }
}

#[typetag::serde]
impl Activity for WhereDidIRun {
    fn context(&self) -> ContextList {
        self.contexts.clone()
    }

    fn initialize(&mut self, cx: &mut ActivityCx<'_>) -> Step {
        let executor = cx.executor_context().to_string();
        cx.send(self.reply_to, (self.name.clone(), executor));
        Step::Finish
    }

    fn process(&mut self, _cx: &mut ActivityCx<'_>, _event: Event) -> Step {
        Step::Finish
    }
}

/// Executions of [`BagItem`] in this process, for exactly-once counts.
pub static BAG_RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// One item of a bag of independent tasks: burns `spin_us` of CPU, then
/// reports `(index, node, executor labels)` to `reply_to`, so a test can see
/// that each ran once and where.
#[derive(Serialize, Deserialize)]
pub struct BagItem {
    /// Which item.
    pub index: u64,
    /// Where the report goes.
    pub reply_to: ActivityId,
    /// Where it may run.
    pub contexts: ContextList,
    /// CPU time to burn, in microseconds.
    pub spin_us: u64,
}

/// What a [`BagItem`] reports.
pub type BagReport = (u64, constellation::NodeId, String);

#[typetag::serde]
impl Activity for BagItem {
    fn context(&self) -> ContextList {
        self.contexts.clone()
    }

    fn initialize(&mut self, cx: &mut ActivityCx<'_>) -> Step {
        BAG_RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        spin_for(self.spin_us);
        let labels = cx.executor_context().label_list();
        let report: BagReport = (self.index, cx.node(), labels);
        cx.send(self.reply_to, report);
        Step::Finish
    }

    fn process(&mut self, _cx: &mut ActivityCx<'_>, _event: Event) -> Step {
        Step::Finish
    }
}

/// Bats a counter back and forth with its peer, timing each round trip
/// where it runs, and sends the round-trip times in nanoseconds to `done`.
#[derive(Serialize, Deserialize)]
pub struct TimedPlayer {
    contexts: ContextList,
    serve: Option<(ActivityId, u64)>,
    done: ActivityId,
    #[serde(skip)]
    sent_at: Option<Instant>,
    #[serde(skip)]
    times: Vec<u64>,
}

impl TimedPlayer {
    /// The player that waits for the ball; runs where `contexts` says.
    pub fn receiver(contexts: ContextList, done: ActivityId) -> Self {
        TimedPlayer {
            contexts,
            serve: None,
            done,
            sent_at: None,
            times: Vec::new(),
        }
    }

    /// The player that serves `rounds` to `peer` and times them.
    pub fn server(contexts: ContextList, peer: ActivityId, rounds: u64, done: ActivityId) -> Self {
        TimedPlayer {
            contexts,
            serve: Some((peer, rounds)),
            done,
            sent_at: None,
            times: Vec::new(),
        }
    }
}

#[typetag::serde]
impl Activity for TimedPlayer {
    fn context(&self) -> ContextList {
        self.contexts.clone()
    }

    fn may_be_stolen(&self) -> bool {
        // The server times on its own clock; the receiver must travel.
        self.serve.is_none()
    }

    fn initialize(&mut self, cx: &mut ActivityCx<'_>) -> Step {
        if let Some((peer, rounds)) = self.serve {
            self.sent_at = Some(Instant::now());
            cx.send(peer, rounds);
        }
        Step::Suspend
    }

    fn process(&mut self, cx: &mut ActivityCx<'_>, event: Event) -> Step {
        let from = event.source;
        let count = event.take::<u64>().expect("players send u64");
        if let Some(sent) = self.sent_at.take() {
            self.times.push(sent.elapsed().as_nanos() as u64);
        }
        if count > 0 {
            if self.serve.is_some() {
                self.sent_at = Some(Instant::now());
            }
            cx.send(from, count - 1);
        }
        if count <= 1 {
            if self.serve.is_some() {
                cx.send(self.done, std::mem::take(&mut self.times));
            }
            return Step::Finish;
        }
        Step::Suspend
    }
}

/// Runs `test` on its own thread and fails if it takes longer than `limit`,
/// so a multi-node test cannot hang CI. Logs go to the test's output
/// (`RUST_LOG` filters them).
pub fn within_limit(limit: Duration, test: impl FnOnce() + Send + 'static) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let (done, finished) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        test();
        let _ = done.send(());
    });
    match finished.recv_timeout(limit) {
        Ok(()) => thread.join().expect("the test thread ended"),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            // The test panicked: report its panic.
            if let Err(panic) = thread.join() {
                std::panic::resume_unwind(panic);
            }
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("the test took longer than {limit:?}")
        }
    }
}
