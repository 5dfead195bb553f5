//! A journal whose disk fills while the run goes on: no more commands
//! start, the rows taken so far stay in memory, and they are written once
//! there is room, within [`ROOM_WAIT`]; the run then ends `interrupted`,
//! to be resumed. Without this, the first failed commit ended the runner
//! with the run still `running` (so `runs` said "stopped (runner gone)")
//! and none of the attempts made journaled.

use std::path::Path;
use std::time::{Duration, Instant};

use journal::JournalError;

/// How long a run whose journal's disk is full waits for room to write
/// what it holds before it gives up.
pub(super) const ROOM_WAIT: Duration = Duration::from_secs(300);

/// How often a write is tried again while the disk is full.
const RETRY_EVERY: Duration = Duration::from_millis(500);

/// What SQLite said, if `error` is a journal write refused because the
/// disk is full; any other error is not this module's.
pub(super) fn disk_full(error: &anyhow::Error) -> Option<String> {
    let journal = error.downcast_ref::<JournalError>()?;
    journal.is_disk_full().then(|| journal.to_string())
}

/// `Ok(None)` if `result` is, `Ok(Some(why))` if it failed on a full disk,
/// and any other error as it is.
pub(super) fn unless_full(result: anyhow::Result<()>) -> anyhow::Result<Option<String>> {
    match result {
        Ok(()) => Ok(None),
        Err(error) => match disk_full(&error) {
            Some(why) => Ok(Some(why)),
            None => Err(error),
        },
    }
}

/// Runs the journal write `write` until it succeeds, trying again while
/// the disk of `journal` is full, for at most [`ROOM_WAIT`]; says once
/// that it waits, for `what`. Other errors end it at once.
pub(super) fn when_room(
    journal: &Path,
    what: &str,
    mut write: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + ROOM_WAIT;
    let mut said = false;
    loop {
        let error = match write() {
            Ok(()) => return Ok(()),
            Err(error) => error,
        };
        let Some(why) = disk_full(&error) else {
            return Err(error);
        };
        if Instant::now() >= deadline {
            anyhow::bail!(
                "the disk holding the journal {} stayed full for {} s ({why}): {what} could not \
                 be written, and the journal still calls the run running; free space there and \
                 resume the run with --resume",
                journal.display(),
                ROOM_WAIT.as_secs()
            );
        }
        if !said {
            eprintln!(
                "the disk holding the journal {} is full ({why}); waiting up to {} s for room to \
                 write {what}: free space there",
                journal.display(),
                ROOM_WAIT.as_secs()
            );
            said = true;
        }
        std::thread::sleep(RETRY_EVERY);
    }
}
