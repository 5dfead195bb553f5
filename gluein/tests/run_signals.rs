//! A real SIGINT or SIGTERM to `constellation run` kills the commands it
//! started (their whole process groups), records each as an attempt,
//! marks the run `interrupted`, and exits 130; a resume then runs what did
//! not finish, with nothing left over from the first run beside it.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{
    alive, group_members, log, numbered_graph, run, scratch, spawn, text, wait_exit,
    wait_while_running, Guard,
};
use journal::{ActivityState, Journal, LOST};

/// Activities in the graph; each gets an executor of its own.
const COMMANDS: usize = 4;

/// Writes `dir/graph.toml`: [`COMMANDS`] activities that write their
/// shell's pid (also their process group) to `dir/pids/N`, then sleep
/// 30 s with a `sleep` child, unless `dir/fast` exists.
fn sleepers(dir: &Path) -> PathBuf {
    let pids = dir.join("pids");
    std::fs::create_dir_all(&pids).unwrap();
    numbered_graph(
        &dir.join("graph.toml"),
        "s",
        COMMANDS,
        &format!(
            "echo $$ > {}/{{n}}; [ -e {} ] && exit 0; sleep 30; echo woke",
            pids.display(),
            dir.join("fast").display()
        ),
    )
}

/// The pids the commands wrote, once all [`COMMANDS`] have (at most 60 s).
fn started_pids(dir: &Path, runner: &mut Guard, log_name: &str) -> Vec<i32> {
    let pids = || -> Vec<i32> {
        (1..=COMMANDS)
            .filter_map(|n| {
                let text = std::fs::read_to_string(dir.join(format!("pids/{n}"))).ok()?;
                text.trim().parse().ok()
            })
            .collect()
    };
    wait_while_running(
        runner,
        Duration::from_secs(60),
        || Some(pids()).filter(|pids| pids.len() == COMMANDS),
        || {
            format!(
                "all {COMMANDS} commands to start (only {} did):\n{}",
                pids().len(),
                log(dir, log_name)
            )
        },
    )
}

/// Starts a run of [`sleepers`], signals it with `signal` once every
/// command has started, and checks what it leaves: exit 130, an
/// interrupted run in the journal with one killed attempt per command,
/// and no process of any command. Then resumes it.
fn interrupted_by(signal: libc::c_int, name: &str) {
    let dir = scratch(name);
    let graph = sleepers(&dir);
    let journal_path = dir.join("journal.db");
    let executors = COMMANDS.to_string();
    let args = [
        "run",
        graph.to_str().unwrap(),
        "--executors",
        &executors,
        "--journal",
        journal_path.to_str().unwrap(),
        "--progress",
        "none",
    ];
    let mut runner = spawn(&dir, &args, "run.log");
    let pids = started_pids(&dir, &mut runner, "run.log");
    // SAFETY: signalling our own child process.
    assert_eq!(unsafe { libc::kill(runner.0.id() as i32, signal) }, 0);
    let status = wait_exit(&mut runner, Duration::from_secs(60));
    let said = log(&dir, "run.log");
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(130),
        "signal {signal}: {status:?}\n{said}"
    );
    for &pid in &pids {
        assert!(!alive(pid), "command {pid} outlived the run:\n{said}");
        let left = group_members(pid);
        assert!(
            left.is_empty(),
            "processes {left:?} of command {pid} outlived the run:\n{said}"
        );
    }
    assert!(
        said.contains(&format!(
            "interrupted with {COMMANDS} activities not finished"
        )),
        "{said}"
    );

    let journal = Journal::open_read_only(&journal_path).unwrap();
    let runs = journal.runs().unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, "interrupted", "{said}");
    assert!(runs[0].ended.is_some());
    let attempts = journal.attempts(Some(1)).unwrap();
    assert_eq!(
        attempts.len(),
        COMMANDS,
        "one attempt per killed command: {attempts:?}"
    );
    for a in &attempts {
        assert_eq!(a.recorded.outcome, "signalled", "{a:?}");
        assert!(
            matches!(a.recorded.signal, Some(s) if s == i64::from(libc::SIGTERM) || s == i64::from(libc::SIGKILL)),
            "{a:?}"
        );
        assert!(
            a.recorded
                .message
                .as_deref()
                .is_some_and(|m| m.contains("interrupted")),
            "{a:?}"
        );
    }
    let mut killed: Vec<&str> = attempts.iter().map(|a| a.activity.as_str()).collect();
    killed.sort();
    assert_eq!(killed, ["s-1", "s-2", "s-3", "s-4"]);
    for activity in journal.activities().unwrap() {
        assert_eq!(activity.state, ActivityState::Pending, "{activity:?}");
    }
    drop(journal);

    // The resume runs all four again, alone: the first run's are dead.
    std::fs::write(dir.join("fast"), "").unwrap();
    let resumed = run(
        &dir,
        &[
            "run",
            graph.to_str().unwrap(),
            "--executors",
            &executors,
            "--resume",
            journal_path.to_str().unwrap(),
            "--progress",
            "none",
        ],
    );
    assert!(resumed.status.success(), "{}", text(&resumed));
    let journal = Journal::open_read_only(&journal_path).unwrap();
    assert_eq!(journal.runs().unwrap()[1].status, "succeeded");
    assert_eq!(journal.attempts(Some(2)).unwrap().len(), COMMANDS);
    for activity in journal.activities().unwrap() {
        assert_eq!(activity.state, ActivityState::Done, "{activity:?}");
    }
}

