//! The scenarios the original Constellation tests, ported and run on the
//! embedded pool with real executor threads.

use std::time::Duration;

use constellation::collect::{MultiEventCollector, SingleEventCollector};
use constellation::wire::{decode_activity, encode_activity, WireError};
use constellation::{
    Activity, ActivityCx, ContextList, DoneError, Event, ExecutorContext, Pool, Preference, Step,
    SubmitError,
};
use constellation_workloads::*;
use serde::{Deserialize, Serialize};

/// Results must arrive well within this; a hang fails the test instead of
/// blocking the suite.
const PATIENCE: Duration = Duration::from_secs(60);

fn fib_on(executors: usize, n: u32) -> (u64, constellation::RunSummary) {
    let pool = Pool::builder().executors(executors).start().unwrap();
    let (collector, result) = SingleEventCollector::new();
    let parent = pool.submit(collector).unwrap();
    pool.submit(Fib::new(n, parent)).unwrap();
    let value = result
        .wait_timeout(PATIENCE)
        .unwrap()
        .remove(0)
        .take::<u64>()
        .unwrap();
    (value, pool.done().unwrap())
}

#[test]
fn fibonacci_25_on_1_2_and_8_executors() {
    for executors in [1, 2, 8] {
        let (value, summary) = fib_on(executors, 25);
        assert_eq!(value, 75025, "{executors} executors");
        // Every fib activity plus the collector finished; nothing is left.
        assert_eq!(summary.counts.finished, fib_activities(25) + 1);
        assert_eq!(summary.counts.live, 0);
        assert_eq!(summary.counts.undeliverable, 0);
    }
}

#[test]
fn work_spreads_over_executors_by_stealing() {
    let (_, summary) = fib_on(4, 22);
    assert!(
        summary.counts.stolen > 0,
        "idle executors must steal: {:?}",
        summary.counts
    );
}

#[test]
fn fork_join_sums_every_child() {
    let pool = Pool::builder().executors(3).start().unwrap();
    let (collector, result) = SingleEventCollector::new();
    let parent = pool.submit(collector).unwrap();
    pool.submit(ForkJoin::new(1000, parent)).unwrap();
    let sum = result
        .wait_timeout(PATIENCE)
        .unwrap()
        .remove(0)
        .take::<u64>()
        .unwrap();
    assert_eq!(sum, (0..1000u64).map(|i| i * i).sum::<u64>());
    pool.done().unwrap();
}

#[test]
fn pipeline_with_unbalanced_stages_delivers_every_item_once() {
    let items = 200u64;
    let pool = Pool::builder().executors(2).trace(true).start().unwrap();
    let (collector, results) = MultiEventCollector::new(items as usize);
    let sink = pool.submit(collector).unwrap();
    for item in 0..items {
        pool.submit(PipelineStage::first(item, sink)).unwrap();
    }
    let mut seen: Vec<(u64, u64)> = results
        .wait_timeout(PATIENCE)
        .unwrap()
        .into_iter()
        .map(|event| event.take().unwrap())
        .collect();
    seen.sort_unstable();
    let expected: Vec<(u64, u64)> = (0..items).map(|i| (i, pipeline_expected(i))).collect();
    assert_eq!(seen, expected);
    let summary = pool.done().unwrap();
    // 3 stages per item plus the collector's initialize and its events.
    let initializes = summary
        .trace
        .iter()
        .filter(|r| r.call == constellation::trace::CallKind::Initialize)
        .count();
    assert_eq!(initializes as u64, 3 * items + 1);
    let mut busy = [0u64; 2];
    for record in &summary.trace {
        busy[record.executor] += record.end_ns - record.start_ns;
    }
    assert!(
        busy.iter().all(|&b| b > 0),
        "both executors must take part: {busy:?}"
    );
}

