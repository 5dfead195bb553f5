//! The pool as a service, as real processes on loopback: graphs submitted
//! with `constellation submit` run as jobs on the pool node, shared by the
//! rule `pool start --help` states; `wait` ends with the jobs (0 when all
//! succeeded, 1 otherwise), or with exit status 2 and a clear message when
//! the pool node is gone, unless `--reconnect` waits for its restart;
//! `cancel` kills a job's commands on the agents and records what did not
//! finish as cancelled; work no agent offers is refused unless the
//! submitter asks to wait for its labels.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::{
    alive, exited, group_members, log, numbered_graph, pids_where, scratch, spawn, spawn_agent,
    start_pool_with, text, Guard,
};
use journal::{ActivityState, Journal};

/// How long a command of this test may take, on a loaded machine.
const COMMAND_LIMIT: Duration = Duration::from_secs(120);

/// How long jobs may take to end.
const JOBS_LIMIT: Duration = Duration::from_secs(240);

/// How long a log line, a file or an exit may take to appear.
const SEEN_LIMIT: Duration = Duration::from_secs(60);

/// Kills, when the test ends, every process that works for the test's
/// scratch directory: the pool node's job runners run in process groups
/// of their own and outlive a pool node killed with SIGKILL, and so do
/// the commands an agent started. Found in /proc by their working
/// directory or their command line; each is killed by its pid.
struct Sweep(PathBuf);

impl Drop for Sweep {
    fn drop(&mut self) {
        let dir = self.0.to_string_lossy().into_owned();
        let me = std::process::id() as i32;
        for pid in processes_of(&dir) {
            if pid != me {
                // SAFETY: sending a signal to a process of this test.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

/// Live processes whose working directory is `dir` (or below), or whose
/// command line names it.
fn processes_of(dir: &str) -> Vec<i32> {
    pids_where(|pid| {
        let cwd = std::fs::read_link(format!("/proc/{pid}/cwd"))
            .is_ok_and(|cwd| cwd.to_string_lossy().starts_with(dir));
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|line| String::from_utf8_lossy(&line).contains(dir));
        (cwd || cmdline) && alive(pid)
    })
}

/// A scratch directory for the test, swept of its processes when the test
/// ends (declared first, so that it is dropped last).
fn setup(name: &str) -> (PathBuf, Sweep) {
    let dir = scratch(name);
    let sweep = Sweep(dir.clone());
    (dir, sweep)
}

/// Starts a loopback pool in `dir` with `extra` arguments, logging to
/// `dir/LOG`.
fn start_pool(dir: &Path, extra: &[&str], log_name: &str) -> Guard {
    start_pool_with(dir, extra, log_name)
}

/// Starts an agent of `executors` executors labelled `worker` and waits
/// until it has joined the pool.
fn start_agent(dir: &Path, executors: usize) -> Guard {
    let agent = spawn_agent(dir, executors, "worker", &["--reconnect", "10m"]);
    wait_for_log(dir, "worker.log", "joined with");
    agent
}

/// Waits until `dir/LOG` contains `wanted`, at most [`SEEN_LIMIT`].
fn wait_for_log(dir: &Path, log_name: &str, wanted: &str) {
    common::wait_for_log(dir, log_name, wanted, SEEN_LIMIT);
}

/// `constellation ARGS` in `dir`, to completion within [`COMMAND_LIMIT`]
/// (killed and reported otherwise).
fn run(dir: &Path, args: &[&str]) -> Output {
    run_within(dir, args, COMMAND_LIMIT)
}

/// `constellation ARGS` in `dir`, to completion within `limit`.
fn run_within(dir: &Path, args: &[&str], limit: Duration) -> Output {
    let child = common::constellation(dir)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start constellation");
    finish(child, limit, &format!("constellation {}", args.join(" ")))
}

/// Waits for `child` to exit within `limit` and returns its output; kills
/// it and fails the test if it does not.
fn finish(mut child: std::process::Child, limit: Duration, what: &str) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let output = child.wait_with_output().expect("output");
            panic!("{what} did not end within {limit:?}: {}", text(&output));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

/// A graph file `dir/NAME.toml` of `count` activities running the shell
/// script `command`.
fn graph(dir: &Path, name: &str, count: usize, command: &str) -> PathBuf {
    numbered_graph(&dir.join(format!("{name}.toml")), name, count, command)
}

/// Submits `graph` to the pool of `dir/pool.json` with `extra` arguments
/// and returns the job's id.
fn submit(dir: &Path, graph: &Path, extra: &[&str]) -> u64 {
    let graph = graph.to_str().expect("UTF-8 path");
    let args = [
        &["submit", graph, "--pool", "pool.json", "--json"][..],
        extra,
    ]
    .concat();
    let output = run(dir, &args);
    assert!(output.status.success(), "submit: {}", text(&output));
    submitted_id(&output)
}

/// The id in the `--json` output of `submit`.
fn submitted_id(output: &Output) -> u64 {
    let json: serde_json::Value =
        serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(output)));
    json["id"]
        .as_u64()
        .unwrap_or_else(|| panic!("no id: {}", text(output)))
}

/// The job as `job ID --json` shows it.
fn job(dir: &Path, id: u64) -> serde_json::Value {
    let id = id.to_string();
    let output = run(dir, &["job", &id, "--pool", "pool.json", "--json"]);
    assert!(output.status.success(), "job {id}: {}", text(&output));
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&output)))
}

