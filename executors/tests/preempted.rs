//! A command killed while its process is being taken down (a cancelled
//! pilot job) is not reported as failed: it is left to run elsewhere. In
//! its own test binary, because the mark is process-wide.

use std::time::Duration;

use constellation::collect::SingleEventCollector;
use constellation::Pool;
use executors::shell::{self, Capture, ShellActivity, ShellResult, ShellSpec};

/// A shell activity for `script`, its output kept in memory (no files).
fn command(script: &str) -> ShellSpec {
    ShellSpec::script(script).capture(Capture::Memory { limit: 4096 })
}

#[test]
fn a_command_killed_by_the_signal_that_takes_its_node_down_is_not_reported() {
    let pool = Pool::builder().executors(1).start().unwrap();

    // Before: a SIGTERM is the command's own failure, and it is reported.
    let (collector, results) = SingleEventCollector::new();
    let parent = pool.submit(collector).unwrap();
    pool.submit(ShellActivity::new(command("kill -TERM $$")).reply_to(parent))
        .unwrap();
    let result: ShellResult = results.wait_one().unwrap().take().unwrap();
    assert!(!result.is_success());

    // After the mark (as an agent's SIGTERM handler sets it): no result.
    shell::mark_preempted();
    let (collector, results) = SingleEventCollector::new();
    let parent = pool.submit(collector).unwrap();
    pool.submit(ShellActivity::new(command("kill -TERM $$")).reply_to(parent))
        .unwrap();
    assert!(
        results.wait_timeout(Duration::from_secs(2)).is_err(),
        "a preempted command must not report a result"
    );
    // A command that ends by itself still reports.
    let (collector, results) = SingleEventCollector::new();
    let parent = pool.submit(collector).unwrap();
    pool.submit(ShellActivity::new(command("true")).reply_to(parent))
        .unwrap();
    let result: ShellResult = results.wait_one().unwrap().take().unwrap();
    assert!(result.is_success());
}
