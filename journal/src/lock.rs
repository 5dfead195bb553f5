//! One writer per journal: a runner holds an exclusive lock on a file
//! beside the journal (`journal.db.lock`) for as long as its [`Journal`]
//! lives, so that a second runner, or a `--resume` of a journal in use, is
//! refused instead of running the same work twice.
//!
//! The lock is a [`trust::lock::LockFile`]: the operating system's
//! (`flock` on Linux), so it goes when the process does, however it ends,
//! `kill -9` included, and a lock file left by a runner that died is
//! simply taken by the next one. The file is never removed.
//!
//! The file also says who holds it (pid, host, start), for the message a
//! refused runner prints and for `constellation runs`.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use trust::lock::{Checks, LockError, LockFile};

use crate::error::JournalError;
use crate::open::Journal;
use crate::rows::unix_seconds;

/// How long a runner keeps trying a held lock before it is refused: a
/// reader that only checks whether the journal is in use
/// ([`Journal::writer`]) holds it for an instant, and must not turn a
/// runner away.
const PATIENCE: Duration = Duration::from_secs(1);

/// The run that holds a journal to write it, as its lock file names it.
/// A field is `None` where the holder has not written it yet (it writes
/// them just after it takes the lock) or the file could not be read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Writer {
    /// The runner's process id.
    pub pid: Option<u32>,
    /// The host the runner runs on.
    pub host: Option<String>,
    /// When it took the lock, in Unix seconds.
    pub started: Option<f64>,
}

impl Writer {
    /// This process, now.
    fn this_process() -> Writer {
        Writer {
            pid: Some(std::process::id()),
            host: Some(host_name()),
            started: Some(unix_seconds(SystemTime::now())),
        }
    }

    /// The lock file's contents: `key=value` lines, readable by people
    /// and by [`Writer::parse`].
    fn to_text(&self) -> String {
        let mut text = String::new();
        if let Some(pid) = self.pid {
            text.push_str(&format!("pid={pid}\n"));
        }
        if let Some(host) = &self.host {
            text.push_str(&format!("host={host}\n"));
        }
        if let Some(started) = self.started {
            text.push_str(&format!("started={started}\n"));
        }
        text
    }

    /// What a lock file says; lines it does not know, or cannot read, are
    /// left out rather than refused: the lock, not the text, decides.
    fn parse(text: &str) -> Writer {
        let mut writer = Writer::default();
        for line in text.lines() {
            match line.split_once('=') {
                Some(("pid", pid)) => writer.pid = pid.trim().parse().ok(),
                Some(("host", host)) if !host.trim().is_empty() => {
                    writer.host = Some(host.trim().to_string())
                }
                Some(("started", started)) => {
                    writer.started = started.trim().parse().ok().filter(|s: &f64| s.is_finite())
                }
                _ => {}
            }
        }
        writer
    }
}

impl std::fmt::Display for Writer {
    /// `pid 4242 on node7, started 2026-11-25T14:12:11Z`, or as much of it
    /// as is known; `a runner that is starting` when nothing is.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if let Some(pid) = self.pid {
            parts.push(format!("pid {pid}"));
        }
        if let Some(host) = &self.host {
            parts.push(format!("on {host}"));
        }
        let mut text = parts.join(" ");
        if let Some(started) = self.started {
            if !text.is_empty() {
                text.push_str(", ");
            }
            text.push_str(&format!("started {}", utc_text(started)));
        }
        if text.is_empty() {
            text.push_str("a runner that is starting");
        }
        f.write_str(&text)
    }
}

/// The lock file of the journal at `journal`: its path with `.lock` added.
pub fn lock_path(journal: &Path) -> PathBuf {
    let mut name = journal.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// The exclusive lock a writing [`Journal`] holds; released when dropped,
/// or by the operating system when the process ends.
#[derive(Debug)]
pub(crate) struct WriterLock {
    lock: LockFile,
}

impl WriterLock {
    /// Takes the lock of the journal at `journal`, waiting up to
    /// [`PATIENCE`] for a holder that lets go, and writes this process
    /// into the lock file. Another process's lock, or another open
    /// journal's in this process, is [`JournalError::InUse`].
    pub(crate) fn take(journal: &Path) -> Result<WriterLock, JournalError> {
        let path = lock_path(journal);
        let failed = |source| JournalError::Lock {
            path: journal.to_path_buf(),
            lock: path.clone(),
            source,
        };
        // The rule on its directory is not applied: a run journal lives
        // where its user chose, often a directory shared with a group.
        let mut lock = match LockFile::take(&path, Checks::FileOnly, PATIENCE) {
            Ok(lock) => lock,
            Err(LockError::Held(text)) => {
                return Err(JournalError::InUse {
                    path: journal.to_path_buf(),
                    writer: Writer::parse(&text),
                })
            }
            Err(LockError::Open(trust::TrustError::Refused(refusal))) => {
                return Err(JournalError::UntrustedLock {
                    path: journal.to_path_buf(),
                    refusal,
                })
            }
            Err(
                LockError::Open(trust::TrustError::Io { source, .. })
                | LockError::Lock(source)
                | LockError::Write(source),
            ) => return Err(failed(source)),
        };
        let text = Writer::this_process().to_text();
        lock.write_holder(&text).map_err(failed)?;
        Ok(WriterLock { lock })
    }
}

impl Drop for WriterLock {
    /// Empties the lock file before letting go, so that it names no
    /// process once its run has ended.
    fn drop(&mut self) {
        self.lock.clear_holder();
    }
}

impl Journal {
    /// The run that holds the journal at `path` to write it, or `None`
    /// when none does: no lock file, or one that no live process holds
    /// (its runner ended, or died). For listings such as
    /// `constellation runs`, which must not take the lock themselves.
    ///
    /// It looks with a shared lock held for an instant; a runner that
    /// starts in that instant waits for it (see [`Journal::open`]).
    pub fn writer(path: &Path) -> Result<Option<Writer>, JournalError> {
        let lock = lock_path(path);
        match trust::lock::holder(&lock) {
            Ok(text) => Ok(text.map(|text| Writer::parse(&text))),
            Err(source) => Err(JournalError::Lock {
                path: path.to_path_buf(),
                lock,
                source,
            }),
        }
    }
}

/// This machine's name, as the kernel has it; the journal crate does not
/// call into libc for it, and the name is only for people to read.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|n| !n.is_empty()))
        .unwrap_or_else(|| "an unknown host".to_string())
}

/// Unix seconds as RFC 3339 in UTC to the second, `2026-11-25T14:12:11Z`
/// (as `timefmt` writes it; the journal crate depends on nothing of the
/// workspace). Times before 1970 or not finite are shown as the number.
pub(crate) fn utc_text(unix: f64) -> String {
    if !(0.0..253_402_300_800.0).contains(&unix) {
        return format!("{unix} (Unix seconds)");
    }
    let secs = unix as i64;
    let (days, in_day) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm,
    // for the proleptic Gregorian calendar).
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        in_day / 3_600,
        in_day / 60 % 60,
        in_day % 60
    )
}
