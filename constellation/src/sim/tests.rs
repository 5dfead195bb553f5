//! The simulator on small pools, where the expected figures can be worked
//! out by hand.

use std::collections::HashMap;

use super::*;
use crate::context::{Context, ContextList, ExecutorContext};
use crate::protocol::strategy::Strategy;

fn anywhere() -> ExecutorContext {
    ExecutorContext::anywhere()
}

/// `nodes` nodes of `executors` anywhere-executors each, dealt over `sites`
/// sites with latency-only links.
fn pool(nodes: usize, executors: usize, sites: usize, strategy: Strategy) -> Model {
    let sites_list: Vec<Site> = (0..sites)
        .map(|i| Site {
            name: format!("site{i}"),
            within: Link::latency(100e-6),
        })
        .collect();
    let nodes = (0..nodes)
        .map(|i| NodeSpec::uniform(format!("n{i}"), i % sites, executors, anywhere()))
        .collect();
    let mut model = Model::new(sites_list, nodes).with_strategy(strategy);
    model.wide_area = Link::latency(5e-3);
    model
}

fn completed(report: &SimReport) -> Vec<&AttemptRecord> {
    (report.records.iter())
        .filter(|r| r.outcome == AttemptEnd::Completed)
        .collect()
}

#[test]
fn one_node_runs_a_uniform_bag_in_sum_over_executors() {
    let model = pool(1, 4, 1, Strategy::Random);
    let report = simulate(&model, &Workload::bag(100, 1.5, ContextList::anywhere())).unwrap();
    assert_eq!(report.makespan, 100.0 * 1.5 / 4.0);
    assert_eq!(report.completed, 100);
    assert_eq!(report.records.len(), 100);
    for executor in &report.executors {
        assert_eq!(executor.busy, 37.5, "every executor busy all the time");
    }
    assert_eq!(report.efficiency, 1.0);
    assert_eq!(report.messages.steal_requests, 0, "nobody to steal from");
    assert_eq!(report.lost, 0);
}

#[test]
fn an_empty_workload_ends_at_once() {
    let report = simulate(&pool(2, 2, 1, Strategy::Random), &Workload::new()).unwrap();
    assert_eq!(report.makespan, 0.0);
    assert!(report.records.is_empty());
}

#[test]
fn gpu_work_runs_only_on_gpu_executors_and_faster_there() {
    let gpu: ExecutorContext = "GPU".parse().unwrap();
    let cpu: ExecutorContext = "CPU".parse().unwrap();
    let sites = vec![Site::new("vu")];
    let nodes = vec![
        NodeSpec::uniform("cpu-node", 0, 4, cpu),
        NodeSpec::new(
            "gpu-node",
            0,
            vec![ExecutorSpec::new(gpu), ExecutorSpec::new(anywhere())],
        ),
    ];
    let model = Model::new(sites, nodes);
    let mut workload = Workload::new();
    let step = workload.add_kind(Kind::new("step").with_speedup("GPU", 10.0));
    let on_gpu = ContextList::single(Context::new("GPU"));
    let on_cpu = ContextList::single(Context::new("CPU"));
    for _ in 0..10 {
        workload.add_root(ActivitySpec::new(step, 2.0).with_contexts(on_gpu.clone()));
    }
    for _ in 0..20 {
        workload.add_root(ActivitySpec::new(step, 2.0).with_contexts(on_cpu.clone()));
    }
    let report = simulate(&model, &workload).unwrap();
    assert_eq!(report.completed, 30);
    for record in completed(&report) {
        let labels = &(report.executors.iter())
            .find(|e| e.node == record.node && e.index == record.executor)
            .unwrap()
            .labels;
        let wants_gpu = report.context_lists[record.contexts as usize] == "GPU";
        assert_eq!(labels == "GPU", wants_gpu, "{record:?} ran on {labels}");
        let seconds = record.end - record.start;
        let expected = if wants_gpu { 0.2 } else { 2.0 };
        assert!((seconds - expected).abs() < 1e-9, "{record:?}");
    }
    let anywhere_busy = report
        .executors
        .iter()
        .find(|e| e.labels == "anywhere")
        .unwrap()
        .busy;
    assert_eq!(anywhere_busy, 0.0, "nothing here runs anywhere-work");
}

#[test]
fn more_cores_run_the_parallel_part_faster() {
    let sites = vec![Site::new("vu")];
    let nodes = vec![NodeSpec::new(
        "big",
        0,
        vec![ExecutorSpec::new(anywhere()).with_cores(8).with_speed(2.0)],
    )];
    let model = Model::new(sites, nodes);
    let mut workload = Workload::new();
    let detect = workload.add_kind(Kind::new("detect").with_parallel(0.75));
    workload.add_root(ActivitySpec::new(detect, 16.0));
    let report = simulate(&model, &workload).unwrap();
    // 16 s × (0.25 + 0.75 / 8) / 2.0
    assert!((report.makespan - 2.75).abs() < 1e-9, "{}", report.makespan);
}

