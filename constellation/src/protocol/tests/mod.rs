//! Message-level tests of [`StateMachine`](super::StateMachine): two, three or many nodes
//! wired by a [harness](harness) on virtual time, with fake executors
//! ([`fake_host`]), no threads and no sockets. In the spirit of the
//! scheduler core's tests and of quinn-proto's `Pair`.
//!
//! Each test says what the protocol promises and checks it against what
//! crossed the network and what each node's host was asked to do.

mod fake_host;
mod harness;
mod swim;

mod events;
mod failures;
mod membership;
mod stealing;

use std::time::Duration;

use super::strategy::{Strategy, WideSteal};
use super::Settings;
use crate::id::NodeId;

/// The id of the node at `index` in a cluster: reproducible, never nil.
fn node_id(index: u32) -> NodeId {
    NodeId::from_u128(u128::from(index) + 1)
}

/// How long SWIM waits for a suspect to refute, in these tests.
const FAILURE_TIMEOUT: Duration = Duration::from_secs(6);
/// How often SWIM probes, in these tests.
const PROBE_PERIOD: Duration = Duration::from_secs(1);

/// The settings of node `index` unless a test says otherwise: random
/// stealing in one pool, SWIM probing every second and declaring a silent
/// member down 6 s after suspecting it.
fn settings(index: u32) -> Settings {
    Settings {
        node: node_id(index),
        site: None,
        strategy: Strategy::Random,
        master: false,
        steal_pool: "pool".to_string(),
        steal_from: "pool".to_string(),
        max_steal: 16,
        wide_steal: WideSteal::default(),
        failure_timeout: FAILURE_TIMEOUT,
        probe_period: PROBE_PERIOD,
        max_attempts: 3,
        early_event_wait: Duration::from_secs(2),
        backoff: (Duration::from_millis(1), Duration::from_millis(50)),
        seed: 0x5EED_0000 + u64::from(index),
    }
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}
