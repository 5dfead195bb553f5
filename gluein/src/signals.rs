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

/// What a stop signal means for the shell commands this process runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnStop {
    /// The process is taken down around its commands, as when a batch
    /// system cancels a pilot job and signals every process of it: a
    /// command the signal kills is this node's loss, to run again
    /// elsewhere, not a failure ([`executors::shell::mark_preempted`]).
    /// For agents and pool nodes.
    Preempted,
    /// Someone stops this process (Ctrl-C on `run`): no shell command
    /// starts from the signal on ([`executors::shell::stop_starting`]),
    /// and the process kills the ones that run
    /// ([`executors::shell::kill_all_running`]) and records them as killed.
    Interrupt,
}

/// [`catch_stop_signals_as`] with [`OnStop::Preempted`].
pub fn catch_stop_signals() -> io::Result<()> {
    catch_stop_signals_as(OnStop::Preempted)
}

/// Makes SIGINT and SIGTERM set the flag [`stop_requested`] reads, instead
/// of ending the process, and tell the shell executor what the stop means
/// for its commands (`on_stop`). The first call decides; calling it again
/// changes nothing. Fails only if the handlers or their thread cannot be
/// set up.
pub fn catch_stop_signals_as(on_stop: OnStop) -> io::Result<()> {
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
                // Before the flag, so that whoever sees the flag also sees
                // the commands' fate settled.
                match on_stop {
                    // A batch system that cancels a job signals its
                    // commands too; marked first, so that a command the
                    // same signal killed is never counted as failed
                    // meanwhile.
                    OnStop::Preempted => executors::shell::mark_preempted(),
                    // At once, not when the main loop gets round to it:
                    // work released meanwhile must not start.
                    OnStop::Interrupt => executors::shell::stop_starting(),
                }
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