/// Two sites, `data` and `compute`, with instant links within each.
fn data_and_compute_sites() -> Vec<Site> {
    ["data", "compute"]
        .map(|name| Site {
            name: name.into(),
            within: Link::latency(0.0),
        })
        .into()
}

#[test]
fn remote_input_adds_exactly_the_modelled_transfer_time() {
    let sites = data_and_compute_sites();
    let nodes = vec![
        NodeSpec::uniform("here", 0, 1, anywhere()),
        NodeSpec::uniform("there", 1, 1, "far".parse().unwrap()),
    ];
    let mut model = Model::new(sites, nodes);
    model.wide_area = Link::latency(0.01)
        .with_bandwidth(1e9)
        .with_per_transfer(1e6);
    let mut workload = Workload::new();
    let kind = workload.add_kind(Kind::new("read"));
    let data = workload.add_data(Data {
        bytes: 10_000_000,
        replicas: vec![0],
    });
    workload.add_root(ActivitySpec::new(kind, 3.0).with_input(data));
    workload.add_root(
        ActivitySpec::new(kind, 3.0)
            .with_input(data)
            .with_contexts(ContextList::single(Context::new("far"))),
    );
    let report = simulate(&model, &workload).unwrap();
    let records = completed(&report);
    let local = records.iter().find(|r| r.node == 0).unwrap();
    let remote = records.iter().find(|r| r.node == 1).unwrap();
    assert_eq!(local.transfer, 0.0);
    assert_eq!(local.end - local.start, 3.0);
    // 10 MB at 1 MB/s per transfer, plus 10 ms latency.
    assert!((remote.transfer - 10.01).abs() < 1e-9, "{remote:?}");
    assert!(
        (remote.end - remote.start - 13.01).abs() < 1e-9,
        "{remote:?}"
    );
    assert_eq!(report.messages.wide_area_transfers, 1);
    assert_eq!(report.messages.wide_area_bytes, 10_000_000);
}

#[test]
fn a_shared_link_queues_transfers_beyond_its_bandwidth() {
    let sites = data_and_compute_sites();
    // Four executors start at once and fetch 1 MB each over a 1 MB/s link.
    let nodes = vec![
        NodeSpec::uniform("master", 0, 0, anywhere()),
        NodeSpec::uniform("far", 1, 4, anywhere()),
    ];
    let mut model = Model::new(sites, nodes).with_strategy(Strategy::MasterWorker);
    model.wide_area = Link::latency(0.0).with_bandwidth(1e6);
    let mut workload = Workload::new();
    let kind = workload.add_kind(Kind::new("read"));
    for _ in 0..4 {
        let data = workload.add_data(Data {
            bytes: 1_000_000,
            replicas: vec![0],
        });
        workload.add_root(ActivitySpec::new(kind, 0.0).with_input(data));
    }
    let report = simulate(&model, &workload).unwrap();
    // The steal replies arrive within a millisecond of each other; the
    // transfers then take turns on the link, one second each.
    let mut ends: Vec<f64> = completed(&report).iter().map(|r| r.end).collect();
    ends.sort_by(f64::total_cmp);
    let first = completed(&report)
        .iter()
        .map(|r| r.start)
        .fold(f64::MAX, f64::min);
    for (i, end) in ends.iter().enumerate() {
        assert!((end - first - (i + 1) as f64).abs() < 1e-9, "{ends:?}");
    }
    assert!(completed(&report).iter().all(|r| r.start < 0.01));
}

/// The paper's first scenario in small: data unevenly spread over two
/// sites, activities labelled with where their data is.
fn located(fallback: bool) -> SimReport {
    let sites = vec![Site::new("a"), Site::new("b")];
    let executor = |site: &str| {
        let mut contexts = vec![Context::new(site)];
        if fallback {
            contexts.push(Context::anywhere());
        }
        ExecutorSpec::new(ExecutorContext::new(contexts))
    };
    let nodes = vec![
        NodeSpec::new("a0", 0, vec![executor("a"); 2]),
        NodeSpec::new("a1", 0, vec![executor("a"); 2]),
        NodeSpec::new("b0", 1, vec![executor("b"); 2]),
        NodeSpec::new("b1", 1, vec![executor("b"); 2]),
    ];
    let mut model = Model::new(sites, nodes)
        .with_strategy(Strategy::Hierarchical)
        .with_seed(1);
    model.wide_area = Link::latency(0.005).with_per_transfer(1e6);
    let mut workload = Workload::new();
    let kind = workload.add_kind(Kind::new("detect"));
    for index in 0..100 {
        // Four in five pairs are stored on site a only.
        let (site, label) = if index % 5 == 0 { (1, "b") } else { (0, "a") };
        let data = workload.add_data(Data {
            bytes: 2_000_000,
            replicas: vec![site],
        });
        let mut contexts = vec![Context::new(label)];
        if fallback {
            contexts.push(Context::anywhere());
        }
        workload.add_root(
            ActivitySpec::new(kind, 10.0)
                .with_input(data)
                .with_contexts(ContextList::priority(contexts)),
        );
    }
    simulate(&model, &workload).unwrap()
}

