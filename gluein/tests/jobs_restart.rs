//! The pool node's job service as real processes on loopback: a job
//! submitted to the pool survives a `kill -9` of the pool node (its runner
//! goes on, the restarted pool node waits for it, the agent reconnects by
//! itself, and nothing that finished runs again), and a cancelled job
//! leaves no command running on its agent.
//!
//! Requests go to the pool node as the `constellation` client commands
//! send them: a node of the pool asks the pool node's app handler.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{alive, log, scratch, spawn_agent, start_pool, start_pool_with};
use constellation::net::{Node, NodeConfig};
use constellation::{Context, ExecutorContext, Pool};
use gluein::service::{self, JobState, JobSubmission, JobSummary, ServiceRequest, ServiceResponse};
use journal::{ActivityState, Journal};

/// How long anything here may take on a loaded machine.
const LIMIT: Duration = Duration::from_secs(120);

/// Kills a process that is not a child of the test (a job's runner, a
/// command on an agent) when the test ends, if it still runs.
struct PidGuard(i32);

impl Drop for PidGuard {
    fn drop(&mut self) {
        if self.0 > 0 && alive(self.0) {
            // SAFETY: sending a signal to a process this test started.
            unsafe { libc::kill(self.0, libc::SIGKILL) };
        }
    }
}

