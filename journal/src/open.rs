//! The journal handle: creating and opening the database (read-write or
//! read-only, also where SQLite cannot write a WAL index), the schema and
//! its version check, and the helpers every query goes through.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension};

use crate::error::JournalError;
use crate::lock::WriterLock;
use crate::write::SlotCache;

/// The SQL that creates the journal's tables, with a comment on every column.
pub const SCHEMA: &str = include_str!("schema.sql");

/// The index that keeps activity ids unique, as [`SCHEMA`] creates it.
pub(crate) const INDEX_IDS: &str = "CREATE UNIQUE INDEX activities_by_id ON activities(id)";

/// How much of a journal a reader maps into memory (address space, not
/// memory: pages are loaded as they are read).
pub(crate) const READ_MAP_BYTES: i64 = 1 << 30;

/// The schema version this crate reads and writes.
pub const SCHEMA_VERSION: i64 = 2;

/// An open journal. One opened to write ([`Journal::create`],
/// [`Journal::open`]) holds the journal's writer lock while it lives.
pub struct Journal {
    pub(crate) conn: Connection,
    pub(crate) path: PathBuf,
    pub(crate) slots: SlotCache,
    /// Declared last, so dropped last: the connection is closed (and its
    /// WAL checkpointed) before another writer may open the journal.
    _writer: Option<WriterLock>,
}