#[test]
fn a_location_fallback_keeps_every_site_busy_at_the_cost_of_transfers() {
    let strict = located(false);
    let fallback = located(true);
    assert_eq!(strict.completed, 100);
    assert_eq!(fallback.completed, 100);
    // Strictly by location, site b runs its 20 pairs and then idles while
    // site a works through 80 on 4 executors: 200 s.
    assert_eq!(strict.messages.wide_area_transfers, 0);
    assert!(strict.makespan >= 200.0, "{}", strict.makespan);
    for record in completed(&strict) {
        let label = &strict.context_lists[record.contexts as usize];
        assert_eq!(label, &strict.sites[record.site as usize], "{record:?}");
    }
    // With the fallback, site b takes site a's pairs once its own are
    // done, fetching each at 1 MB/s (2 s), and the run ends much sooner.
    assert!(fallback.messages.wide_area_transfers > 0);
    // (Fetches within a site take a couple of milliseconds on the cluster link.)
    let fetched = completed(&fallback)
        .into_iter()
        .filter(|r| r.transfer > 1.0)
        .collect::<Vec<_>>();
    assert_eq!(fetched.len() as u64, fallback.messages.wide_area_transfers);
    assert!(
        fetched.iter().all(|r| (r.transfer - 2.005).abs() < 1e-9),
        "{fetched:#?}"
    );
    // Nearly all by site b. Each executor has its own scheduler (the local
    // pool's shape), and the master's executors were dealt site b's pairs
    // with the rest; one whose own queue holds only those runs them (as
    // `anywhere`) before it looks at its neighbour's queue, so site a
    // fetches a couple too (2 of 32 here). With one scheduler per node
    // (until issue 19) it took its neighbour's site-a pairs first, and
    // site b fetched all of them.
    let by_site_b = fetched.iter().filter(|r| r.site == 1).count();
    assert!(by_site_b * 10 >= fetched.len() * 9, "{fetched:#?}");
    assert!(
        fallback.makespan < 0.7 * strict.makespan,
        "{} vs {}",
        fallback.makespan,
        strict.makespan
    );
}

#[test]
fn stealing_spreads_a_bag_over_all_nodes() {
    let model = pool(4, 2, 2, Strategy::Random).with_seed(3);
    let report = simulate(&model, &Workload::bag(400, 1.0, ContextList::anywhere())).unwrap();
    assert_eq!(report.completed, 400);
    let mut per_node: HashMap<u32, usize> = HashMap::new();
    for record in completed(&report) {
        *per_node.entry(record.node).or_default() += 1;
    }
    assert_eq!(per_node.len(), 4, "every node ran some: {per_node:?}");
    assert!(report.messages.moved > 0);
    // 400 s of work on 8 executors: 50 s if perfectly spread.
    assert!(
        report.makespan < 55.0,
        "makespan {} (efficiency {})",
        report.makespan,
        report.efficiency
    );
}

#[test]
fn every_strategy_completes_the_bag() {
    for strategy in [
        Strategy::MasterWorker,
        Strategy::Random,
        Strategy::Hierarchical,
    ] {
        let model = pool(6, 2, 3, strategy).with_seed(5);
        let report = simulate(&model, &Workload::bag(300, 0.5, ContextList::anywhere())).unwrap();
        assert_eq!(report.completed, 300, "{strategy}");
        assert_eq!(report.duplicates, 0, "{strategy}");
        assert_eq!(report.lost, 0, "{strategy}");
        let nodes: std::collections::HashSet<u32> =
            completed(&report).iter().map(|r| r.node).collect();
        assert_eq!(nodes.len(), 6, "{strategy}: every node worked");
        assert_eq!(report.strategy, strategy);
    }
}

#[test]
fn under_master_worker_the_master_answers_every_steal_request() {
    let model = pool(5, 2, 1, Strategy::MasterWorker).with_seed(2);
    let report = simulate(&model, &Workload::bag(200, 1.0, ContextList::anywhere())).unwrap();
    assert!(report.messages.steal_requests > 0);
    assert_eq!(report.master_load, report.messages.steal_requests);
    for (index, node) in report.nodes.iter().enumerate() {
        if index != report.master as usize {
            assert_eq!(node.requests_handled, 0, "{}", node.name);
        }
    }
}

#[test]
fn an_idle_executor_asks_less_often_under_a_longer_steal_backoff() {
    // The worker's second executor finds nothing for the 10 s the first
    // two items run; how often it asks in that time is the backoff's doing.
    let empty_replies = |backoff: (f64, f64)| {
        let mut model = pool(2, 1, 1, Strategy::MasterWorker);
        model.nodes[1] = NodeSpec::uniform("worker", 0, 2, anywhere());
        model.max_steal = 1;
        model.steal_backoff = backoff;
        let report = simulate(&model, &Workload::bag(2, 10.0, ContextList::anywhere())).unwrap();
        assert_eq!(completed(&report).len(), 2);
        report.messages.empty_replies
    };
    let net_driver = empty_replies((0.001, 0.05));
    let stretched = empty_replies((0.5, 2.0));
    // 1 + 2 + 4 + ... ms, then every 50 ms: about 200 in 10 s; from 0.5 s
    // doubling to 2 s: about 6.
    assert!((150..=260).contains(&net_driver), "{net_driver}");
    assert!((3..=10).contains(&stretched), "{stretched}");
}

