//! Every job ends: an activity lost with its agent on every attempt the
//! pool allows fails with that reason, and what runs after it is
//! cancelled, instead of waiting forever for a result that cannot come;
//! and an activity too large to travel to an agent is refused before the
//! job is accepted, instead of staying forever on its runner.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{log, scratch, spawn_agent, spawn_pool_run, start_pool, wait_exit, Guard};
use journal::{Journal, LOST};

/// How many agents the pool loses before the run gives the killer up: the
/// pool hands an activity out at most three times (`max_attempts`).
const ATTEMPTS: usize = 3;

/// Writes `dir/graph.toml`: `killer`, whose command appends a line to
/// `dir/killer-starts` and then kills the agent that runs it (the nearest
/// ancestor that is a `constellation agent`), as an agent OOM-killed by its
/// command; `after-killer`, which runs after it; and `independent`.
fn killer_graph(dir: &Path) -> std::path::PathBuf {
    let starts = dir.join("killer-starts");
    let ran = dir.join("ran");
    std::fs::create_dir_all(&ran).expect("ran directory");
    // The pause lets the agent's announcement of the attempt leave before
    // the agent dies, as it would for a command that grows for a while.
    let killer = format!(
        r#"echo "$CONSTELLATION_LABELS" >> {starts}; sleep 0.5
p=$$
while [ "$p" -gt 1 ]; do
  if [ "$(cat /proc/$p/comm)" = constellation ] && tr '\0' ' ' < /proc/$p/cmdline | grep -q ' agent '; then
    kill -9 "$p"; exit 0
  fi
  p=$(cut -d' ' -f4 /proc/$p/stat)
done
echo 'no agent among my ancestors' >&2; exit 3"#,
        starts = starts.display()
    );
    let path = dir.join("graph.toml");
    std::fs::write(
        &path,
        format!(
            "[[activity]]\nid = \"killer\"\nscript = '''\n{killer}\n'''\n\n\
             [[activity]]\nid = \"after-killer\"\nafter = [\"killer\"]\n\
             script = \"touch {ran}/after-killer\"\n\n\
             [[activity]]\nid = \"independent\"\nscript = \"touch {ran}/independent\"\n",
            ran = ran.display()
        ),
    )
    .expect("graph file");
    path
}

/// A pool in `dir` with one more agent than the killer can kill, each
/// of one executor, all joined: `agent1` to `agent4`, logging to
/// `dir/agentK.log`.
fn pool_of_agents(dir: &Path) -> (Guard, Vec<Guard>) {
    let pool = start_pool(dir);
    let agents: Vec<Guard> = (1..=ATTEMPTS + 1)
        .map(|k| spawn_agent(dir, 1, &format!("agent{k}"), &[]))
        .collect();
    for k in 1..=ATTEMPTS + 1 {
        let log_name = format!("agent{k}.log");
        common::wait_for_log(dir, &log_name, "joined with", Duration::from_secs(60));
    }
    (pool, agents)
}

#[test]
fn an_activity_lost_on_every_attempt_fails_and_the_run_ends() {
    let dir = scratch("lost-every-attempt");
    let (_pool, agents) = pool_of_agents(&dir);
    let graph = killer_graph(&dir);
    let journal_path = dir.join("journal.db");
    let waited = (ATTEMPTS + 1).to_string();
    let extra = ["--wait-agents", &waited, "--progress", "none"];
    let mut runner = spawn_pool_run(&dir, &graph, &journal_path, &extra);

    // Three deaths, each found in about 10 s; far less than forever.
    let status = wait_exit(&mut runner, Duration::from_secs(180));
    let said = log(&dir, "run.log");
    let status = status.unwrap_or_else(|| {
        panic!("the run did not end within 180 s after its activity was lost:\n{said}")
    });
    assert_eq!(status.code(), Some(1), "the run failed:\n{said}");
    drop(agents);

    let journal = Journal::open_read_only(&journal_path).unwrap();
    assert_eq!(journal.runs().unwrap()[0].status, "failed", "{said}");
    let activities = journal.activities().unwrap();
    let state = |id: &str| {
        let row = (activities.iter())
            .find(|a| a.id == id)
            .unwrap_or_else(|| panic!("{id} in the journal: {activities:#?}"));
        (row.state.as_str(), row.message.clone().unwrap_or_default())
    };
    let (killer, why) = state("killer");
    assert_eq!(killer, "failed", "{activities:#?}");
    assert!(
        why.starts_with("lost: ") && why.contains(&format!("died {ATTEMPTS} times")),
        "the reason names the loss and the attempts: {why}"
    );
    assert_eq!(state("after-killer").0, "cancelled", "{activities:#?}");
    assert_eq!(state("independent").0, "done", "{activities:#?}");
    assert!(dir.join("ran/independent").exists());
    assert!(!dir.join("ran/after-killer").exists());

    // Every execution of the killer is an attempt, lost with its agent.
    let executions = log(&dir, "killer-starts").lines().count();
    let attempts = journal.attempts(Some(1)).unwrap();
    let killer_attempts: Vec<_> = (attempts.iter())
        .filter(|a| a.activity == "killer")
        .collect();
    assert_eq!(executions, ATTEMPTS, "{said}");
    assert_eq!(killer_attempts.len(), executions, "{attempts:#?}\n{said}");
    assert!(
        killer_attempts.iter().all(|a| a.recorded.outcome == LOST),
        "{killer_attempts:#?}"
    );
    assert!(
        said.contains("killer: lost: "),
        "the summary names it:\n{said}"
    );
}

