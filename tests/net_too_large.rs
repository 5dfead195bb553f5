//! An activity too large for a steal reply, on a node where no executor
//! can run it, is given up with the reason, over real loopback sockets,
//! instead of waiting there forever.

use std::time::{Duration, Instant};

use constellation::net::{Node, NodeConfig};
use constellation::{Context, ContextList, ExecutorContext, Pool};
use constellation_workloads::{within_limit, WhereDidIRun};

const TEST_LIMIT: Duration = Duration::from_secs(90);
const WAIT: Duration = Duration::from_secs(30);

/// Frames of 1 MiB: a steal reply carries at most 512 KiB of activities.
const MAX_FRAME: usize = 1 << 20;

#[test]
fn an_activity_that_cannot_travel_is_given_up_where_nothing_can_run_it() {
    within_limit(TEST_LIMIT, || {
        let here: ExecutorContext = "here".parse().expect("a label");
        let origin = Node::start(
            NodeConfig {
                master: true,
                max_frame: MAX_FRAME,
                ..NodeConfig::default()
            },
            Pool::builder().executor(here),
        )
        .expect("the origin starts");
        let far: ExecutorContext = "far".parse().expect("a label");
        let worker = Node::start(
            NodeConfig {
                bootstrap: vec![origin.join_address()],
                max_frame: MAX_FRAME,
                ..NodeConfig::default()
            },
            Pool::builder().executor(far),
        )
        .expect("the worker starts");
        origin.wait_for_members(2, WAIT).expect("they meet");

        let name = "x".repeat(600 << 10);
        let far = ContextList::single(Context::new("far"));
        let big = WhereDidIRun::new(name, far, origin.pool().address());
        let id = submit_when_offered(&origin, big);

        let deadline = Instant::now() + WAIT;
        let lost = loop {
            let lost = origin.take_lost();
            if !lost.is_empty() {
                break lost;
            }
            assert!(
                Instant::now() < deadline,
                "the activity too large to travel was not given up within {WAIT:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(lost.len(), 1, "{lost:?}");
        assert_eq!(lost[0].0, id);
        assert!(
            lost[0].1.contains("too large to travel to another node"),
            "{}",
            lost[0].1
        );
        assert_eq!(origin.pool().outstanding(), 0, "nothing waits for it");
        drop(worker);
    });
}

/// Submits `activity` on `node` once a member offers what it needs (the
/// worker's offer comes with its hello, after it is a member).
fn submit_when_offered(node: &Node, activity: WhereDidIRun) -> constellation::ActivityId {
    let deadline = Instant::now() + WAIT;
    let mut activity = Some(activity);
    loop {
        let offered = (node.members().iter())
            .any(|m| m.executors.iter().any(|e| e.to_string().contains("far")));
        if offered {
            return node
                .pool()
                .submit(activity.take().expect("submitted once"))
                .expect("a member offers far");
        }
        assert!(Instant::now() < deadline, "the worker's offer never came");
        std::thread::sleep(Duration::from_millis(20));
    }
}