#[test]
fn hierarchical_stealing_moves_less_work_between_sites_than_random() {
    let workload = Workload::bag(2000, 1.0, ContextList::anywhere());
    let run = |strategy| {
        let mut model = pool(16, 2, 4, strategy).with_seed(9);
        model.max_steal = 4;
        simulate(&model, &workload).unwrap()
    };
    let random = run(Strategy::Random);
    let hierarchical = run(Strategy::Hierarchical);
    assert_eq!(random.completed, 2000);
    assert_eq!(hierarchical.completed, 2000);
    // Random takes a quarter of its loot from its own site (4 of 16 nodes
    // there, itself excluded); hierarchical asks its site first and starts
    // small when it crosses. All work starts on site 0, so at least the
    // three quarters that run elsewhere cross once (1,500): hierarchical
    // stays within a third above that floor, random goes further.
    let floor = 1500;
    let moved = hierarchical.messages.wide_area_moved;
    assert!(
        moved < random.messages.wide_area_moved && moved * 3 < floor * 4,
        "hierarchical moved {moved} activities between sites, random {}",
        random.messages.wide_area_moved
    );
}

#[test]
fn hierarchical_steals_across_sites_take_one_per_idle_executor_unless_told_otherwise() {
    // All work starts on site 0; sites 1-7 get it only by wide steals.
    let workload = Workload::bag(1600, 1.0, ContextList::anywhere());
    let run = |wide_steal| {
        let mut model = pool(16, 2, 8, Strategy::Hierarchical).with_seed(3);
        model.wide_steal = wide_steal;
        simulate(&model, &workload).unwrap()
    };
    let idle = run(WideSteal::IdleExecutors);
    let batch = run(WideSteal::MaxSteal);
    // A wide steal brings at most the thief's two idle executors' worth.
    let wide_loot =
        |r: &SimReport| r.messages.wide_area_moved as f64 / r.messages.wide_area_steals as f64;
    assert!(wide_loot(&idle) <= 2.0, "{:?}", idle.messages);
    assert!(wide_loot(&batch) > wide_loot(&idle), "{:?}", batch.messages);
    assert!(
        batch.makespan < idle.makespan,
        "batch {} idle {}",
        batch.makespan,
        idle.makespan
    );
}

#[test]
fn a_node_dying_mid_run_loses_no_work() {
    // Master-worker: each activity is handed out once, by the master, so
    // each is completed exactly once even though a worker dies.
    let mut model = pool(5, 2, 1, Strategy::MasterWorker).with_seed(4);
    model.max_steal = 4;
    let workload = Workload::bag(200, 1.0, ContextList::anywhere());
    let healthy = simulate(&model, &workload).unwrap();
    model.nodes[3].dies_at = Some(20.0);
    let report = simulate(&model, &workload).unwrap();
    assert!(report.requeued > 0, "the dead node held work");
    assert_eq!(report.lost, 0);
    let killed = (report.records.iter())
        .filter(|r| r.outcome == AttemptEnd::Killed)
        .count();
    assert!(killed > 0, "it died while running something");
    let mut runs: HashMap<crate::id::ActivityId, usize> = HashMap::new();
    for record in completed(&report) {
        *runs.entry(record.activity).or_default() += 1;
        assert!(record.node != 3 || record.end <= 20.0, "{record:?}");
    }
    assert_eq!(runs.len(), 200, "every activity completed");
    assert!(runs.values().all(|&n| n == 1), "and exactly once");
    assert!(
        completed(&report).iter().any(|r| r.attempt == 2),
        "some ran as a second attempt"
    );
    assert_eq!(report.nodes[3].died, Some(20.0));
    // Two of ten executors gone from 20 s on, work redone and 3 s until
    // anyone notices: it takes longer than without the failure.
    assert!(
        report.makespan > healthy.makespan,
        "{} vs {}",
        report.makespan,
        healthy.makespan
    );
    // The dead node's executors count until it died.
    let expected = 10.0 * report.makespan - 2.0 * (report.makespan - 20.0);
    assert!((report.capacity - expected).abs() < 1e-6);
}

/// Master-worker on one site: a master without executors, and two workers
/// of two executors each, of which w2 dies at 3.5 s.
fn master_and_two_workers_one_dying(max_steal: usize) -> Model {
    let sites = vec![Site::new("vu")];
    let nodes = vec![
        NodeSpec::uniform("master", 0, 0, anywhere()),
        NodeSpec::uniform("w1", 0, 2, anywhere()),
        NodeSpec::uniform("w2", 0, 2, anywhere()).dying_at(3.5),
    ];
    let mut model = Model::new(sites, nodes).with_strategy(Strategy::MasterWorker);
    model.max_steal = max_steal;
    model
}