/// Runs `activities` on a pool built from `executors` while a gate holds the
/// executors, so everything is queued before anything is taken; returns
/// `(name, executor context)` in execution order.
fn run_gated(
    executors: Vec<ExecutorContext>,
    activities: &[(&str, &str)],
) -> Vec<(String, String)> {
    let mut builder = Pool::builder();
    for context in &executors {
        builder = builder.executor(context.clone());
    }
    let pool = builder.start().unwrap();
    let gate = Gate::default();
    for context in &executors {
        let holds = ContextList::single(context.contexts[0]);
        pool.submit(HoldAtGate::new(holds, gate.clone())).unwrap();
    }
    gate.until_waiting(executors.len());
    let (collector, results) = MultiEventCollector::new(activities.len());
    let reply_to = pool.submit(collector).unwrap();
    for (name, contexts) in activities {
        pool.submit(WhereDidIRun::new(
            *name,
            contexts.parse().unwrap(),
            reply_to,
        ))
        .unwrap();
    }
    gate.open();
    let order = results
        .wait_timeout(PATIENCE)
        .unwrap()
        .into_iter()
        .map(|event| event.take::<(String, String)>().unwrap())
        .collect();
    pool.done().unwrap();
    order
}

fn contexts(texts: &[&str]) -> Vec<ExecutorContext> {
    texts.iter().map(|t| t.parse().unwrap()).collect()
}

#[test]
fn gpu_activities_run_only_on_gpu_executors() {
    let work: Vec<(String, &str)> = (0..30u32)
        .map(|i| {
            (
                format!("job-{i}"),
                if i.is_multiple_of(3) { "GPU" } else { "CPU" },
            )
        })
        .collect();
    let work: Vec<(&str, &str)> = work.iter().map(|(n, c)| (n.as_str(), *c)).collect();
    let ran = run_gated(contexts(&["CPU,anywhere", "CPU", "GPU"]), &work);
    assert_eq!(ran.len(), 30);
    for (name, executor) in ran {
        let index: usize = name["job-".len()..].parse().unwrap();
        assert_eq!(
            index.is_multiple_of(3),
            executor == "GPU",
            "{name} ran on [{executor}]"
        );
    }
}

#[test]
fn location_list_runs_only_where_the_data_is() {
    let work: Vec<(String, &str)> = (0..20)
        .map(|i| (format!("pair-{i}"), "site:vu|site:uva"))
        .collect();
    let work: Vec<(&str, &str)> = work.iter().map(|(n, c)| (n.as_str(), *c)).collect();
    let ran = run_gated(
        contexts(&["site:lu,anywhere", "site:vu", "site:uva"]),
        &work,
    );
    assert_eq!(ran.len(), 20);
    assert!(
        ran.iter()
            .all(|(_, executor)| executor != "site:lu > anywhere"),
        "{ran:?}"
    );
}

#[test]
fn local_work_runs_before_the_anywhere_fallback() {
    let ran = run_gated(
        contexts(&["site:vu,anywhere"]),
        &[
            ("far-1", "anywhere"),
            ("near-1", "site:vu"),
            ("far-2", "anywhere"),
            ("near-2", "site:vu"),
            ("either", "site:vu>anywhere"),
        ],
    );
    let order: Vec<&str> = ran.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(order, ["near-1", "near-2", "either", "far-1", "far-2"]);
}

#[test]
fn rank_preference_orders_execution_on_one_executor() {
    let work = [
        ("r50", "size=50"),
        ("r10", "size=10"),
        ("r90", "size=90"),
        ("r30", "size=30"),
        ("r70", "size=70"),
    ];
    let cases = [
        (Preference::Biggest, ["r90", "r70", "r50", "r30", "r10"]),
        (Preference::Smallest, ["r10", "r30", "r50", "r70", "r90"]),
        (
            Preference::Range(25, 60),
            ["r30", "r50", "r10", "r70", "r90"],
        ),
    ];
    for (preference, expected) in cases {
        let executor = "size,anywhere"
            .parse::<ExecutorContext>()
            .unwrap()
            .with_preference(preference);
        let ran = run_gated(vec![executor], &work);
        let order: Vec<&str> = ran.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(order, expected, "{preference:?}");
    }
}

