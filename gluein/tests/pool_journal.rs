//! The journal of a run on a pool: each agent is a node of its own, even
//! two on one host, listed with its executors' labels and cores; each
//! attempt names the agent and executor that ran it; and the report counts
//! the agents' executors. With an agent killed mid-run, every execution is
//! an attempt: those killed with it as lost, and their re-runs after them.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use common::{
    counted_sleepers, executions, first_label, log, marks, per_agent, run, run_on_pool, scratch,
    sleepers, spawn_agent, start_pool, text,
};
use journal::Journal;

#[test]
fn two_agents_on_one_host_are_two_nodes_with_their_own_executors_and_cores() {
    let dir = scratch("pool-journal");
    let _pool = start_pool(&dir);
    let _alpha = spawn_agent(&dir, 2, "alpha", &["--idle-timeout", "5s"]);
    let _beta = spawn_agent(&dir, 3, "beta", &["--idle-timeout", "5s"]);
    let graph = sleepers(&dir, 20, 0.2);
    let journal_path = dir.join("journal.db");
    let ran = run_on_pool(
        &dir,
        &graph,
        2,
        &["--journal", journal_path.to_str().unwrap()],
    );
    assert!(ran.status.success(), "{}", text(&ran));

    let journal = Journal::open_read_only(&journal_path).unwrap();
    let listed = journal.executors(1).unwrap();
    // The runner offers no executor of its own: all five are the agents'.
    assert_eq!(listed.len(), 5, "{listed:?}");
    let nodes: HashSet<&str> = listed.iter().map(|e| e.node.as_str()).collect();
    assert_eq!(nodes.len(), 2, "two agents, two nodes: {listed:?}");
    let host = executors::probe::hostname();
    for node in &nodes {
        assert!(
            node.starts_with(&format!("{host}#")) && node.len() > host.len() + 1,
            "a node is named HOST#ID: {node}"
        );
    }
    for (label, count) in [("alpha", 2), ("beta", 3)] {
        let executors: Vec<_> = (listed.iter())
            .filter(|e| first_label(&e.labels) == label)
            .collect();
        assert_eq!(executors.len(), count, "{label}: {listed:?}");
        let node = &executors[0].node;
        assert!(executors.iter().all(|e| &e.node == node), "{executors:?}");
        let mut indices: Vec<i64> = executors.iter().map(|e| e.executor).collect();
        indices.sort();
        assert_eq!(indices, (0..count as i64).collect::<Vec<_>>());
        assert!(executors.iter().all(|e| e.cores >= 1), "{executors:?}");
    }

    // Each attempt's slot is a listed executor of the agent that ran it,
    // as the command itself saw its labels.
    let ran_by: BTreeMap<String, String> = std::fs::read_dir(dir.join("marks"))
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            let mark = std::fs::read_to_string(entry.path()).unwrap();
            let label = first_label(mark.split_whitespace().next().unwrap()).to_string();
            (format!("s-{}", entry.file_name().to_string_lossy()), label)
        })
        .collect();
    assert_eq!(ran_by.len(), 20);
    let attempts = journal.attempts(Some(1)).unwrap();
    assert_eq!(attempts.len(), 20, "{attempts:?}");
    for a in &attempts {
        let executor = (listed.iter())
            .find(|e| {
                e.node == a.recorded.node
                    && e.executor == a.recorded.executor
                    && e.labels == a.recorded.labels
            })
            .unwrap_or_else(|| panic!("attempt on an executor not listed: {a:?}\n{listed:?}"));
        assert_eq!(
            first_label(&executor.labels),
            ran_by[&a.activity],
            "{a:?} was journaled on another agent than the one that ran it"
        );
    }
    assert_eq!(marks(&dir).len(), 20);

    let report = run(&dir, &["report", journal_path.to_str().unwrap()]);
    let shown = text(&report);
    assert!(report.status.success(), "{shown}");
    let cores: i64 = listed.iter().map(|e| e.cores).sum();
    assert!(
        shown.contains(&format!(
            "executors  5 (2 alpha, 3 beta) with {cores} cores"
        )) || shown.contains(&format!(
            "executors  5 (3 beta, 2 alpha) with {cores} cores"
        )),
        "{shown}"
    );
}