#[test]
fn a_master_without_executors_takes_back_the_work_of_a_dead_worker() {
    let model = master_and_two_workers_one_dying(4);
    let report = simulate(&model, &Workload::bag(40, 1.0, ContextList::anywhere())).unwrap();
    assert!(report.requeued > 0);
    assert_eq!(report.completed, 40);
    assert_eq!(report.duplicates, 0);
    assert!(completed(&report)
        .iter()
        .all(|r| r.node == 1 || r.end <= 3.5));
}

#[test]
fn random_stealing_with_dying_nodes_finishes_everything_at_least_once() {
    let mut model = pool(10, 2, 2, Strategy::Random).with_seed(8);
    model.max_steal = 4;
    for node in [2, 5, 7] {
        model.nodes[node].dies_at = Some(10.0 + node as f64);
    }
    let workload = Workload::bag(400, 1.0, ContextList::anywhere());
    let report = simulate(&model, &workload).unwrap();
    assert_eq!(report.lost, 0);
    assert!(report.requeued > 0);
    assert_eq!(report.completed, 400, "every activity completed");
    let completions = completed(&report).len() as u64;
    assert_eq!(completions, 400 + report.duplicates);
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let workload = Workload::bag(500, 0.3, ContextList::anywhere());
    let run = |seed| {
        let mut model = pool(8, 2, 3, Strategy::Random).with_seed(seed);
        model.nodes[4].dies_at = Some(5.0);
        simulate(&model, &workload).unwrap()
    };
    let first = run(11);
    let again = run(11);
    assert_eq!(first.records, again.records);
    assert_eq!(first, again);
    let other = run(12);
    assert_ne!(
        first.records, other.records,
        "another seed steals from other victims"
    );
}

#[test]
fn work_nobody_can_run_is_refused_with_a_clear_error() {
    let model = pool(2, 2, 1, Strategy::Random);
    let workload = Workload::bag(3, 1.0, ContextList::single(Context::new("GPU")));
    let error = simulate(&model, &workload).unwrap_err();
    assert!(matches!(error, SimError::Unrunnable(_)), "{error:?}");
    let text = error.to_string();
    assert!(text.contains("GPU") && text.contains("anywhere"), "{text}");
}

#[test]
fn work_whose_only_executors_died_stalls_with_an_error_not_a_hang() {
    let sites = vec![Site::new("vu")];
    let nodes = vec![
        NodeSpec::uniform("cpu", 0, 2, anywhere()),
        NodeSpec::uniform("gpu", 0, 1, "GPU".parse().unwrap()).dying_at(1.0),
    ];
    let model = Model::new(sites, nodes);
    let mut workload = Workload::bag(2, 1.0, ContextList::anywhere());
    let kind = workload.kinds.len() as u32 - 1;
    for _ in 0..5 {
        workload.add_root(
            ActivitySpec::new(kind, 10.0).with_contexts(ContextList::single(Context::new("GPU"))),
        );
    }
    match simulate(&model, &workload) {
        Err(SimError::Stalled {
            unfinished, roots, ..
        }) => {
            assert_eq!(roots, 7);
            assert!(unfinished >= 4, "{unfinished}");
        }
        other => panic!("expected a stall, got {other:?}"),
    }
}

/// A pipeline like the paper's many-task version: per pair, a first step,
/// a step fanned out into tiles that stay on the node, and a last step.
fn pipeline(pairs: usize, tiles: usize) -> Workload {
    let mut workload = Workload::new();
    let pair = workload.add_kind(Kind::new("pair"));
    let first = workload.add_kind(Kind::new("first"));
    let tile = workload.add_kind(Kind::new("tile"));
    let last = workload.add_kind(Kind::new("last"));
    let first_spec = workload.add(ActivitySpec::new(first, 2.0));
    let tile_spec = workload.add(ActivitySpec::new(tile, 1.0).with_placement(Placement::Node));
    let last_spec = workload.add(ActivitySpec::new(last, 3.0));
    for _ in 0..pairs {
        workload.add_root(
            ActivitySpec::new(pair, 0.0)
                .with_stage(vec![first_spec])
                .with_stage(vec![tile_spec; tiles])
                .with_stage(vec![last_spec]),
        );
    }
    workload
}

