//! Collectors: activities that let a main program wait for results.
//!
//! Submit a collector, give its id to the activities that produce results,
//! then wait on its [`Results`] handle. A collector never leaves its node:
//! the handle is shared memory.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use serde::{Deserialize, Serialize};

use crate::activity::{Activity, ActivityCx, Step};
use crate::context::ContextList;
use crate::event::Event;

#[derive(Default)]
struct Mailbox {
    state: Mutex<MailboxState>,
    changed: Condvar,
}

#[derive(Default)]
struct MailboxState {
    events: Vec<Event>,
    /// Events already handed out by [`Results::next_batch`].
    taken: usize,
    /// A [`Results::next_batch`] is waiting for any event.
    batch_reader: bool,
    complete: bool,
    /// The collector was dropped before it had all its events.
    abandoned: bool,
}

/// Why waiting on a collector ended without all its events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CollectError {
    /// The collector was dropped (its pool shut down) before enough events arrived.
    #[error("the collector was shut down after {received} of {expected} events")]
    Abandoned {
        /// Events that did arrive.
        received: usize,
        /// Events the collector waited for.
        expected: usize,
    },
    /// The deadline passed first.
    #[error("timed out after {received} of {expected} events")]
    TimedOut {
        /// Events that did arrive.
        received: usize,
        /// Events the collector waited for.
        expected: usize,
    },
}

/// The main program's end of a collector.
pub struct Results {
    mailbox: Arc<Mailbox>,
    expected: usize,
}

impl Results {
    /// Blocks until all expected events arrived; returns them in arrival order.
    pub fn wait(&self) -> Result<Vec<Event>, CollectError> {
        self.wait_until(None)
    }

    /// Like [`wait`](Self::wait), but gives up after `timeout`.
    pub fn wait_timeout(&self, timeout: Duration) -> Result<Vec<Event>, CollectError> {
        self.wait_until(Some(Instant::now() + timeout))
    }

    /// Blocks until the one expected event arrived.
    pub fn wait_one(&self) -> Result<Event, CollectError> {
        Ok(self.wait()?.remove(0))
    }

    /// Events that arrived since the last batch, as soon as there are any,
    /// for a main program that acts on results while the run goes on.
    /// Waits at most `timeout` and may return an empty batch; `None` means
    /// every expected event has been handed out. A later [`wait`](Self::wait)
    /// returns only the events no batch took.
    pub fn next_batch(&self, timeout: Duration) -> Result<Option<Vec<Event>>, CollectError> {
        let deadline = Instant::now() + timeout;
        let mut state = self.mailbox.state.lock();
        loop {
            if !state.events.is_empty() {
                let batch = std::mem::take(&mut state.events);
                state.taken += batch.len();
                return Ok(Some(batch));
            }
            if state.complete {
                return Ok(None);
            }
            if state.abandoned {
                return Err(CollectError::Abandoned {
                    received: state.taken,
                    expected: self.expected,
                });
            }
            state.batch_reader = true;
            let timed_out = self
                .mailbox
                .changed
                .wait_until(&mut state, deadline)
                .timed_out();
            state.batch_reader = false;
            if timed_out {
                return Ok(Some(Vec::new()));
            }
        }
    }

    fn wait_until(&self, deadline: Option<Instant>) -> Result<Vec<Event>, CollectError> {
        let mut state = self.mailbox.state.lock();
        loop {
            if state.complete {
                return Ok(std::mem::take(&mut state.events));
            }
            let received = state.taken + state.events.len();
            let expected = self.expected;
            if state.abandoned {
                return Err(CollectError::Abandoned { received, expected });
            }
            match deadline {
                None => self.mailbox.changed.wait(&mut state),
                Some(deadline) => {
                    if self
                        .mailbox
                        .changed
                        .wait_until(&mut state, deadline)
                        .timed_out()
                    {
                        return Err(CollectError::TimedOut { received, expected });
                    }
                }
            }
        }
    }
}