#[test]
fn unmatchable_activity_is_refused_and_the_pool_keeps_working() {
    let pool = Pool::builder().executors(2).start().unwrap();
    let (collector, result) = SingleEventCollector::new();
    let reply_to = pool.submit(collector).unwrap();
    let refused = pool.submit(WhereDidIRun::new(
        "kernel",
        "GPU".parse().unwrap(),
        reply_to,
    ));
    let Err(SubmitError::NoSuitableExecutor { offered, .. }) = refused else {
        panic!("expected NoSuitableExecutor, got {refused:?}");
    };
    assert_eq!(offered, "[anywhere]");
    pool.submit(WhereDidIRun::new(
        "plain",
        ContextList::anywhere(),
        reply_to,
    ))
    .unwrap();
    let (name, _) = result
        .wait_timeout(PATIENCE)
        .unwrap()
        .remove(0)
        .take::<(String, String)>()
        .unwrap();
    assert_eq!(name, "plain");
    pool.done().unwrap();
}

/// Submits a child nobody can run, from inside an activity, and reports the error text.
#[derive(Serialize, Deserialize)]
struct SubmitsTheImpossible {
    reply_to: constellation::ActivityId,
}

#[typetag::serde]
impl Activity for SubmitsTheImpossible {
    fn initialize(&mut self, cx: &mut ActivityCx<'_>) -> Step {
        let child = WhereDidIRun::new("child", "FPGA".parse().unwrap(), self.reply_to);
        let outcome = cx.submit(child).map(|_| ()).map_err(|e| e.to_string());
        cx.send(self.reply_to, outcome);
        Step::Finish
    }

    fn process(&mut self, _cx: &mut ActivityCx<'_>, _event: Event) -> Step {
        Step::Finish
    }
}

#[test]
fn unmatchable_submit_from_inside_an_activity_is_an_error_there() {
    let pool = Pool::builder().executors(1).start().unwrap();
    let (collector, result) = SingleEventCollector::new();
    let reply_to = pool.submit(collector).unwrap();
    pool.submit(SubmitsTheImpossible { reply_to }).unwrap();
    let outcome = result
        .wait_timeout(PATIENCE)
        .unwrap()
        .remove(0)
        .take::<Result<(), String>>()
        .unwrap();
    let message = outcome.unwrap_err();
    assert!(
        message.contains("FPGA") && message.contains("no executor can run"),
        "{message}"
    );
    pool.done().unwrap();
}

#[test]
fn unknown_activity_type_is_a_clear_decode_error() {
    // What another build would send: a type name this binary does not have.
    let mut bytes = Vec::new();
    let foreign = std::collections::BTreeMap::from([("GalaxyClassifier", 7u32)]);
    rmp_serde::encode::write(&mut bytes, &foreign).unwrap();
    let error = decode_activity(&bytes).err().expect("must not decode");
    assert!(
        matches!(&error, WireError::UnknownActivityType { name } if name == "GalaxyClassifier"),
        "{error}"
    );
    assert!(error.to_string().contains("GalaxyClassifier"));

    let error = decode_activity(&[0x93, 0x01])
        .err()
        .expect("must not decode");
    assert!(matches!(error, WireError::Malformed { .. }), "{error}");

    // A known type round-trips, which is what lets a node run work it never saw submitted.
    let parent = Pool::builder().executors(1).start().unwrap().address();
    let bytes = encode_activity(&Fib::new(10, parent)).unwrap();
    assert!(decode_activity(&bytes).is_ok());
}

/// Sends one event to an id that does not exist, then finishes.
#[derive(Serialize, Deserialize)]
struct WritesToNobody {
    nobody: constellation::ActivityId,
}

#[typetag::serde]
impl Activity for WritesToNobody {
    fn initialize(&mut self, cx: &mut ActivityCx<'_>) -> Step {
        cx.send(self.nobody, "hello?".to_string());
        Step::Finish
    }

    fn process(&mut self, _cx: &mut ActivityCx<'_>, _event: Event) -> Step {
        Step::Finish
    }
}

