//! Why the journal could not be read or written.

use std::path::PathBuf;

use crate::lock::Writer;
use crate::open::SCHEMA_VERSION;

/// Why the journal could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// SQLite refused an operation.
    #[error("journal {path}: {source}")]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// SQLite's complaint.
        source: rusqlite::Error,
    },
    /// The file exists but is not a journal this version understands.
    #[error("{path} is not a constellation journal{detail}")]
    NotAJournal {
        /// The file.
        path: PathBuf,
        /// What was found instead, for the message.
        detail: String,
    },
    /// The file is there but cannot be opened or read: permissions, a
    /// directory that cannot be entered, an I/O error. Not a verdict on
    /// what the file holds.
    #[error("cannot open journal {path}: {source}")]
    Unreadable {
        /// The database file.
        path: PathBuf,
        /// SQLite's complaint.
        source: rusqlite::Error,
    },
    /// The operating system refused to open the file for reading (e.g.
    /// no read permission).
    #[error("cannot read journal {path}: {source}")]
    CannotRead {
        /// The database file.
        path: PathBuf,
        /// The operating system's complaint.
        source: std::io::Error,
    },
    /// The file is a journal of another schema version than this build's.
    #[error(
        "journal {path} has schema version {found}, but this build of constellation reads \
         version {SCHEMA_VERSION} only; read it with the build that wrote it, or start a new run"
    )]
    OtherVersion {
        /// The database file.
        path: PathBuf,
        /// The version it has.
        found: i64,
    },
    /// A caller passed values that refer to nothing (a bug in the caller).
    #[error("journal {path}: {detail}")]
    Invalid {
        /// The database file.
        path: PathBuf,
        /// What was wrong.
        detail: String,
    },
    /// `create` found a journal already there.
    #[error("journal {0} already exists; resume it with --resume, or choose another path")]
    Exists(PathBuf),
    /// `open` found nothing there.
    #[error("journal {0} does not exist")]
    Missing(PathBuf),
    /// The directory for a new journal could not be made.
    #[error("cannot create the directory for journal {path}: {source}")]
    Directory {
        /// The database file.
        path: PathBuf,
        /// The operating system's complaint.
        source: std::io::Error,
    },
    /// Another run writes the journal: it holds the journal's writer
    /// lock. The lock goes with its process, so this means a live runner.
    #[error(
        "the journal {path} is in use by another run ({writer}); wait for it to end, or stop it"
    )]
    InUse {
        /// The database file.
        path: PathBuf,
        /// Who holds it, as its lock file says.
        writer: Writer,
    },
    /// The writer lock could not be taken or checked at all (the lock file
    /// cannot be made or opened, or the file system has no locks).
    #[error("cannot lock journal {path} for writing (lock file {lock}): {source}")]
    Lock {
        /// The database file.
        path: PathBuf,
        /// The lock file beside it.
        lock: PathBuf,
        /// The operating system's complaint.
        source: std::io::Error,
    },
    /// The lock file is not one to write this process's id into: a link
    /// (another user's pointing it at a file of yours), another user's
    /// file, one others may write, or not a file at all.
    #[error("cannot lock journal {path} for writing: {refusal}")]
    UntrustedLock {
        /// The database file.
        path: PathBuf,
        /// Why its lock file was refused.
        refusal: trust::Refusal,
    },
}

impl JournalError {
    /// Whether SQLite could not write because the disk holding the journal
    /// is full: the write may succeed later, once there is room, and
    /// nothing written before is harmed (SQLite rolls the transaction back).
    pub fn is_disk_full(&self) -> bool {
        matches!(
            self,
            JournalError::Sqlite {
                source: rusqlite::Error::SqliteFailure(error, _),
                ..
            } if error.code == rusqlite::ErrorCode::DiskFull
        )
    }
}
