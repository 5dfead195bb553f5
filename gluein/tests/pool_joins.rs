//! Joining a pool, and losing it, as real processes on loopback: an agent
//! that cannot reach its pool node exits within its join timeout and says
//! why (another key, nothing listening, a stale pool file); one whose pool
//! node died waits for it and rejoins when it is started again; one whose
//! pool node was stopped leaves at once.

mod common;

use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;

use common::{log, run_on_pool, scratch, sleepers, spawn, start_pool_with, text, Guard};

/// Far more than a join timeout of 5 s needs, for a loaded machine.
const EXIT_LIMIT: Duration = Duration::from_secs(60);

/// How long a log line may take to appear.
const LOG_LIMIT: Duration = Duration::from_secs(60);

/// Starts a loopback pool in `dir` with the key `dir/pool.key` (made if
/// missing) and the pool file `dir/pool.json`, logging to `dir/LOG`, and
/// waits until the pool file is this process's (a killed pool's stale
/// file does not count).
fn start_pool(dir: &Path, log_name: &str) -> Guard {
    start_pool_with(dir, &["--key-file", "pool.key"], log_name)
}

/// Starts `constellation agent` with one executor and `args`, logging to
/// `dir/LOG`.
fn spawn_agent(dir: &Path, args: &[&str], log_name: &str) -> Guard {
    let base = ["agent", "-n", "1", "--context", "worker"];
    spawn(dir, &[&base[..], args].concat(), log_name)
}

/// Waits for the process of `guard` to exit, at most [`EXIT_LIMIT`].
fn exited(guard: &mut Guard, dir: &Path, log_name: &str) -> ExitStatus {
    common::exited(guard, EXIT_LIMIT, dir, log_name)
}

/// Waits until `dir/LOG` contains `wanted`, at most [`LOG_LIMIT`].
fn wait_for_log(dir: &Path, log_name: &str, wanted: &str) {
    common::wait_for_log(dir, log_name, wanted, LOG_LIMIT);
}

/// Starts a pool and an agent that joins it with `--reconnect RECONNECT`,
/// kills the pool node with SIGKILL once the agent has joined, and
/// returns what the agent said once it left, which it must have done
/// successfully.
fn agent_log_after_its_pool_node_died(name: &str, reconnect: &str) -> String {
    let dir = scratch(name);
    let mut pool = start_pool(&dir, "pool.log");
    let mut agent = spawn_agent(
        &dir,
        &["--pool", "pool.json", "--reconnect", reconnect],
        "agent.log",
    );
    wait_for_log(&dir, "agent.log", "joined with");
    pool.0.kill().expect("kill -9 the pool node");
    let status = exited(&mut agent, &dir, "agent.log");
    let said = log(&dir, "agent.log");
    assert!(status.success(), "{said}");
    said
}

/// Asserts that the agent failed to join and said `because`.
fn assert_not_joined(status: ExitStatus, dir: &Path, log_name: &str, because: &[&str]) {
    let said = log(dir, log_name);
    assert_eq!(status.code(), Some(2), "{said}");
    assert!(said.contains("could not join the pool"), "{said}");
    assert!(!said.contains("joined with"), "never 'joined': {said}");
    for words in because {
        assert!(said.contains(words), "should say {words:?}: {said}");
    }
}

#[test]
fn an_agent_with_another_pools_key_exits_and_names_the_key() {
    let dir = scratch("joins-wrong-key");
    let _pool = start_pool(&dir, "pool.log");
    constellation::net::key::write_new_file(&dir.join("other.key")).expect("a second key");
    let mut agent = spawn_agent(
        &dir,
        &[
            "--pool",
            "pool.json",
            "--key-file",
            "other.key",
            "--join-timeout",
            "5s",
        ],
        "agent.log",
    );
    let status = exited(&mut agent, &dir, "agent.log");
    assert_not_joined(
        status,
        &dir,
        "agent.log",
        &["within 5 s", "different pool key"],
    );
}

/// An agent of `dir` (its log `agent.log`) that joins, with `dir/pool.key`
/// and a 5 s join timeout, a made-up pool node on loopback port `port`.
fn agent_joining_port(dir: &Path, port: u16) -> Guard {
    let peer = constellation::net::Keypair::generate_ed25519()
        .public()
        .to_peer_id();
    let address = format!("/ip4/127.0.0.1/tcp/{port}/p2p/{peer}");
    let arguments = [
        "--pool",
        &address,
        "--key-file",
        "pool.key",
        "--join-timeout",
        "5s",
    ];
    spawn_agent(dir, &arguments, "agent.log")
}

#[test]
fn a_connection_dropped_during_the_handshake_is_not_called_a_different_key() {
    let dir = scratch("joins-dropped");
    constellation::net::key::write_new_file(&dir.join("pool.key")).expect("a key");
    // Something that takes each connection and closes it at once, as a
    // pool node that is stopping, or a program that is not one, does.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a listener");
    let port = listener.local_addr().expect("its address").port();
    std::thread::spawn(move || {
        for connection in listener.incoming() {
            drop(connection);
        }
    });
    let mut agent = agent_joining_port(&dir, port);
    let status = exited(&mut agent, &dir, "agent.log");
    assert_not_joined(
        status,
        &dir,
        "agent.log",
        &["was closed during the handshake"],
    );
    let said = log(&dir, "agent.log");
    assert!(!said.contains("has a different pool key"), "{said}");
}