#[test]
fn events_for_missing_activities_are_reported_not_lost() {
    let pool = Pool::builder().executors(2).start().unwrap();
    let nobody = constellation::ActivityId::new(pool.node(), 999_999);
    let error = pool.send(nobody, 1u32).unwrap_err();
    assert_eq!(error.event.target, nobody);
    assert!(error.to_string().contains("no such activity"), "{error}");
    pool.submit(WritesToNobody { nobody }).unwrap();
    let summary = pool.done().unwrap();
    assert_eq!(summary.counts.undeliverable, 2, "both attempts are counted");
}

/// Panics in `initialize`.
#[derive(Serialize, Deserialize)]
struct Explodes;

#[typetag::serde]
impl Activity for Explodes {
    fn initialize(&mut self, _cx: &mut ActivityCx<'_>) -> Step {
        panic!("bad pixel data");
    }

    fn process(&mut self, _cx: &mut ActivityCx<'_>, _event: Event) -> Step {
        Step::Finish
    }
}

#[test]
fn a_panicking_activity_fails_alone() {
    let pool = Pool::builder().executors(2).start().unwrap();
    pool.submit(Explodes).unwrap();
    let (collector, result) = SingleEventCollector::new();
    let parent = pool.submit(collector).unwrap();
    pool.submit(Fib::new(15, parent)).unwrap();
    assert_eq!(
        result
            .wait_timeout(PATIENCE)
            .unwrap()
            .remove(0)
            .take::<u64>()
            .unwrap(),
        610
    );
    let summary = pool.done().unwrap();
    assert_eq!(summary.failed_calls, 1);
}

#[test]
fn done_reports_activities_that_can_never_finish() {
    let pool = Pool::builder().executors(2).start().unwrap();
    let (collector, result) = MultiEventCollector::new(3);
    pool.submit(collector).unwrap();
    let Err(DoneError::Stalled { live, examples, .. }) = pool.done() else {
        panic!("a collector waiting for events nobody sends is a stall");
    };
    assert_eq!(live, 1);
    assert_eq!(examples.len(), 1);
    // The waiting main program is released, not left hanging.
    assert!(matches!(
        result.wait_timeout(PATIENCE),
        Err(constellation::collect::CollectError::Abandoned {
            received: 0,
            expected: 3
        })
    ));
}

#[test]
fn a_pool_needs_executors() {
    assert!(matches!(
        Pool::builder().start(),
        Err(constellation::PoolError::NoExecutors)
    ));
}

#[test]
fn trace_records_every_call_with_its_executor_and_labels() {
    let pool = Pool::builder()
        .executor("GPU".parse().unwrap())
        .executor("anywhere".parse().unwrap())
        .trace(true)
        .start()
        .unwrap();
    let (collector, results) = MultiEventCollector::new(10);
    let reply_to = pool.submit(collector).unwrap();
    for i in 0..10 {
        pool.submit(WhereDidIRun::new(
            format!("k{i}"),
            "GPU".parse().unwrap(),
            reply_to,
        ))
        .unwrap();
    }
    results.wait_timeout(PATIENCE).unwrap();
    let summary = pool.done().unwrap();
    let gpu_calls: Vec<_> = summary
        .trace
        .iter()
        .filter(|r| r.contexts.to_string() == "GPU")
        .collect();
    assert_eq!(gpu_calls.len(), 10);
    assert!(gpu_calls
        .iter()
        .all(|r| r.executor == 0 && r.start_ns <= r.end_ns));
    let mut csv = Vec::new();
    constellation::trace::write_csv(&mut csv, &summary.trace).unwrap();
    let csv = String::from_utf8(csv).unwrap();
    assert!(csv.starts_with("activity,executor,labels,call,end,start_ns,end_ns\n"));
    assert_eq!(csv.lines().count(), summary.trace.len() + 1);
}

/// Runs on a CPU executor and submits GPU work from there.
#[derive(Serialize, Deserialize)]
struct OffloadsToGpu {
    kernels: usize,
    reply_to: constellation::ActivityId,
}

