//! The run journal: an embedded SQLite database that records every run of
//! an activity graph — the files the graph was read from, each activity's
//! state, every attempt with where and when it ran, and the executors the
//! run had.
//!
//! It stays compact at a million activities (about 120 bytes each, one
//! attempt apiece): names that repeat are stored once and referred to by
//! number, and a caller refers to activities by the numbers
//! [`Journal::declare`] returns. Reads join the names back in.
//!
//! Resume reads it to skip work that is done, and reports read it to draw
//! utilization. It needs no server: it is one file, and users can query it
//! with `sqlite3` directly; [`SCHEMA`] documents every table and column.
//!
//! Writes are transactions of their own, so a runner killed at any moment
//! leaves a consistent database: what was recorded stays recorded.
//!
//! One process writes a journal at a time: [`Journal::create`] and
//! [`Journal::open`] hold a lock on a file beside it (`journal.db.lock`)
//! that the operating system releases when the process ends, however it
//! ends; [`Journal::open_read_only`] takes none, so reports read a journal
//! in use, and [`Journal::writer`] says who holds it.
//!
//! The code is split by concern: `open` creates and opens a journal and
//! checks its version, `lock` keeps to one writer, `write` records runs, activities and attempts,
//! `read` answers resumes and reports, `rows` holds the records going in
//! and out, and `error` says what went wrong.

#![warn(unreachable_pub)]

mod error;
mod lock;
mod open;
mod read;
mod rows;
mod write;

pub use error::JournalError;
pub use lock::{lock_path, Writer};
pub use open::{Journal, SCHEMA, SCHEMA_VERSION};
pub use rows::{
    unix_seconds, ActivityDecl, ActivityRow, ActivityState, ActivityUpdate, AttemptFacts,
    AttemptRow, ExecutorRow, ExecutorSlot, KindRow, NewAttempt, NewRun, ReExecutions, RunRow,
    RunStatus, StateCount, StreamPlace, EXTRA_EXECUTION, LOST,
};

#[cfg(test)]
mod tests;
