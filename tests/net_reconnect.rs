//! A pool node that dies and comes back, and a node that cannot join.
//!
//! The master runs as a child process (this test binary again, in
//! `--master` mode), so that killing it with SIGKILL is a real crash: no
//! goodbye, sockets closed by the kernel. A master restarted with the same
//! libp2p identity and port must be found again by the workers that knew
//! it, even by workers that still know each other, and a master that is
//! stopped on purpose must be told apart from one that died.
//!
//! The binary has its own `main` (`harness = false`) because the child
//! mode must not be a test; the scenarios run one after another and print
//! what libtest prints. Arguments that do not start with `-` filter them
//! by name.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use constellation::net::{JoinFailure, Keypair, MasterState, Multiaddr, Node, NodeConfig, PoolKey};
use constellation::{ExecutorContext, Pool};

/// How long SWIM gives a silent member: short, so a death is noticed in a
/// few seconds, but long enough for two busy cores.
const FAILURE_TIMEOUT: Duration = Duration::from_secs(2);

/// The bound on every wait: joining, noticing a death, rejoining. Each
/// takes a few seconds on an idle machine.
const WAIT: Duration = Duration::from_secs(60);

/// The environment variable that hands the child its identity's seed.
const SEED_ENV: &str = "NET_RECONNECT_SEED";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--master") {
        master_main(&args[1]);
        return;
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .try_init();
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    let scenarios: [(&str, fn()); 4] = [
        (
            "workers_rejoin_a_master_killed_and_restarted_with_the_same_identity_and_port",
            workers_rejoin_a_master_killed_and_restarted_with_the_same_identity_and_port,
        ),
        (
            "a_master_that_leaves_is_told_apart_from_one_that_dies",
            a_master_that_leaves_is_told_apart_from_one_that_dies,
        ),
        (
            "a_node_with_another_key_says_so",
            a_node_with_another_key_says_so,
        ),
        (
            "a_node_given_a_dead_address_says_nothing_listens",
            a_node_given_a_dead_address_says_nothing_listens,
        ),
    ];
    let mut failed = Vec::new();
    let mut ran = 0;
    for (name, scenario) in scenarios {
        if !filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        ran += 1;
        let started = Instant::now();
        match std::panic::catch_unwind(scenario) {
            Ok(()) => eprintln!(
                "test {name} ... ok ({:.1} s)",
                started.elapsed().as_secs_f64()
            ),
            Err(_) => {
                eprintln!("test {name} ... FAILED");
                failed.push(name);
            }
        }
    }
    eprintln!(
        "\ntest result: {}. {} passed; {} failed",
        if failed.is_empty() { "ok" } else { "FAILED" },
        ran - failed.len(),
        failed.len()
    );
    if !failed.is_empty() {
        eprintln!("failed: {failed:?}");
        std::process::exit(1);
    }
}

/// The child: a master on `127.0.0.1:PORT` with the identity seeded by
/// `SEED_ENV` and the key in `CONSTELLATION_KEY`. It prints its join
/// address, then serves until a line (or the end) on stdin tells it to
/// leave cleanly, or until it is killed.
fn master_main(port: &str) {
    let seed = std::env::var(SEED_ENV).expect("the seed of the master's identity");
    let identity = identity(seed.parse().expect("a numeric seed"));
    let config = NodeConfig {
        listen: format!("/ip4/127.0.0.1/tcp/{port}")
            .parse()
            .expect("a multiaddr"),
        key: constellation::net::key::from_env().expect("a key in the environment"),
        master: true,
        identity: Some(identity),
        failure_timeout: FAILURE_TIMEOUT,
        role: "pool".into(),
        ..NodeConfig::default()
    };
    let holds_only: ExecutorContext = "constellation:pool".parse().expect("a label");
    let node = Node::start(config, Pool::builder().executor(holds_only)).expect("master starts");
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", node.join_address()).expect("stdout");
    out.flush().expect("stdout");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    node.leave();
}

/// The libp2p identity made from `seed`: the same seed, the same peer id.
fn identity(seed: u8) -> Keypair {
    Keypair::ed25519_from_bytes([seed; 32]).expect("32 bytes make an ed25519 key")
}

/// A master child process; killed when dropped.
struct Master {
    child: Child,
    stdin: Option<ChildStdin>,
    address: Multiaddr,
}