#[test]
fn stages_run_in_order_and_tiles_stay_on_their_node() {
    let model = pool(3, 4, 1, Strategy::Random).with_seed(1);
    let report = simulate(&model, &pipeline(6, 5)).unwrap();
    assert_eq!(report.completed, 6 * (1 + 1 + 5 + 1));
    let kind = |name: &str| report.kinds.iter().position(|k| k == name).unwrap() as u32;
    let (pair, first, tile, last) = (kind("pair"), kind("first"), kind("tile"), kind("last"));
    let records = completed(&report);
    // Children ids name their parent's node and come in consecutive runs;
    // group the steps by the pair that submitted them via timing instead:
    // each pair's steps must nest inside the pair's own attempt.
    let pairs: Vec<_> = records.iter().filter(|r| r.kind == pair).collect();
    assert_eq!(pairs.len(), 6);
    for p in &pairs {
        let inside: Vec<_> = (records.iter())
            .filter(|r| r.kind != pair && r.activity.origin() == node_id(p.node))
            .filter(|r| r.start >= p.start && r.end <= p.end)
            .collect();
        assert!(!inside.is_empty(), "{p:?}");
    }
    for t in records.iter().filter(|r| r.kind == tile) {
        assert_eq!(
            node_id(t.node),
            t.activity.origin(),
            "a tile runs on the node that submitted it"
        );
    }
    // Step order per pair: firsts end before their tiles start, all of a
    // pair's tiles end before its last step starts.
    let total_work: f64 = records.iter().map(|r| r.busy).sum();
    assert!((total_work - 6.0 * (2.0 + 5.0 + 3.0)).abs() < 1e-6);
    let lasts = records.iter().filter(|r| r.kind == last).count();
    let firsts = records.iter().filter(|r| r.kind == first).count();
    assert_eq!((firsts, lasts), (6, 6));
    assert!(report.makespan >= 2.0 + 5.0 / 4.0 + 3.0);
}

#[test]
fn one_pair_runs_its_stages_strictly_one_after_the_other() {
    let model = pool(1, 8, 1, Strategy::Random);
    let report = simulate(&model, &pipeline(1, 4)).unwrap();
    let records = completed(&report);
    let kind = |name: &str| report.kinds.iter().position(|k| k == name).unwrap() as u32;
    let of = |k: u32| -> Vec<&&AttemptRecord> { records.iter().filter(|r| r.kind == k).collect() };
    let first = of(kind("first"));
    let tiles = of(kind("tile"));
    let last = of(kind("last"));
    let pair = of(kind("pair"));
    assert_eq!(first[0].end, 2.0);
    assert!(
        tiles.iter().all(|t| t.start == 2.0 && t.end == 3.0),
        "{tiles:?}"
    );
    assert_eq!((last[0].start, last[0].end), (3.0, 6.0));
    assert_eq!((pair[0].start, pair[0].end), (0.0, 6.0));
    assert_eq!(pair[0].busy, 0.0, "a waiting parent holds no executor");
    assert_eq!(report.makespan, 6.0);
}

#[test]
fn a_pipeline_survives_nodes_dying_under_its_pairs() {
    let mut restarts = 0;
    for strategy in [
        Strategy::MasterWorker,
        Strategy::Random,
        Strategy::Hierarchical,
    ] {
        let mut model = pool(6, 4, 2, strategy).with_seed(6);
        model.max_steal = 2;
        model.nodes[2].dies_at = Some(7.0);
        model.nodes[4].dies_at = Some(11.0);
        let workload = pipeline(24, 6);
        let report = simulate(&model, &workload).unwrap();
        assert_eq!(report.lost, 0, "{strategy}");
        assert!(report.requeued > 0, "{strategy}");
        let kind = report.kinds.iter().position(|k| k == "pair").unwrap() as u32;
        let mut pairs: Vec<_> = completed(&report)
            .into_iter()
            .filter(|r| r.kind == kind)
            .map(|r| r.activity)
            .collect();
        pairs.sort();
        pairs.dedup();
        assert_eq!(pairs.len(), 24, "{strategy}: every pair finished");
        // A restarted pair ran all its steps again, after its restart.
        for restarted in completed(&report)
            .iter()
            .filter(|r| r.kind == kind && r.attempt > 1)
        {
            let steps = completed(&report)
                .iter()
                .filter(|r| r.node == restarted.node && r.kind != kind)
                .filter(|r| r.start >= restarted.start && r.end <= restarted.end)
                .count();
            // The first step, six tiles and the last step.
            let per_pair = 8;
            assert!(steps >= per_pair, "{strategy}: {restarted:?}");
            restarts += 1;
        }
    }
    assert!(restarts > 0, "some pair was running on a node that died");
}

fn node_id(index: u32) -> crate::id::NodeId {
    crate::id::NodeId::from_u128(u128::from(index) + 1)
}

#[test]
fn bad_models_and_workloads_are_refused_with_reasons() {
    let mut model = pool(2, 1, 1, Strategy::Random);
    model.nodes[1].site = 7;
    let error = simulate(&model, &Workload::new()).unwrap_err();
    assert!(matches!(error, SimError::Model(_)), "{error}");
    assert!(error.to_string().contains("site 7"), "{error}");

    let mut model = pool(1, 1, 1, Strategy::Random);
    model.nodes[0].executors[0].speed = f64::NAN;
    assert!(matches!(
        simulate(&model, &Workload::new()),
        Err(SimError::Model(_))
    ));

    let mut model = pool(1, 1, 1, Strategy::Random);
    model.steal_backoff = (0.0, 0.05);
    let error = simulate(&model, &Workload::new()).unwrap_err();
    assert!(error.to_string().contains("steal backoff"), "{error}");

    let model = pool(1, 1, 1, Strategy::Random);
    let mut workload = Workload::new();
    let kind = workload.add_kind(Kind::new("loop"));
    let a = workload.add(ActivitySpec::new(kind, 1.0));
    let b = workload.add(ActivitySpec::new(kind, 1.0).with_stage(vec![a]));
    workload.activities[a as usize].stages.push(vec![b]);
    workload.roots.push(b);
    let error = simulate(&model, &workload).unwrap_err();
    assert!(matches!(error, SimError::Workload(_)), "{error}");
    assert!(error.to_string().contains("own descendants"), "{error}");

    let mut workload = Workload::bag(1, -1.0, ContextList::anywhere());
    assert!(matches!(
        simulate(&model, &workload),
        Err(SimError::Workload(_))
    ));
    workload.activities[0].seconds = 1.0;
    workload.activities[0].input = Some(3);
    assert!(matches!(
        simulate(&model, &workload),
        Err(SimError::Workload(_))
    ));
}

