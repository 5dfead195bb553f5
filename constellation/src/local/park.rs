//! Waking idle executor threads.
//!
//! An idle executor spins briefly before it parks: a fine-grained activity
//! often arrives within microseconds, and a futex wake-up costs more than
//! that. The scheduler hands an idle executor at most one call per idle
//! period, so the waker side is one atomic swap.

use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::Thread;
use std::time::{Duration, Instant};

const EMPTY: u32 = 0;
const NOTIFIED: u32 = 1;
const PARKED: u32 = 2;

/// How long an idle executor spins before parking.
const SPIN_FOR: Duration = Duration::from_micros(50);

/// Keeps a value on a cache line of its own (128 bytes covers the adjacent-
/// line prefetcher), so threads writing neighbouring data do not keep
/// stealing the line from a thread that spins on this value.
#[derive(Default)]
#[repr(align(128))]
pub(crate) struct CachePadded<T>(pub(crate) T);

impl<T> std::ops::Deref for CachePadded<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

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

    /// Spins until notified, until `other_work` says there is something
    /// else to look at, or until the spin time is used up. Only reads shared
    /// memory while it spins.
    pub(crate) fn spin(&self, other_work: impl Fn() -> bool) -> Spin {
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
                return Spin::Notified;
            }
            if other_work() {
                return Spin::OtherWork;
            }
            spins += 1;
            if spins.is_multiple_of(64) && Instant::now() >= spin_until {
                return Spin::TimedOut;
            }
            std::hint::spin_loop();
        }
    }

    /// Blocks the owning thread until [`notify`](Self::notify) is called
    /// (returns at once if it already was).
    pub(crate) fn park(&self) {
        if self
            .state
            .compare_exchange(EMPTY, PARKED, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // Notified before we got here.
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

/// How [`Parker::spin`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spin {
    /// [`Parker::notify`] was called.
    Notified,
    /// The caller's check found something else to do.
    OtherWork,
    /// Nothing happened; the caller should announce itself and park.
    TimedOut,
}