/// `wait IDS --pool pool.json` with `extra` arguments, to completion.
fn wait(dir: &Path, ids: &[u64], extra: &[&str]) -> Output {
    let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let args = [&["wait"][..], &ids, &["--pool", "pool.json"], extra].concat();
    run_within(dir, &args, JOBS_LIMIT)
}

/// (first start, last end) of the attempts in the journal at `path`, with
/// every attempt's start: when the job ran on the agents.
fn attempt_times(path: &Path) -> (f64, f64) {
    let journal = Journal::open_read_only(path).expect("the job's journal");
    let attempts = journal.attempts(None).expect("attempts");
    assert!(!attempts.is_empty(), "no attempts in {}", path.display());
    let first = attempts
        .iter()
        .map(|a| a.recorded.started)
        .fold(f64::INFINITY, f64::min);
    let last = attempts
        .iter()
        .map(|a| a.recorded.ended)
        .fold(0.0, f64::max);
    (first, last)
}

#[test]
fn three_jobs_submitted_at_once_share_the_pool_two_at_a_time() {
    let (dir, _sweep) = setup("jobs-three-at-once");
    let _pool = start_pool(&dir, &["--max-jobs", "2"], "pool.log");
    let _agent = start_agent(&dir, 2);
    let graphs: Vec<PathBuf> = ["a", "b", "c"]
        .iter()
        // Each alone would keep both executors busy for 8 s: time enough
        // for the second runner to start while the first one's work runs.
        .map(|name| graph(&dir, name, 8, "sleep 2"))
        .collect();
    // Three shells at once.
    let submitting: Vec<_> = (graphs.iter())
        .map(|graph| {
            common::constellation(&dir)
                .args(["submit", graph.to_str().unwrap(), "--pool", "pool.json"])
                .arg("--json")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start submit")
        })
        .collect();
    let mut ids: Vec<u64> = (submitting.into_iter())
        .map(|child| submitted_id(&finish(child, COMMAND_LIMIT, "submit")))
        .collect();
    ids.sort();
    assert_eq!(ids, [1, 2, 3], "ids in submit order");

    let waited = wait(&dir, &ids, &["--progress", "--timeout", "200s"]);
    assert_eq!(waited.status.code(), Some(0), "{}", text(&waited));
    let said = String::from_utf8_lossy(&waited.stdout);
    for id in &ids {
        assert!(said.contains(&format!("job {id} (")), "{said}");
    }

    let output = run(&dir, &["jobs", "--all", "--pool", "pool.json", "--json"]);
    assert!(output.status.success(), "{}", text(&output));
    let listed: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let jobs = listed["jobs"].as_array().expect("a list of jobs");
    assert_eq!(jobs.len(), 3, "{listed}");
    let mut spans = Vec::new();
    let mut runners = Vec::new();
    for job in jobs {
        assert_eq!(job["state"], "succeeded", "{job}");
        assert_eq!(job["counts"]["done"], 8, "{job}");
        assert_eq!(job["counts"]["total"], 8, "{job}");
        let journal = PathBuf::from(job["journal"].as_str().expect("journal"));
        let id = job["id"].as_u64().unwrap();
        spans.push((id, attempt_times(&journal)));
        let time = |field: &str| {
            job[field]
                .as_f64()
                .unwrap_or_else(|| panic!("{field}: {job}"))
        };
        runners.push((id, (time("started"), time("ended"))));
    }
    spans.sort_by_key(|(id, _)| *id);
    runners.sort_by_key(|(id, _)| *id);
    let [(_, first), (_, second), (_, third)] = [spans[0], spans[1], spans[2]];
    // Jobs 1 and 2 took the two slots: their runners ran at once. Their
    // commands need not overlap on the agent, which steals from a random
    // member each time; four picks of the same runner in a row run one
    // job's 8 commands before the other's, as happened once under load.
    let [(_, runner_1), (_, runner_2), _] = [runners[0], runners[1], runners[2]];
    assert!(
        runner_1.0.max(runner_2.0) < runner_1.1.min(runner_2.1),
        "the runners of jobs 1 and 2 should overlap: {runners:?}"
    );
    // Job 3 waited for a free slot: for the first of them to end.
    assert!(
        third.0 >= first.1.min(second.1),
        "job 3 should start after job 1 or job 2 ended: {spans:?}"
    );
    // The table has them too.
    let table = run(&dir, &["jobs", "--all", "--pool", "pool.json"]);
    let table_text = String::from_utf8_lossy(&table.stdout);
    assert!(table_text.starts_with("ID"), "{}", text(&table));
    assert_eq!(table_text.matches("succeeded").count(), 3, "{table_text}");
}

