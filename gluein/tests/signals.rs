//! SIGINT and SIGTERM, sent for real, set the stop flag and the shell
//! executor's preemption mark instead of ending the process. Both are
//! process-wide and cannot be unset, so each signal is tried in a process
//! of its own: this test binary, started again for one test.

use std::process::Command;
use std::time::{Duration, Instant};

use gluein::signals::{catch_stop_signals, stop_requested};

/// Names the signal the child run of this binary sends itself.
const SIGNAL_VAR: &str = "SIGNALS_TEST_SIGNAL";

/// Waits up to 10 s for `condition`: the flag is set on the signal thread,
/// a moment after the signal.
fn eventually(condition: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// The child's part: runs only when [`SIGNAL_VAR`] is set.
#[test]
fn signalled_child() {
    let Ok(signal) = std::env::var(SIGNAL_VAR) else {
        return;
    };
    let signal: libc::c_int = signal.parse().unwrap();
    catch_stop_signals().unwrap();
    // A second call changes nothing, as `run` inside a command that caught them.
    catch_stop_signals().unwrap();
    assert!(!stop_requested() && !executors::shell::preempted());
    // SAFETY: signalling this very process, whose handler is installed.
    assert_eq!(unsafe { libc::kill(libc::getpid(), signal) }, 0);
    assert!(eventually(stop_requested), "no stop flag");
    assert!(
        eventually(executors::shell::preempted),
        "the commands were not marked preempted"
    );
    println!("asked to stop by signal {signal}");
}

#[test]
fn sigint_and_sigterm_ask_to_stop_instead_of_ending_the_process() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        let output = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "signalled_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(SIGNAL_VAR, signal.to_string())
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            output.status.success(),
            "signal {signal}: {:?}\n{said}",
            output.status
        );
        assert!(
            said.contains(&format!("asked to stop by signal {signal}")),
            "{said}"
        );
    }
}
