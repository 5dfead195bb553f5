//! Jobs' readiness under load: with every core kept busy, a submit and its
//! job's runner, which have just joined the pool, wait (a bounded time)
//! for the pool node's view of its agents before they refuse work that no
//! agent they know offers; an agent that is there is found.

mod common;

use std::process::{Child, Command};
use std::time::Duration;

use common::{numbered_graph, run, scratch, spawn_agent, start_pool, text, wait_for_log};

/// Submits in a row, each a new node joining the pool.
const SUBMITS: usize = 20;

/// Shell busy loops, killed when the test ends.
struct BusyLoops(Vec<Child>);

impl BusyLoops {
    /// `count` loops that each keep a core busy.
    fn start(count: usize) -> BusyLoops {
        let loops = (0..count)
            .map(|_| {
                Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .spawn()
                    .expect("start a busy loop")
            })
            .collect();
        BusyLoops(loops)
    }
}

impl Drop for BusyLoops {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn every_submit_is_accepted_and_every_job_succeeds_with_every_core_busy() {
    let dir = scratch("under-load");
    let _pool = start_pool(&dir);
    let _agent = spawn_agent(&dir, 1, "worker", &[]);
    wait_for_log(&dir, "worker.log", "joined with", Duration::from_secs(60));
    let graph = numbered_graph(&dir.join("graph.toml"), "t", 1, "true");
    let graph = graph.to_str().expect("UTF-8 path");

    // Eight loops per core: the pool's processes get a ninth of one each.
    // With two loops per core, 0 of 20 submits were refused before the
    // fix; with eight, 17 of 20 were, and 2 of the 3 accepted jobs failed.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let busy = BusyLoops::start(8 * cores);
    let mut ids = Vec::new();
    let mut refused = Vec::new();
    for _ in 0..SUBMITS {
        let submitted = run(&dir, &["submit", graph, "--pool", "pool.json", "--json"]);
        let answer: Option<serde_json::Value> = serde_json::from_slice(&submitted.stdout).ok();
        match answer.and_then(|answer| answer["id"].as_u64()) {
            Some(id) => ids.push(id.to_string()),
            None => refused.push(text(&submitted)),
        }
    }
    let waiting: Vec<&str> = ids.iter().map(String::as_str).collect();
    let wait = [
        &["wait"][..],
        &waiting,
        &["--pool", "pool.json", "--timeout", "400s"],
    ];
    let waited = run(&dir, &wait.concat());
    drop(busy);

    assert!(
        refused.is_empty(),
        "{} of {SUBMITS} submits refused under load: {refused:#?}",
        refused.len()
    );
    assert_eq!(
        waited.status.code(),
        Some(0),
        "every accepted job succeeded under load: {}",
        text(&waited)
    );
}