#[test]
fn wait_exits_1_for_a_failed_job_and_names_an_unknown_one() {
    let (dir, _sweep) = setup("jobs-wait-failed");
    let _pool = start_pool(&dir, &[], "pool.log");
    let _agent = start_agent(&dir, 1);
    let failing = graph(&dir, "failing", 1, "false");
    let id = submit(&dir, &failing, &[]);
    let waited = wait(&dir, &[id], &[]);
    assert_eq!(waited.status.code(), Some(1), "{}", text(&waited));
    assert!(
        String::from_utf8_lossy(&waited.stdout).contains(&format!("job {id} (failing) failed")),
        "{}",
        text(&waited)
    );
    let shown = job(&dir, id);
    assert_eq!(shown["job"]["state"], "failed", "{shown}");
    assert_eq!(shown["activities"][0]["state"], "failed", "{shown}");
    assert_eq!(shown["activities"][0]["attempts"], 1, "{shown}");

    let unknown = wait(&dir, &[id, 99], &[]);
    assert_eq!(unknown.status.code(), Some(2), "{}", text(&unknown));
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("no job 99"),
        "{}",
        text(&unknown)
    );
    let cancel = run(&dir, &["cancel", "99", "--pool", "pool.json"]);
    assert_eq!(cancel.status.code(), Some(2), "{}", text(&cancel));
    assert!(
        String::from_utf8_lossy(&cancel.stderr).contains("no job 99"),
        "{}",
        text(&cancel)
    );
}