/// An activity that waits for `expected` events, hands them to a
/// [`Results`] handle and finishes.
#[derive(Serialize, Deserialize)]
pub struct MultiEventCollector {
    expected: usize,
    /// Where it runs; `anywhere` unless [`on`](Self::on) says otherwise.
    #[serde(default)]
    context: ContextList,
    #[serde(skip)]
    mailbox: Arc<Mailbox>,
}

impl MultiEventCollector {
    /// A collector for `expected` events and the handle to wait on.
    pub fn new(expected: usize) -> (Self, Results) {
        let mailbox = Arc::new(Mailbox::default());
        let results = Results {
            mailbox: mailbox.clone(),
            expected,
        };
        (
            MultiEventCollector {
                expected,
                context: ContextList::anywhere(),
                mailbox,
            },
            results,
        )
    }

    /// This collector, to run only on executors offering `context`. A
    /// collector handles each event on the executor it started on, so one
    /// that must answer promptly belongs on an executor that never runs
    /// long work.
    pub fn on(mut self, context: ContextList) -> Self {
        self.context = context;
        self
    }

    /// Adds `event`, if any, and finishes once all expected events are in.
    fn step(&self, event: Option<Event>) -> Step {
        let mut state = self.mailbox.state.lock();
        let arrived = event.is_some();
        state.events.extend(event);
        if state.taken + state.events.len() >= self.expected {
            state.complete = true;
            self.mailbox.changed.notify_all();
            Step::Finish
        } else {
            // A `wait` sleeps until the last event; only a batch reader
            // wants to hear of each one.
            if arrived && state.batch_reader {
                self.mailbox.changed.notify_all();
            }
            Step::Suspend
        }
    }
}

#[typetag::serde]
impl Activity for MultiEventCollector {
    fn context(&self) -> ContextList {
        self.context.clone()
    }

    fn may_be_stolen(&self) -> bool {
        false
    }

    fn initialize(&mut self, _cx: &mut ActivityCx<'_>) -> Step {
        self.step(None)
    }

    fn process(&mut self, _cx: &mut ActivityCx<'_>, event: Event) -> Step {
        self.step(Some(event))
    }
}

impl Drop for MultiEventCollector {
    fn drop(&mut self) {
        let mut state = self.mailbox.state.lock();
        if !state.complete {
            state.abandoned = true;
            self.mailbox.changed.notify_all();
        }
    }
}

/// A collector for exactly one event, e.g. the result of a whole computation.
pub struct SingleEventCollector;

impl SingleEventCollector {
    /// The collector activity and the handle whose
    /// [`wait_one`](Results::wait_one) returns the event.
    #[allow(clippy::new_ret_no_self)]
    pub fn new() -> (MultiEventCollector, Results) {
        MultiEventCollector::new(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Pool;

    #[test]
    fn batches_hand_out_each_event_once_and_then_say_done() {
        let pool = Pool::builder().executors(2).start().unwrap();
        let (collector, results) = MultiEventCollector::new(3);
        let id = pool.submit(collector).unwrap();
        assert_eq!(
            results
                .next_batch(Duration::from_millis(1))
                .unwrap()
                .unwrap()
                .len(),
            0,
            "nothing sent yet: an empty batch after the timeout"
        );
        pool.send(id, 1u32).unwrap();
        let first = results
            .next_batch(Duration::from_secs(10))
            .unwrap()
            .unwrap();
        assert_eq!(first.len(), 1);
        pool.send(id, 2u32).unwrap();
        pool.send(id, 3u32).unwrap();
        let mut seen = first.len();
        while let Some(batch) = results.next_batch(Duration::from_secs(10)).unwrap() {
            seen += batch.len();
        }
        assert_eq!(seen, 3);
        assert!(
            results.wait().unwrap().is_empty(),
            "every event was handed out"
        );
        pool.done().unwrap();
    }
}