/// Asks the pool node of `dir/pool.json` `request`, from a node of its
/// own that joins and leaves the pool; the pool node's refusal is `Err`.
fn ask(dir: &Path, request: &ServiceRequest) -> Result<ServiceResponse, String> {
    let pool = dir.join("pool.json");
    let joining = gluein::poolfile::joining(pool.to_str().expect("UTF-8 path"), None)
        .map_err(|error| format!("{error:#}"))?;
    let config = NodeConfig {
        listen: joining.default_listen().parse().expect("a multiaddr"),
        bootstrap: joining.bootstrap,
        key: joining.key,
        role: "test-client".to_string(),
        ..NodeConfig::default()
    };
    // An executor offering a label no work asks for: nothing runs here.
    let nothing = ExecutorContext::new([Context::new("test:client")]);
    let node = Node::start(config, Pool::builder().executor(nothing)).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + LIMIT;
    let master = loop {
        if let Some(master) = node.master() {
            break master;
        }
        if Instant::now() >= deadline {
            return Err(format!("no pool node within {LIMIT:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let answer = node.ask_app(master.node, service::encode(request), LIMIT);
    node.leave();
    service::decode(&answer.map_err(|error| error.to_string())?)
}

/// Submits the graph `graph` from `dir`, named `name`; returns its id.
fn submit(dir: &Path, graph: &Path, name: &str) -> u64 {
    match ask(dir, &ServiceRequest::Submit(submission(dir, graph, name))) {
        Ok(ServiceResponse::Submitted { id }) => id,
        other => panic!("not submitted: {other:?}\npool: {}", log(dir, "pool.log")),
    }
}

/// The graph `graph` from `dir`, named `name`, as a client submits it
/// with paths only.
fn submission(dir: &Path, graph: &Path, name: &str) -> JobSubmission {
    JobSubmission {
        graph: graph.to_path_buf(),
        cwd: dir.to_path_buf(),
        name: Some(name.to_string()),
        relabel: Vec::new(),
        context_file: None,
        priority: 0,
        wait_for_labels: false,
        submitter: "tester@loopback".to_string(),
        files: None,
        token: None,
    }
}

/// Job `id` as the pool node has it.
fn job(dir: &Path, id: u64) -> JobSummary {
    match ask(dir, &ServiceRequest::Job { id }) {
        Ok(ServiceResponse::Job { job }) => job,
        other => panic!("no job {id}: {other:?}"),
    }
}

/// Waits until job `id` has ended, at most [`LIMIT`], and returns it.
fn wait_for_end(dir: &Path, id: u64, logs: &[&str]) -> JobSummary {
    let deadline = Instant::now() + LIMIT;
    loop {
        let job = job(dir, id);
        if job.state.is_final() {
            return job;
        }
        assert!(
            Instant::now() < deadline,
            "job {id} still {} after {LIMIT:?}: {job:?}\n{}",
            job.state,
            logs.iter()
                .map(|name| format!("--- {name}:\n{}", log(dir, name)))
                .collect::<String>()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Waits until `done` holds, at most [`LIMIT`].
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + LIMIT;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {LIMIT:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The run journal of job `id` of the pool in `dir`.
fn journal_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("pool.state/jobs/{id}/journal.db"))
}

/// The process that holds the run journal at `path` to write it.
fn writer_pid(path: &Path) -> Option<i32> {
    let writer = Journal::writer(path).ok()??;
    writer.pid.and_then(|pid| i32::try_from(pid).ok())
}

/// Writes `dir/graph.toml`: `n` activities that each note the start of
/// every execution in `dir/started/N` (a line each), sleep `seconds`,
/// and note their end in `dir/ended/N`.
fn counted_sleepers(dir: &Path, n: usize, seconds: f64) -> PathBuf {
    for sub in ["started", "ended"] {
        std::fs::create_dir_all(dir.join(sub)).expect("marks directory");
    }
    let graph = dir.join("graph.toml");
    std::fs::write(
        &graph,
        format!(
            "[[activity]]\nid = \"s-{{n}}\"\nfor = {{ n = \"1..={n}\" }}\n\
             script = \"echo $$ >> started/{{n}}; sleep {seconds}; echo $$ >> ended/{{n}}\"\n"
        ),
    )
    .expect("graph file");
    graph
}

/// Lines per file of `dir/sub`, by file name.
fn lines_per_file(dir: &Path, sub: &str) -> BTreeMap<String, usize> {
    std::fs::read_dir(dir.join(sub))
        .map(|entries| {
            entries
                .map(|entry| {
                    let entry = entry.expect("mark");
                    let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
                    let name = entry.file_name().to_string_lossy().into_owned();
                    (name, text.lines().count())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Asserts that the journal has an attempt for each execution of each
/// activity of [`counted_sleepers`] in `dir`, and returns the executions
/// by activity number.
fn assert_attempts_are_executions(journal: &Journal, dir: &Path) -> BTreeMap<String, usize> {
    let mut attempts: BTreeMap<String, usize> = BTreeMap::new();
    for attempt in journal.attempts(None).expect("attempts") {
        *attempts.entry(attempt.activity).or_default() += 1;
    }
    let executions = lines_per_file(dir, "started");
    for (n, &ran) in &executions {
        let id = format!("s-{n}");
        assert_eq!(
            attempts.get(&id).copied().unwrap_or(0),
            ran,
            "{id}: the journal's attempts are the executions"
        );
    }
    executions
}

#[test]
fn a_job_goes_on_through_a_kill_9_of_the_pool_node() {
    let dir = scratch("jobs-restart-kill9");
    let mut pool = start_pool(&dir);
    let mut agent = spawn_agent(&dir, 2, "worker", &["--reconnect", "10m"]);
    wait_until("the agent joins", || {
        log(&dir, "worker.log").contains("joined with")
    });
    let graph = counted_sleepers(&dir, 12, 1.0);
    let id = submit(&dir, &graph, "restart");
    assert_eq!(id, 1);

    // Mid-run: some activities done, others not started.
    wait_until("four activities end", || {
        lines_per_file(&dir, "ended").len() >= 4
    });
    let runner = writer_pid(&journal_path(&dir, id)).expect("the runner holds its journal");
    let _runner_guard = PidGuard(runner);
    let ended_before = lines_per_file(&dir, "ended");
    pool.0.kill().expect("kill -9 the pool node");
    pool.0.wait().expect("reap the pool node");
    let started_after = lines_per_file(&dir, "started");
    assert!(
        ended_before.len() < 12,
        "the kill came before the end: {ended_before:?}"
    );
    assert!(alive(runner), "the runner outlives its pool node");

    // The same state directory: the same identity, address and jobs.
    let _pool = start_pool_with(&dir, &[], "pool-again.log");
    let logs = [
        "pool-again.log",
        "worker.log",
        "pool.state/jobs/1/runner.log",
    ];
    let done = wait_for_end(&dir, id, &logs);
    let said = log(&dir, "pool-again.log");
    assert_eq!(done.state, JobState::Succeeded, "{done:?}\n{said}");
    assert!(
        said.contains(&format!(
            "job 1 (restart): its runner (pid {runner}) still runs; waiting for it"
        )),
        "the restarted pool node adopts the runner: {said}"
    );
    assert_eq!((done.counts.done, done.counts.total), (12, 12), "{done:?}");
    assert!(
        agent.0.try_wait().expect("try_wait").is_none(),
        "the agent was not restarted: it still runs\n{}",
        log(&dir, "worker.log")
    );
    wait_until("the runner ends", || !alive(runner));

    let journal = Journal::open_read_only(&journal_path(&dir, id)).expect("the job's journal");
    let activities = journal.activities().expect("activities");
    assert_eq!(activities.len(), 12);
    for activity in &activities {
        assert_eq!(activity.state, ActivityState::Done, "{activity:?}");
    }
    // Every execution is an attempt, and only what ran at the kill may
    // have run twice (at-least-once).
    let executions = assert_attempts_are_executions(&journal, &dir);
    let running_at_kill: BTreeSet<String> = (started_after.keys())
        .filter(|n| !ended_before.contains_key(*n))
        .cloned()
        .collect();
    for (n, &ran) in &executions {
        let id = format!("s-{n}");
        if !running_at_kill.contains(n) {
            assert_eq!(ran, 1, "{id} was not running at the kill: it ran once");
        }
    }
    assert_eq!(executions.len(), 12, "every activity ran: {executions:?}");

    // The restarted pool node knows the agent: a new job's runner, which
    // learns the members from it, finds it.
    let second = dir.join("second.toml");
    std::fs::write(
        &second,
        "[[activity]]\nid = \"after-{n}\"\nfor = { n = \"1..=2\" }\nscript = \"true\"\n",
    )
    .expect("graph file");
    let id = submit(&dir, &second, "after");
    let after = wait_for_end(
        &dir,
        id,
        &["pool-again.log", "pool.state/jobs/2/runner.log"],
    );
    assert_eq!(after.state, JobState::Succeeded, "{after:?}");
    assert!(
        agent.0.try_wait().expect("try_wait").is_none(),
        "same agent"
    );
}

#[test]
fn a_stopped_pool_node_stops_its_runners_and_resumes_their_jobs_when_started_again() {
    let dir = scratch("jobs-restart-stop");
    let mut pool = start_pool(&dir);
    let _agent = spawn_agent(&dir, 2, "worker", &[]);
    wait_until("the agent joins", || {
        log(&dir, "worker.log").contains("joined with")
    });
    let graph = counted_sleepers(&dir, 12, 1.0);
    let id = submit(&dir, &graph, "stopped");
    wait_until("four activities end", || {
        lines_per_file(&dir, "ended").len() >= 4
    });
    let journal = journal_path(&dir, id);
    let runner = writer_pid(&journal).expect("the runner holds its journal");
    let _runner_guard = PidGuard(runner);

    // SIGTERM, as a batch system or a service manager stops it.
    unsafe { libc::kill(pool.0.id() as i32, libc::SIGTERM) };
    let status = common::wait_exit(&mut pool, LIMIT).expect("the pool node stops");
    let said = log(&dir, "pool.log");
    assert!(status.success(), "{said}");
    assert!(said.contains("stopping the runners of 1 job(s)"), "{said}");
    assert!(!alive(runner), "its runner stopped with it: {said}");
    let ended_before = lines_per_file(&dir, "ended");
    assert!(ended_before.len() < 12, "stopped mid-run: {ended_before:?}");
    let runs = Journal::open_read_only(&journal)
        .and_then(|j| j.runs())
        .expect("the job's runs");
    assert_eq!(runs.len(), 1);
    assert_eq!(
        runs[0].status, "interrupted",
        "the runner journaled its stop"
    );
    let store = gluein::service::jobs::JobStore::open(&dir.join("pool.state")).expect("jobs.db");
    let left: Vec<u64> = store
        .running()
        .expect("jobs")
        .iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(left, vec![id], "the job is left running, to resume");
    drop(store);

    // Started again; the agent, which left with the pool node, too.
    let _pool = start_pool_with(&dir, &[], "pool-again.log");
    let _agent = common::spawn(
        &dir,
        &[
            "agent",
            "--pool",
            "pool.json",
            "-n",
            "2",
            "--context",
            "worker",
        ],
        "worker-again.log",
    );
    let logs = [
        "pool-again.log",
        "worker-again.log",
        "pool.state/jobs/1/runner.log",
    ];
    let done = wait_for_end(&dir, id, &logs);
    let said = log(&dir, "pool-again.log");
    assert_eq!(done.state, JobState::Succeeded, "{done:?}\n{said}");
    assert!(
        said.contains("job 1 (stopped): its runner is gone; resuming it"),
        "{said}"
    );
    assert_eq!((done.counts.done, done.counts.total), (12, 12), "{done:?}");
    let journal = Journal::open_read_only(&journal).expect("the job's journal");
    let statuses: Vec<String> = (journal.runs().expect("runs").into_iter())
        .map(|run| run.status)
        .collect();
    assert_eq!(statuses, vec!["interrupted", "succeeded"]);
    // What ended before the stop stays done: it ran once.
    let executions = assert_attempts_are_executions(&journal, &dir);
    for n in ended_before.keys() {
        assert_eq!(executions[n], 1, "s-{n} ended before the stop: it ran once");
    }
    assert_eq!(executions.len(), 12, "every activity ran: {executions:?}");
}

#[test]
fn a_cancelled_job_leaves_no_command_running_on_its_agent() {
    let dir = scratch("jobs-restart-cancel");
    let _pool = start_pool(&dir);
    let _agent = spawn_agent(&dir, 2, "worker", &[]);
    wait_until("the agent joins", || {
        log(&dir, "worker.log").contains("joined with")
    });
    // Each command is a shell with a child, both noted.
    std::fs::create_dir_all(dir.join("pids")).expect("pids directory");
    let graph = dir.join("graph.toml");
    std::fs::write(
        &graph,
        "[[activity]]\nid = \"long-{n}\"\nfor = { n = \"1..=6\" }\n\
         script = \"echo $$ >> pids/{n}; sleep 300 & echo $! >> pids/{n}; wait\"\n",
    )
    .expect("graph file");
    let id = submit(&dir, &graph, "doomed");
    let pids = || -> Vec<i32> {
        (std::fs::read_dir(dir.join("pids")).expect("pids directory"))
            .flat_map(|entry| {
                let text = std::fs::read_to_string(entry.expect("pid file").path());
                let text = text.unwrap_or_default();
                text.lines()
                    .filter_map(|line| line.trim().parse().ok())
                    .collect::<Vec<i32>>()
            })
            .collect()
    };
    wait_until("both executors run a command and its child", || {
        pids().len() >= 4
    });
    let running = pids();
    let _guards: Vec<PidGuard> = running.iter().map(|&pid| PidGuard(pid)).collect();
    let runner = writer_pid(&journal_path(&dir, id)).expect("the runner holds its journal");
    let _runner_guard = PidGuard(runner);

    match ask(&dir, &ServiceRequest::Cancel { id }) {
        Ok(ServiceResponse::Job { job }) => assert!(
            matches!(job.state, JobState::Running | JobState::Cancelled),
            "{job:?}"
        ),
        other => panic!("not cancelled: {other:?}"),
    }
    let logs = ["pool.log", "worker.log", "pool.state/jobs/1/runner.log"];
    let cancelled = wait_for_end(&dir, id, &logs);
    assert_eq!(cancelled.state, JobState::Cancelled, "{cancelled:?}");
    assert_eq!(cancelled.counts.done, 0, "{cancelled:?}");
    assert_eq!(cancelled.counts.cancelled, 6, "{cancelled:?}");
    wait_until("the runner ends", || !alive(runner));
    wait_until("every command and its child is gone", || {
        running.iter().all(|&pid| !alive(pid))
    });
    let journal = Journal::open_read_only(&journal_path(&dir, id)).expect("the job's journal");
    for activity in journal.activities().expect("activities") {
        assert_eq!(activity.state, ActivityState::Cancelled, "{activity:?}");
    }
    // Each execution noted two pids (its shell's and its child's), and is
    // one attempt.
    let attempts = journal.attempts(None).expect("attempts");
    assert_eq!(attempts.len() * 2, pids().len(), "{attempts:#?}");
    let again = ask(&dir, &ServiceRequest::Cancel { id }).unwrap_err();
    assert!(
        again.ends_with("refused: job 1 has already ended: cancelled"),
        "{again}"
    );
}

/// Asks the pool node of `dir` to take the graph `graph`: its answer.
fn try_submit(dir: &Path, graph: &Path) -> Result<ServiceResponse, String> {
    ask(
        dir,
        &ServiceRequest::Submit(submission(dir, graph, "after")),
    )
}

/// Stops the pool node of `pool` with SIGTERM, as a user does.
fn stop_pool(mut pool: common::Guard) {
    // SAFETY: sending a signal to our own child process.
    unsafe { libc::kill(pool.0.id() as i32, libc::SIGTERM) };
    let status = common::wait_exit(&mut pool, LIMIT);
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
}

#[test]
fn a_state_directory_removed_under_the_pool_is_not_made_again() {
    let dir = scratch("jobs-restart-state-removed");
    let _pool = start_pool(&dir);
    let state = dir.join("pool.state");
    assert!(state.join("jobs.db").exists());
    std::fs::remove_dir_all(&state).unwrap();
    let graph = common::sleepers(&dir, 1, 0.0);
    let said = match try_submit(&dir, &graph) {
        Err(said) => said,
        Ok(answer) => panic!(
            "a job was taken without a state directory: {answer:?}\n{}",
            log(&dir, "pool.log")
        ),
    };
    assert!(
        said.contains(&format!(
            "the pool's state directory {} was removed or replaced",
            state.display()
        )) && said.contains("stop this pool node and start it again"),
        "{said}"
    );
    common::wait_for_log(&dir, "pool.log", "was removed or replaced", LIMIT);
    assert!(
        !state.exists(),
        "the state directory was made again: {}",
        log(&dir, "pool.log")
    );
}

#[test]
fn a_new_job_journal_never_reuses_the_folder_of_an_old_job() {
    let dir = scratch("jobs-restart-old-folders");
    stop_pool(start_pool(&dir));
    // What a pool node whose state directory was removed under it left
    // (before, it made STATE/jobs/ID again for the jobs it started): the
    // folders of jobs 1 and 2, and no job journal.
    let state = dir.join("pool.state");
    for id in [1, 2] {
        let folder = state.join(format!("jobs/{id}"));
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("journal.db"), format!("old job {id}")).unwrap();
    }
    for name in ["jobs.db", "jobs.db-wal", "jobs.db-shm"] {
        let _ = std::fs::remove_file(state.join(name));
    }
    let pool = start_pool_with(&dir, &[], "pool-again.log");
    let graph = common::sleepers(&dir, 1, 0.0);
    let id = match try_submit(&dir, &graph) {
        Ok(ServiceResponse::Submitted { id }) => id,
        other => panic!("not submitted: {other:?}\n{}", log(&dir, "pool-again.log")),
    };
    assert_eq!(id, 3, "ids 1 and 2 have folders of old jobs");
    assert_eq!(
        journal_path(&dir, 3),
        state.join("jobs/3/journal.db"),
        "the new job's own folder"
    );
    for id in [1, 2] {
        assert_eq!(
            std::fs::read_to_string(journal_path(&dir, id)).unwrap(),
            format!("old job {id}"),
            "an old job's journal was touched"
        );
    }
    stop_pool(pool);
}

/// Writes `dir/graph.toml`: `n` activities that note each execution's
/// start in `dir/started/N` and its end in `dir/ended/N`, as
/// [`counted_sleepers`] does, and sleep 30 s while `dir/slow` exists when
/// they start, else 0.3 s.
fn slow_while_marked(dir: &Path, n: usize) -> PathBuf {
    for sub in ["started", "ended"] {
        std::fs::create_dir_all(dir.join(sub)).expect("marks directory");
    }
    std::fs::write(dir.join("slow"), "").expect("the slow mark");
    let graph = dir.join("graph.toml");
    std::fs::write(
        &graph,
        format!(
            "[[activity]]\nid = \"s-{{n}}\"\nfor = {{ n = \"1..={n}\" }}\n\
             script = \"echo $$ >> started/{{n}}; if [ -e slow ]; then sleep 30; else sleep 0.3; fi; \
             echo $$ >> ended/{{n}}\"\n"
        ),
    )
    .expect("graph file");
    graph
}

/// Job `id`'s runner, once both executors of the agent run its commands
/// and their starts are in its journal (a runner killed before that commit,
/// at most 50 ms after a start, would leave them out).
fn runner_with_two_journaled_starts(dir: &Path, id: u64) -> i32 {
    let journal = journal_path(dir, id);
    wait_until("two commands start and are journaled", || {
        lines_per_file(dir, "started").len() >= 2
            && Journal::open_read_only(&journal)
                .and_then(|j| j.attempts(None))
                .is_ok_and(|attempts| attempts.len() >= 2)
    });
    writer_pid(&journal).expect("the runner holds its journal")
}

/// A runner killed (`kill -9`) while its commands run on an agent, alone
/// or with its pool node: the job is resumed, the agent drops the dead
/// runner's work (kills its commands, starts none of what it queued), and
/// every execution is an attempt in the journal, those the dead runner
/// never heard the end of as lost.
fn a_killed_runner_is_resumed_and_every_execution_journaled(name: &str, with_pool_node: bool) {
    let dir = scratch(name);
    let mut pool = start_pool(&dir);
    let _agent = spawn_agent(&dir, 2, "worker", &["--reconnect", "10m"]);
    wait_until("the agent joins", || {
        log(&dir, "worker.log").contains("joined with")
    });
    let graph = slow_while_marked(&dir, 6);
    let id = submit(&dir, &graph, name);
    let runner = runner_with_two_journaled_starts(&dir, id);
    let _runner_guard = PidGuard(runner);
    let killed: Vec<i32> = (std::fs::read_dir(dir.join("started")).expect("started"))
        .flat_map(|entry| {
            let text = std::fs::read_to_string(entry.expect("mark").path()).unwrap_or_default();
            text.lines()
                .filter_map(|l| l.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect();
    let _command_guards: Vec<PidGuard> = killed.iter().map(|&pid| PidGuard(pid)).collect();
    if with_pool_node {
        pool.0.kill().expect("kill -9 the pool node");
        pool.0.wait().expect("reap the pool node");
    }
    // SAFETY: sending a signal to the runner this test's job started.
    unsafe { libc::kill(runner, libc::SIGKILL) };
    wait_until("the runner dies", || !alive(runner));
    // What starts from now on, a re-run or the dead runner's queued work
    // (which must not start), is quick.
    std::fs::remove_file(dir.join("slow")).expect("the slow mark");
    let (_pool_again, pool_log) = if with_pool_node {
        (
            Some(start_pool_with(&dir, &[], "pool-again.log")),
            "pool-again.log",
        )
    } else {
        (None, "pool.log")
    };
    let logs = [pool_log, "worker.log", "pool.state/jobs/1/runner.log"];
    let done = wait_for_end(&dir, id, &logs);
    let said = log(&dir, pool_log);
    assert_eq!(done.state, JobState::Succeeded, "{done:?}\n{said}");
    let resumed = match with_pool_node {
        true => "job 1 (".to_string() + name + "): its runner is gone; resuming it",
        false => format!("job 1 ({name}): its runner was killed by signal 9; resuming it"),
    };
    assert!(said.contains(&resumed), "{said}");
    assert_eq!((done.counts.done, done.counts.total), (6, 6), "{done:?}");
    // The dead runner's commands were killed by the agent, not left to
    // run their 30 s for nobody.
    wait_until("the dead runner's commands are gone", || {
        killed.iter().all(|&pid| !alive(pid))
    });
    let worker = log(&dir, "worker.log");
    assert!(
        worker.contains("left or was declared dead while 2 of its activities ran here"),
        "{worker}"
    );

    let journal = Journal::open_read_only(&journal_path(&dir, id)).expect("the job's journal");
    let executions = assert_attempts_are_executions(&journal, &dir);
    assert_eq!(executions.len(), 6, "every activity ran: {executions:?}");
    let lost: Vec<_> = (journal.attempts(None).expect("attempts").into_iter())
        .filter(|a| a.recorded.outcome == journal::LOST)
        .collect();
    assert_eq!(lost.len(), killed.len(), "{lost:#?}");
    for a in &lost {
        let message = a.recorded.message.as_deref().unwrap_or_default();
        assert!(
            message.starts_with("the run ended without hearing how it ended"),
            "{message}"
        );
    }
}

#[test]
fn a_runner_killed_alone_is_resumed_and_every_execution_journaled() {
    a_killed_runner_is_resumed_and_every_execution_journaled("jobs-runner-killed", false);
}

#[test]
fn a_runner_killed_with_its_pool_node_is_resumed_and_every_execution_journaled() {
    a_killed_runner_is_resumed_and_every_execution_journaled("jobs-runner-and-pool-killed", true);
}

#[test]
fn a_submit_sent_again_with_its_token_gets_its_job_back_also_after_a_kill_9() {
    let dir = scratch("jobs-restart-token");
    let mut pool = start_pool(&dir);
    let graph = counted_sleepers(&dir, 1, 0.1);
    // No agent: each job ends at once, refused by its runner, and leaves
    // no runner behind the kill below.
    let submitted = |token: &str| {
        let job = JobSubmission {
            token: Some(token.to_string()),
            ..submission(&dir, &graph, "once")
        };
        match ask(&dir, &ServiceRequest::Submit(job)) {
            Ok(ServiceResponse::Submitted { id }) => id,
            other => panic!("not submitted: {other:?}\npool: {}", log(&dir, "pool.log")),
        }
    };
    let first = submitted("a-token");
    // The answer to this try was, say, lost: the client sends it again.
    assert_eq!(submitted("a-token"), first, "one job for one token");
    let other = submitted("another-token");
    assert_ne!(other, first);
    for id in [first, other] {
        wait_for_end(&dir, id, &["pool.log"]);
    }

    // The token is kept with the job: a pool node killed and started
    // again on its state directory still knows it.
    pool.0.kill().expect("kill -9 the pool node");
    pool.0.wait().expect("reap the pool node");
    let _pool = start_pool_with(&dir, &[], "pool-again.log");
    assert_eq!(submitted("a-token"), first, "the token survives a restart");
    let jobs = match ask(&dir, &ServiceRequest::Jobs { all: true }) {
        Ok(ServiceResponse::Jobs { jobs }) => jobs,
        other => panic!("{other:?}"),
    };
    let mut ids: Vec<u64> = jobs.iter().map(|job| job.id).collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![first, other], "no duplicate");
}