#[test]
fn cancel_kills_a_jobs_commands_on_the_agent_and_cancels_what_did_not_finish() {
    let (dir, _sweep) = setup("jobs-cancel");
    let _pool = start_pool(&dir, &[], "pool.log");
    let _agent = start_agent(&dir, 2);
    let pids = dir.join("pids");
    std::fs::create_dir_all(&pids).unwrap();
    // Two commands that record their shell's pid (the process group's
    // leader) and sleep, and one that waits for the first.
    let graph_path = dir.join("sleepy.toml");
    std::fs::write(
        &graph_path,
        format!(
            "[[activity]]\nid = \"s-{{n}}\"\nfor = {{ n = \"1..=2\" }}\n\
             script = \"echo $$ > {pids}/{{n}}; sleep 60\"\n\n\
             [[activity]]\nid = \"after\"\nafter = [\"s-1\"]\ncommand = \"true\"\n",
            pids = pids.display()
        ),
    )
    .unwrap();
    let id = submit(&dir, &graph_path, &[]);
    let deadline = Instant::now() + SEEN_LIMIT;
    let groups: Vec<i32> = loop {
        let groups: Vec<i32> = (1..=2)
            .filter_map(|n| std::fs::read_to_string(pids.join(n.to_string())).ok())
            .filter_map(|text| text.trim().parse().ok())
            .collect();
        if groups.len() == 2 {
            break groups;
        }
        assert!(
            Instant::now() < deadline,
            "the job's commands did not start within {SEEN_LIMIT:?}: {}\n{}",
            log(&dir, "pool.log"),
            log(&dir, "worker.log")
        );
        std::thread::sleep(Duration::from_millis(50));
    };

    // SIGINT to a wait stops the waiting, not the job.
    let mut waiting = spawn(
        &dir,
        &["wait", &id.to_string(), "--pool", "pool.json", "--progress"],
        "wait-interrupted.log",
    );
    wait_for_log(
        &dir,
        "wait-interrupted.log",
        &format!("job {id} (sleepy): running"),
    );
    // SAFETY: sending a signal to the wait this test started.
    unsafe { libc::kill(waiting.0.id() as i32, libc::SIGINT) };
    let status = exited(&mut waiting, SEEN_LIMIT, &dir, "wait-interrupted.log");
    let said = log(&dir, "wait-interrupted.log");
    assert_eq!(status.code(), Some(130), "{said}");
    assert!(said.contains("stopped waiting"), "{said}");
    assert_eq!(job(&dir, id)["job"]["state"], "running", "the job goes on");
    assert!(
        groups.iter().all(|&group| !group_members(group).is_empty()),
        "its commands go on"
    );

    let cancelled = run(&dir, &["cancel", &id.to_string(), "--pool", "pool.json"]);
    assert!(cancelled.status.success(), "{}", text(&cancelled));
    assert!(
        String::from_utf8_lossy(&cancelled.stdout).contains(&format!("job {id} (sleepy)")),
        "{}",
        text(&cancelled)
    );
    let waited = wait(&dir, &[id], &["--timeout", "120s"]);
    assert_eq!(waited.status.code(), Some(1), "{}", text(&waited));
    assert!(
        String::from_utf8_lossy(&waited.stdout).contains("cancelled"),
        "{}",
        text(&waited)
    );

    let shown = job(&dir, id);
    assert_eq!(shown["job"]["state"], "cancelled", "{shown}");
    let journal = Journal::open_read_only(Path::new(
        shown["job"]["journal"].as_str().expect("journal"),
    ))
    .expect("the job's journal");
    let activities = journal.activities().expect("activities");
    assert_eq!(activities.len(), 3);
    for activity in &activities {
        assert_eq!(
            activity.state,
            ActivityState::Cancelled,
            "nothing is left pending: {activities:?}"
        );
    }
    // The killed commands are attempts of their activities.
    for n in 1..=2 {
        let attempts = journal.attempts_of(&format!("s-{n}")).expect("attempts");
        assert_eq!(attempts.len(), 1, "s-{n}: {attempts:?}");
    }

    // No process of the job's commands is left on the agent.
    let deadline = Instant::now() + SEEN_LIMIT;
    loop {
        let left: Vec<i32> = groups.iter().flat_map(|&g| group_members(g)).collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "processes of the cancelled job's commands still run after {SEEN_LIMIT:?}: {left:?}\n{}",
            log(&dir, "worker.log")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn wait_ends_when_the_pool_node_is_killed_or_waits_for_its_restart_with_reconnect() {
    let (dir, _sweep) = setup("jobs-pool-killed");
    let mut pool = start_pool(&dir, &[], "pool.log");
    let _agent = start_agent(&dir, 2);
    let sleepy = graph(&dir, "slow", 6, "sleep 3");
    let id = submit(&dir, &sleepy, &[]);
    let id_text = id.to_string();
    // A wait that is under way (it has seen the job) when the pool node dies.
    let mut plain = spawn(
        &dir,
        &["wait", &id_text, "--pool", "pool.json", "--progress"],
        "wait-plain.log",
    );
    wait_for_log(&dir, "wait-plain.log", &format!("job {id} (slow): running"));
    pool.0.kill().expect("kill -9 the pool node");
    pool.0.wait().expect("reap the pool node");
    let status = exited(&mut plain, SEEN_LIMIT, &dir, "wait-plain.log");
    let said = log(&dir, "wait-plain.log");
    assert_eq!(status.code(), Some(2), "{said}");
    assert!(said.contains("lost the pool"), "{said}");
    assert!(
        said.contains("--reconnect"),
        "says how to wait longer: {said}"
    );

    // Another wait, willing to wait a minute for the pool node's return,
    // started while it is gone.
    let mut patient = spawn(
        &dir,
        &[
            "wait",
            &id_text,
            "--pool",
            "pool.json",
            "--reconnect",
            "60s",
            "--timeout",
            "200s",
        ],
        "wait-reconnect.log",
    );
    std::thread::sleep(Duration::from_secs(2));
    let _restarted = start_pool(&dir, &[], "pool-again.log");
    let status = exited(&mut patient, JOBS_LIMIT, &dir, "wait-reconnect.log");
    let said = log(&dir, "wait-reconnect.log");
    assert_eq!(
        status.code(),
        Some(0),
        "{said}\n{}",
        log(&dir, "pool-again.log")
    );
    assert!(
        said.contains(&format!("job {id} (slow) succeeded")),
        "{said}"
    );
}

#[test]
fn work_no_agent_offers_is_refused_unless_the_submitter_waits_for_its_labels() {
    let (dir, _sweep) = setup("jobs-labels");
    let _pool = start_pool(&dir, &[], "pool.log");
    let _agent = start_agent(&dir, 1);
    let graph_path = dir.join("gpu.toml");
    std::fs::write(
        &graph_path,
        "[[activity]]\nid = \"render-{n}\"\nfor = { n = \"1..=3\" }\ncontext = \"gpu\"\ncommand = \"true\"\n",
    )
    .unwrap();
    let refused = run(&dir, &["submit", "gpu.toml", "--pool", "pool.json"]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    let said = String::from_utf8_lossy(&refused.stderr);
    for n in 1..=3 {
        assert!(said.contains(&format!("render-{n} needs [gpu]")), "{said}");
    }
    assert!(said.contains("--wait-for-labels"), "{said}");
    let listed = run(&dir, &["jobs", "--all", "--pool", "pool.json", "--json"]);
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    assert_eq!(listed["jobs"], serde_json::json!([]), "nothing was stored");

    let accepted = run(
        &dir,
        &[
            "submit",
            "gpu.toml",
            "--pool",
            "pool.json",
            "--wait-for-labels",
        ],
    );
    assert!(accepted.status.success(), "{}", text(&accepted));
    assert_eq!(
        String::from_utf8_lossy(&accepted.stdout).trim(),
        "submitted job 1 (gpu)"
    );
    // Its runner runs, and says what its work waits for.
    let runner_log = "pool.state/jobs/1/runner.log";
    wait_for_log(
        &dir,
        runner_log,
        "3 waiting for labels no executor offers: gpu (3)",
    );
    let shown = job(&dir, 1);
    assert_eq!(shown["job"]["state"], "running", "{shown}");
    assert_eq!(shown["job"]["counts"]["done"], 0, "{shown}");
    // Its runner must not stay behind, waiting for a gpu.
    let cancelled = run(&dir, &["cancel", "1", "--pool", "pool.json"]);
    assert!(cancelled.status.success(), "{}", text(&cancelled));
    let waited = wait(&dir, &[1], &["--timeout", "120s"]);
    assert_eq!(waited.status.code(), Some(1), "{}", text(&waited));
    assert_eq!(job(&dir, 1)["job"]["state"], "cancelled");
}

/// `job` shows every activity from the journal, and `report --job` reports
/// on the job's journal.
#[test]
fn job_and_report_read_the_jobs_journal() {
    let (dir, _sweep) = setup("jobs-report");
    let _pool = start_pool(&dir, &[], "pool.log");
    let _agent = start_agent(&dir, 2);
    let quick = graph(&dir, "quick", 4, "true");
    let id = submit(&dir, &quick, &["--name", "quick-one", "--priority", "5"]);
    let waited = wait(&dir, &[id], &[]);
    assert_eq!(waited.status.code(), Some(0), "{}", text(&waited));
    let output = run(&dir, &["job", &id.to_string(), "--pool", "pool.json"]);
    assert!(output.status.success(), "{}", text(&output));
    let shown = String::from_utf8_lossy(&output.stdout);
    assert!(
        shown.starts_with(&format!("job {id} (quick-one): succeeded, priority 5")),
        "{shown}"
    );
    for n in 1..=4 {
        assert!(shown.contains(&format!("quick-{n}")), "{shown}");
    }
    let report = run(
        &dir,
        &[
            "report",
            "--pool",
            "pool.json",
            "--job",
            &id.to_string(),
            "--json",
        ],
    );
    assert!(report.status.success(), "{}", text(&report));
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).expect("JSON");
    assert_eq!(report["run"]["status"], "succeeded", "{report}");
    // The run ran the job's copy of quick.toml, kept at submit.
    assert!(
        report["run"]["graph_path"]
            .as_str()
            .is_some_and(|path| path.ends_with(&format!("pool.state/jobs/{id}/graph.toml"))),
        "{report}"
    );
    assert_eq!(report["bars"].as_array().map(Vec::len), Some(4), "{report}");
    let refused = run(&dir, &["report", "--pool", "pool.json", "--job", "42"]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("no job 42"),
        "{}",
        text(&refused)
    );
    // A runner is a process of its own: none is left once the job ended.
    let runners: Vec<i32> = processes_of(&dir.to_string_lossy())
        .into_iter()
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|line| String::from_utf8_lossy(&line).contains("--job-progress"))
        })
        .collect();
    assert!(runners.is_empty(), "runners left: {runners:?}");
}

