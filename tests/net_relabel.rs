//! Live relabelling over real loopback sockets: a member whose executor is
//! relabelled from `cpu` to `gpu` by another member starts taking `gpu`
//! work and stops taking `cpu` work, and `status` reports what it offers
//! and what waits where.

use std::time::{Duration, Instant};

use constellation::collect::MultiEventCollector;
use constellation::net::{Node, NodeConfig, NodeError};
use constellation::{ContextList, ExecutorContext, NodeId, Pool};
use constellation_workloads::{within_limit, BagItem, BagReport};

const TEST_LIMIT: Duration = Duration::from_secs(90);
const WAIT: Duration = Duration::from_secs(20);

fn labels(text: &str) -> ExecutorContext {
    text.parse().expect("valid labels")
}

fn contexts(text: &str) -> ContextList {
    text.parse().expect("valid contexts")
}

/// Waits until `observer` sees member `node` offering `wanted`.
fn wait_until_offered(observer: &Node, node: NodeId, wanted: &str) {
    let start = Instant::now();
    loop {
        let offered = (observer.members().into_iter())
            .find(|member| member.node == node)
            .map(|member| {
                member
                    .executors
                    .iter()
                    .map(|e| e.label_list())
                    .collect::<Vec<_>>()
            });
        if offered
            .as_ref()
            .is_some_and(|o| o.iter().all(|l| l == wanted))
        {
            return;
        }
        assert!(
            start.elapsed() < WAIT,
            "{node} still offers {offered:?}, not {wanted}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_relabelled_member_takes_the_new_labels_work_and_not_the_old() {
    within_limit(TEST_LIMIT, || {
        // The coordinator runs nothing but its collector.
        let coordinator = Node::start(
            NodeConfig {
                role: "run".into(),
                ..NodeConfig::default()
            },
            Pool::builder().executor(labels("coordinator")),
        )
        .expect("the coordinator starts");
        let worker = Node::start(
            NodeConfig {
                bootstrap: vec![coordinator.join_address()],
                role: "agent".into(),
                host: "worker-host".into(),
                deadline: Some(Instant::now() + Duration::from_secs(3600)),
                // One at a time, so queued cpu work stays with the coordinator.
                max_steal: 1,
                ..NodeConfig::default()
            },
            Pool::builder().executor(labels("cpu")),
        )
        .expect("the worker starts");
        coordinator.wait_for_members(2, WAIT).expect("they meet");
        let worker_id = worker.node_id();
        wait_until_offered(&coordinator, worker_id, "cpu");

        let (collector, results) = MultiEventCollector::new(7);
        let collector = coordinator
            .submit(collector.on(contexts("coordinator")))
            .expect("the collector starts");
        let item = |index, labels: &str, spin_us| BagItem {
            index,
            reply_to: collector,
            contexts: contexts(labels),
            spin_us,
        };
        // One cpu item runs, so the worker is known to take cpu work.
        coordinator
            .submit(item(0, "cpu", 0))
            .expect("cpu is offered");
        let first = results
            .next_batch(WAIT)
            .expect("a report")
            .expect("one batch");
        assert_eq!(first.len(), 1);

        // Relabelled from the coordinator's side, over the network.
        coordinator
            .relabel_member(worker_id, None, labels("gpu"), WAIT)
            .expect("the worker accepts the new labels");
        wait_until_offered(&coordinator, worker_id, "gpu");
        assert_eq!(
            worker.pool().executor_context(0).map(|c| c.label_list()),
            Some("gpu".to_string())
        );
        // cpu work is refused now: nobody offers cpu.
        let refused = coordinator.submit(item(90, "cpu", 0)).unwrap_err();
        assert!(matches!(refused, NodeError::Submit(_)), "{refused}");

        for index in 1..=2 {
            coordinator
                .submit(item(index, "gpu", 1_000))
                .expect("gpu is offered");
        }
        let mut reports: Vec<BagReport> = Vec::new();
        let take = |count: usize, reports: &mut Vec<BagReport>| {
            let wanted = reports.len() + count;
            while reports.len() < wanted {
                let batch = results
                    .next_batch(WAIT)
                    .expect("reports")
                    .expect("more to come");
                assert!(!batch.is_empty(), "no report within {WAIT:?}");
                for event in batch {
                    reports.push(event.take().expect("a bag report"));
                }
            }
        };
        take(2, &mut reports);
        for (index, node, labels) in &reports {
            assert_eq!(*node, worker_id, "gpu item {index} ran on the worker");
            assert_eq!(labels, "gpu", "gpu item {index} ran under the new labels");
        }

        // cpu work already queued is not taken either. The worker offers
        // both, is kept busy with a long gpu item, and meanwhile three cpu
        // items queue at the coordinator; then it is relabelled gpu-only.
        worker
            .relabel(None, labels("gpu, cpu"))
            .expect("a node relabels itself");
        wait_until_offered(&coordinator, worker_id, "gpu,cpu");
        coordinator
            .submit(item(3, "gpu", 1_500_000))
            .expect("gpu is offered");
        let start = Instant::now();
        while worker.status().expect("status").busy != [true] {
            assert!(start.elapsed() < WAIT, "the long gpu item never started");
            std::thread::sleep(Duration::from_millis(5));
        }
        for index in 4..=6 {
            coordinator
                .submit(item(index, "cpu", 0))
                .expect("cpu is offered");
        }
        coordinator
            .relabel_member(worker_id, None, labels("gpu"), WAIT)
            .expect("back to gpu only");
        wait_until_offered(&coordinator, worker_id, "gpu");
        take(1, &mut reports);
        assert_eq!(
            reports.last().map(|r| r.0),
            Some(3),
            "the long gpu item finished"
        );
        // The idle worker asks for work a few times a second; give it time
        // to take cpu work if it (wrongly) would.
        std::thread::sleep(Duration::from_millis(800));
        assert!(
            reports.iter().all(|r| r.0 <= 3),
            "no cpu item ran: {reports:?}"
        );
        let waiting = coordinator
            .status()
            .expect("the coordinator describes itself");
        let status = coordinator
            .member_status(worker_id, WAIT)
            .expect("the worker answers");
        // Mostly at the coordinator; one may sit in the worker's queue if a
        // steal request it sent under its old labels (while its executor
        // was handed the long item) was answered after the items arrived.
        let cpu_queued = |queued: &[(String, u64)]| -> u64 {
            queued
                .iter()
                .filter(|(l, _)| l == "cpu")
                .map(|(_, n)| n)
                .sum()
        };
        assert_eq!(
            cpu_queued(&waiting.queued) + cpu_queued(&status.queued),
            3,
            "the cpu items still wait: coordinator {:?}, worker {:?}",
            waiting.queued,
            status.queued
        );
        assert_eq!(status.role, "agent");
        assert_eq!(status.host, "worker-host");
        assert_eq!(status.busy, vec![false]);
        assert_eq!(status.finished, 4, "{status:?}");
        let left = status.walltime_left_s.expect("the worker has a deadline");
        assert!(left > 3000.0 && left <= 3600.0, "{left}");
        let offered: Vec<String> = (status.member.executors.iter())
            .map(|e| e.label_list())
            .collect();
        assert_eq!(offered, ["gpu"]);

        // Offering cpu again, it takes them.
        coordinator
            .relabel_member(worker_id, None, labels("cpu"), WAIT)
            .expect("cpu again");
        let rest = results.wait_timeout(WAIT).expect("every item reports");
        assert_eq!(rest.len(), 3, "the three cpu items");
        let own = coordinator
            .status()
            .expect("the coordinator describes itself");
        assert_eq!(own.role, "run");
        assert_eq!(own.walltime_left_s, None);
        assert!(own.queued.is_empty(), "{:?}", own.queued);
        worker.leave();
        coordinator.done().expect("the run ends cleanly");
    });
}

#[test]
fn queued_work_is_counted_per_label_and_bad_relabels_are_refused() {
    within_limit(TEST_LIMIT, || {
        let coordinator = Node::start(
            NodeConfig::default(),
            Pool::builder().executor(labels("coordinator")),
        )
        .expect("the coordinator starts");
        let worker = Node::start(
            NodeConfig {
                bootstrap: vec![coordinator.join_address()],
                ..NodeConfig::default()
            },
            Pool::builder().executors_with(2, labels("cpu")),
        )
        .expect("the worker starts");
        coordinator.wait_for_members(2, WAIT).expect("they meet");
        let worker_id = worker.node_id();
        wait_until_offered(&coordinator, worker_id, "cpu");
        let error = coordinator
            .relabel_member(worker_id, Some(vec![5]), labels("gpu"), WAIT)
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "{worker_id} refused: there is no executor 5: this node has 2 (numbered from 0)"
            )
        );
        let stranger = NodeId::random();
        let error = coordinator.member_status(stranger, WAIT).unwrap_err();
        assert!(error.to_string().contains("is not a member"), "{error}");
        // Only executor 1 changes; the other keeps cpu.
        coordinator
            .relabel_member(worker_id, Some(vec![1]), labels("gpu"), WAIT)
            .expect("one executor relabelled");
        let status = coordinator.member_status(worker_id, WAIT).expect("status");
        let offered: Vec<String> = (status.member.executors.iter())
            .map(|e| e.label_list())
            .collect();
        assert_eq!(offered, ["cpu", "gpu"]);

        // Work for a label nobody has waits at the coordinator, counted
        // under each label it names.
        coordinator
            .relabel_member(worker_id, None, labels("gpu"), WAIT)
            .expect("all gpu");
        wait_until_offered(&coordinator, worker_id, "gpu");
        let (collector, results) = MultiEventCollector::new(3);
        let collector = coordinator
            .submit(collector.on(contexts("coordinator")))
            .expect("the collector starts");
        // "gpu | mpi": any-of, so the worker can take it.
        for index in 0..3 {
            let item = BagItem {
                index,
                reply_to: collector,
                contexts: contexts("gpu | mpi"),
                spin_us: 0,
            };
            coordinator.submit(item).expect("gpu is offered");
        }
        results
            .wait_timeout(WAIT)
            .expect("all three ran on the worker");
        worker.leave();
        coordinator.done().expect("clean end");
    });
}
