//! `--resume` of a 100,000-activity run killed part-way, with real
//! processes: the resumed run skips every activity the killed run
//! journaled as done, and runs none of them again.
//!
//! Neither run is waited for to the end (100,000 commands would take
//! minutes on a loaded 2-core machine): the first is killed with SIGKILL
//! once some thousands are done, the second is stopped with SIGINT once it
//! has done some work of its own. What the test checks is the plan, which
//! covers all 100,000 activities either way.

mod common;

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use journal::{ActivityState, Journal};

const ACTIVITIES: usize = 100_000;

/// How many activities run `run` of the journal at `path` has journaled
/// as done; 0 while the journal or the run does not exist yet.
fn done_in_run(path: &Path, run: i64) -> u64 {
    let Ok(journal) = Journal::open_read_only(path) else {
        return 0;
    };
    (journal.state_counts().unwrap_or_default().into_iter())
        .filter(|c| c.state == ActivityState::Done && c.run == run)
        .map(|c| c.count)
        .sum()
}

/// Waits until `condition` holds, or panics after `limit` naming `what`.
fn wait_for(what: &str, limit: Duration, mut condition: impl FnMut() -> bool) {
    let start = Instant::now();
    while !condition() {
        assert!(
            start.elapsed() < limit,
            "{what}: not reached after {} s",
            limit.as_secs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_resumed_run_of_100k_activities_skips_what_the_killed_run_finished() {
    let dir = common::scratch("resume-100k");
    std::fs::write(
        dir.join("big.toml"),
        format!(
            "[[activity]]\nid = \"t-{{n}}\"\nfor = {{ n = \"1..={ACTIVITIES}\" }}\ncommand = \"true\"\n"
        ),
    )
    .unwrap();
    let journal = dir.join("run/journal.db");
    let journal_arg = journal.to_str().unwrap();

    let mut first = common::spawn(
        &dir,
        &[
            "run",
            "big.toml",
            "-n",
            "2",
            "--journal",
            journal_arg,
            "--progress",
            "none",
        ],
        "first.log",
    );
    // Limits are generous: the test must pass with both cores busy.
    wait_for(
        "2,000 activities done by the first run",
        Duration::from_secs(600),
        || done_in_run(&journal, 1) >= 2_000,
    );
    first.0.kill().unwrap();
    first.0.wait().unwrap();

    let reader = Journal::open_read_only(&journal).unwrap();
    let mut done_before = HashSet::new();
    reader
        .for_each_done(|id, _| {
            done_before.insert(id.to_string());
        })
        .unwrap();
    drop(reader);
    assert!(done_before.len() >= 2_000, "{} done", done_before.len());
    assert!(
        done_before.len() < ACTIVITIES,
        "the first run was not stopped part-way"
    );

    let mut second = common::spawn(
        &dir,
        &[
            "run",
            "big.toml",
            "-n",
            "2",
            "--resume",
            journal_arg,
            "--progress",
            "none",
        ],
        "second.log",
    );
    wait_for(
        "500 activities done by the resumed run",
        Duration::from_secs(600),
        || done_in_run(&journal, 2) >= 500,
    );
    // Ctrl-C: the run ends with its summary and journals `interrupted`.
    assert_eq!(unsafe { libc::kill(second.0.id() as i32, libc::SIGINT) }, 0);
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = second.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the resumed run did not stop after SIGINT"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let log = std::fs::read_to_string(dir.join("second.log")).unwrap();
    eprintln!("--- second run:\n{log}");
    assert_eq!(status.code(), Some(130), "{log}");
    assert!(
        log.contains(&format!(
            "{ACTIVITIES} activities ({} done before, skipped)",
            done_before.len()
        )),
        "the resumed run does not say it skips the {} done before:\n{log}",
        done_before.len()
    );

    let reader = Journal::open_read_only(&journal).unwrap();
    let runs = reader.runs().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[1].status, "interrupted");
    let attempts = reader.attempts(Some(2)).unwrap();
    assert!(
        attempts.len() >= 500,
        "{} attempts in run 2",
        attempts.len()
    );
    let repeated: Vec<&str> = (attempts.iter())
        .map(|a| a.activity.as_str())
        .filter(|id| done_before.contains(*id))
        .take(5)
        .collect();
    assert!(
        repeated.is_empty(),
        "the resumed run ran again activities done before: {repeated:?}"
    );
    // What was done stays done, and says which run did it.
    let mut still_done = 0;
    for activity in reader.activities().unwrap() {
        if done_before.contains(&activity.id) {
            assert_eq!(activity.state, ActivityState::Done, "{}", activity.id);
            assert_eq!(activity.run, 1, "{}", activity.id);
            still_done += 1;
        }
    }
    assert_eq!(still_done, done_before.len());
}
