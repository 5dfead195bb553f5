//! A command killed while its process is being taken down (a cancelled
//! pilot job) is not reported as failed: it is left to run elsewhere. In
//! its own test binary, because the mark is process-wide.

use std::time::Duration;

use constellation::collect::SingleEventCollector;
use constellation::Pool;
use executors::shell::{self, ShellActivity, ShellResult, ShellSpec};

#[test]
fn a_command_killed_by_the_signal_that_takes_its_node_down_is_not_reported() {
    let pool = Pool::builder().executors(1).start().unwrap();

    // Before: a SIGTERM is the command's own failure, and it is reported.
    let (collector, results) = SingleEventCollector::new();
    let parent = pool.submit(collector).unwrap();
    pool.submit(ShellActivity::new(ShellSpec::script("kill -TERM $$")).reply_to(parent))
        .unwrap();
    let result: ShellResult = results.wait_one().unwrap().take().unwrap();
    assert!(!result.is_success());

    // After the mark (as an agent's SIGTERM handler sets it): no result.
    shell::mark_preempted();
    let (collector, results) = SingleEventCollector::new();
    let parent = pool.submit(collector).unwrap();
    pool.submit(ShellActivity::new(ShellSpec::script("kill -TERM $$")).reply_to(parent))
        .unwrap();
    assert!(
        results.wait_timeout(Duration::from_secs(2)).is_err(),
        "a preempted command must not report a result"
    );
    // A command that ends by itself still reports.
    let (collector, results) = SingleEventCollector::new();
    let parent = pool.submit(collector).unwrap();
    pool.submit(ShellActivity::new(ShellSpec::script("true")).reply_to(parent))
        .unwrap();
    let result: ShellResult = results.wait_one().unwrap().take().unwrap();
    assert!(result.is_success());
}