impl Master {
    fn start(port: u16, seed: u8, key: &PoolKey) -> Master {
        let mut child = Command::new(std::env::current_exe().expect("this binary"))
            .args(["--master", &port.to_string()])
            .env(SEED_ENV, seed.to_string())
            .env(constellation::net::key::KEY_ENV, key.to_hex())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the master process starts");
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(WAIT)
            .expect("the master prints its address within the wait");
        let address = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("the master printed {line:?}, not its address"));
        Master {
            stdin: child.stdin.take(),
            child,
            address,
        }
    }

    /// SIGKILL: the master dies without a word.
    fn kill(mut self) {
        self.child.kill().expect("kill the master");
        self.child.wait().expect("reap the master");
    }

    /// Asks the master to leave cleanly and waits for it to exit.
    fn stop(mut self) {
        let mut stdin = self.stdin.take().expect("the master's stdin");
        let _ = writeln!(stdin, "leave");
        drop(stdin);
        let deadline = Instant::now() + WAIT;
        while self.child.try_wait().expect("wait").is_none() {
            assert!(Instant::now() < deadline, "the master did not leave");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Master {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port nobody listens on now (the OS picked it, and it was let go).
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").port()
}

fn worker(bootstrap: Vec<Multiaddr>, key: &PoolKey) -> Node {
    let config = NodeConfig {
        bootstrap,
        key: Some(key.clone()),
        failure_timeout: FAILURE_TIMEOUT,
        role: "agent".into(),
        ..NodeConfig::default()
    };
    Node::start(config, Pool::builder().executors(1)).expect("a worker starts")
}

/// Waits up to [`WAIT`] for `condition`, failing with `what` and `state`.
fn wait_for(what: &str, mut condition: impl FnMut() -> bool, state: impl Fn() -> String) {
    let deadline = Instant::now() + WAIT;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "{what}: not within {WAIT:?}; {}",
            state()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn describe(nodes: &[&Node]) -> String {
    (nodes.iter())
        .map(|node| {
            format!(
                "{}: {:?}, {} member(s), problem {:?}",
                node.peer_id(),
                node.master_state(),
                node.members().len(),
                node.join_problem().map(|p| p.to_string())
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn workers_rejoin_a_master_killed_and_restarted_with_the_same_identity_and_port() {
    let key = PoolKey::generate();
    let port = free_port();
    let master = Master::start(port, 7, &key);
    let address = master.address.clone();
    let first = worker(vec![address.clone()], &key);
    let second = worker(vec![address.clone()], &key);
    let state = || describe(&[&first, &second]);
    wait_for(
        "both workers know the master and each other",
        || {
            [&first, &second]
                .iter()
                .all(|w| w.master_known() && w.members().len() == 2)
        },
        state,
    );

    master.kill();
    wait_for(
        "both workers count the killed master lost",
        || {
            [&first, &second]
                .iter()
                .all(|w| w.master_state() == MasterState::Lost)
        },
        state,
    );
    // They still know each other: SWIM alone would not look for the
    // master again, since neither is alone.
    wait_for(
        "the workers still know each other",
        || first.members().len() == 1 && second.members().len() == 1,
        state,
    );

    let master = Master::start(port, 7, &key);
    assert_eq!(
        master.address, address,
        "the restarted master has the same identity and port"
    );
    wait_for(
        "both workers know the restarted master",
        || [&first, &second].iter().all(|w| w.master_known()),
        state,
    );
    master.stop();
    drop((first, second));
}

fn a_master_that_leaves_is_told_apart_from_one_that_dies() {
    let key = PoolKey::generate();
    let master = Master::start(free_port(), 8, &key);
    let node = worker(vec![master.address.clone()], &key);
    let state = || describe(&[&node]);
    wait_for("the worker knows the master", || node.master_known(), state);
    master.stop();
    wait_for(
        "the worker counts the master as left",
        || node.master_state() != MasterState::Known,
        state,
    );
    // SWIM's goodbye may come before the master's `Leaving`: give it a
    // moment to settle on `Left`.
    wait_for(
        "the master's goodbye is told from a death",
        || node.master_state() == MasterState::Left,
        state,
    );
}

fn a_node_with_another_key_says_so() {
    let key = PoolKey::generate();
    let master = Master::start(free_port(), 9, &key);
    let stranger = worker(vec![master.address.clone()], &PoolKey::generate());
    let state = || describe(&[&stranger]);
    wait_for(
        "the node with another key names the key as its problem",
        || {
            stranger
                .join_problem()
                .is_some_and(|p| p.failure == JoinFailure::WrongKey)
        },
        state,
    );
    assert_eq!(stranger.master_state(), MasterState::NotYetSeen);
    let problem = stranger.join_problem().expect("a problem").to_string();
    assert!(problem.contains("different pool key"), "{problem}");
}

fn a_node_given_a_dead_address_says_nothing_listens() {
    let key = PoolKey::generate();
    let peer = identity(10).public().to_peer_id();
    let dead: Multiaddr = format!("/ip4/127.0.0.1/tcp/{}/p2p/{peer}", free_port())
        .parse()
        .expect("a multiaddr");
    let lonely = worker(vec![dead], &key);
    let state = || describe(&[&lonely]);
    wait_for(
        "the node given a dead address says the connection was refused",
        || {
            lonely
                .join_problem()
                .is_some_and(|p| p.failure == JoinFailure::Refused)
        },
        state,
    );
    let problem = lonely.join_problem().expect("a problem").to_string();
    assert!(problem.contains("connection refused"), "{problem}");
}