/// How long a refusal of bad input may take: no read of it may block or
/// grow without bound, so this is time to start the binary, on a loaded
/// machine, and nothing more.
const REFUSAL_LIMIT: Duration = Duration::from_secs(30);

/// `constellation ARGS` in `dir` that must fail within [`REFUSAL_LIMIT`]:
/// its stderr, after checking it names every one of `named`.
fn refused(dir: &Path, args: &[&str], named: &[&str]) -> String {
    let output = run_within(dir, args, REFUSAL_LIMIT);
    let said = text(&output);
    assert!(!output.status.success(), "accepted: {said}");
    for name in named {
        assert!(said.contains(name), "no {name:?} in: {said}");
    }
    said
}

/// A FIFO at `path`, which nothing writes to.
fn fifo(path: &Path) {
    let name = std::ffi::CString::new(path.to_str().expect("UTF-8 path")).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0, "mkfifo");
}

#[test]
fn graph_context_sweep_and_pool_files_are_bounded_regular_files() {
    let (dir, _sweep) = setup("jobs-bounded-input");
    fifo(&dir.join("fifo.toml"));
    let good = graph(&dir, "good", 1, "true");
    let good = good.to_str().unwrap();

    // A device and a FIFO are refused before a byte is read: no read of
    // /dev/zero growing to gigabytes, no open that waits for a writer.
    refused(
        &dir,
        &["run", "/dev/zero"],
        &["/dev/zero is a character device"],
    );
    for graph in ["/dev/zero", "fifo.toml"] {
        refused(
            &dir,
            &["submit", graph, "--pool", "pool.json", "--timeout", "2s"],
            &[graph, "give a regular file"],
        );
    }
    refused(
        &dir,
        &["run", good, "--context-file", "/dev/zero"],
        &["the context file /dev/zero is a character device"],
    );
    refused(
        &dir,
        &[
            "submit",
            good,
            "--context-file",
            "fifo.toml",
            "--pool",
            "pool.json",
        ],
        &["the context file fifo.toml is a FIFO"],
    );
    refused(
        &dir,
        &["jobs", "--pool", "/dev/zero"],
        &["/dev/zero", "a character device"],
    );
    refused(
        &dir,
        &["jobs", "--pool", "fifo.toml"],
        &["fifo.toml", "a FIFO"],
    );
    let swept = dir.join("swept.toml");
    std::fs::write(
        &swept,
        "[[activity]]\nid = \"s-{n}\"\nfor = { n = { file = \"fifo.toml\" } }\nscript = \"true\"\n",
    )
    .unwrap();
    refused(
        &dir,
        &["run", swept.to_str().unwrap()],
        &["sweep file", "fifo.toml is a FIFO"],
    );

    // A regular file over the limit: its name, its size and the limit.
    let big = dir.join("big.toml");
    let mut text = std::fs::read_to_string(good).unwrap();
    text.push_str(&format!("# {}\n", "x".repeat(2048)));
    std::fs::write(&big, &text).unwrap();
    let size = text.len().to_string();
    refused(
        &dir,
        &["run", big.to_str().unwrap(), "--max-graph-size", "1KiB"],
        &[
            "big.toml",
            &format!("{size} bytes"),
            "1024 bytes",
            "--max-graph-size",
        ],
    );
    refused(
        &dir,
        &[
            "submit",
            "big.toml",
            "--max-graph-size",
            "1K",
            "--pool",
            "pool.json",
        ],
        &["big.toml", &format!("{size} bytes"), "1024 bytes"],
    );
    let pool_file = dir.join("huge-pool.json");
    std::fs::write(&pool_file, " ".repeat(100 * 1024)).unwrap();
    refused(
        &dir,
        &["jobs", "--pool", "huge-pool.json"],
        &["huge-pool.json", "102400 bytes", "65536 bytes"],
    );
}

