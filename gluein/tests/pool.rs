//! `constellation pool start`, `agent` and `run --pool` as real processes
//! on loopback: agents join, run a graph's activities, leave when idle or
//! before their walltime, and a killed agent's work runs elsewhere.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    log, marks, marks_done, run, scratch, sleepers, spawn, start_pool, text, wait_exit, BIN,
};

#[test]
fn agents_run_a_graph_submitted_to_the_pool_and_leave_when_idle() {
    let dir = scratch("pool-graph");
    let mut pool = start_pool(&dir);
    let mut alpha = spawn(
        &dir,
        &[
            "agent",
            "--pool",
            "pool.json",
            "-n",
            "2",
            "--context",
            "alpha",
            "--idle-timeout",
            "3s",
        ],
        "alpha.log",
    );
    let mut beta = spawn(
        &dir,
        &[
            "agent",
            "--pool",
            "pool.json",
            "-n",
            "1",
            "--context",
            "beta",
            "--idle-timeout",
            "3s",
        ],
        "beta.log",
    );
    let graph = sleepers(&dir, 30, 0.1);
    let ran = run(
        &dir,
        &[
            "run",
            graph.to_str().unwrap(),
            "--pool",
            "pool.json",
            "--wait-agents",
            "2",
            "--progress",
            "none",
        ],
    );
    assert!(ran.status.success(), "{}", text(&ran));
    let marks = marks(&dir);
    assert_eq!(marks.len(), 30, "every activity ran once");
    let by = |label: &str| marks.iter().filter(|m| m.0 == label).count();
    println!("alpha ran {}, beta ran {}", by("alpha"), by("beta"));
    assert_eq!(
        by("alpha") + by("beta"),
        30,
        "only agents ran work: {marks:?}"
    );
    for (agent, name) in [(&mut alpha, "alpha.log"), (&mut beta, "beta.log")] {
        let status = wait_exit(agent, Duration::from_secs(20));
        assert!(status.is_some_and(|s| s.success()), "{}", log(&dir, name));
        assert!(
            log(&dir, name).contains("nothing to do"),
            "{}",
            log(&dir, name)
        );
    }
    // SIGTERM stops the pool cleanly, and it removes its pool file.
    // SAFETY: sending a signal to our own child process.
    unsafe { libc::kill(pool.0.id() as i32, libc::SIGTERM) };
    assert!(wait_exit(&mut pool, Duration::from_secs(10)).is_some_and(|s| s.success()));
    assert!(!dir.join("pool.json").exists());
}

#[test]
fn an_agent_takes_no_activity_it_cannot_finish_before_its_walltime() {
    let dir = scratch("pool-walltime");
    let _pool = start_pool(&dir);
    // Activities take 1 s; the short agent (6 s) must stop taking work
    // once less than 1 s + its 2 s margin is left, finish, and leave.
    let started = Instant::now();
    let unix_start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let mut short = spawn(
        &dir,
        &[
            "agent",
            "--pool",
            "pool.json",
            "-n",
            "1",
            "--context",
            "short",
            "--walltime",
            "6s",
        ],
        "short.log",
    );
    let _long = spawn(
        &dir,
        &[
            "agent",
            "--pool",
            "pool.json",
            "-n",
            "1",
            "--context",
            "long",
            "--idle-timeout",
            "3s",
        ],
        "long.log",
    );
    let graph = sleepers(&dir, 12, 1.0);
    let ran = run(
        &dir,
        &[
            "run",
            graph.to_str().unwrap(),
            "--pool",
            "pool.json",
            "--wait-agents",
            "2",
            "--progress",
            "none",
        ],
    );
    assert!(ran.status.success(), "{}", text(&ran));
    let status = wait_exit(&mut short, Duration::from_secs(20));
    assert!(
        status.is_some_and(|s| s.success()),
        "{}",
        log(&dir, "short.log")
    );
    assert!(
        log(&dir, "short.log").contains("walltime"),
        "{}",
        log(&dir, "short.log")
    );
    assert!(started.elapsed() < Duration::from_secs(60));
    let marks = marks(&dir);
    assert_eq!(marks.len(), 12);
    let deadline = unix_start + 6_000_000_000;
    let short_runs: Vec<_> = marks.iter().filter(|m| m.0 == "short").collect();
    assert!(
        !short_runs.is_empty(),
        "the short agent ran nothing: {marks:?}"
    );
    for (_, _, end) in &short_runs {
        assert!(
            *end < deadline,
            "an activity ended after the walltime: {short_runs:?}"
        );
    }
}

#[test]
fn work_on_a_killed_agent_runs_again_on_another() {
    let dir = scratch("pool-kill");
    let _pool = start_pool(&dir);
    let mut victim = spawn(
        &dir,
        &[
            "agent",
            "--pool",
            "pool.json",
            "-n",
            "2",
            "--context",
            "victim",
        ],
        "victim.log",
    );
    let _survivor = spawn(
        &dir,
        &[
            "agent",
            "--pool",
            "pool.json",
            "-n",
            "2",
            "--context",
            "survivor",
            "--idle-timeout",
            "3s",
        ],
        "survivor.log",
    );
    let graph = sleepers(&dir, 16, 0.5);
    let runner = Command::new(BIN)
        .args([
            "run",
            graph.to_str().unwrap(),
            "--pool",
            "pool.json",
            "--wait-agents",
            "2",
            "--progress",
            "none",
        ])
        .current_dir(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Kill the victim once it has work running.
    let deadline = Instant::now() + Duration::from_secs(30);
    while marks_done(&dir) == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(700));
    victim.0.kill().unwrap();
    let output = runner.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", text(&output));
    let marks = marks(&dir);
    assert_eq!(marks.len(), 16, "every activity finished");
    assert!(marks.iter().any(|m| m.0 == "survivor"));
}

#[test]
fn bad_pools_are_clear_errors() {
    let dir = scratch("pool-errors");
    let missing = run(&dir, &["agent", "--pool", "nope.json"]);
    assert_eq!(missing.status.code(), Some(2), "{}", text(&missing));
    assert!(
        text(&missing).contains("constellation pool start"),
        "{}",
        text(&missing)
    );
    let _pool = start_pool(&dir);
    let graph = sleepers(&dir, 1, 0.0);
    let lonely = run(
        &dir,
        &[
            "run",
            graph.to_str().unwrap(),
            "--pool",
            "pool.json",
            "--wait-timeout",
            "1s",
        ],
    );
    assert_eq!(lonely.status.code(), Some(2), "{}", text(&lonely));
    assert!(
        text(&lonely).contains("constellation agent --pool"),
        "{}",
        text(&lonely)
    );
    let bad = run(
        &dir,
        &["agent", "--pool", "pool.json", "--walltime", "soon"],
    );
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        text(&bad).contains("invalid walltime `soon`"),
        "{}",
        text(&bad)
    );
}
