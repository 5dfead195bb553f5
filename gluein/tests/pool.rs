//! `constellation pool start`, `agent` and `run --pool` as real processes
//! on loopback: agents join, run a graph's activities, leave when idle or
//! before their walltime, and a killed agent's work runs elsewhere.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    log, marks, marks_done, run, run_on_pool, scratch, sleepers, spawn_agent, start_pool, text,
    wait_exit, wait_for_log, BIN,
};

#[test]
fn agents_run_a_graph_submitted_to_the_pool_and_leave_when_idle() {
    let dir = scratch("pool-graph");
    let mut pool = start_pool(&dir);
    let mut alpha = spawn_agent(&dir, 2, "alpha", &["--idle-timeout", "3s"]);
    let mut beta = spawn_agent(&dir, 1, "beta", &["--idle-timeout", "3s"]);
    let graph = sleepers(&dir, 30, 0.1);
    let ran = run_on_pool(&dir, &graph, 2, &[]);
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
    let mut short = spawn_agent(&dir, 1, "short", &["--walltime", "6s"]);
    let _long = spawn_agent(&dir, 1, "long", &["--idle-timeout", "3s"]);
    let graph = sleepers(&dir, 12, 1.0);
    let ran = run_on_pool(&dir, &graph, 2, &[]);
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
    let mut victim = spawn_agent(&dir, 2, "victim", &[]);
    // The survivor must outstay the victim's death being noticed: SWIM
    // gives a silent member up about failure_timeout (3 s) plus three probe
    // periods (1.5 s each) after it died, and the survivor is idle by then.
    let _survivor = spawn_agent(&dir, 2, "survivor", &["--idle-timeout", "12s"]);
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
        text(&bad).contains("bad duration `soon`") && text(&bad).contains("--walltime"),
        "{}",
        text(&bad)
    );
}