#[test]
fn after_an_agent_is_killed_every_execution_is_an_attempt() {
    let dir = scratch("pool-journal-kill");
    let _pool = start_pool(&dir);
    let mut victim = spawn_agent(&dir, 2, "victim", &[]);
    // Outstays the victim's death being noticed (about 7.5 s).
    let _survivor = spawn_agent(&dir, 2, "survivor", &["--idle-timeout", "12s"]);
    let graph = counted_sleepers(&dir, 16, 0.5);
    let journal_path = dir.join("journal.db");
    let extra = ["--wait-agents", "2", "--progress", "none"];
    let mut runner = common::spawn_pool_run(&dir, &graph, &journal_path, &extra);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !executions(&dir).iter().any(|(agent, _)| agent == "victim") {
        assert!(
            Instant::now() < deadline,
            "the victim never started work: {}",
            log(&dir, "victim.log")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(200));
    victim.0.kill().unwrap();
    let status = common::wait_exit(&mut runner, Duration::from_secs(120));
    let said = log(&dir, "run.log");
    let status = status.unwrap_or_else(|| panic!("the run did not end within 120 s:\n{said}"));
    assert!(status.success(), "{said}");
    // The victim's commands were not killed with it: they end by themselves.
    std::thread::sleep(Duration::from_secs(1));

    let journal = Journal::open_read_only(&journal_path).unwrap();
    let attempts = journal.attempts(None).unwrap();
    let journaled = per_agent(attempts.iter().map(|a| first_label(&a.recorded.labels)));
    let executed = executions(&dir);
    let executed = per_agent(executed.iter().map(|(agent, _)| agent.as_str()));
    println!("executions {executed:?}, attempts {journaled:?}");
    assert_eq!(
        journaled, executed,
        "one attempt per execution, on the agent that ran it\n{said}"
    );
    assert!(executed["victim"] >= 1, "{executed:?}");
    let lost: Vec<_> = (attempts.iter())
        .filter(|a| a.recorded.outcome == journal::LOST)
        .collect();
    assert_eq!(
        lost.len(),
        executed["victim"],
        "the victim's executions are lost with it: {attempts:?}"
    );
    for a in &lost {
        assert_eq!(first_label(&a.recorded.labels), "victim", "{a:?}");
        let message = a.recorded.message.as_deref().unwrap_or_default();
        assert!(
            message.starts_with("the agent ") && message.contains(&a.recorded.node),
            "{message}"
        );
        // Each ran again, numbered after it, and that run settled it.
        let rerun = (attempts.iter())
            .find(|b| b.activity == a.activity && b.recorded.attempt > a.recorded.attempt)
            .unwrap_or_else(|| panic!("no attempt after the lost one: {attempts:?}"));
        assert_eq!(first_label(&rerun.recorded.labels), "survivor", "{rerun:?}");
        assert_eq!(rerun.recorded.outcome, "exited", "{rerun:?}");
    }
    let by_activity: HashSet<_> = attempts.iter().map(|a| &a.activity).collect();
    assert_eq!(by_activity.len(), 16, "every activity has an attempt");
    let states = journal.state_counts().unwrap();
    assert!(
        states
            .iter()
            .all(|s| s.state == journal::ActivityState::Done),
        "{states:?}"
    );
    let counted = journal.re_executions(1).unwrap();
    assert_eq!(counted.lost, lost.len());
    assert!(
        said.contains(&format!("re-executions: {}", counted.total())),
        "{said}"
    );

    let report = run(&dir, &["report", journal_path.to_str().unwrap()]);
    let shown = text(&report);
    assert!(report.status.success(), "{shown}");
    assert!(
        shown.contains(&format!(
            "re-executions: {} ({} lost with their agent, {} extra results)",
            counted.total(),
            counted.lost,
            counted.extra
        )),
        "{shown}"
    );
}