impl Journal {
    /// Creates a new journal at `path`, with its directory, and holds its
    /// writer lock while it lives. Fails if one exists, or if another
    /// process (or another [`Journal`] in this one) is creating it.
    pub fn create(path: &Path) -> Result<Journal, JournalError> {
        if path.exists() {
            return Err(JournalError::Exists(path.to_path_buf()));
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| JournalError::Directory {
                path: path.to_path_buf(),
                source,
            })?;
        }
        // Taken before the database is made, so that no one sees a new
        // journal without its writer.
        let writer = WriterLock::take(path)?;
        // Another creator may have made it and let go while we waited.
        if path.exists() {
            return Err(JournalError::Exists(path.to_path_buf()));
        }
        let mut journal = Journal::connect(path)?;
        journal._writer = Some(writer);
        journal.configure()?;
        journal.sql(|c| {
            c.execute_batch(SCHEMA)?;
            c.execute(
                "INSERT INTO meta(key, value) VALUES ('schema_version', ?1)",
                [SCHEMA_VERSION.to_string()],
            )?;
            Ok(())
        })?;
        Ok(journal)
    }

    /// Opens an existing journal to read and write it (resume), checking
    /// that it is one, and holds its writer lock while it lives: a journal
    /// that another run writes is [`JournalError::InUse`]. Reports use
    /// [`Journal::open_read_only`], which takes no lock.
    pub fn open(path: &Path) -> Result<Journal, JournalError> {
        if !path.exists() {
            return Err(JournalError::Missing(path.to_path_buf()));
        }
        let mut journal = Journal::connect(path).map_err(|error| match error {
            JournalError::Sqlite { source, .. } => Journal::classify(path, source),
            other => other,
        })?;
        // Checked before anything is set: a journal of another version (or
        // another file) is left exactly as it was, not switched to WAL,
        // and gets no lock file beside it.
        journal.check_version()?;
        journal._writer = Some(WriterLock::take(path)?);
        journal.configure()?;
        Ok(journal)
    }

    /// Opens an existing journal only to read it, as reports do: nothing
    /// is written, not even SQLite's WAL index when it cannot be, so a
    /// journal on a read-only medium, or one this user may only read,
    /// opens too.
    pub fn open_read_only(path: &Path) -> Result<Journal, JournalError> {
        if !path.exists() {
            return Err(JournalError::Missing(path.to_path_buf()));
        }
        if path.is_dir() {
            return Err(JournalError::NotAJournal {
                path: path.to_path_buf(),
                detail: " (it is a directory)".to_string(),
            });
        }
        // SQLite says "unable to open database file" for a file this user
        // may not read; the operating system says why.
        if let Err(source) = std::fs::File::open(path) {
            return Err(JournalError::CannotRead {
                path: path.to_path_buf(),
                source,
            });
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        match Journal::connect_read_only(path, path, flags) {
            // A WAL database needs its `-shm` index even to be read; where
            // there is none and the directory cannot be written, SQLite
            // cannot make one. Then no writer has the file open either (it
            // would have made the index), so it may be read as immutable,
            // which needs no index.
            Err(JournalError::Unreadable { source, .. }) if needs_wal_index(&source) => {
                let first = JournalError::Unreadable {
                    path: path.to_path_buf(),
                    source,
                };
                let Some(uri) = immutable_uri(path) else {
                    return Err(first);
                };
                match Journal::connect_read_only(path, uri, flags | OpenFlags::SQLITE_OPEN_URI) {
                    // Its own failure would name the URI: the first is clearer.
                    Err(JournalError::Unreadable { .. }) => Err(first),
                    other => other,
                }
            }
            other => other,
        }
    }

    /// Opens `target` (the journal `path`, or a URI naming it) with
    /// `flags` and checks that it is a journal.
    fn connect_read_only(
        path: &Path,
        target: impl AsRef<Path>,
        flags: OpenFlags,
    ) -> Result<Journal, JournalError> {
        let conn = Connection::open_with_flags(target, flags)
            .map_err(|source| Journal::classify(path, source))?;
        // A run may be writing: wait for its transaction as `connect` does.
        conn.busy_timeout(Duration::from_secs(10))
            .map_err(|source| Journal::classify(path, source))?;
        let journal = Journal {
            conn,
            path: path.to_path_buf(),
            slots: SlotCache::default(),
            _writer: None,
        };
        journal.check_version()?;
        // A report reads every page of a million attempts: mapped, they
        // are read where they lie instead of copied a page per system call.
        journal.sql(|c| c.pragma_update(None, "mmap_size", READ_MAP_BYTES))?;
        Ok(journal)
    }

    /// Checks that the file is a journal of [`SCHEMA_VERSION`].
    fn check_version(&self) -> Result<(), JournalError> {
        let not_a_journal = |detail: String| JournalError::NotAJournal {
            path: self.path.clone(),
            detail,
        };
        let version: Option<String> = self
            .conn
            .query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |row| row.get(0),
            )
            .optional()
            .map_err(|error| Journal::classify(&self.path, error))?;
        match version.as_deref().map(str::parse::<i64>) {
            Some(Ok(SCHEMA_VERSION)) => Ok(()),
            Some(Ok(found)) => Err(JournalError::OtherVersion {
                path: self.path.clone(),
                found,
            }),
            _ => Err(not_a_journal(" (it has no schema version)".to_string())),
        }
    }

    /// Tells a file that is not a journal (not SQLite, or SQLite without
    /// our tables) from one that could not be opened or read, which says
    /// nothing about its contents.
    fn classify(path: &Path, error: rusqlite::Error) -> JournalError {
        use rusqlite::ErrorCode;
        match error.sqlite_error_code() {
            // SQLITE_ERROR ("no such table: meta") and SQLITE_NOTADB.
            Some(ErrorCode::Unknown | ErrorCode::NotADatabase) => JournalError::NotAJournal {
                path: path.to_path_buf(),
                detail: format!(" ({error})"),
            },
            _ => JournalError::Unreadable {
                path: path.to_path_buf(),
                source: error,
            },
        }
    }

    fn connect(path: &Path) -> Result<Journal, JournalError> {
        let error = |source| JournalError::Sqlite {
            path: path.to_path_buf(),
            source,
        };
        let conn = Connection::open(path).map_err(error)?;
        // A run may be writing: wait for its transaction.
        conn.busy_timeout(Duration::from_secs(10)).map_err(error)?;
        Ok(Journal {
            conn,
            path: path.to_path_buf(),
            slots: SlotCache::default(),
            _writer: None,
        })
    }

    /// Sets up the connection of a journal to write.
    fn configure(&self) -> Result<(), JournalError> {
        self.sql(|c| {
            // WAL with NORMAL sync: a commit survives a killed process (the
            // crash that matters for resume) at a fraction of FULL's cost;
            // only a power cut can lose the last commits.
            c.pragma_update(None, "journal_mode", "WAL")?;
            c.pragma_update(None, "synchronous", "NORMAL")?;
            // Declaring a million activities touches tens of megabytes of
            // pages (the id index above all): a cache that holds them keeps
            // the transaction from rereading them.
            c.pragma_update(None, "cache_size", -65536)
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn sql<R>(
        &self,
        operate: impl FnOnce(&Connection) -> rusqlite::Result<R>,
    ) -> Result<R, JournalError> {
        operate(&self.conn).map_err(|source| JournalError::Sqlite {
            path: self.path.clone(),
            source,
        })
    }

    pub(crate) fn transaction<R>(
        &mut self,
        operate: impl FnOnce(&rusqlite::Transaction<'_>) -> rusqlite::Result<R>,
    ) -> Result<R, JournalError> {
        let path = self.path.clone();
        let error = |source| JournalError::Sqlite {
            path: path.clone(),
            source,
        };
        let tx = self.conn.transaction().map_err(error)?;
        let result = operate(&tx).map_err(error)?;
        tx.commit().map_err(error)?;
        Ok(result)
    }
}

/// Whether opening read-only failed for want of a WAL index (`-shm`) that
/// SQLite could not create: SQLITE_CANTOPEN, or SQLITE_READONLY_CANTINIT
/// and its kin.
fn needs_wal_index(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(rusqlite::ErrorCode::CannotOpen | rusqlite::ErrorCode::ReadOnly)
    )
}

/// `path` as an SQLite URI that opens it immutable; `None` for a path
/// that is not UTF-8, which a URI cannot carry.
fn immutable_uri(path: &Path) -> Option<String> {
    let path = std::path::absolute(path).ok()?;
    let mut uri = String::from("file:");
    for c in path.to_str()?.chars() {
        // The characters a URI path gives a meaning to.
        match c {
            '%' => uri.push_str("%25"),
            '?' => uri.push_str("%3f"),
            '#' => uri.push_str("%23"),
            c => uri.push(c),
        }
    }
    uri.push_str("?immutable=1");
    Some(uri)
}