/// Writes `dir/big.json`: `big`, whose environment holds 33 MiB (more than
/// half the 64 MiB network frame that a steal reply must fit in), and
/// `small`.
fn big_graph(dir: &Path) -> std::path::PathBuf {
    let value = "x".repeat(33 << 20);
    let graph = serde_json::json!({
        "activity": [
            { "id": "big", "command": "true", "env": { "BIG": value } },
            { "id": "small", "command": "true" },
        ]
    });
    let path = dir.join("big.json");
    std::fs::write(&path, graph.to_string()).expect("graph file");
    path
}

/// Runs `constellation ARGS` in `dir`, failing the test if it takes
/// longer than `limit` (a refusal must not hang).
fn run_within(dir: &Path, args: &[&str], limit: Duration) -> std::process::Output {
    let child = common::constellation(dir)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start constellation");
    let pid = child.id() as i32;
    let (sent, output) = std::sync::mpsc::channel();
    std::thread::spawn(move || sent.send(child.wait_with_output()));
    match output.recv_timeout(limit) {
        Ok(output) => output.expect("constellation's output"),
        Err(_) => {
            // SAFETY: sending a signal to the child this test started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("constellation {args:?} did not end within {limit:?}");
        }
    }
}

#[test]
fn an_activity_too_large_to_travel_is_refused_by_submit_and_by_a_pool_run() {
    let dir = scratch("too-large-to-travel");
    let _pool = start_pool(&dir);
    let _agent = spawn_agent(&dir, 1, "agent", &[]);
    let graph = big_graph(&dir);
    let graph = graph.to_str().expect("UTF-8 path");
    let limit = Duration::from_secs(120);
    let submitted = run_within(&dir, &["submit", graph, "--pool", "pool.json"], limit);
    let run = ["run", graph, "--pool", "pool.json", "--progress", "none"];
    let ran = run_within(&dir, &run, limit);
    for output in [&submitted, &ran] {
        let said = common::text(output);
        assert!(!output.status.success(), "{said}");
        assert!(
            said.contains("big is 33.0 MiB encoded, too large to travel to an agent")
                && said.contains("an activity may take at most 31.9 MiB (33488896 bytes)")
                && !said.contains("small is"),
            "names the activity, its size and the limit: {said}"
        );
    }
    let jobs = run_within(
        &dir,
        &["jobs", "--pool", "pool.json", "--all", "--json"],
        limit,
    );
    assert!(
        !common::text(&jobs).contains("\"big\""),
        "no job was accepted: {}",
        common::text(&jobs)
    );
}

/// The same loss in a submitted job: its runner ends, and the job with it,
/// `failed`, instead of `running 1` with no executor busy, forever.
#[test]
fn a_job_whose_activity_is_lost_on_every_attempt_ends_failed() {
    let dir = scratch("lost-every-attempt-job");
    let (_pool, agents) = pool_of_agents(&dir);
    let graph = killer_graph(&dir);
    let graph = graph.to_str().expect("UTF-8 path");
    let limit = Duration::from_secs(120);
    let submit = ["submit", graph, "--pool", "pool.json", "--json"];
    let submitted = run_within(&dir, &submit, limit);
    let answer: serde_json::Value = serde_json::from_slice(&submitted.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", common::text(&submitted)));
    let id = answer["id"].as_u64().expect("the job's id").to_string();

    let wait = ["wait", &id, "--pool", "pool.json", "--timeout", "180s"];
    let waited = run_within(&dir, &wait, Duration::from_secs(200));
    drop(agents);
    let said = common::text(&waited);
    assert_eq!(waited.status.code(), Some(1), "the job failed: {said}");
    assert!(said.contains(&format!("job {id} (graph) failed")), "{said}");
    let job = run_within(&dir, &["job", &id, "--pool", "pool.json", "--json"], limit);
    let job: serde_json::Value = serde_json::from_slice(&job.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", common::text(&job)));
    assert_eq!(job["job"]["state"], "failed", "{job:#}");
    assert_eq!(job["job"]["counts"]["running"], 0, "{job:#}");
    let killer = (job["activities"].as_array().expect("activities").iter())
        .find(|a| a["id"] == "killer")
        .unwrap_or_else(|| panic!("the killer: {job:#}"));
    assert_eq!(killer["state"], "failed", "{job:#}");
    assert_eq!(
        killer["attempts"], ATTEMPTS,
        "one lost attempt per agent: {job:#}"
    );
}
