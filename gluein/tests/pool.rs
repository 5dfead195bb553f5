//! `constellation pool start`, `agent` and `run --pool` as real processes
//! on loopback: agents join, run a graph's activities, leave when idle or
//! before their walltime, and a killed agent's work runs elsewhere.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_constellation");

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("pool-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// Kills the process when the test ends, whatever happens.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(dir: &Path, args: &[&str], log: &str) -> Guard {
    let out = std::fs::File::create(dir.join(log)).unwrap();
    Guard(
        Command::new(BIN)
            .args(args)
            .current_dir(dir)
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("start constellation"),
    )
}

/// Starts a loopback pool in `dir` and waits for its pool file.
fn pool(dir: &Path) -> Guard {
    let guard = spawn(
        dir,
        &[
            "pool",
            "start",
            "--listen",
            "/ip4/127.0.0.1/tcp/0",
            "--pool-file",
            "pool.json",
        ],
        "pool.log",
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while !dir.join("pool.json").exists() {
        assert!(
            Instant::now() < deadline,
            "no pool file: {}",
            log(dir, "pool.log")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    guard
}

fn log(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_default()
}

fn run(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run constellation")
}

fn text(output: &Output) -> String {
    format!(
        "{:?}\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A graph of `n` activities that sleep `seconds` and record which agent
/// ran them and when (Unix nanoseconds), one file each.
fn sleepers(dir: &Path, n: usize, seconds: f64) -> PathBuf {
    let graph = dir.join("graph.toml");
    let marks = dir.join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    std::fs::write(
        &graph,
        format!(
            "[[activity]]\nid = \"s-{{n}}\"\nfor = {{ n = \"1..={n}\" }}\n\
             script = \"s=$(date +%s%N); sleep {seconds}; echo \\\"$CONSTELLATION_LABELS $s $(date +%s%N)\\\" > {}/{{n}}\"\n",
            marks.display()
        ),
    )
    .unwrap();
    graph
}

/// (first label of the agent, start, end) per activity that ran.
fn marks(dir: &Path) -> Vec<(String, u128, u128)> {
    std::fs::read_dir(dir.join("marks"))
        .unwrap()
        .map(|entry| {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            let mut parts = text.split_whitespace();
            let labels = parts.next().unwrap();
            let first = labels.split(',').next().unwrap().to_string();
            let start = parts.next().unwrap().parse().unwrap();
            let end = parts.next().unwrap().parse().unwrap();
            (first, start, end)
        })
        .collect()
}

fn wait_exit(guard: &mut Guard, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(status) = guard.0.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

#[test]
fn agents_run_a_graph_submitted_to_the_pool_and_leave_when_idle() {
    let dir = scratch("graph");
    let mut pool = pool(&dir);
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
    let dir = scratch("walltime");
    let _pool = pool(&dir);
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
    let dir = scratch("kill");
    let _pool = pool(&dir);
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
    while marks_started(&dir) == 0 && Instant::now() < deadline {
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

/// How many activities have written their mark (finished) so far.
fn marks_started(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("marks")).map_or(0, |d| d.count())
}

#[test]
fn bad_pools_are_clear_errors() {
    let dir = scratch("errors");
    let missing = run(&dir, &["agent", "--pool", "nope.json"]);
    assert_eq!(missing.status.code(), Some(2), "{}", text(&missing));
    assert!(
        text(&missing).contains("constellation pool start"),
        "{}",
        text(&missing)
    );
    let _pool = pool(&dir);
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
    let dir = scratch("relabel");
    let _pool = pool(&dir);
    let _agent = spawn(
        &dir,
        &[
            "agent",
            "--pool",
            "pool.json",
            "-n",
            "2",
            "--context",
            "cpu",
            "--walltime",
            "1h",
        ],
        "agent.log",
    );
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