#[test]
fn absurd_but_valid_sizes_do_not_overflow_virtual_time() {
    let mut model = pool(2, 1, 2, Strategy::Random);
    model.nodes[1].executors[0].context = "far".parse().unwrap();
    model.wide_area = Link::latency(0.0).with_per_transfer(1e-3);
    let mut workload = Workload::new();
    let kind = workload.add_kind(Kind::new("huge"));
    let data = workload.add_data(Data {
        bytes: u64::MAX,
        replicas: vec![0],
    });
    workload.add_root(
        ActivitySpec::new(kind, 1.0)
            .with_input(data)
            .with_contexts(ContextList::single(Context::new("far"))),
    );
    model.horizon = 1000.0;
    // Not a panic on overflow, and not years of idle polling: an error.
    assert_eq!(
        simulate(&model, &workload),
        Err(SimError::Horizon {
            horizon: 1000.0,
            unfinished: 1,
            roots: 1
        })
    );
}

#[test]
fn reports_round_trip_through_msgpack() {
    let model = pool(2, 2, 2, Strategy::Hierarchical);
    let report = simulate(&model, &Workload::bag(20, 1.0, ContextList::anywhere())).unwrap();
    let bytes = rmp_serde::to_vec_named(&report).unwrap();
    let back: SimReport = rmp_serde::from_slice(&bytes).unwrap();
    assert_eq!(back, report);
    let model_bytes = rmp_serde::to_vec_named(&model).unwrap();
    let model_back: Model = rmp_serde::from_slice(&model_bytes).unwrap();
    assert_eq!(model_back, model);
}

#[test]
fn the_comparison_has_one_row_per_strategy() {
    let mut setup = ComparisonSetup::new(32, 4);
    setup.activities = 640;
    let rows = compare_strategies(&setup).unwrap();
    assert_eq!(rows.len(), 3);
    for row in &rows {
        assert_eq!(row.executors, 32);
        assert_eq!(row.nodes, 4);
        assert!(row.efficiency > 0.0 && row.efficiency <= 1.0, "{row:?}");
    }
    assert_eq!(rows[0].strategy, Strategy::MasterWorker);
    let table = ComparisonRow::table(&rows);
    assert_eq!(table.lines().count(), 4);
    assert!(table.contains("hierarchical"));
}

#[test]
fn doubling_cross_site_steals_feed_sites_that_stay_dry_and_move_less_than_random() {
    // All work starts on site 0 of 16; the other sites never have work of
    // their own, so their cross-site batches keep doubling.
    let workload = Workload::bag(6400, 1.0, ContextList::anywhere());
    let run = |strategy, wide_steal| {
        let mut model = pool(64, 2, 16, strategy).with_seed(5);
        model.wide_steal = wide_steal;
        simulate(&model, &workload).unwrap()
    };
    let doubling = run(Strategy::Hierarchical, WideSteal::Doubling);
    let idle = run(Strategy::Hierarchical, WideSteal::IdleExecutors);
    let random = run(Strategy::Random, WideSteal::Doubling);
    for report in [&doubling, &idle, &random] {
        assert_eq!(report.completed, 6400);
        assert_eq!(report.lost, 0);
    }
    let ideal = 6400.0 / 128.0;
    assert!(
        doubling.makespan < 1.1 * ideal,
        "doubling {} against ideal {ideal}",
        doubling.makespan
    );
    assert!(
        doubling.makespan < idle.makespan,
        "doubling {} idle-executors {}",
        doubling.makespan,
        idle.makespan
    );
    assert!(
        doubling.messages.wide_area_moved < random.messages.wide_area_moved,
        "doubling moved {} between sites, random {}",
        doubling.messages.wide_area_moved,
        random.messages.wide_area_moved
    );
}