#[test]
fn sigint_kills_the_commands_and_records_the_run_as_interrupted() {
    interrupted_by(libc::SIGINT, "run-sigint");
}

#[test]
fn sigterm_kills_the_commands_and_records_the_run_as_interrupted() {
    interrupted_by(libc::SIGTERM, "run-sigterm");
}

/// Writes `dir/NAME.toml`: `n` activities that write their shell's pid to
/// `dir/pids/N` and their executor's labels to `dir/labels/N`, append a
/// line to `dir/executions` (one per execution), then sleep `seconds`.
fn labelled_sleepers(dir: &Path, name: &str, n: usize, seconds: u32) -> PathBuf {
    for sub in ["pids", "labels"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    let graph = dir.join(format!("{name}.toml"));
    std::fs::write(
        &graph,
        format!(
            "[[activity]]\nid = \"p-{{n}}\"\nfor = {{ n = \"1..={n}\" }}\n\
             script = \"echo $$ > {0}/pids/{{n}}; echo $CONSTELLATION_LABELS > {0}/labels/{{n}}; \
             echo $$ >> {0}/executions; sleep {seconds}\"\n",
            dir.display()
        ),
    )
    .unwrap();
    graph
}

/// Per activity of [`labelled_sleepers`] started so far: its pid and the
/// first label of the executor that runs it.
fn started(dir: &Path) -> Vec<(i32, String)> {
    let Ok(entries) = std::fs::read_dir(dir.join("labels")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let labels = std::fs::read_to_string(entry.path()).ok()?;
            let first = labels.trim().split(',').next()?.to_string();
            let pid = std::fs::read_to_string(dir.join("pids").join(entry.file_name())).ok()?;
            Some((pid.trim().parse().ok()?, first))
        })
        .filter(|(_, first)| !first.is_empty())
        .collect()
}

/// How many executions of [`labelled_sleepers`] started so far.
fn executions(dir: &Path) -> usize {
    log(dir, "executions").lines().count()
}

/// Checks that the journal at `path` has an attempt for every execution of
/// [`labelled_sleepers`] in `dir`, for the run's log `said`. An attempt
/// more than the executions may only be a `lost` stand-in: a start the
/// agent reported just as the run stopped, whose command was killed before
/// its first line ran (seen once in CI: started 15 ms before the stop).
fn assert_an_attempt_per_execution(path: &Path, dir: &Path, said: &str) {
    let attempts = Journal::open_read_only(path)
        .and_then(|journal| journal.attempts(None))
        .expect("the run's attempts");
    let executions = executions(dir);
    let lost = (attempts.iter())
        .filter(|attempt| attempt.recorded.outcome == LOST)
        .count();
    assert!(
        attempts.len() >= executions && attempts.len() - executions <= lost,
        "an attempt per execution ({executions}), and no more but lost stand-ins ({lost} lost): \
         {attempts:#?}\n{said}"
    );
}

/// Kills, when the test ends, the process groups of the commands that
/// agents started, should any be left: a test that fails half-way must
/// not leave commands sleeping after it (the stopped runner asks its
/// agents to kill them, which cancel_on_agents.rs checks).
struct KillGroups(PathBuf);

impl Drop for KillGroups {
    fn drop(&mut self) {
        for (pid, _) in started(&self.0) {
            if pid > 1 {
                // SAFETY: signalling a process group a test command made.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
            }
        }
    }
}

/// A run of [`labelled_sleepers`] on a loopback pool with an agent
/// `alpha` of 2 executors. Fields drop in order: the runner first, then
/// what its commands left, the agent and the pool.
struct PoolRun {
    runner: Guard,
    _cleanup: KillGroups,
    _agent: Guard,
    pool: Guard,
    journal: PathBuf,
}

