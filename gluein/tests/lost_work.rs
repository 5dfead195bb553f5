//! Work the pool gives up ends its run: an activity lost with its agent on
//! every attempt the pool allows fails with that reason, and what runs
//! after it is cancelled, instead of waiting forever for a result that
//! cannot come.

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

#[test]
fn an_activity_lost_on_every_attempt_fails_and_the_run_ends() {
    let dir = scratch("lost-every-attempt");
    let _pool = start_pool(&dir);
    let agents: Vec<Guard> = (1..=ATTEMPTS + 1)
        .map(|k| spawn_agent(&dir, 1, &format!("agent{k}"), &[]))
        .collect();
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
        killer_attempts.iter().all(|a| a.outcome == LOST),
        "{killer_attempts:#?}"
    );
    assert!(
        said.contains("killer: lost: "),
        "the summary names it:\n{said}"
    );
}