#[test]
fn a_queued_job_runs_its_files_as_submitted_not_as_edited_since() {
    let (dir, _sweep) = setup("jobs-graph-copied");
    let _pool = start_pool(&dir, &["--max-jobs", "1"], "pool.log");
    let _agent = start_agent(&dir, 1);
    // The first job holds the only slot until `release` exists.
    let blocking = graph(
        &dir,
        "blocking",
        1,
        "while [ ! -e release ]; do sleep 0.1; done",
    );
    let first = submit(&dir, &blocking, &[]);
    let copied = dir.join("copied.toml");
    std::fs::write(dir.join("n.txt"), "1\n").unwrap();
    std::fs::write(
        &copied,
        "[[activity]]\nid = \"c-{n}\"\nfor = { n = { file = \"n.txt\" } }\n\
         script = \"echo submitted-{n} >> said.txt\"\n",
    )
    .unwrap();
    let second = submit(&dir, &copied, &[]);
    assert_eq!(job(&dir, second)["job"]["state"], "queued");
    // Edited after submit: the command, and the sweep's values.
    std::fs::write(
        &copied,
        "[[activity]]\nid = \"c-{n}\"\nfor = { n = { file = \"n.txt\" } }\n\
         script = \"echo edited-{n} >> said.txt\"\n",
    )
    .unwrap();
    std::fs::write(dir.join("n.txt"), "1\n2\n3\n").unwrap();
    std::fs::write(dir.join("release"), "").unwrap();

    let waited = wait(&dir, &[first, second], &["--timeout", "200s"]);
    assert_eq!(waited.status.code(), Some(0), "{}", text(&waited));
    let said = std::fs::read_to_string(dir.join("said.txt")).expect("the job's output");
    assert_eq!(said, "submitted-1\n", "the job ran what was submitted");
    let shown = job(&dir, second);
    assert_eq!(shown["job"]["counts"]["total"], 1, "{shown}");
    // The copy is the pool node's, private, in the job's folder.
    let journal = PathBuf::from(shown["job"]["journal"].as_str().unwrap());
    let kept = journal.with_file_name("graph.toml");
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&kept)
        .expect("the job's copy")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{}", kept.display());
    // Kept once: the journal has its digest, not its text again.
    use sha2::Digest as _;
    let digest: String = sha2::Sha256::digest(std::fs::read(&kept).unwrap())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let sources = Journal::open_read_only(&journal)
        .unwrap()
        .sources(1)
        .unwrap();
    assert_eq!(
        sources.len(),
        2,
        "the graph and its sweep file: {sources:?}"
    );
    assert!(
        sources[0].1.ends_with(&format!("sha256 {digest}")),
        "{sources:?}"
    );
}

