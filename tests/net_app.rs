//! App requests over real loopback sockets: a node's application answers
//! questions from other members (the job service on a pool node, kill
//! requests on agents) through its `AppHandler`, on a thread of its own,
//! and every way a question can go wrong comes back as a clear error
//! instead of a hang.

use std::sync::Arc;
use std::time::Duration;

use constellation::net::{AppHandler, Node, NodeConfig, NodeError};
use constellation::{ExecutorContext, Pool};
use constellation_workloads::within_limit;

const TEST_LIMIT: Duration = Duration::from_secs(90);
const WAIT: Duration = Duration::from_secs(20);

/// Upper-cases what it is asked; refuses "no"; panics on "boom"; takes
/// 3 s over "slow".
fn shouting() -> AppHandler {
    Arc::new(|request| match request.body.as_slice() {
        b"no" => Err("no is no".to_string()),
        b"boom" => panic!("the handler broke"),
        b"slow" => {
            std::thread::sleep(Duration::from_secs(3));
            Ok(b"late".to_vec())
        }
        body => Ok(body.to_ascii_uppercase()),
    })
}

fn node(config: NodeConfig) -> Node {
    let only: ExecutorContext = "nothing-asks-for-this".parse().expect("a label");
    Node::start(config, Pool::builder().executor(only)).expect("the node starts")
}

#[test]
fn app_requests_are_answered_refused_or_timed_out_never_hung() {
    within_limit(TEST_LIMIT, || {
        let pool = node(NodeConfig {
            master: true,
            role: "pool".into(),
            app_handler: Some(shouting()),
            ..NodeConfig::default()
        });
        let client = node(NodeConfig {
            bootstrap: vec![pool.join_address()],
            role: "client".into(),
            ..NodeConfig::default()
        });
        client.wait_for_members(2, WAIT).expect("they meet");
        let master = client.master().expect("the client knows the pool node");
        assert_eq!(master.node, pool.node_id());

        let answer = client.ask_app(master.node, b"hello".to_vec(), WAIT);
        assert_eq!(answer.expect("an answer"), b"HELLO");

        match client.ask_app(master.node, b"no".to_vec(), WAIT) {
            Err(NodeError::Refused { reason, .. }) => assert_eq!(reason, "no is no"),
            other => panic!("expected the handler's refusal, got {other:?}"),
        }
        match client.ask_app(master.node, b"boom".to_vec(), WAIT) {
            Err(NodeError::Refused { reason, .. }) => {
                assert!(reason.contains("handler failed"), "{reason}")
            }
            other => panic!("expected a refusal for a panicking handler, got {other:?}"),
        }
        match client.ask_app(master.node, b"slow".to_vec(), Duration::from_millis(300)) {
            Err(NodeError::NoAnswer { reason, .. }) => {
                assert!(reason.contains("no answer within"), "{reason}")
            }
            other => panic!("expected no answer in time, got {other:?}"),
        }
        // The slow handler holds a blocking thread, not the driver: the
        // pool node answers the next question at once.
        let answer = client.ask_app(master.node, b"again".to_vec(), WAIT);
        assert_eq!(answer.expect("an answer"), b"AGAIN");

        // A node without a handler refuses, naming what it is.
        match pool.ask_app(client.node_id(), b"hello".to_vec(), WAIT) {
            Err(NodeError::Refused { reason, .. }) => {
                assert!(reason.contains("client takes no app requests"), "{reason}")
            }
            other => panic!("expected a refusal from a node without a handler, got {other:?}"),
        }
        client.leave();
        pool.leave();
    });
}