#[test]
fn a_master_that_answers_slower_than_it_is_asked_saturates() {
    // 8 thieving executors finishing 10 ms activities ask 800 times a
    // second; a master that needs 10 ms per answer serves 100.
    let workload = Workload::bag(200, 0.01, ContextList::anywhere());
    let run = |per_request| {
        let mut model = pool(5, 2, 1, Strategy::MasterWorker);
        model.max_steal = 1;
        model.answer_cost = AnswerCost {
            per_request,
            per_activity: 0.0,
        };
        simulate(&model, &workload).unwrap()
    };
    let free = run(0.0);
    let slow = run(0.01);
    for report in [&free, &slow] {
        assert_eq!(report.completed, 200, "nothing is lost while requests wait");
        assert_eq!(report.lost, 0);
    }
    assert_eq!(free.nodes[0].answering, 0.0);
    // Each request answered took 10 ms of the master's time, one at a time.
    let answered = slow.nodes[0].requests_handled as f64;
    assert!((slow.nodes[0].answering - answered * 0.01).abs() < 1e-6);
    assert!(
        slow.nodes[0].answering > 0.9 * slow.makespan,
        "the master is busy nearly all the time: {} of {} s",
        slow.nodes[0].answering,
        slow.makespan
    );
    assert!(
        slow.makespan > 3.0 * free.makespan,
        "saturated {} s against {} s",
        slow.makespan,
        free.makespan
    );
}

#[test]
fn answer_costs_must_not_be_negative() {
    let mut model = pool(2, 1, 1, Strategy::MasterWorker);
    model.answer_cost.per_activity = -1.0;
    let error = simulate(&model, &Workload::bag(1, 1.0, ContextList::anywhere())).unwrap_err();
    assert!(error.to_string().contains("answer cost"), "{error}");
}

#[test]
fn with_work_at_every_site_hierarchical_stealing_keeps_it_there() {
    let mut setup = ComparisonSetup::new(256, 4);
    setup.activities = 4 * 640;
    setup.every_site = true;
    let workload = setup.workload();
    assert_eq!(workload.roots.len(), 4, "one seeding activity per site");
    let run = |strategy| {
        let model = setup.model(strategy);
        simulate(&model, &workload).unwrap()
    };
    let random = run(Strategy::Random);
    let hierarchical = run(Strategy::Hierarchical);
    for report in [&random, &hierarchical] {
        // The shares and their seeds.
        assert_eq!(report.completed, 4 * 640 + 4);
        assert_eq!(report.lost, 0);
    }
    // Each seed ran on its own site, so each site submitted its share.
    let seed_kind = hierarchical.kinds.iter().position(|k| k == "seed").unwrap();
    for record in completed(&hierarchical) {
        if record.kind as usize == seed_kind {
            let node = &hierarchical.nodes[record.node as usize];
            assert!(
                hierarchical.context_lists[record.contexts as usize]
                    .contains(&format!("site:{}", node.site)),
                "{record:?}"
            );
        }
    }
    assert!(
        hierarchical.messages.wide_area_moved * 4 < random.messages.wide_area_moved,
        "hierarchical moved {} activities between sites, random {}",
        hierarchical.messages.wide_area_moved,
        random.messages.wide_area_moved
    );
    assert!(hierarchical.makespan < 1.1 * random.makespan);
}

#[test]
fn a_hundred_nodes_learn_each_other_by_swim_within_a_few_round_trips() {
    // They all join at once and introduce themselves to the master; SWIM
    // spreads the rest (the master's feeds, then gossip).
    let model = pool(100, 1, 10, Strategy::Random).with_seed(2);
    let report = simulate(&model, &Workload::bag(500, 1.0, ContextList::anywhere())).unwrap();
    assert_eq!(report.completed, 500);
    let converged = report.membership_converged.expect("membership converged");
    // Wide-area round trips are 10 ms here.
    assert!(converged < 0.5, "converged at {converged} s");
    assert!(report.messages.membership > 0);
    let nodes: std::collections::HashSet<u32> = completed(&report).iter().map(|r| r.node).collect();
    assert_eq!(nodes.len(), 100, "every node found work");
}

#[test]
fn a_dead_node_is_given_up_after_the_failure_timeout_and_at_most_four_probe_periods_more() {
    // The master hands one activity to each worker; w2 dies holding its
    // own, and w1, idle by then, runs it again once the master declares
    // w2 dead and queues it again.
    let model = master_and_two_workers_one_dying(1);
    let report = simulate(&model, &Workload::bag(2, 10.0, ContextList::anywhere())).unwrap();
    assert_eq!(report.requeued, 1, "{:?}", report.records);
    let again = completed(&report)
        .into_iter()
        .find(|r| r.attempt == 2)
        .expect("the dead node's activity ran again");
    assert_eq!(again.node, 1);
    let declared = again.start - 3.5;
    // The master probes its two members in turn, so up to two periods
    // pass before it probes the dead one; the probe and the indirect ones
    // take the rest of that period; then the suspicion timeout, and a grace
    // of one period before the work is queued again. Here it ran again
    // 8.54 s after the death; the old engine, without SWIM, declared a
    // dead node dead exactly `failure_timeout` (3 s) after it died.
    let (timeout, probe) = (model.failure_timeout, model.probe_period);
    println!("the dead node's work ran again {declared:.2} s after it died");
    assert!(
        declared >= timeout && declared <= timeout + 4.0 * probe,
        "declared dead {declared} s after it died"
    );
}
