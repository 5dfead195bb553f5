//! Output streams: the standard output and error of many commands in a few
//! files, as HyperQueue's `--stream` keeps them, instead of two files per
//! command ([`Capture::Stream`](super::Capture::Stream)).
//!
//! Each executor thread appends the output of the commands it runs to a
//! stream file of its own in the stream directory, created when the first
//! of its commands writes something: no lock is shared between executors,
//! and a million commands leave as many files as there were executors.
//! An executor runs one command at a time, so the records of one attempt
//! are contiguous: the attempt's [`StreamPlace`] (file, offset, length) is
//! all a reader needs, and journals keep it. A command that writes nothing
//! writes no record.
//!
//! # Format
//!
//! A stream file begins with [`MAGIC`], a line of text. Records follow,
//! each `kind: u8, length: u32 LE, payload, length: u32 LE, kind: u8`:
//!
//! - kind 0, an attempt begins: the attempt number (`u32` LE), then the
//!   activity's name (UTF-8). Every attempt's region starts with one.
//! - kind 1, a chunk of standard output; kind 2, of standard error, as the
//!   command wrote them (each chunk what one read of its pipe returned).
//!
//! The length and kind repeated after the payload let [`tail`] walk back
//! from the end of a region, so an error message reads only the last
//! kilobytes of a command that wrote gigabytes. A runner killed in the
//! middle of a write leaves a torn last record: readers stop there with a
//! [`StreamError::Torn`], and every record before it reads as written.

mod format;
mod pump;
mod reader;
mod writer;

pub use format::{Channel, StreamError, StreamPlace, MAGIC};
pub(crate) use pump::Pump;
pub use reader::{copy_channel, read_channel, scan, tail, Scan, StreamedAttempt};
pub(crate) use writer::{Pumped, StreamSink};

#[cfg(test)]
pub(super) mod tests;
