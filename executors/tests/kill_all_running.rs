//! `kill_all_running` ends every command this process runs, whole process
//! groups included, reports each as killed, retries none, and starts no
//! command after it. In its own test binary, because the stop is
//! process-wide and cannot be undone.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use constellation::collect::MultiEventCollector;
use constellation::Pool;
use executors::shell::{self, Capture, RetryPolicy, ShellActivity, ShellOutcome, ShellResult};
use executors::shell::{RetryOn, ShellSpec};

/// A fresh directory for the test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kill-all-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Whether `pid` is a live process (a zombie counts as dead).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat.rsplit_once(") ").map_or("", |(_, s)| s);
        !state.starts_with('Z') && !state.starts_with('X')
    })
}

/// Live processes whose process group is `group`.
fn group_members(group: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                let Some((_, rest)) = stat.rsplit_once(") ") else {
                    return false;
                };
                // state ppid pgrp ...
                let fields: Vec<&str> = rest.split_whitespace().collect();
                fields.len() > 2 && fields[2] == group.to_string() && !fields[0].starts_with('Z')
            })
        })
        .collect()
}

/// The pid a command wrote to `path`, once it has (at most 30 s).
fn pid_in(path: &Path) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "{} was never written",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A command that may be retried after a signal, its output in memory.
fn command(script: String) -> ShellSpec {
    ShellSpec::script(script)
        .capture(Capture::Memory { limit: 4096 })
        .retry(RetryPolicy {
            max_attempts: 3,
            retry_on: RetryOn::TimeoutOrSignal,
            ..RetryPolicy::default()
        })
}

#[test]
fn every_running_command_is_killed_reported_once_and_nothing_starts_after() {
    let dir = scratch("all");
    let pool = Pool::builder().executors(3).start().unwrap();
    let (collector, results) = MultiEventCollector::new(3);
    let parent = pool.submit(collector).unwrap();
    // One ends at SIGTERM; the other ignores it (and so does its `sleep`,
    // which inherits the disposition), so only the SIGKILL after the grace
    // ends it.
    let polite = pool
        .submit(
            ShellActivity::new(command(format!(
                "echo $$ > {0}/polite; sleep 30; echo again >> {0}/polite",
                dir.display()
            )))
            .reply_to(parent),
        )
        .unwrap();
    let stubborn = pool
        .submit(
            ShellActivity::new(command(format!(
                "trap '' TERM; echo $$ > {0}/stubborn; sleep 30; echo again >> {0}/stubborn",
                dir.display()
            )))
            .reply_to(parent),
        )
        .unwrap();
    // A third failed at once and waits a minute to retry.
    let retrying = pool
        .submit(
            ShellActivity::new(
                ShellSpec::script(format!("echo failed >> {}/retrying; exit 3", dir.display()))
                    .capture(Capture::Memory { limit: 4096 })
                    .retry(RetryPolicy {
                        max_attempts: 3,
                        retry_on: RetryOn::AnyFailure,
                        delay: Duration::from_secs(60),
                        ..RetryPolicy::default()
                    }),
            )
            .reply_to(parent),
        )
        .unwrap();
    let polite_pid = pid_in(&dir.join("polite"));
    let stubborn_pid = pid_in(&dir.join("stubborn"));
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
        assert!(!alive(pid), "command {pid} is still alive");
        assert!(
            group_members(pid).is_empty(),
            "processes of group {pid} are still alive: {:?}",
            group_members(pid)
        );
    }

    // Each reports its one attempt, killed or failed: no retry after the
    // stop, and no wait for one.
    let events = results
        .wait_timeout(Duration::from_secs(30))
        .expect("the killed commands and the failed one report");
    let results: Vec<ShellResult> = events.into_iter().map(|e| e.take().unwrap()).collect();
    for result in &results {
        assert_eq!(result.attempts, 1, "{result:?}");
        let want = if result.activity == polite {
            ShellOutcome::Signalled {
                signal: libc::SIGTERM,
            }
        } else if result.activity == stubborn {
            ShellOutcome::Signalled {
                signal: libc::SIGKILL,
            }
        } else {
            ShellOutcome::Exited { code: 3 }
        };
        assert_eq!(result.outcome, want, "{result:?}");
    }
    assert_eq!(shell::waiting_to_retry(), 0);
    assert_eq!(
        std::fs::read_to_string(dir.join("retrying")).unwrap(),
        "failed\n",
        "the failed command was retried after the stop"
    );
    for name in ["polite", "stubborn"] {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        assert!(!text.contains("again"), "{name} ran on: {text}");
    }

    // A command submitted after the stop never starts, and reports nothing.
    let (collector, results) = MultiEventCollector::new(1);
    let parent = pool.submit(collector).unwrap();
    pool.submit(
        ShellActivity::new(command(format!("touch {}/late", dir.display()))).reply_to(parent),
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
