//! How long 50 nodes take to learn each other.
//!
//! Fifty nodes start in this process, one after another, each joining
//! through the first. The test measures how long after the last node
//! started every node knows the other 49, and prints it (run with
//! `--nocapture`); it asserts only that membership completes and is right,
//! never on the time, which depends on the machine.

use std::collections::BTreeSet;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use constellation::net::{Node, NodeConfig};
use constellation::NodeId;
use constellation::Pool;
use constellation_workloads::within_limit;
use libp2p::Multiaddr;

/// Nodes in the pool, unless `CONSTELLATION_TEST_NODES` says otherwise.
const NODES: usize = 50;

fn node_count() -> usize {
    std::env::var("CONSTELLATION_TEST_NODES")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|&n| n >= 2)
        .unwrap_or(NODES)
}

/// Membership not complete after this long is a failure: it has stopped
/// converging. On 2 cores in a debug build 50 idle nodes, every one
/// stealing from the others all the while, took 7-17 s here, and 9-25 s
/// with two other processes spinning; a node too starved to finish its
/// handshakes in time is declared dead by the others meanwhile and has to
/// be learnt again.
const MEMBERSHIP_DEADLINE: Duration = Duration::from_secs(60);

/// The whole test, shutdown included, must end within this.
const TEST_LIMIT: Duration = Duration::from_secs(100);

/// How often membership is looked at.
const POLL: Duration = Duration::from_millis(2);

fn start(bootstrap: Vec<Multiaddr>) -> Node {
    Node::start(
        NodeConfig {
            bootstrap,
            ..NodeConfig::default()
        },
        Pool::builder().executors(1),
    )
    .expect("a node starts")
}

/// Which nodes know each other only one way, for a failure message.
fn one_sided(nodes: &[Node]) -> String {
    let ids: Vec<NodeId> = nodes.iter().map(Node::node_id).collect();
    let known: Vec<BTreeSet<NodeId>> = (nodes.iter())
        .map(|n| n.members().iter().map(|m| m.node).collect())
        .collect();
    let mut one_way = 0;
    let mut neither = 0;
    for a in 0..nodes.len() {
        for b in a + 1..nodes.len() {
            match (known[a].contains(&ids[b]), known[b].contains(&ids[a])) {
                (true, false) | (false, true) => one_way += 1,
                (false, false) => neither += 1,
                (true, true) => {}
            }
        }
    }
    let unknown_to_first: Vec<usize> = (1..nodes.len())
        .filter(|&i| !known[0].contains(&ids[i]))
        .collect();
    format!(
        "{one_way} pairs know each other one way only, {neither} not at all; \
         the first node does not know nodes {unknown_to_first:?}"
    )
}

#[test]
fn fifty_nodes_learn_each_other() {
    within_limit(TEST_LIMIT, || {
        let nodes_wanted = node_count();
        let began = Instant::now();
        let first = start(Vec::new());
        let address = first.join_address();
        let mut nodes = vec![first];
        let mut last_started = began;
        for _ in 1..nodes_wanted {
            last_started = Instant::now();
            nodes.push(start(vec![address.clone()]));
        }
        let all_started = began.elapsed();

        let wanted = nodes_wanted - 1;
        let deadline = last_started + MEMBERSHIP_DEADLINE;
        let complete = loop {
            let counts: Vec<usize> = nodes.iter().map(|n| n.members().len()).collect();
            if counts.iter().all(|&c| c == wanted) {
                break last_started.elapsed();
            }
            assert!(
                Instant::now() < deadline,
                "membership incomplete after {MEMBERSHIP_DEADLINE:?}: members known per node \
                 {counts:?}; {}",
                one_sided(&nodes)
            );
            std::thread::sleep(POLL);
        };
        println!(
            "{nodes_wanted} nodes: started in {all_started:?}; every node knew the other {wanted} \
             {complete:?} after the last one started ({:?} after the first)",
            began.elapsed()
        );

        let ids: Vec<_> = nodes.iter().map(Node::node_id).collect();
        for (node, me) in nodes.iter().zip(&ids) {
            let members = node.members();
            let known: BTreeSet<String> = members.iter().map(|m| m.node.to_string()).collect();
            let others: BTreeSet<String> = (ids.iter())
                .filter(|id| *id != me)
                .map(ToString::to_string)
                .collect();
            assert_eq!(known, others, "node {me} knows the wrong members");
            for member in &members {
                assert_eq!(
                    member.executors.len(),
                    1,
                    "node {me} sees node {} with executors {:?}",
                    member.node,
                    member.executors
                );
            }
        }

        let stopping = Instant::now();
        let (results, ended) = mpsc::channel();
        let threads: Vec<_> = (nodes.into_iter())
            .map(|node| {
                let results = results.clone();
                std::thread::spawn(move || {
                    let _ = results.send(node.done().map_err(|e| e.to_string()));
                })
            })
            .collect();
        drop(results);
        let mut steal_requests = 0;
        for result in ended.iter() {
            let (_, stats) = result.expect("a node ends cleanly");
            steal_requests += stats.steal_requests;
        }
        for thread in threads {
            thread.join().expect("a node's done() did not panic");
        }
        println!(
            "{nodes_wanted} nodes ended (done() in parallel) in {:?}; they sent {steal_requests} steal requests in all",
            stopping.elapsed()
        );
    });
}
