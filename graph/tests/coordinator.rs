//! The coordinator on a real pool with real commands: a bounded window of
//! submitted work per context, and work stuck in one context never holding
//! back another's.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use constellation::collect::MultiEventCollector;
use constellation::{Context, ContextList, ExecutorContext, Pool};
use executors::shell::Capture;
use graph::{Coordinator, Format, Graph, NodeReport, COORDINATOR_LABEL};

/// Generous for a loaded 2-core machine; the runs take seconds.
const PATIENCE: Duration = Duration::from_secs(300);

fn graph(text: &str) -> Arc<Graph> {
    Arc::new(
        Graph::parse(text, Format::Toml, "pipeline.toml", Path::new("."))
            .unwrap_or_else(|e| panic!("{e}")),
    )
}

/// A pool with `executors` and the coordinator's executor.
fn pool(executors: &[ExecutorContext]) -> Pool {
    let builder = executors.iter().fold(Pool::builder(), |builder, context| {
        builder.executor(context.clone())
    });
    builder
        .executor(ExecutorContext::new([Context::new(COORDINATOR_LABEL)]))
        .start()
        .unwrap()
}

#[test]
fn the_window_bounds_the_work_submitted_at_once() {
    let graph =
        graph("[[activity]]\nid = \"t-{i}\"\nfor = { i = \"1..=200\" }\ncommand = \"true\"\n");
    let pool = pool(&[ExecutorContext::anywhere(), ExecutorContext::anywhere()]);
    let coordination = ContextList::single(Context::new(COORDINATOR_LABEL));
    let (collector, reports) = MultiEventCollector::new(graph.len());
    let observer = pool.submit(collector.on(coordination)).unwrap();
    let window = 5;
    let coordinator = Coordinator::new(Arc::clone(&graph), &vec![false; graph.len()], observer)
        .with_capture(Capture::Discard)
        .with_window(window);
    let counts = coordinator.released();
    pool.submit(coordinator).unwrap();
    let (mut settled, mut most_live) = (0, 0);
    let deadline = Instant::now() + PATIENCE;
    while let Some(batch) = reports.next_batch(Duration::from_millis(5)).unwrap() {
        // What the pool holds: the shell activities in flight, plus the
        // coordinator and the collector.
        most_live = most_live.max(pool.counts().live);
        for event in batch {
            let report: NodeReport = event.take().unwrap();
            assert!(report.is_success(), "{report:?}");
            settled += 1;
        }
        assert!(Instant::now() < deadline, "{settled} of 200 settled");
    }
    assert_eq!(settled, 200);
    // The coordinator's own count is exact: never more than the window.
    // The pool's is a sum over its executors' schedulers read one after
    // another, so an activity stolen from one to another while they are
    // read counts twice: at most twice the window and the two others (the
    // coordinator and the collector), and far from the 200 a coordinator
    // without a window puts in the pool at once.
    assert!(most_live <= 2 * (window + 2), "{most_live} live activities");
    assert!(counts.most_in_flight(0) <= window);
    assert!(
        counts.most_in_flight(0) >= 2,
        "two executors, so two at once"
    );
    assert_eq!(counts.released(0), 0);
    pool.done().unwrap();
}

#[test]
fn work_stuck_in_one_context_does_not_hold_back_another() {
    let dir = std::env::temp_dir().join(format!("graph-coordinator-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let gate = dir.join("go");
    let _ = std::fs::remove_file(&gate);
    // The gpu work waits for a file that appears only once all the cpu
    // work is done: with one window for all contexts it would fill the
    // window and the cpu work would never be submitted.
    let text = format!(
        "[[activity]]\nid = \"gpu-{{i}}\"\nfor = {{ i = \"1..=20\" }}\ncontext = \"gpu\"\n\
         script = \"while [ ! -e {gate} ]; do sleep 0.05; done\"\n\n\
         [[activity]]\nid = \"cpu-{{i}}\"\nfor = {{ i = \"1..=30\" }}\ncontext = \"cpu\"\ncommand = \"true\"\n",
        gate = gate.display()
    );
    let graph = graph(&text);
    let cpu = ExecutorContext::new([Context::new("cpu")]);
    let gpu = ExecutorContext::new([Context::new("gpu")]);
    let pool = pool(&[cpu, gpu]);
    let coordination = ContextList::single(Context::new(COORDINATOR_LABEL));
    let (collector, reports) = MultiEventCollector::new(graph.len());
    let observer = pool.submit(collector.on(coordination)).unwrap();
    let window = 4;
    let coordinator = Coordinator::new(Arc::clone(&graph), &vec![false; graph.len()], observer)
        .with_capture(Capture::Discard)
        .with_window(window);
    let counts = coordinator.released();
    pool.submit(coordinator).unwrap();
    let gpu_context = graph.context_of(0);
    let cpu_context = graph.context_of(20);
    let mut cpu_done = 0;
    let deadline = Instant::now() + PATIENCE;
    while cpu_done < 30 {
        let batch = reports.next_batch(Duration::from_millis(50)).unwrap();
        for event in batch.into_iter().flatten() {
            let report: NodeReport = event.take().unwrap();
            assert!(
                report.node() >= 20,
                "gpu work ran before the gate: {report:?}"
            );
            assert!(report.is_success(), "{report:?}");
            cpu_done += 1;
        }
        assert!(
            Instant::now() < deadline,
            "{cpu_done} of 30 cpu activities done"
        );
    }
    // All the gpu work is released and waits; only a window of it is in
    // the pool.
    assert_eq!(counts.released(gpu_context), 20);
    assert_eq!(counts.in_flight(gpu_context), window);
    assert_eq!(counts.released(cpu_context), 0);
    std::fs::write(&gate, "").unwrap();
    let mut gpu_done = 0;
    while let Some(batch) = reports.next_batch(Duration::from_millis(50)).unwrap() {
        for event in batch {
            let report: NodeReport = event.take().unwrap();
            assert!(report.is_success() && report.node() < 20, "{report:?}");
            gpu_done += 1;
        }
        assert!(
            Instant::now() < deadline,
            "{gpu_done} of 20 gpu activities done"
        );
    }
    assert_eq!(gpu_done, 20);
    assert!(counts.most_in_flight(gpu_context) <= window);
    pool.done().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
