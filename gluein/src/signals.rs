//! SIGINT and SIGTERM as a flag, for commands that serve until stopped
//! (`pool start`, `agent`) and must leave the pool cleanly when told to.

use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_signal: libc::c_int) {
    // Only atomic stores: nothing else is safe in a signal handler.
    STOP.store(true, Ordering::SeqCst);
    // A batch system that cancels a job signals its commands too; they
    // are this node's loss, to run again elsewhere, not failures.
    executors::shell::mark_preempted();
}

/// Makes SIGINT and SIGTERM set the flag [`stop_requested`] reads, instead
/// of ending the process, and mark the process as taken down for the
/// shell executor ([`executors::shell::mark_preempted`]).
pub fn catch_stop_signals() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is
    // async-signal-safe; `signal` is called with valid signal numbers.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
}

/// Whether SIGINT or SIGTERM arrived since [`catch_stop_signals`].
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}
