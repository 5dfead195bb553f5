//! `cancel_origin` ends the shell work of one origin node and leaves the
//! rest alone: its running commands die with their process groups (SIGTERM,
//! then SIGKILL after the grace) and report their attempt marked
//! cancelled, with no retry; one waiting to retry reports at once; one not
//! started yet never starts, sends nothing, and still finishes, so nothing
//! of the cancelled work stays behind. Another origin's command runs on.
//!
//! Two embedded pools stand for two runners: each issues activity ids
//! that name its own node.

mod common;

use std::time::{Duration, Instant};

use common::{
    assert_group_gone, assert_none_ran_on, failing_then_retried_in_a_minute, pid_in,
    polite_and_stubborn_scripts, retried_after_signal, scratch, stopped_outcome,
};
use constellation::collect::MultiEventCollector;
use constellation::{NodeId, Pool};
use executors::shell::{self, ShellActivity, ShellResult};

/// Kills the groups of the test's commands if the test fails before
/// `cancel_origin` did.
struct KillGroups(Vec<i32>);

impl Drop for KillGroups {
    fn drop(&mut self) {
        for &group in &self.0 {
            // SAFETY: signalling a process group this test's command made.
            unsafe { libc::kill(-group, libc::SIGKILL) };
        }
    }
}

#[test]
fn only_the_cancelled_origins_commands_die_report_once_and_nothing_of_it_starts_after() {
    let dir = scratch("two-origins");
    let cancelled = Pool::builder().executors(3).start().unwrap();
    let spared = Pool::builder().executors(1).start().unwrap();

    let (collector, results) = MultiEventCollector::new(3);
    let parent = cancelled.submit(collector).unwrap();
    let origin = parent.origin();
    // One ends at SIGTERM; the other ignores it, so only the SIGKILL after
    // the grace ends it.
    let [polite, stubborn] = polite_and_stubborn_scripts(&dir).map(|script| {
        cancelled
            .submit(ShellActivity::new(retried_after_signal(script)).reply_to(parent))
            .unwrap()
    });
    // A third failed at once and waits a minute to retry.
    let retrying = cancelled
        .submit(ShellActivity::new(failing_then_retried_in_a_minute(&dir)).reply_to(parent))
        .unwrap();
    assert!([polite, stubborn, retrying]
        .iter()
        .all(|a| a.origin() == origin));

    // The other origin's command runs through the cancel.
    let (other_collector, other_results) = MultiEventCollector::new(1);
    let other_parent = spared.submit(other_collector).unwrap();
    assert_ne!(other_parent.origin(), origin);
    spared
        .submit(
            ShellActivity::new(retried_after_signal(format!(
                "echo $$ > {0}/spared; sleep 3; echo done >> {0}/spared-done",
                dir.display()
            )))
            .reply_to(other_parent),
        )
        .unwrap();

    let polite_pid = pid_in(&dir.join("polite"));
    let stubborn_pid = pid_in(&dir.join("stubborn"));
    let spared_pid = pid_in(&dir.join("spared"));
    let _cleanup = KillGroups(vec![polite_pid, stubborn_pid, spared_pid]);
    let deadline = Instant::now() + Duration::from_secs(30);
    // Three of the origin's activities are held while the failing command
    // still runs, before it has failed: wait for its retry to be pending
    // too (it is the only activity in this process that retries).
    while shell::running_from(origin) < 3 || shell::waiting_to_retry() < 1 {
        assert!(
            Instant::now() < deadline,
            "the origin's work never held 2 commands and 1 retry: {} held, {} waiting to retry",
            shell::running_from(origin),
            shell::waiting_to_retry()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!shell::origin_cancelled(origin));

    let done = shell::cancel_origin(origin, Duration::from_millis(500));
    assert_eq!(
        done,
        shell::Cancelled {
            running: 2,
            not_started: 1
        },
        "two commands killed, one retry dropped"
    );
    assert!(shell::origin_cancelled(origin));
    assert!(!shell::origin_cancelled(other_parent.origin()));

    // Each reports its one attempt, killed or failed, marked cancelled.
    let events = results
        .wait_timeout(Duration::from_secs(30))
        .expect("the killed commands and the failed one report");
    let results: Vec<ShellResult> = events.into_iter().map(|e| e.take().unwrap()).collect();
    assert_eq!(results.len(), 3);
    for result in &results {
        assert_eq!(result.attempts, 1, "retried after the cancel: {result:?}");
        let want = stopped_outcome(result.activity == polite, result.activity == stubborn);
        assert_eq!(result.outcome, want, "{result:?}");
        let why = result.cancelled.as_deref().unwrap_or_else(|| {
            panic!("a result of the cancelled origin is not marked cancelled: {result:?}")
        });
        assert!(why.contains("cancelled"), "{why}");
        assert!(
            result
                .clone()
                .check()
                .unwrap_err()
                .to_string()
                .contains(why),
            "a failure's message says it was cancelled"
        );
    }
    for pid in [polite_pid, stubborn_pid] {
        assert_group_gone(pid);
    }
    assert_eq!(shell::running_from(origin), 0);
    assert_eq!(
        std::fs::read_to_string(dir.join("retrying")).unwrap(),
        "failed\n",
        "the failed command was retried after the cancel"
    );
    assert_none_ran_on(&dir);

    // Work of the cancelled origin that comes later never starts and sends
    // nothing, yet finishes: the pool ends with nothing left waiting.
    cancelled
        .submit(ShellActivity::new(retried_after_signal(format!(
            "touch {}/late",
            dir.display()
        ))))
        .unwrap();
    let summary = cancelled
        .done()
        .expect("the pool of the cancelled origin ends with nothing suspended");
    assert_eq!(
        summary.counts.finished, 5,
        "the collector, three reporting activities and the late one finished: {summary:?}"
    );
    assert!(
        !dir.join("late").exists(),
        "a command of the cancelled origin started after the cancel"
    );

    // The other origin's command was left alone and succeeded.
    let other: ShellResult = other_results
        .wait_timeout(Duration::from_secs(30))
        .expect("the other origin's command reports")
        .remove(0)
        .take()
        .unwrap();
    assert!(other.is_success(), "{other:?}");
    assert_eq!(other.cancelled, None);
    assert!(dir.join("spared-done").exists());
    spared.done().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn origins_read_back_what_they_print_and_bad_text_is_an_error() {
    let node = NodeId::random();
    let text = shell::origin_text(node);
    assert_eq!(shell::parse_origin(&text).unwrap(), node);
    assert_eq!(shell::parse_origin(&text.replace('-', "")).unwrap(), node);
    for bad in [
        "",
        "3f2a9c1e",
        "not a node id at all, not at all!",
        &text[1..],
    ] {
        let error = shell::parse_origin(bad).unwrap_err();
        assert!(error.contains("is not a node id"), "{bad:?}: {error}");
    }
}