#[typetag::serde]
impl Activity for OffloadsToGpu {
    fn context(&self) -> ContextList {
        "CPU".parse().expect("a valid context")
    }

    fn initialize(&mut self, cx: &mut ActivityCx<'_>) -> Step {
        for i in 0..self.kernels {
            let kernel =
                WhereDidIRun::new(format!("kernel-{i}"), "GPU".parse().unwrap(), self.reply_to);
            cx.submit(kernel).expect("the pool has a GPU executor");
        }
        Step::Finish
    }

    fn process(&mut self, _cx: &mut ActivityCx<'_>, _event: Event) -> Step {
        Step::Finish
    }
}

#[test]
fn work_submitted_on_a_cpu_executor_reaches_the_gpu_executor() {
    let pool = Pool::builder()
        .executor("CPU,anywhere".parse().unwrap())
        .executor("GPU".parse().unwrap())
        .start()
        .unwrap();
    let (collector, results) = MultiEventCollector::new(8);
    let reply_to = pool.submit(collector).unwrap();
    pool.submit(OffloadsToGpu {
        kernels: 8,
        reply_to,
    })
    .unwrap();
    let ran = results.wait_timeout(PATIENCE).unwrap();
    assert!(ran
        .into_iter()
        .map(|event| event.take::<(String, String)>().unwrap().1)
        .all(|executor| executor == "GPU"));
    pool.done().unwrap();
}

