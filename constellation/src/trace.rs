//! Execution traces: one record per activity call, for utilization plots.
//!
//! Recording costs one clock read per call start and end and a push onto a
//! per-executor vector, so it is cheap but not free; pools record only when
//! asked to.

use std::io::{self, Write};

use crate::context::ContextList;
use crate::id::ActivityId;

/// Which call a trace record covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    /// The `initialize` call.
    Initialize,
    /// A `process` call for one event.
    Process,
}

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallEnd {
    /// The activity suspended.
    Suspended,
    /// The activity finished.
    Finished,
    /// The call panicked; the activity was dropped.
    Failed,
}

/// One call of one activity on one executor.
#[derive(Debug, Clone)]
pub struct TraceRecord {
    /// The activity.
    pub activity: ActivityId,
    /// The executor's index within its node.
    pub executor: usize,
    /// The activity's contexts (its labels).
    pub contexts: ContextList,
    /// Which call this was.
    pub call: CallKind,
    /// How it ended.
    pub end: CallEnd,
    /// Start, in nanoseconds since the pool started.
    pub start_ns: u64,
    /// End, in nanoseconds since the pool started.
    pub end_ns: u64,
}

/// Writes records as CSV with a header: `activity,executor,labels,call,end,start_ns,end_ns`.
pub fn write_csv<'a>(
    out: &mut impl Write,
    records: impl IntoIterator<Item = &'a TraceRecord>,
) -> io::Result<()> {
    writeln!(out, "activity,executor,labels,call,end,start_ns,end_ns")?;
    for record in records {
        writeln!(
            out,
            "{},{},\"{}\",{:?},{:?},{},{}",
            record.activity,
            record.executor,
            record.contexts,
            record.call,
            record.end,
            record.start_ns,
            record.end_ns
        )?;
    }
    Ok(())
}
