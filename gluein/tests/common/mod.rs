//! Helpers for the tests that run `constellation` as real processes: a
//! scratch directory, children killed when the test ends, a loopback pool,
//! a bag of shell activities that records where each ran, and the
//! allocation directories `constellation glidein` leaves.

// Each test file uses its own subset of these helpers.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output};
use std::time::{Duration, Instant};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_constellation");

/// An empty directory `name` under cargo's per-target temp directory; it is
/// kept after the test for a look at the logs.
pub fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// Kills the process when the test ends, whatever happens.
pub struct Guard(pub Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `constellation` run in `dir`, with its glide-in allocations kept in
/// `dir/home` instead of the user's home.
pub fn constellation(dir: &Path) -> Command {
    let mut command = Command::new(BIN);
    command
        .current_dir(dir)
        .env("CONSTELLATION_HOME", dir.join("home"));
    command
}

/// Starts `constellation ARGS` in `dir` with stdout and stderr in
/// `dir/LOG`.
pub fn spawn(dir: &Path, args: &[&str], log: &str) -> Guard {
    let out = std::fs::File::create(dir.join(log)).expect("log file");
    Guard(
        constellation(dir)
            .args(args)
            .stdout(out.try_clone().expect("log file"))
            .stderr(out)
            .spawn()
            .expect("start constellation"),
    )
}

/// Starts an agent of `executors` executors labelled `context` on the
/// pool of `dir/pool.json`, with `extra` arguments; its log is
/// `dir/CONTEXT.log`.
pub fn spawn_agent(dir: &Path, executors: usize, context: &str, extra: &[&str]) -> Guard {
    let executors = executors.to_string();
    let args = [
        "agent",
        "--pool",
        "pool.json",
        "-n",
        &executors,
        "--context",
        context,
    ];
    spawn(dir, &[&args[..], extra].concat(), &format!("{context}.log"))
}

/// Runs the graph file `graph` to completion on the pool of
/// `dir/pool.json`, once `agents` agents have joined, without progress
/// output; `extra` arguments follow.
pub fn run_on_pool(dir: &Path, graph: &Path, agents: usize, extra: &[&str]) -> Output {
    let agents = agents.to_string();
    let graph = graph.to_str().expect("UTF-8 path");
    let args = [
        "run",
        graph,
        "--pool",
        "pool.json",
        "--wait-agents",
        &agents,
        "--progress",
        "none",
    ];
    run(dir, &[&args[..], extra].concat())
}

/// Starts `constellation run GRAPH` on the pool of `dir/pool.json` with
/// the journal `journal` and `extra` arguments, its output in
/// `dir/run.log`.
pub fn spawn_pool_run(dir: &Path, graph: &Path, journal: &Path, extra: &[&str]) -> Guard {
    let args = [
        "run",
        graph.to_str().expect("UTF-8 path"),
        "--pool",
        "pool.json",
        "--journal",
        journal.to_str().expect("UTF-8 path"),
    ];
    spawn(dir, &[&args[..], extra].concat(), "run.log")
}

/// Runs `constellation ARGS` in `dir` to completion.
pub fn run(dir: &Path, args: &[&str]) -> Output {
    constellation(dir)
        .args(args)
        .output()
        .expect("run constellation")
}

/// Starts a loopback pool in `dir` (pool file `dir/pool.json`, its key
/// `dir/pool.key`, log `dir/pool.log`) and waits for its pool file.
pub fn start_pool(dir: &Path) -> Guard {
    start_pool_with(dir, &[], "pool.log")
}

/// Starts `constellation pool start` on loopback in `dir` with the pool
/// file `dir/pool.json` and `extra` arguments, logging to `dir/LOG`, and
/// waits (at most 30 s) until the pool file is this process's: a stale
/// one a killed pool left does not count.
pub fn start_pool_with(dir: &Path, extra: &[&str], log_name: &str) -> Guard {
    let mut guard = spawn(
        dir,
        &[&pool_start_args("pool.json")[..], extra].concat(),
        log_name,
    );
    let pid = guard.0.id();
    wait_while_running(
        &mut guard,
        Duration::from_secs(30),
        || (pool_file_pid(&dir.join("pool.json")) == Some(pid)).then_some(()),
        || format!("its pool file: {}", log(dir, log_name)),
    );
    guard
}

/// The arguments of `constellation pool start` on loopback, on a port of
/// the system's choosing, with the pool file `pool_file`.
pub fn pool_start_args(pool_file: &str) -> [&str; 6] {
    [
        "pool",
        "start",
        "--listen",
        "/ip4/127.0.0.1/tcp/0",
        "--pool-file",
        pool_file,
    ]
}

/// Polls `ready` every 50 ms until it gives a value, and returns that
/// value. Fails the test, naming what it waited for with `waited_for`
/// (which may add logs), if the process of `guard` ends first or `limit`
/// passes.
pub fn wait_while_running<T>(
    guard: &mut Guard,
    limit: Duration,
    mut ready: impl FnMut() -> Option<T>,
    waited_for: impl Fn() -> String,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = ready() {
            return value;
        }
        if let Some(status) = guard.0.try_wait().expect("try_wait") {
            panic!(
                "the process ended ({status}) while waiting for {}",
                waited_for()
            );
        }
        assert!(
            Instant::now() < deadline,
            "waited {limit:?} in vain for {}",
            waited_for()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits up to `limit` until `dir/LOG` contains `wanted`.
pub fn wait_for_log(dir: &Path, log_name: &str, wanted: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    while !log(dir, log_name).contains(wanted) {
        assert!(
            Instant::now() < deadline,
            "{log_name} never said {wanted:?} within {limit:?}: {}",
            log(dir, log_name)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The pool node's process id in the pool file at `path`, if it can be
/// read.
pub fn pool_file_pid(path: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(path).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    json["pid"].as_u64()?.try_into().ok()
}

/// The contents of `dir/name`, or nothing.
pub fn log(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_default()
}

/// Status, stdout and stderr, for assertion messages.
pub fn text(output: &Output) -> String {
    format!(
        "{:?}\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Waits up to `limit` for the process to exit.
pub fn wait_exit(guard: &mut Guard, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(status) = guard.0.try_wait().expect("try_wait") {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// The exit status of `guard`'s process within `limit`, or a failure that
/// shows its log `dir/LOG`.
pub fn exited(guard: &mut Guard, limit: Duration, dir: &Path, log_name: &str) -> ExitStatus {
    wait_exit(guard, limit).unwrap_or_else(|| {
        panic!(
            "{log_name}: the process did not exit within {limit:?}: {}",
            log(dir, log_name)
        )
    })
}

/// Writes `dir/graph.toml`: `n` activities that sleep `seconds` and record
/// which agent ran them and when (Unix nanoseconds) in `dir/marks`, one
/// file each.
pub fn sleepers(dir: &Path, n: usize, seconds: f64) -> PathBuf {
    let marks = dir.join("marks");
    std::fs::create_dir_all(&marks).expect("marks directory");
    numbered_graph(
        &dir.join("graph.toml"),
        "s",
        n,
        &format!(
            "s=$(date +%s%N); sleep {seconds}; echo \\\"$CONSTELLATION_LABELS $s $(date +%s%N)\\\" > {}/{{n}}",
            marks.display()
        ),
    )
}

/// Writes the graph file `path`: `count` activities `PREFIX-1` to
/// `PREFIX-COUNT`, each running the shell `script`, in which `{n}` stands
/// for the activity's number (and a double quote must be escaped).
pub fn numbered_graph(path: &Path, prefix: &str, count: usize, script: &str) -> PathBuf {
    std::fs::write(
        path,
        format!(
            "[[activity]]\nid = \"{prefix}-{{n}}\"\nfor = {{ n = \"1..={count}\" }}\n\
             script = \"{script}\"\n"
        ),
    )
    .expect("graph file");
    path.to_path_buf()
}

/// (first label of the agent, start, end) per activity of [`sleepers`]
/// that finished.
pub fn marks(dir: &Path) -> Vec<(String, u128, u128)> {
    std::fs::read_dir(dir.join("marks"))
        .expect("marks directory")
        .map(|entry| {
            let text = std::fs::read_to_string(entry.expect("mark").path()).expect("mark");
            let mut parts = text.split_whitespace();
            let labels = parts.next().expect("labels");
            let first = labels.split(',').next().unwrap_or_default().to_string();
            let start = parts.next().expect("start").parse().expect("start");
            let end = parts.next().expect("end").parse().expect("end");
            (first, start, end)
        })
        .collect()
}

/// Writes `dir/graph.toml`: `n` activities that each append a line
/// "LABELS PID" to `dir/starts/N` when they start (one line per execution,
/// however often it runs), then become `sleep SECONDS` in the same process.
pub fn counted_sleepers(dir: &Path, n: usize, seconds: f64) -> PathBuf {
    let starts = dir.join("starts");
    std::fs::create_dir_all(&starts).expect("starts directory");
    numbered_graph(
        &dir.join("graph.toml"),
        "c",
        n,
        &format!(
            "echo $CONSTELLATION_LABELS $$ >> {}/{{n}}; exec sleep {seconds}",
            starts.display()
        ),
    )
}

/// The first label of a comma separated label list.
pub fn first_label(labels: &str) -> &str {
    labels.split(',').next().unwrap_or_default()
}

/// Every execution of [`counted_sleepers`] started so far: (agent's first
/// label, command's pid).
pub fn executions(dir: &Path) -> Vec<(String, i32)> {
    let mut started = Vec::new();
    for entry in std::fs::read_dir(dir.join("starts")).expect("starts directory") {
        let text = std::fs::read_to_string(entry.expect("start").path()).expect("start");
        for line in text.lines() {
            let mut words = line.split_whitespace();
            let labels = words.next().unwrap_or_default();
            let pid = words.next().and_then(|p| p.parse().ok()).unwrap_or(0);
            started.push((first_label(labels).to_string(), pid));
        }
    }
    started
}

/// How many of the given agents' executions or attempts each agent has.
pub fn per_agent<'a>(agents: impl Iterator<Item = &'a str>) -> BTreeMap<String, usize> {
    let mut counted = BTreeMap::new();
    for agent in agents {
        *counted.entry(agent.to_string()).or_default() += 1;
    }
    counted
}

/// How many activities of [`sleepers`] have finished so far.
pub fn marks_done(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("marks")).map_or(0, |d| d.count())
}

/// The allocation ids under `dir/home/allocations`, sorted.
pub fn allocation_ids(dir: &Path) -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(dir.join("home/allocations"))
        .expect("allocations directory")
        .filter_map(|e| {
            let e = e.expect("allocation entry");
            e.path()
                .is_dir()
                .then(|| e.file_name().to_string_lossy().into_owned())
        })
        .collect();
    ids.sort();
    ids
}

/// The directory of allocation `id`.
pub fn allocation_dir(dir: &Path, id: &str) -> PathBuf {
    dir.join("home/allocations").join(id)
}

/// The allocation's `state.json`, parsed.
pub fn allocation_state(dir: &Path, id: &str) -> serde_json::Value {
    let state =
        std::fs::read_to_string(allocation_dir(dir, id).join("state.json")).expect("state.json");
    serde_json::from_str(&state).expect("state.json is JSON")
}

/// The `host:pid` agents recorded in the allocation's `pids` file.
pub fn agent_pids(alloc_dir: &Path) -> Vec<(String, i32)> {
    std::fs::read_to_string(alloc_dir.join("pids"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let (host, pid) = line.trim().rsplit_once(':')?;
            Some((host.to_string(), pid.parse().ok()?))
        })
        .collect()
}

/// True while `pid` runs here (a zombie, which an orphan may stay as where
/// PID 1 does not reap, counts as gone).
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'))
    })
}

/// Kills, when the test ends, every agent (and the local pilot) that a
/// glide-in on this machine recorded in `dir`: if the test fails before
/// cancelling them, they would otherwise run until their walltime.
pub struct AgentsGuard(pub PathBuf);

impl Drop for AgentsGuard {
    fn drop(&mut self) {
        let pilot = std::fs::read_to_string(self.0.join("pilot.pid")).unwrap_or_default();
        let pids = agent_pids(&self.0).into_iter().map(|(_, pid)| pid);
        for pid in pids.chain(pilot.trim().parse().ok()) {
            if pid > 0 && alive(pid) {
                // SAFETY: sending a signal; the pid is one this test started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

/// The pids of the processes /proc lists that `keep` accepts; none if
/// /proc cannot be read (which [`group_members`] rules out).
pub fn pids_where(keep: impl Fn(i32) -> bool) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| keep(pid))
        .collect()
}

/// Live processes (zombies count as gone) in the process group `group`.
pub fn group_members(group: i32) -> Vec<i32> {
    // An unreadable /proc must fail the test, not read as "none left".
    std::fs::read_dir("/proc").expect("/proc");
    pids_where(|pid| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            let Some((_, rest)) = stat.rsplit_once(") ") else {
                return false;
            };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            // state, ppid, pgrp
            fields.len() > 2 && fields[2] == group.to_string() && !fields[0].starts_with('Z')
        })
    })
}
