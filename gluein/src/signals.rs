//! SIGINT and SIGTERM as a flag, for commands that serve until stopped
//! (`pool start`, `agent`) or end with a summary (`run`), and must leave
//! cleanly when told to.
//!
//! The signals are caught through `signal-hook`, which installs the handler
//! and turns each signal into an item of an iterator on a thread of its
//! own, where ordinary code may run: no hand-written signal handler.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

static STOP: AtomicBool = AtomicBool::new(false);

/// Makes SIGINT and SIGTERM set the flag [`stop_requested`] reads, instead
/// of ending the process, and mark the process as taken down for the
/// shell executor ([`executors::shell::mark_preempted`]). Calling it again
/// changes nothing. Fails only if the handlers or their thread cannot be set up.
pub fn catch_stop_signals() -> io::Result<()> {
    static CAUGHT: Mutex<bool> = Mutex::new(false);
    let mut caught = CAUGHT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if *caught {
        return Ok(());
    }
    let mut signals = Signals::new([SIGINT, SIGTERM])?;
    std::thread::Builder::new()
        .name("stop-signals".to_string())
        .spawn(move || {
            for _ in signals.forever() {
                // A batch system that cancels a job signals its commands
                // too; they are this node's loss, to run again elsewhere,
                // not failures. Marked first, so that a command the same
                // signal killed is never counted as failed meanwhile.
                executors::shell::mark_preempted();
                STOP.store(true, Ordering::SeqCst);
            }
        })?;
    *caught = true;
    Ok(())
}

/// Whether SIGINT or SIGTERM arrived since [`catch_stop_signals`].
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}