#[test]
fn job_names_are_bounded_and_printable_and_any_name_lists_without_a_panic() {
    let (dir, _sweep) = setup("jobs-names");
    // No agent: the job waits for one, listed.
    let _pool = start_pool(&dir, &[], "pool.log");
    let queued = graph(&dir, "queued", 1, "true");
    let queued_path = queued.to_str().unwrap();
    let long = "n".repeat(100_000);
    for (name, why) in [
        (long.as_str(), "at most 200"),
        ("a\n2  forged", "control character"),
    ] {
        let args = ["submit", queued_path, "--pool", "pool.json", "--name", name];
        refused(&dir, &args, &["--name", why]);
    }
    let id = submit(&dir, &queued, &["--wait-for-labels"]);

    // A name an older build let in, as its job journal still has it.
    let forged = format!("{long}\n99  evil  \u{1b}[2J");
    let jobs_db = dir.join("pool.state/jobs.db");
    let db = rusqlite::Connection::open(&jobs_db).expect("the job journal");
    db.busy_timeout(Duration::from_secs(30)).unwrap();
    db.execute(
        "UPDATE jobs SET name = ?1 WHERE id = ?2",
        rusqlite::params![forged, id as i64],
    )
    .unwrap();
    drop(db);
    // To a file: the table is wider than a pipe holds.
    let mut listing = spawn(&dir, &["jobs", "--all", "--pool", "pool.json"], "jobs.log");
    let status = exited(&mut listing, COMMAND_LIMIT, &dir, "jobs.log");
    let table = log(&dir, "jobs.log");
    assert!(
        status.success(),
        "{status}: {}",
        &table[table.len().saturating_sub(2000)..]
    );
    assert_eq!(table.lines().count(), 2, "a header and one row: {table}");
    assert!(table.contains("\\n99  evil  \\u{1b}[2J"), "{table}");
    let mut showing = spawn(
        &dir,
        &["job", &id.to_string(), "--pool", "pool.json"],
        "job.log",
    );
    assert!(exited(&mut showing, COMMAND_LIMIT, &dir, "job.log").success());
    assert!(!log(&dir, "job.log").contains('\u{1b}'));
}

