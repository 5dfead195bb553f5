//! Helpers for the tests that run real shell commands and check that
//! cancelling or stopping them leaves no process behind: a scratch
//! directory, the pids the commands write, and /proc scans for what still
//! lives.

// Each test file uses its own subset of these helpers.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use executors::shell::{Capture, RetryOn, RetryPolicy, ShellOutcome, ShellSpec};

/// A fresh directory `name` for the test, under the system's temp
/// directory and named after the test binary and this process, so that
/// test binaries running side by side never share one.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "{}-{}-{name}",
        env!("CARGO_CRATE_NAME"),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Whether `pid` is a live process (a zombie counts as dead).
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat.rsplit_once(") ").map_or("", |(_, s)| s);
        !state.starts_with('Z') && !state.starts_with('X')
    })
}

/// Live processes whose process group is `group`. An unreadable /proc
/// fails the test rather than reading as "none left".
pub fn group_members(group: i32) -> Vec<i32> {
    let entries = std::fs::read_dir("/proc").expect("/proc");
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

/// Asserts that the command whose shell was `pid` (its process group's
/// leader) is dead, and every process of its group with it.
pub fn assert_group_gone(pid: i32) {
    assert!(!alive(pid), "command {pid} is still alive");
    assert!(
        group_members(pid).is_empty(),
        "processes of group {pid} are still alive: {:?}",
        group_members(pid)
    );
}

/// The pid a command wrote to `path`, once it has (at most 30 s).
pub fn pid_in(path: &Path) -> i32 {
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
pub fn retried_after_signal(script: String) -> ShellSpec {
    ShellSpec::script(script)
        .capture(Capture::Memory { limit: 4096 })
        .retry(RetryPolicy {
            max_attempts: 3,
            retry_on: RetryOn::TimeoutOrSignal,
            ..RetryPolicy::default()
        })
}

/// A command that appends a line to `dir/retrying` and fails with exit
/// status 3, to be retried on any failure after a minute: long enough that
/// it is still waiting to retry when the test stops it.
pub fn failing_then_retried_in_a_minute(dir: &Path) -> ShellSpec {
    ShellSpec::script(format!("echo failed >> {}/retrying; exit 3", dir.display()))
        .capture(Capture::Memory { limit: 4096 })
        .retry(RetryPolicy {
            max_attempts: 3,
            retry_on: RetryOn::AnyFailure,
            delay: Duration::from_secs(60),
            ..RetryPolicy::default()
        })
}

/// The scripts of a command that ends at SIGTERM and of one that ignores
/// it (and so does its `sleep`, which inherits the disposition), so that
/// only a SIGKILL ends it. Each writes its shell's pid to `dir/polite` or
/// `dir/stubborn` and, should it outlive the signal, "again" after it.
pub fn polite_and_stubborn_scripts(dir: &Path) -> [String; 2] {
    [
        format!(
            "echo $$ > {0}/polite; sleep 30; echo again >> {0}/polite",
            dir.display()
        ),
        format!(
            "trap '' TERM; echo $$ > {0}/stubborn; sleep 30; echo again >> {0}/stubborn",
            dir.display()
        ),
    ]
}

/// How a command of [`polite_and_stubborn_scripts`] or
/// [`failing_then_retried_in_a_minute`] ended when stopped: the polite one
/// by SIGTERM, the stubborn one by SIGKILL after the grace, the failing one
/// with its own exit status.
pub fn stopped_outcome(is_polite: bool, is_stubborn: bool) -> ShellOutcome {
    if is_polite {
        ShellOutcome::Signalled {
            signal: libc::SIGTERM,
        }
    } else if is_stubborn {
        ShellOutcome::Signalled {
            signal: libc::SIGKILL,
        }
    } else {
        ShellOutcome::Exited { code: 3 }
    }
}

/// Asserts that neither `dir/polite` nor `dir/stubborn` ran on after its
/// signal.
pub fn assert_none_ran_on(dir: &Path) {
    for name in ["polite", "stubborn"] {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        assert!(!text.contains("again"), "{name} ran on: {text}");
    }
}