#[test]
fn an_agent_given_an_address_where_nothing_listens_says_so() {
    let dir = scratch("joins-dead-address");
    constellation::net::key::write_new_file(&dir.join("pool.key")).expect("a key");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let mut agent = agent_joining_port(&dir, port);
    let status = exited(&mut agent, &dir, "agent.log");
    assert_not_joined(status, &dir, "agent.log", &["connection refused"]);
}

#[test]
fn an_agent_given_the_pool_file_of_a_killed_pool_says_it_is_stale() {
    let dir = scratch("joins-stale-file");
    let mut pool = start_pool(&dir, "pool.log");
    pool.0.kill().expect("kill -9 the pool node");
    pool.0.wait().expect("reap the pool node");
    assert!(
        dir.join("pool.json").exists(),
        "a killed pool leaves its file"
    );
    let mut agent = spawn_agent(
        &dir,
        &["--pool", "pool.json", "--join-timeout", "5s"],
        "agent.log",
    );
    let status = exited(&mut agent, &dir, "agent.log");
    assert_not_joined(status, &dir, "agent.log", &["connection refused", "stale"]);
}

#[test]
fn an_agent_leaves_at_once_when_the_pool_node_is_stopped() {
    let dir = scratch("joins-pool-stopped");
    let pool = start_pool(&dir, "pool.log");
    // A long reconnect window: leaving well within it shows that a stop is
    // not taken for a death.
    let mut agent = spawn_agent(
        &dir,
        &["--pool", "pool.json", "--reconnect", "10m"],
        "agent.log",
    );
    wait_for_log(&dir, "agent.log", "joined with");
    unsafe { libc::kill(pool.0.id() as i32, libc::SIGTERM) };
    let status = exited(&mut agent, &dir, "agent.log");
    let said = log(&dir, "agent.log");
    assert!(status.success(), "{said}");
    assert!(
        said.contains("agent leaving: the pool node stopped"),
        "{said}"
    );
    drop(pool);
}

#[test]
fn an_agent_gives_a_dead_pool_node_its_reconnect_time_then_leaves() {
    let said = agent_log_after_its_pool_node_died("joins-pool-lost", "3s");
    assert!(said.contains("the pool node is gone; trying"), "{said}");
    assert!(
        said.contains("agent leaving: pool node gone for 3 s"),
        "{said}"
    );
}

#[test]
fn an_agent_rejoins_a_pool_node_killed_and_started_again() {
    let dir = scratch("joins-pool-restarted");
    let mut pool = start_pool(&dir, "pool.log");
    let _agent = spawn_agent(
        &dir,
        &["--pool", "pool.json", "--reconnect", "10m"],
        "agent.log",
    );
    wait_for_log(&dir, "agent.log", "joined with");
    pool.0.kill().expect("kill -9 the pool node");
    pool.0.wait().expect("reap the pool node");
    wait_for_log(&dir, "agent.log", "the pool node is gone; trying");

    // The same state directory: the same identity and port.
    let _pool = start_pool(&dir, "pool-again.log");
    wait_for_log(&dir, "agent.log", "the pool node is back");
    // The restarted pool node knows the agent: work submitted to it runs.
    let graph = sleepers(&dir, 2, 0.0);
    let ran = run_on_pool(&dir, &graph, 1, &["--wait-timeout", "60s"]);
    assert!(
        ran.status.success(),
        "{}\nagent: {}",
        text(&ran),
        log(&dir, "agent.log")
    );
    assert_eq!(common::marks_done(&dir), 2, "both activities ran");
}

#[test]
fn an_agent_told_not_to_wait_leaves_as_soon_as_the_pool_node_dies() {
    let said = agent_log_after_its_pool_node_died("joins-no-reconnect", "0");
    assert!(
        said.contains("agent leaving: the pool node is gone"),
        "{said}"
    );
    assert!(!said.contains("trying"), "no reconnect window: {said}");
}

#[test]
fn a_run_with_another_pools_key_fails_and_names_the_key() {
    let dir = scratch("joins-run-wrong-key");
    let _pool = start_pool(&dir, "pool.log");
    constellation::net::key::write_new_file(&dir.join("other.key")).expect("a second key");
    let graph = sleepers(&dir, 1, 0.0);
    let mut runner = spawn(
        &dir,
        &[
            "run",
            graph.to_str().expect("UTF-8 path"),
            "--pool",
            "pool.json",
            "--key-file",
            "other.key",
            "--wait-timeout",
            "5s",
            "--progress",
            "none",
        ],
        "run.log",
    );
    let status = exited(&mut runner, &dir, "run.log");
    let said = log(&dir, "run.log");
    assert_eq!(status.code(), Some(2), "{said}");
    assert!(
        said.contains("could not join the pool pool.json within 5 s")
            && said.contains("different pool key"),
        "{said}"
    );
    assert_eq!(common::marks_done(&dir), 0, "nothing ran: {said}");
}