#[test]
fn wait_timeout_bounds_the_whole_wait_even_when_the_pool_node_is_frozen() {
    let (dir, _sweep) = setup("jobs-wait-timeout");
    let mut pool = start_pool(&dir, &[], "pool.log");
    let pid = pool.0.id() as i32;
    // SAFETY: stops the pool node of this test; resumed below.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let started = Instant::now();
    let waited = run_within(
        &dir,
        &[
            "wait",
            "1",
            "--pool",
            "pool.json",
            "--timeout",
            "3s",
            "--request-timeout",
            "20s",
        ],
        COMMAND_LIMIT,
    );
    let took = started.elapsed();
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    assert_eq!(waited.status.code(), Some(2), "{}", text(&waited));
    assert!(text(&waited).contains("--timeout"), "{}", text(&waited));
    // 3 s and the start of a process; the request timeout (20 s) must
    // not decide it.
    assert!(
        took < Duration::from_secs(12),
        "took {took:?}: {}",
        text(&waited)
    );
    let _ = pool.0.kill();
}

#[test]
fn an_agent_of_no_executors_is_refused() {
    let (dir, _sweep) = setup("jobs-agent-zero");
    refused(
        &dir,
        &["agent", "--pool", "pool.json", "-n", "0"],
        &["--executors", "0", "at least 1"],
    );
}
