//! `kill_all_running` ends every command this process runs, whole process
//! groups included, reports each as killed, retries none, and starts no
//! command after it. In its own test binary, because the stop is
//! process-wide and cannot be undone.

mod common;

use std::time::{Duration, Instant};

use common::{
    assert_group_gone, assert_none_ran_on, failing_then_retried_in_a_minute, pid_in,
    polite_and_stubborn_scripts, retried_after_signal, scratch, stopped_outcome,
};
use constellation::collect::MultiEventCollector;
use constellation::Pool;
use executors::shell::{self, ShellActivity, ShellResult};

#[test]
fn every_running_command_is_killed_reported_once_and_nothing_starts_after() {
    let dir = scratch("all");
    let pool = Pool::builder().executors(3).start().unwrap();
    let (collector, results) = MultiEventCollector::new(3);
    let parent = pool.submit(collector).unwrap();
    // One ends at SIGTERM; the other ignores it, so only the SIGKILL after
    // the grace ends it.
    let [polite, stubborn] = polite_and_stubborn_scripts(&dir).map(|script| {
        pool.submit(ShellActivity::new(retried_after_signal(script)).reply_to(parent))
            .unwrap()
    });
    // A third failed at once and waits a minute to retry.
    let retrying = pool
        .submit(ShellActivity::new(failing_then_retried_in_a_minute(&dir)).reply_to(parent))
        .unwrap();
    let polite_pid = pid_in(&dir.join("polite"));
    let stubborn_pid = pid_in(&dir.join("stubborn"));
    // A command writes its pid as soon as it runs, which on a loaded
    // machine can be before its starter has registered it.
    let deadline = Instant::now() + Duration::from_secs(30);
    while shell::running_count() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(shell::running_count(), 2);
    let deadline = Instant::now() + Duration::from_secs(30);
    while shell::waiting_to_retry() == 0 {
        assert!(
            Instant::now() < deadline,
            "the failed command never waited to retry"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let started = Instant::now();
    let mut killed = shell::kill_all_running(Duration::from_millis(500));
    let took = started.elapsed();
    killed.sort();
    let mut expected = vec![polite, stubborn, retrying];
    expected.sort();
    assert_eq!(
        killed, expected,
        "the activities whose commands it killed, and the one waiting to retry"
    );
    assert!(
        took < Duration::from_secs(20),
        "kill_all_running took {took:?}"
    );
    assert!(shell::stopped());
    assert_eq!(shell::running_count(), 0);
    for pid in [polite_pid, stubborn_pid] {
        assert_group_gone(pid);
    }

    // Each reports its one attempt, killed or failed: no retry after the
    // stop, and no wait for one.
    let events = results
        .wait_timeout(Duration::from_secs(30))
        .expect("the killed commands and the failed one report");
    let results: Vec<ShellResult> = events.into_iter().map(|e| e.take().unwrap()).collect();
    for result in &results {
        assert_eq!(result.attempts, 1, "{result:?}");
        let want = stopped_outcome(result.activity == polite, result.activity == stubborn);
        assert_eq!(result.outcome, want, "{result:?}");
    }
    assert_eq!(shell::waiting_to_retry(), 0);
    assert_eq!(
        std::fs::read_to_string(dir.join("retrying")).unwrap(),
        "failed\n",
        "the failed command was retried after the stop"
    );
    assert_none_ran_on(&dir);

    // A command submitted after the stop never starts, and reports nothing.
    let (collector, results) = MultiEventCollector::new(1);
    let parent = pool.submit(collector).unwrap();
    pool.submit(
        ShellActivity::new(retried_after_signal(format!(
            "touch {}/late",
            dir.display()
        )))
        .reply_to(parent),
    )
    .unwrap();
    assert!(
        results.wait_timeout(Duration::from_secs(2)).is_err(),
        "a command submitted after the stop reported a result"
    );
    assert!(
        !dir.join("late").exists(),
        "a command started after the stop"
    );
    assert!(shell::kill_all_running(Duration::from_millis(10)).is_empty());
    // The pool's drop waits for its executors, all idle or suspended now.
    drop(pool);
    let _ = std::fs::remove_dir_all(&dir);
}
