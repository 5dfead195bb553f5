//! A runner's commands on agents die with its run. On SIGINT, `run --pool`
//! asks each agent to kill the commands of its activities (a kill-origin
//! request): they die, their attempts reach the journal, the run is
//! `interrupted`, and the agent serves on. A runner killed with `kill -9`
//! cannot ask: the agent sees it gone while its commands run there, and
//! kills them by itself, saying so in its log.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{
    alive, log, numbered_graph, scratch, spawn_agent, spawn_pool_run, start_pool, wait_exit,
    wait_while_running, Guard,
};
use journal::{ActivityState, Journal};

/// Activities in the graph: twice the agent's executors, so that two wait
/// while two run.
const COMMANDS: usize = 4;

/// Writes `dir/graph.toml`: [`COMMANDS`] activities that append their pid
/// to `dir/pids` and become `sleep 60` in that same process.
fn sleepers(dir: &Path) -> PathBuf {
    numbered_graph(
        &dir.join("graph.toml"),
        "s",
        COMMANDS,
        &format!("echo $$ >> {}; exec sleep 60", dir.join("pids").display()),
    )
}

/// The pids the commands recorded so far.
fn recorded_pids(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("pids"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect()
}

/// Waits (at most 60 s) until `count` commands have recorded their pid,
/// and returns them.
fn wait_for_pids(dir: &Path, count: usize, runner: &mut Guard) -> Vec<i32> {
    wait_while_running(
        runner,
        Duration::from_secs(60),
        || Some(recorded_pids(dir)).filter(|pids| pids.len() >= count),
        || {
            format!(
                "{count} commands to start ({} did):\n{}\n{}",
                recorded_pids(dir).len(),
                log(dir, "run.log"),
                log(dir, "alpha.log")
            )
        },
    )
}

/// Waits (at most `limit`) until none of `pids` is alive; the live ones
/// if some still are.
fn wait_dead(pids: &[i32], limit: Duration) -> Vec<i32> {
    let deadline = Instant::now() + limit;
    loop {
        let live: Vec<i32> = pids.iter().copied().filter(|&p| alive(p)).collect();
        if live.is_empty() || Instant::now() >= deadline {
            return live;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Kills, when the test ends, whatever the commands left alive: if the
/// test fails, nothing sleeps on after it.
struct KillRecorded(PathBuf);

impl Drop for KillRecorded {
    fn drop(&mut self) {
        for pid in recorded_pids(&self.0) {
            if pid > 1 && alive(pid) {
                // SAFETY: signalling the process group of a test command.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
            }
        }
    }
}

/// Starts a pool, an agent `alpha` of 2 executors, and a run of
/// [`sleepers`] on it with its journal in `dir/journal.db`; returns once 2
/// commands run on the agent.
fn two_running_on_the_agent(dir: &Path) -> (Guard, Guard, Guard, Vec<i32>) {
    let pool = start_pool(dir);
    let agent = spawn_agent(dir, 2, "alpha", &[]);
    let graph = sleepers(dir);
    let journal = dir.join("journal.db");
    let mut runner = spawn_pool_run(dir, &graph, &journal, &["--progress", "none"]);
    let pids = wait_for_pids(dir, 2, &mut runner);
    (pool, agent, runner, pids)
}

/// Runs a small graph on the pool to its end: the agent still serves.
fn agent_serves(dir: &Path) {
    let graph = dir.join("after.toml");
    std::fs::write(
        &graph,
        format!(
            "[[activity]]\nid = \"after-{{n}}\"\nfor = {{ n = \"1..=2\" }}\n\
             script = \"touch {}/after-{{n}}\"\n",
            dir.display()
        ),
    )
    .unwrap();
    let after = dir.join("after.db");
    let ran = common::run_on_pool(
        dir,
        &graph,
        1,
        &[
            "--journal",
            after.to_str().unwrap(),
            "--wait-timeout",
            "60s",
        ],
    );
    assert!(
        ran.status.success(),
        "a run after the cancel did not succeed on the agent:\n{}\n{}",
        common::text(&ran),
        log(dir, "alpha.log")
    );
    assert!(dir.join("after-1").exists() && dir.join("after-2").exists());
}

#[test]
fn sigint_on_a_pool_run_kills_its_commands_on_the_agent_and_journals_them() {
    let dir = scratch("cancel-on-agents-sigint");
    let _cleanup = KillRecorded(dir.clone());
    let (_pool, mut agent, mut runner, pids) = two_running_on_the_agent(&dir);
    assert_eq!(pids.len(), 2, "only the agent's 2 executors run: {pids:?}");

    // SAFETY: signalling our own child process.
    assert_eq!(unsafe { libc::kill(runner.0.id() as i32, libc::SIGINT) }, 0);
    let status = wait_exit(&mut runner, Duration::from_secs(60));
    let said = log(&dir, "run.log");
    let agent_said = log(&dir, "alpha.log");
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(130),
        "{status:?}\n{said}\n{agent_said}"
    );
    // The runner waited for their reports, which come once they are dead.
    let live = wait_dead(&pids, Duration::from_secs(10));
    assert!(
        live.is_empty(),
        "commands {live:?} outlived the run on the agent:\n{said}\n{agent_said}"
    );
    assert!(
        said.contains("asked 1 agent(s) to kill this run's commands: 2 killed"),
        "{said}"
    );
    assert!(
        agent_said.contains("asked to cancel the work of run") && agent_said.contains("killed 2"),
        "{agent_said}"
    );

    let journal = Journal::open_read_only(&dir.join("journal.db")).unwrap();
    let runs = journal.runs().unwrap();
    assert_eq!(runs[0].status, "interrupted", "{said}");
    let attempts = journal.attempts(Some(1)).unwrap();
    assert_eq!(
        attempts.len(),
        pids.len(),
        "one attempt per started command: {attempts:?}\n{said}"
    );
    for a in &attempts {
        assert_eq!(a.recorded.outcome, "signalled", "{a:?}");
        assert!(
            a.recorded.labels.starts_with("alpha,"),
            "ran on the agent: {a:?}"
        );
        assert!(
            a.recorded
                .message
                .as_deref()
                .is_some_and(|m| m.contains("interrupted")),
            "{a:?}"
        );
    }
    for activity in journal.activities().unwrap() {
        assert_eq!(activity.state, ActivityState::Pending, "{activity:?}");
    }
    drop(journal);
    // The two that waited never started, on the agent or anywhere.
    assert_eq!(
        recorded_pids(&dir),
        pids,
        "a command started after the stop"
    );

    // It was not the agent's fault: it serves on.
    assert!(
        agent.0.try_wait().unwrap().is_none(),
        "the agent ended:\n{}",
        log(&dir, "alpha.log")
    );
    agent_serves(&dir);
    assert_eq!(recorded_pids(&dir), pids, "the stopped run's work started");
}

#[test]
fn an_agent_kills_the_commands_of_a_runner_killed_with_sigkill() {
    let dir = scratch("cancel-on-agents-kill9");
    let _cleanup = KillRecorded(dir.clone());
    let (_pool, mut agent, mut runner, pids) = two_running_on_the_agent(&dir);
    // Each start is journaled as it is reported, within one commit (50
    // ms): killed after that, the runner leaves both in its journal.
    let journal_path = dir.join("journal.db");
    let journaled = || {
        Journal::open_read_only(&journal_path)
            .and_then(|journal| journal.attempts(None))
            .unwrap_or_default()
    };
    wait_while_running(
        &mut runner,
        Duration::from_secs(30),
        || (journaled().len() >= pids.len()).then_some(()),
        || format!("the starts in the journal: {:?}", journaled()),
    );

    runner.0.kill().unwrap();
    let _ = runner.0.wait();
    // Failure detection (about 7.5 s of silence), then GONE_CONFIRM (2 s),
    // then at most the 3 s grace: far less than a minute.
    let live = wait_dead(&pids, Duration::from_secs(60));
    assert!(
        live.is_empty(),
        "the agent left commands {live:?} of the dead runner running:\n{}",
        log(&dir, "alpha.log")
    );
    // The agent signals the commands before it writes its log line, and a
    // loaded machine may run the test between the two.
    let said = |wanted| common::wait_for_log(&dir, "alpha.log", wanted, Duration::from_secs(20));
    said("left or was declared dead while 2 of its activities ran here");
    said("killed 2 command(s)");
    // Its queued work does not start either.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        recorded_pids(&dir),
        pids,
        "work of the dead runner started after it was cancelled:\n{}",
        log(&dir, "alpha.log")
    );
    // Every execution is an attempt, lost with the runner that heard of
    // its start and of nothing after.
    let attempts = journaled();
    assert_eq!(attempts.len(), recorded_pids(&dir).len(), "{attempts:#?}");
    assert!(
        attempts.iter().all(|a| a.recorded.outcome == journal::LOST),
        "{attempts:#?}"
    );
    assert!(
        agent.0.try_wait().unwrap().is_none(),
        "the agent ended:\n{}",
        log(&dir, "alpha.log")
    );
    agent_serves(&dir);
}