/// `status --json` parsed, once it shows `agents` agents.
fn status_with_agents(dir: &Path, agents: usize) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = run(dir, &["status", "--pool", "pool.json", "--json"]);
        assert!(out.status.success(), "{}", text(&out));
        let json: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("status --json prints JSON");
        let members = json["members"].as_array().expect("a member list");
        let seen = members.iter().filter(|m| m["role"] == "agent").count();
        if seen == agents {
            return json;
        }
        assert!(
            Instant::now() < deadline,
            "{agents} agents never showed: {json}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn agent_labels(json: &serde_json::Value) -> Vec<String> {
    let agent = (json["members"].as_array().unwrap().iter())
        .find(|m| m["role"] == "agent")
        .expect("an agent");
    (agent["executors"].as_array().unwrap().iter())
        .map(|e| e["labels"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn status_shows_the_pool_and_relabel_retargets_a_live_agent() {
    let dir = scratch("pool-relabel");
    let _pool = start_pool(&dir);
    let _agent = spawn_agent(&dir, 2, "cpu", &["--walltime", "1h"]);
    let json = status_with_agents(&dir, 1);
    let members = json["members"].as_array().unwrap();
    assert_eq!(members.len(), 2, "the pool node and the agent: {json}");
    assert_eq!(members[0]["role"], "pool");
    assert!(members[0]["executors"].as_array().unwrap().is_empty());
    let agent = &members[1];
    let left = agent["walltime_left_s"]
        .as_f64()
        .expect("the agent has a walltime");
    assert!(left > 3500.0 && left <= 3600.0, "{left}");
    let labels = agent_labels(&json);
    assert_eq!(labels.len(), 2);
    assert!(labels.iter().all(|l| l.starts_with("cpu,")), "{labels:?}");
    let id = agent["node"].as_str().unwrap().to_string();

    let human = run(&dir, &["status", "--pool", "pool.json"]);
    let shown = text(&human);
    assert!(human.status.success(), "{shown}");
    for expected in [
        "2 member(s), 1 agent(s); 2 executor(s)",
        "MEMBER",
        "WALLTIME",
        &id,
        "#0-1",
    ] {
        assert!(
            shown.contains(expected),
            "{expected:?} missing from\n{shown}"
        );
    }

    let relabelled = run(
        &dir,
        &[
            "relabel",
            "--pool",
            "pool.json",
            "--agent",
            &id,
            "--context",
            "gpu",
        ],
    );
    let said = text(&relabelled);
    assert!(relabelled.status.success(), "{said}");
    assert!(
        said.contains("#0  cpu,") && said.contains("->  gpu"),
        "{said}"
    );
    assert_eq!(agent_labels(&status_with_agents(&dir, 1)), ["gpu", "gpu"]);

    // gpu work now runs on the agent, under its new labels ...
    let graph = dir.join("gpu.toml");
    let marks_dir = dir.join("marks");
    std::fs::create_dir_all(&marks_dir).unwrap();
    std::fs::write(
        &graph,
        format!(
            "[[activity]]\nid = \"g-{{n}}\"\nfor = {{ n = \"1..=4\" }}\ncontext = \"gpu\"\n\
             script = \"echo \\\"$CONSTELLATION_LABELS 0 0\\\" > {}/{{n}}\"\n",
            marks_dir.display()
        ),
    )
    .unwrap();
    let args = [
        "--pool",
        "pool.json",
        "--wait-agents",
        "1",
        "--progress",
        "none",
    ];
    let ran = run(
        &dir,
        &[&["run", graph.to_str().unwrap()][..], &args].concat(),
    );
    assert!(ran.status.success(), "{}", text(&ran));
    let marks = marks(&dir);
    assert_eq!(marks.len(), 4);
    assert!(marks.iter().all(|m| m.0 == "gpu"), "{marks:?}");

    // ... and cpu work finds no executor.
    let cpu = dir.join("cpu.toml");
    std::fs::write(
        &cpu,
        "[[activity]]\nid = \"c\"\ncontext = \"cpu\"\nscript = \"true\"\n",
    )
    .unwrap();
    let refused = run(&dir, &[&["run", cpu.to_str().unwrap()][..], &args].concat());
    let why = text(&refused);
    assert_eq!(refused.status.code(), Some(2), "{why}");
    assert!(why.contains("cpu"), "{why}");

    // A wrong id is a clear error that lists the members.
    let wrong = run(
        &dir,
        &[
            "relabel",
            "--pool",
            "pool.json",
            "--agent",
            "zzzz",
            "--context",
            "gpu",
        ],
    );
    let why = text(&wrong);
    assert_eq!(wrong.status.code(), Some(2), "{why}");
    assert!(
        why.contains("no member of the pool has the id \"zzzz\"") && why.contains(&id),
        "{why}"
    );
}

/// Relabels agent `id` of the pool in `dir` to offer `context`.
fn relabel_agent(dir: &Path, id: &str, context: &str) {
    let args = [
        "relabel",
        "--pool",
        "pool.json",
        "--agent",
        id,
        "--context",
        context,
        "--json",
    ];
    let out = run(dir, &args);
    assert!(out.status.success(), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("relabel --json: {e}\n{}", text(&out)));
    assert!(
        json["node"].as_str().is_some_and(|n| n.contains(id)),
        "{json}"
    );
    let changed = json["changed"].as_array().expect("a changed array");
    assert!(changed.iter().all(|c| c["after"] == context), "{json}");
}

/// Starts `run` of `count` gpu activities on the pool, each touching
/// `dir/done/<prefix>-<n>`, with progress lines in `log`. All but the
/// first wait until the file `dir/go-<prefix>` exists: the work cannot
/// all be done before the test has relabelled the agent, however slowly
/// the machine runs.
fn spawn_gpu_run(dir: &Path, prefix: &str, count: usize, log: &str) -> common::Guard {
    let done = dir.join("done");
    std::fs::create_dir_all(&done).unwrap();
    let graph = dir.join(format!("{prefix}.toml"));
    std::fs::write(
        &graph,
        format!(
            "[[activity]]\nid = \"{prefix}-{{n}}\"\nfor = {{ n = \"1..={count}\" }}\ncontext = \"gpu\"\n\
             script = \"[ {{n}} = 1 ] || while [ ! -e {} ]; do sleep 0.05; done; touch {}/{prefix}-{{n}}\"\n",
            dir.join(format!("go-{prefix}")).display(),
            done.display()
        ),
    )
    .unwrap();
    let args = [
        "run",
        graph.to_str().unwrap(),
        "--pool",
        "pool.json",
        "--wait-agents",
        "1",
        "--progress",
        "lines",
    ];
    common::spawn(dir, &args, log)
}

fn done_count(dir: &Path, prefix: &str) -> usize {
    std::fs::read_dir(dir.join("done"))
        .map(|entries| {
            (entries.flatten())
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with(&format!("{prefix}-"))
                })
                .count()
        })
        .unwrap_or(0)
}

/// Waits (at most 60 s) until `count` activities of `prefix` are done.
fn wait_done(dir: &Path, prefix: &str, count: usize, log_name: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while done_count(dir, prefix) < count {
        assert!(
            Instant::now() < deadline,
            "{count} of {prefix} never done:\n{}",
            log(dir, log_name)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn work_waiting_for_labels_nobody_offers_is_named_by_progress_status_and_summary() {
    let dir = scratch("pool-unoffered");
    let _pool = start_pool(&dir);
    let _agent = spawn_agent(&dir, 1, "gpu", &["--walltime", "1h"]);
    let json = status_with_agents(&dir, 1);
    let agent = (json["members"].as_array().unwrap().iter())
        .find(|m| m["role"] == "agent")
        .unwrap();
    let id = agent["node"].as_str().unwrap().to_string();

    // The only agent is relabelled away from `gpu` while gpu work is left.
    let mut first = spawn_gpu_run(&dir, "g", 8, "first.log");
    wait_done(&dir, "g", 1, "first.log");
    relabel_agent(&dir, &id, "cpu");
    wait_for_log(
        &dir,
        "first.log",
        "waiting for labels no executor offers: gpu (",
        Duration::from_secs(30),
    );
    let status = run(&dir, &["status", "--pool", "pool.json"]);
    let shown = text(&status);
    assert!(status.status.success(), "{shown}");
    let section = shown
        .split_once("queued waiting for labels no executor offers")
        .unwrap_or_else(|| panic!("no waiting work in\n{shown}"))
        .1;
    assert!(section.contains("\n  gpu "), "{shown}");
    let json = run(&dir, &["status", "--pool", "pool.json", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let waiting = json["waiting_for_labels"]["gpu"].as_u64().unwrap_or(0);
    assert!(waiting >= 1, "{json}");
    // Relabelled back, the agent runs the rest and the run ends well.
    relabel_agent(&dir, &id, "gpu");
    wait_for_log(
        &dir,
        "first.log",
        "every released activity has an executor that offers its labels again",
        Duration::from_secs(30),
    );
    std::fs::write(dir.join("go-g"), "").unwrap();
    let status = wait_exit(&mut first, Duration::from_secs(60));
    assert!(
        status.is_some_and(|s| s.success()),
        "{}",
        log(&dir, "first.log")
    );
    assert_eq!(done_count(&dir, "g"), 8);

    // Ctrl-C while work waits: the summary says how much, and for what.
    let mut second = spawn_gpu_run(&dir, "h", 8, "second.log");
    wait_done(&dir, "h", 1, "second.log");
    relabel_agent(&dir, &id, "cpu");
    wait_for_log(
        &dir,
        "second.log",
        "waiting for labels no executor offers: gpu (",
        Duration::from_secs(30),
    );
    // SAFETY: sending a signal to our own child process.
    unsafe { libc::kill(second.0.id() as i32, libc::SIGINT) };
    let status = wait_exit(&mut second, Duration::from_secs(30));
    // The command that was running when the agent was relabelled may end.
    std::fs::write(dir.join("go-h"), "").unwrap();
    let said = log(&dir, "second.log");
    assert_eq!(status.and_then(|s| s.code()), Some(130), "{said}");
    let summary = said
        .lines()
        .find(|l| l.contains("activities not finished"))
        .unwrap_or_else(|| panic!("no summary of unfinished work in\n{said}"));
    assert!(
        summary.contains("waiting for labels no executor offers: gpu ("),
        "{said}"
    );
}