/// Many short runs, each checked exactly: a pool that declared itself done
/// while work was still moving between executors would finish fewer
/// activities than submitted, lose a result, or report a stall.
/// `STRESS_ROUNDS` raises the number of runs (default 40).
#[test]
fn repeated_runs_finish_exactly_what_they_started() {
    let rounds: u32 = std::env::var("STRESS_ROUNDS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(40);
    for round in 0..rounds {
        let executors = 2 + (round % 4) as usize;
        let pool = Pool::builder().executors(executors).start().unwrap();
        let (collector, results) = MultiEventCollector::new(3);
        let sink = pool.submit(collector).unwrap();
        pool.submit(Fib::new(12 + round % 5, sink)).unwrap();
        pool.submit(ForkJoin::new(50, sink)).unwrap();
        pool.submit(Fib::new(10, sink)).unwrap();
        // Trivial work racing the rest from outside.
        for _ in 0..100 {
            pool.submit(Trivial).unwrap();
        }
        let values: Vec<u64> = results
            .wait_timeout(PATIENCE)
            .unwrap()
            .into_iter()
            .map(|event| event.take().unwrap())
            .collect();
        assert_eq!(values.len(), 3);
        let summary = pool.done().unwrap();
        let expected = fib_activities(12 + round % 5) + fib_activities(10) + 51 + 100 + 1;
        assert_eq!(summary.counts.finished, expected, "round {round}");
        assert_eq!(summary.counts.live, 0);
    }
}

/// Sleeps, then submits `children` sleepers that report where they ran.
#[derive(Serialize, Deserialize)]
struct SlowParent {
    children: usize,
    reply_to: constellation::ActivityId,
}

#[typetag::serde]
impl Activity for SlowParent {
    fn initialize(&mut self, cx: &mut ActivityCx<'_>) -> Step {
        // Long enough for every other executor to stop spinning and park.
        std::thread::sleep(Duration::from_millis(20));
        for i in 0..self.children {
            cx.submit(Sleeper {
                name: format!("child-{i}"),
                reply_to: self.reply_to,
            })
            .unwrap();
        }
        Step::Finish
    }

    fn process(&mut self, _cx: &mut ActivityCx<'_>, _event: Event) -> Step {
        Step::Finish
    }
}

/// Sleeps 30 ms and reports the executor index it ran on.
#[derive(Serialize, Deserialize)]
struct Sleeper {
    name: String,
    reply_to: constellation::ActivityId,
}

#[typetag::serde]
impl Activity for Sleeper {
    fn initialize(&mut self, cx: &mut ActivityCx<'_>) -> Step {
        std::thread::sleep(Duration::from_millis(30));
        cx.send(self.reply_to, cx.executor_index() as u64);
        Step::Finish
    }

    fn process(&mut self, _cx: &mut ActivityCx<'_>, _event: Event) -> Step {
        Step::Finish
    }
}

#[test]
fn parked_executors_wake_to_steal_new_children() {
    let pool = Pool::builder().executors(4).start().unwrap();
    let (collector, results) = MultiEventCollector::new(8);
    let reply_to = pool.submit(collector).unwrap();
    pool.submit(SlowParent {
        children: 8,
        reply_to,
    })
    .unwrap();
    let executors: std::collections::BTreeSet<u64> = results
        .wait_timeout(PATIENCE)
        .unwrap()
        .into_iter()
        .map(|event| event.take().unwrap())
        .collect();
    // 8 × 30 ms of sleeping: one executor alone would take 240 ms; the
    // parked ones must have been woken to share it.
    assert!(
        executors.len() >= 3,
        "children ran on executors {executors:?}"
    );
    pool.done().unwrap();
}

#[test]
fn outside_submissions_after_a_pause_wake_parked_executors() {
    let pool = Pool::builder().executors(3).start().unwrap();
    let (collector, results) = MultiEventCollector::new(6);
    let reply_to = pool.submit(collector).unwrap();
    for i in 0..6 {
        // Every executor has parked by the time the next one arrives.
        std::thread::sleep(Duration::from_millis(5));
        pool.submit(Sleeper {
            name: format!("late-{i}"),
            reply_to,
        })
        .unwrap();
    }
    assert_eq!(results.wait_timeout(PATIENCE).unwrap().len(), 6);
    pool.done().unwrap();
}

/// Submits children that only another executor can run.
#[derive(Serialize, Deserialize)]
struct HandOff {
    children: usize,
    reply_to: constellation::ActivityId,
}

#[typetag::serde]
impl Activity for HandOff {
    fn context(&self) -> ContextList {
        "a".parse().unwrap()
    }

    fn initialize(&mut self, cx: &mut ActivityCx<'_>) -> Step {
        for k in 0..self.children {
            let child =
                WhereDidIRun::new(format!("child-{k}"), "b".parse().unwrap(), self.reply_to);
            cx.submit(child).unwrap();
        }
        Step::Finish
    }

    fn process(&mut self, _cx: &mut ActivityCx<'_>, _event: Event) -> Step {
        Step::Finish
    }
}

/// An executor that goes idle just as another publishes work only it can
/// run must still be woken. This raced once: the submitter checked for idle
/// executors before it published the work, so one that parked in between
/// slept through it, and a graph coordinator waited forever. The window is
/// narrow; pools on several threads at once, more threads than cores, make
/// the preemption that widens it common enough to catch the old code in
/// most runs of this test.
#[test]
fn work_only_an_idle_executor_can_run_wakes_it() {
    let rounds = |thread: u64| {
        for round in 0..250u64 {
            let pool = Pool::builder()
                .executors_with(1, "a".parse().unwrap())
                .executors_with(1, "b".parse().unwrap())
                .start()
                .unwrap();
            let (collector, results) = MultiEventCollector::new(3);
            let collector = collector.on("b".parse().unwrap());
            let reply_to = pool.submit(collector).unwrap();
            // Let executor `b` go idle at varying moments, as it would
            // between graph nodes.
            std::thread::sleep(Duration::from_micros(10 * ((round + thread) % 12)));
            pool.submit(HandOff {
                children: 3,
                reply_to,
            })
            .unwrap();
            let ran = results
                .wait_timeout(Duration::from_secs(10))
                .unwrap_or_else(|e| panic!("thread {thread}, round {round}: {e}"));
            assert_eq!(ran.len(), 3);
            pool.done().unwrap();
        }
    };
    std::thread::scope(|scope| {
        for thread in 0..4 {
            scope.spawn(move || rounds(thread));
        }
    });
}