/// Starts a pool and its agent in `dir`, and a run of `n`
/// [`labelled_sleepers`] of `seconds` on it with the journal
/// `dir/journal.db`, `extra` arguments, and its output in `dir/run.log`.
fn start_pool_run(dir: &Path, n: usize, seconds: u32, extra: &[&str]) -> PoolRun {
    let pool = common::start_pool(dir);
    let agent = common::spawn_agent(dir, 2, "alpha", &[]);
    let cleanup = KillGroups(dir.to_path_buf());
    let graph = labelled_sleepers(dir, "graph", n, seconds);
    let journal = dir.join("journal.db");
    let runner = common::spawn_pool_run(dir, &graph, &journal, extra);
    PoolRun {
        runner,
        _cleanup: cleanup,
        _agent: agent,
        pool,
        journal,
    }
}

#[test]
fn sigint_on_a_pool_run_kills_its_own_commands_and_leaves_the_pool_cleanly() {
    let dir = scratch("run-pool-sigint");
    let extra = [
        "--executors",
        "2",
        "--context",
        "runner",
        "--progress",
        "none",
    ];
    // Bound whole, so that the pool and its agent live to the test's end.
    let mut run = start_pool_run(&dir, 4, 30, &extra);
    let (runner, journal_path) = (&mut run.runner, run.journal.clone());
    wait_while_running(
        runner,
        Duration::from_secs(60),
        || {
            let now = started(&dir);
            let here = now.iter().filter(|(_, l)| l == "runner").count();
            (here > 0 && now.len() > here).then_some(())
        },
        || {
            format!(
                "commands started both here and on the agent: {:?}\n{}",
                started(&dir),
                log(&dir, "run.log")
            )
        },
    );
    // SAFETY: signalling our own child process.
    assert_eq!(unsafe { libc::kill(runner.0.id() as i32, libc::SIGINT) }, 0);
    let status = wait_exit(runner, Duration::from_secs(60));
    let said = log(&dir, "run.log");
    assert_eq!(status.and_then(|s| s.code()), Some(130), "{said}");
    let own: Vec<i32> = (started(&dir).into_iter())
        .filter(|(_, l)| l == "runner")
        .map(|(pid, _)| pid)
        .collect();
    for &pid in &own {
        assert!(
            !alive(pid) && group_members(pid).is_empty(),
            "the run's own command {pid} outlived it:\n{said}"
        );
    }
    let journal = Journal::open_read_only(&journal_path).unwrap();
    assert_eq!(journal.runs().unwrap()[0].status, "interrupted", "{said}");
    let killed = (journal.attempts(Some(1)).unwrap().into_iter())
        .filter(|a| a.recorded.labels.starts_with("runner,") && a.recorded.outcome == "signalled")
        .count();
    assert_eq!(killed, own.len(), "one attempt per killed command:\n{said}");
    drop(journal);
    assert_an_attempt_per_execution(&journal_path, &dir, &said);
    // The run said goodbye: no member declares it dead. SWIM would within
    // about 7.5 s of its silence.
    std::thread::sleep(Duration::from_secs(12));
    for name in ["pool.log", "alpha.log"] {
        let text = log(&dir, name);
        assert!(
            !text.contains("declared dead"),
            "{name} declared the run dead:\n{text}"
        );
    }
}

#[test]
fn a_run_whose_pool_node_is_gone_stops_and_says_how_to_resume() {
    let dir = scratch("run-pool-gone");
    let extra = ["--reconnect", "2s", "--progress", "lines"];
    let mut run = start_pool_run(&dir, 8, 5, &extra);
    let (runner, pool, journal_path) = (&mut run.runner, &mut run.pool, run.journal.clone());
    wait_while_running(
        runner,
        Duration::from_secs(60),
        || (!started(&dir).is_empty()).then_some(()),
        || format!("a command to start:\n{}", log(&dir, "run.log")),
    );
    // Progress counts what runs on the agent: its 2 executors are busy
    // until the end, since 8 activities of 5 s are in flight from the start.
    let deadline = Instant::now() + Duration::from_secs(60);
    let line = loop {
        let said = log(&dir, "run.log");
        if let Some(line) = said.lines().find(|l| l.starts_with("progress: ")) {
            break line.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "no progress line within 60 s:\n{said}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(line.contains("running 2,"), "{line}");
    pool.0.kill().unwrap();
    let _ = pool.0.wait();
    let status = wait_exit(runner, Duration::from_secs(60));
    let said = log(&dir, "run.log");
    let status = status.unwrap_or_else(|| panic!("the run hangs without its pool node:\n{said}"));
    assert!(!status.success(), "{said}");
    for expected in [
        "waiting up to 2 s for it to come back",
        "the pool node at pool.json is gone",
        "activities did not finish; resume with `constellation run ",
        &format!("--resume {} --pool pool.json`", journal_path.display()),
    ] {
        assert!(said.contains(expected), "{expected:?} missing:\n{said}");
    }
    let journal = Journal::open_read_only(&journal_path).unwrap();
    assert_eq!(journal.runs().unwrap()[0].status, "interrupted", "{said}");
    assert_an_attempt_per_execution(&journal_path, &dir, &said);
}
