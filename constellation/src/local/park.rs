//! Waking idle executor threads.
//!
//! An idle executor spins briefly before it parks: a fine-grained activity
//! often arrives within microseconds, and a futex wake-up costs more than
//! that. The scheduler asks for at most one wake per idle period, so the
//! waker side is one atomic swap.

use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::Thread;
use std::time::{Duration, Instant};

const EMPTY: u32 = 0;
const NOTIFIED: u32 = 1;
const PARKED: u32 = 2;

/// How long an idle executor spins before parking.
const SPIN_FOR: Duration = Duration::from_micros(50);

/// One executor thread's wake-up flag.
pub(crate) struct Parker {
    state: AtomicU32,
    thread: Thread,
}

impl Parker {
    pub(crate) fn new(thread: Thread) -> Self {
        Parker {
            state: AtomicU32::new(EMPTY),
            thread,
        }
    }

    /// Wakes the thread, or makes its next [`wait`](Self::wait) return at once.
    pub(crate) fn notify(&self) {
        if self.state.swap(NOTIFIED, Ordering::AcqRel) == PARKED {
            self.thread.unpark();
        }
    }

    /// Blocks the owning thread until [`notify`](Self::notify) is called.
    pub(crate) fn wait(&self) {
        let spin_until = Instant::now() + SPIN_FOR;
        let mut spins = 0u32;
        loop {
            // Read before writing: a spinning compare-exchange would pull the
            // cache line away from the notifier on every turn.
            if self.state.load(Ordering::Acquire) == NOTIFIED
                && self
                    .state
                    .compare_exchange(NOTIFIED, EMPTY, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                return;
            }
            spins += 1;
            if spins.is_multiple_of(64) && Instant::now() >= spin_until {
                break;
            }
            std::hint::spin_loop();
        }
        if self
            .state
            .compare_exchange(EMPTY, PARKED, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // Notified between the last spin and now.
            self.state.store(EMPTY, Ordering::Release);
            return;
        }
        loop {
            std::thread::park();
            if self
                .state
                .compare_exchange(NOTIFIED, EMPTY, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return;
            }
        }
    }
}
