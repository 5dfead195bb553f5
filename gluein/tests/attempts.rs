//! Every execution of a pool run is an attempt in its journal, as counted
//! by the commands themselves (each appends a line when it starts): also
//! the commands killed with their pilot, whose agent sends no result for
//! them, and those a stopped run could not hear back from.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{
    counted_sleepers, executions, first_label, log, per_agent, scratch, spawn_agent,
    spawn_pool_run, start_pool, wait_exit, Guard,
};
use journal::{AttemptRow, Journal, LOST};

/// Waits until `count` executions run on the agent labelled `label`, or
/// fails saying why; the run must still be going.
fn wait_for_executions(dir: &Path, label: &str, count: usize, runner: &mut Guard) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let started = executions(dir).iter().filter(|(l, _)| l == label).count();
        if started >= count {
            return;
        }
        if let Some(status) = runner.0.try_wait().unwrap() {
            panic!("the run ended ({status}) first:\n{}", log(dir, "run.log"));
        }
        assert!(
            Instant::now() < deadline,
            "{count} executions on {label} within 60 s ({started} started):\n{}\n{}",
            log(dir, "run.log"),
            log(dir, &format!("{label}.log"))
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts `run GRAPH --pool pool.json` in `dir` once `agents` agents have
/// joined, journaling to `dir/journal.db`, logging to `dir/run.log`.
fn spawn_run(dir: &Path, graph: &Path, agents: usize) -> Guard {
    let agents = agents.to_string();
    let extra = ["--wait-agents", &agents, "--progress", "none"];
    spawn_pool_run(dir, graph, &dir.join("journal.db"), &extra)
}

/// The attempts of the journal's only run.
fn attempts(dir: &Path) -> Vec<AttemptRow> {
    let journal = Journal::open_read_only(&dir.join("journal.db")).unwrap();
    journal.attempts(Some(1)).unwrap()
}

/// Waits for the run to end, successfully, and checks that each agent has
/// as many attempts in the journal as executions it started; returns the
/// run's log and the attempts.
fn ends_with_an_attempt_per_execution(dir: &Path, runner: &mut Guard) -> (String, Vec<AttemptRow>) {
    let status = wait_exit(runner, Duration::from_secs(120));
    let said = log(dir, "run.log");
    let status = status.unwrap_or_else(|| panic!("the run did not end within 120 s:\n{said}"));
    assert!(status.success(), "{said}");
    let executed = executions(dir);
    let attempts = attempts(dir);
    assert_eq!(
        per_agent(attempts.iter().map(|a| first_label(&a.recorded.labels))),
        per_agent(executed.iter().map(|(label, _)| label.as_str())),
        "one attempt per execution, on the agent that ran it:\n{attempts:#?}\n{said}"
    );
    (said, attempts)
}

fn signal(pid: i32, signal: i32) {
    // SAFETY: sending a signal to a process this test started, directly
    // or through the run it started.
    unsafe { libc::kill(pid, signal) };
}

#[test]
fn commands_killed_with_their_pilot_are_lost_attempts_and_run_again() {
    let dir = scratch("attempts-pilot");
    let _pool = start_pool(&dir);
    let mut pilot = spawn_agent(&dir, 2, "pilot", &[]);
    let _survivor = spawn_agent(&dir, 2, "survivor", &[]);
    let graph = counted_sleepers(&dir, 8, 3.0);
    let mut runner = spawn_run(&dir, &graph, 2);
    wait_for_executions(&dir, "pilot", 1, &mut runner);

    // The batch system cancels the pilot job: SIGTERM to the agent and
    // to the commands, as to every process of the job.
    signal(pilot.0.id() as i32, libc::SIGTERM);
    let killed: Vec<i32> = (executions(&dir).into_iter())
        .filter(|(label, _)| label == "pilot")
        .map(|(_, pid)| pid)
        .collect();
    for &pid in &killed {
        signal(pid, libc::SIGTERM);
    }
    let left = wait_exit(&mut pilot, Duration::from_secs(60));
    assert!(
        left.is_some(),
        "the pilot's agent did not leave within 60 s of SIGTERM:\n{}",
        log(&dir, "pilot.log")
    );
    let (said, attempts) = ends_with_an_attempt_per_execution(&dir, &mut runner);
    // The agent lets what it took run while it leaves: commands that
    // started after the signal end by themselves and are reported. The
    // killed ones are not: the agent left without their results.
    let lost: Vec<&AttemptRow> = attempts
        .iter()
        .filter(|a| a.recorded.outcome == LOST)
        .collect();
    assert_eq!(lost.len(), killed.len(), "{attempts:#?}\n{said}");
    for a in &lost {
        assert_eq!(first_label(&a.recorded.labels), "pilot", "{a:?}");
        let message = a.recorded.message.as_deref().unwrap_or_default();
        assert!(
            message.contains(&a.recorded.node) && message.contains("died or left"),
            "{message}"
        );
        let later = (attempts.iter())
            .filter(|b| b.activity == a.activity && b.recorded.attempt > a.recorded.attempt)
            .count();
        assert_eq!(later, 1, "each ran again once, after: {attempts:#?}");
    }
    assert!(
        said.contains(&format!(
            "re-executions: {0} ({0} lost with their agent, 0 extra results)",
            killed.len()
        )),
        "{said}"
    );
}

#[test]
fn a_stopped_run_journals_the_commands_an_agent_did_not_report() {
    let dir = scratch("attempts-unreported");
    let _pool = start_pool(&dir);
    let frozen = spawn_agent(&dir, 2, "frozen", &[]);
    let graph = counted_sleepers(&dir, 4, 30.0);
    let mut runner = spawn_run(&dir, &graph, 1);
    wait_for_executions(&dir, "frozen", 2, &mut runner);
    // An agent that answers nothing: the run's request to kill its
    // commands times out, and no result comes from it.
    signal(frozen.0.id() as i32, libc::SIGSTOP);
    signal(runner.0.id() as i32, libc::SIGINT);
    let status = wait_exit(&mut runner, Duration::from_secs(120));
    let said = log(&dir, "run.log");
    signal(frozen.0.id() as i32, libc::SIGCONT);
    let status = status.unwrap_or_else(|| panic!("the run did not end within 120 s:\n{said}"));
    assert_eq!(status.code(), Some(130), "{said}");
    let executed = executions(&dir);
    for (_, pid) in &executed {
        // The agent, stopped, killed none: this test does.
        signal(*pid, libc::SIGKILL);
    }
    drop(frozen);

    let attempts = attempts(&dir);
    assert_eq!(attempts.len(), executed.len(), "{attempts:#?}\n{said}");
    for a in &attempts {
        assert_eq!(a.recorded.outcome, LOST, "{a:?}");
        let message = a.recorded.message.as_deref().unwrap_or_default();
        assert!(
            message.starts_with("interrupted: the run stopped before the agent")
                && message.contains(&a.recorded.node),
            "{message}"
        );
    }
    let journal = Journal::open_read_only(&dir.join("journal.db")).unwrap();
    assert_eq!(journal.runs().unwrap()[0].status, "interrupted");
}

/// An agent that stops answering (SIGSTOP, as a swapped-out or suspended
/// node) for longer than failure detection takes is declared dead: its
/// work is queued again and runs on the other agent, while its own
/// commands go on. When it comes back its results come too. Whichever of
/// each pair settles its activity first, the other is an extra execution
/// (or, if the run ended first, a lost one): every execution is an
/// attempt, on the agent that ran it.
#[test]
fn an_agent_taken_for_dead_that_comes_back_is_journaled_once_per_execution() {
    let dir = scratch("attempts-frozen");
    let _pool = start_pool(&dir);
    let slow = spawn_agent(&dir, 2, "slow", &[]);
    let _survivor = spawn_agent(&dir, 2, "survivor", &[]);
    let graph = counted_sleepers(&dir, 4, 4.0);
    let mut runner = spawn_run(&dir, &graph, 2);
    wait_for_executions(&dir, "slow", 1, &mut runner);
    signal(slow.0.id() as i32, libc::SIGSTOP);
    // Failure detection takes about 10 s here.
    std::thread::sleep(Duration::from_secs(20));
    signal(slow.0.id() as i32, libc::SIGCONT);
    let (said, attempts) = ends_with_an_attempt_per_execution(&dir, &mut runner);
    let journal = Journal::open_read_only(&dir.join("journal.db")).unwrap();
    let counted = journal.re_executions(1).unwrap();
    println!("re-executions: {counted:?}");
    if said.contains("queued again: the node running it died") {
        assert!(
            counted.total() >= 1,
            "work queued again ran twice, so something ran again: {attempts:#?}\n{said}"
        );
    }
    assert!(
        (attempts.iter()).all(|a| a.recorded.outcome == "exited" || a.recorded.outcome == LOST),
        "{attempts:#?}"
    );
}
