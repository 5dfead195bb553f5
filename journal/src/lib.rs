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

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{params, Connection, OpenFlags, OptionalExtension};

/// The SQL that creates the journal's tables, with a comment on every column.
pub const SCHEMA: &str = include_str!("schema.sql");

/// The index that keeps activity ids unique, as [`SCHEMA`] creates it.
const INDEX_IDS: &str = "CREATE UNIQUE INDEX activities_by_id ON activities(id)";

/// How much of a journal a reader maps into memory (address space, not
/// memory: pages are loaded as they are read).
const READ_MAP_BYTES: i64 = 1 << 30;

/// A new activity, pending.
const INSERT_ACTIVITY: &str = "INSERT INTO activities(id, kind, context, spec_hash, state, run)
     VALUES (?1, ?2, ?3, ?4, 'pending', ?5)";

/// An activity by id, for a resume: its number and what decides whether
/// it changed.
const FIND_ACTIVITY: &str =
    "SELECT activity, kind, context, spec_hash FROM activities WHERE id = ?1";

/// An activity a resume runs again: pending, set by this run (?5), with
/// its kind, context and spec as declared now.
const RERUN_ACTIVITY: &str = "UPDATE activities SET kind = ?2, context = ?3, spec_hash = ?4,
     state = 'pending', run = ?5, message = NULL WHERE activity = ?1";

/// An activity a resume skips whose kind or context changed (its spec hash
/// did not, or it would run again): it keeps its state and the run that
/// set it.
const RESPEC_ACTIVITY: &str = "UPDATE activities SET kind = ?2, context = ?3, spec_hash = ?4
     WHERE activity = ?1";

/// The statements a resume's declaration runs per activity.
struct Resume<'c> {
    find: rusqlite::Statement<'c>,
    rerun: rusqlite::Statement<'c>,
    respec: rusqlite::Statement<'c>,
}

/// The schema version this crate reads and writes.
pub const SCHEMA_VERSION: i64 = 2;

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
}

/// How a run ended, as the `runs.status` column spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    /// Still running, or killed before it could say otherwise.
    Running,
    /// Every activity is done.
    Succeeded,
    /// Some activity failed for good, or was cancelled because of one.
    Failed,
    /// The user stopped it (Ctrl-C).
    Interrupted,
}

impl RunStatus {
    /// The column value.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Interrupted => "interrupted",
        }
    }
}

/// What a new run records about itself.
#[derive(Debug, Clone, Default)]
pub struct NewRun {
    /// The graph file as given.
    pub graph_path: String,
    /// A hash of what the run runs (the graph and its sweep files).
    pub graph_hash: String,
    /// Where the runner runs.
    pub host: String,
    /// The command line, for the record.
    pub command_line: String,
    /// Where this run's output files go.
    pub output_dir: String,
    /// `(name, text)` of the graph file and of each sweep values file, as
    /// read: the graph is kept as its sources, once per run, not expanded.
    pub sources: Vec<(String, String)>,
}

/// An activity as the graph declares it, for [`Journal::declare`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActivityDecl<'a> {
    /// The graph id.
    pub id: &'a str,
    /// Index into the `kinds` given to [`Journal::declare`].
    pub kind: usize,
    /// Index into the `contexts` given to [`Journal::declare`].
    pub context: usize,
    /// A hash of everything that decides what the activity does.
    pub spec_hash: u64,
    /// Whether this run runs it (again); `false` for work a resume skips.
    pub rerun: bool,
}

/// An executor of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorRow {
    /// Index within its node.
    pub executor: i64,
    /// The node's host name.
    pub node: String,
    /// Its contexts, comma separated.
    pub labels: String,
    /// Cores it may use.
    pub cores: i64,
}

/// An executor row with the number attempts refer to it by, listed by the
/// run or known only from an attempt that ran on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorSlot {
    /// The number [`AttemptFacts::slot`] gives.
    pub slot: i64,
    /// Index within its node.
    pub executor: i64,
    /// The node's host name.
    pub node: String,
    /// Its contexts, comma separated.
    pub labels: String,
    /// Cores it may use; `None` for an executor the run did not list.
    pub cores: Option<i64>,
}

/// Where an attempt's output lies in a run's stream file, for runs that
/// stream all output into a few files instead of a file per command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamPlace {
    /// The stream file.
    pub file: String,
    /// Where the attempt's output starts in it, in bytes.
    pub offset: i64,
    /// How many bytes of it are the attempt's.
    pub length: i64,
}

/// One attempt to record, for [`ActivityUpdate::attempts`]. The executor
/// is named by node, index and labels; the journal keeps each distinct
/// one once and refers to it by number.
#[derive(Debug, Clone, PartialEq)]
pub struct NewAttempt {
    /// 1, 2, ... within the run.
    pub attempt: i64,
    /// Host name of the node that ran it.
    pub node: String,
    /// Executor index on that node.
    pub executor: i64,
    /// The executor's contexts.
    pub labels: String,
    /// Unix seconds.
    pub started: f64,
    /// Unix seconds.
    pub ended: f64,
    /// `exited`, `signalled`, `timed_out` or `start_failed`.
    pub outcome: String,
    /// The exit status, for `exited`.
    pub exit_code: Option<i64>,
    /// The signal, for `signalled`.
    pub signal: Option<i64>,
    /// The outcome in words.
    pub message: Option<String>,
    /// User + system CPU seconds of the command, where known.
    pub cpu_seconds: Option<f64>,
    /// Standard output file, if kept in one of its own; `None` also when
    /// the command wrote nothing to it (no file is left).
    pub stdout: Option<String>,
    /// Standard error file, if kept in one of its own; `None` also when
    /// it was empty.
    pub stderr: Option<String>,
    /// Bytes written to standard output.
    pub stdout_bytes: Option<i64>,
    /// Bytes written to standard error.
    pub stderr_bytes: Option<i64>,
    /// Where the output is in the run's stream file, if the run streams.
    pub stream: Option<StreamPlace>,
}

/// One attempt to run an activity, as read back, with names joined in.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRow {
    /// The run it belongs to.
    pub run: i64,
    /// The activity's graph id.
    pub activity: String,
    /// 1, 2, ... within the run.
    pub attempt: i64,
    /// Host name of the node that ran it.
    pub node: String,
    /// Executor index on that node.
    pub executor: i64,
    /// The executor's contexts.
    pub labels: String,
    /// Unix seconds.
    pub started: f64,
    /// Unix seconds.
    pub ended: f64,
    /// `exited`, `signalled`, `timed_out` or `start_failed`.
    pub outcome: String,
    /// The exit status, for `exited`.
    pub exit_code: Option<i64>,
    /// The signal, for `signalled`.
    pub signal: Option<i64>,
    /// The outcome in words.
    pub message: Option<String>,
    /// User + system CPU seconds of the command, where known.
    pub cpu_seconds: Option<f64>,
    /// Standard output file, if kept in one. `None` also when the command
    /// wrote nothing to it: the empty file is removed, and `stdout_bytes`
    /// is 0.
    pub stdout: Option<String>,
    /// Standard error file, if kept in one; `None` also when it was empty.
    pub stderr: Option<String>,
    /// Bytes written to standard output.
    pub stdout_bytes: Option<i64>,
    /// Bytes written to standard error.
    pub stderr_bytes: Option<i64>,
    /// Where the output is in the run's stream file, if the run streamed.
    pub stream: Option<StreamPlace>,
}

/// What a report needs of one attempt, borrowed from the row being read
/// (see [`Journal::scan_attempts`]): numbers instead of names, so that a
/// million attempts are read without a string per name.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttemptFacts<'a> {
    /// The activity's number ([`ActivityRow::activity`]).
    pub activity: i64,
    /// The activity's graph id.
    pub id: &'a str,
    /// The activity's kind ([`KindRow::kind`]).
    pub kind: i64,
    /// 1, 2, ... within the run.
    pub attempt: i64,
    /// The executor ([`ExecutorSlot::slot`]).
    pub slot: i64,
    /// Unix seconds.
    pub started: f64,
    /// Unix seconds.
    pub ended: f64,
    /// `exited`, `signalled`, `timed_out` or `start_failed`.
    pub outcome: &'a str,
    /// The exit status, for `exited`.
    pub exit_code: Option<i64>,
    /// User + system CPU seconds of the command, where known.
    pub cpu_seconds: Option<f64>,
}

/// An activity kind with its number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindRow {
    /// The number activities refer to it by.
    pub kind: i64,
    /// The graph entry's id as written, e.g. `detect-{pair}`.
    pub name: String,
}

/// Where an activity stands, as the `activities.state` column spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActivityState {
    /// Not finished yet in any run.
    Pending,
    /// Succeeded.
    Done,
    /// Failed on its last attempt.
    Failed,
    /// Never ran because something it depends on failed.
    Cancelled,
}

impl ActivityState {
    /// The column value.
    pub fn as_str(self) -> &'static str {
        match self {
            ActivityState::Pending => "pending",
            ActivityState::Done => "done",
            ActivityState::Failed => "failed",
            ActivityState::Cancelled => "cancelled",
        }
    }

    fn parse(text: &str) -> ActivityState {
        match text {
            "done" => ActivityState::Done,
            "failed" => ActivityState::Failed,
            "cancelled" => ActivityState::Cancelled,
            _ => ActivityState::Pending,
        }
    }
}

/// An activity's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActivityRow {
    /// Its number, which attempts refer to.
    pub activity: i64,
    /// The graph id.
    pub id: String,
    /// The file entry's id before sweep expansion.
    pub kind: String,
    /// Hash of its spec.
    pub spec_hash: u64,
    /// Where it may run.
    pub context: String,
    /// Its state after the latest run.
    pub state: ActivityState,
    /// The run that set the state.
    pub run: i64,
    /// Why it failed or was cancelled.
    pub message: Option<String>,
}

/// How many activities are in one state, set by one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateCount {
    /// The state.
    pub state: ActivityState,
    /// The run that set it.
    pub run: i64,
    /// How many activities.
    pub count: u64,
}

/// A run's row.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRow {
    /// 1 for the first run, then one more per resume.
    pub run: i64,
    /// The graph file.
    pub graph_path: String,
    /// Hash of what the run ran.
    pub graph_hash: String,
    /// Unix seconds.
    pub started: f64,
    /// Unix seconds; `None` while running or if the runner was killed.
    pub ended: Option<f64>,
    /// `running`, `succeeded`, `failed` or `interrupted`.
    pub status: String,
    /// Where the runner ran.
    pub host: String,
    /// The command line.
    pub command_line: String,
    /// Where the run's output files went.
    pub output_dir: String,
}

/// What happened to one activity, to record in one transaction.
#[derive(Debug, Clone)]
pub struct ActivityUpdate {
    /// The activity's number, as [`Journal::declare`] returned it.
    pub activity: i64,
    /// Its new state.
    pub state: ActivityState,
    /// Why it failed or was cancelled.
    pub message: Option<String>,
    /// The attempts it made in this run (none for a cancelled one).
    pub attempts: Vec<NewAttempt>,
}

/// The executors [`Journal::record`] has looked up or added, so that an
/// attempt costs no query for its executor: per node name, its
/// `(run, executor index, labels, slot)`s (a node has few).
#[derive(Default)]
struct SlotCache {
    by_node: HashMap<String, Vec<(i64, i64, String, i64)>>,
}

impl SlotCache {
    fn get(&self, run: i64, node: &str, executor: i64, labels: &str) -> Option<i64> {
        self.by_node.get(node).and_then(|slots| {
            slots
                .iter()
                .find(|(r, e, l, _)| *r == run && *e == executor && l == labels)
                .map(|&(.., slot)| slot)
        })
    }

    fn insert(&mut self, run: i64, node: &str, executor: i64, labels: &str, slot: i64) {
        self.by_node.entry(node.to_string()).or_default().push((
            run,
            executor,
            labels.to_string(),
            slot,
        ));
    }
}

/// An open journal.
pub struct Journal {
    conn: Connection,
    path: PathBuf,
    slots: SlotCache,
}

impl Journal {
    /// Creates a new journal at `path`, with its directory. Fails if one exists.
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
        let journal = Journal::connect(path)?;
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
    /// that it is one.
    pub fn open(path: &Path) -> Result<Journal, JournalError> {
        if !path.exists() {
            return Err(JournalError::Missing(path.to_path_buf()));
        }
        let journal = Journal::connect(path).map_err(|error| match error {
            JournalError::Sqlite { source, .. } => Journal::classify(path, source),
            other => other,
        })?;
        // Checked before anything is set: a journal of another version (or
        // another file) is left exactly as it was, not switched to WAL.
        journal.check_version()?;
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

    fn sql<R>(
        &self,
        operate: impl FnOnce(&Connection) -> rusqlite::Result<R>,
    ) -> Result<R, JournalError> {
        operate(&self.conn).map_err(|source| JournalError::Sqlite {
            path: self.path.clone(),
            source,
        })
    }

    /// Records the start of a run, with the files its graph was read
    /// from, and returns its number.
    pub fn begin_run(&mut self, run: &NewRun) -> Result<i64, JournalError> {
        self.transaction(|tx| {
            tx.execute(
                "INSERT INTO runs(graph_path, graph_hash, started, status, host, command_line,
                                  output_dir)
                 VALUES (?1, ?2, ?3, 'running', ?4, ?5, ?6)",
                params![
                    run.graph_path,
                    run.graph_hash,
                    unix_seconds(SystemTime::now()),
                    run.host,
                    run.command_line,
                    run.output_dir
                ],
            )?;
            let number = tx.last_insert_rowid();
            let mut source = tx.prepare(
                "INSERT OR REPLACE INTO run_sources(run, name, text) VALUES (?1, ?2, ?3)",
            )?;
            for (name, text) in &run.sources {
                source.execute(params![number, name, text])?;
            }
            Ok(number)
        })
    }

    /// Records the executors of run `run`.
    pub fn record_executors(
        &mut self,
        run: i64,
        executors: &[ExecutorRow],
    ) -> Result<(), JournalError> {
        self.transaction(|tx| {
            let mut insert = tx.prepare(
                "INSERT INTO executors(run, node, executor, labels, cores)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT(run, node, executor, labels) DO UPDATE SET cores = excluded.cores",
            )?;
            for e in executors {
                insert.execute(params![run, e.node, e.executor, e.labels, e.cores])?;
            }
            Ok(())
        })
    }

    /// Declares the graph's activities for run `run` and returns each
    /// one's number, in the order given, for [`ActivityUpdate::activity`].
    ///
    /// `kinds` and `contexts` are the graph's distinct kinds (in graph
    /// order) and contexts, which each [`ActivityDecl`] refers to by index;
    /// each is stored once. New activities are pending, and so are the
    /// ones marked to run again; the others (done before, and skipped by
    /// this run) keep their state and the run that set it. Activities of an
    /// earlier run that the graph no longer has are left alone.
    ///
    /// One transaction of prepared statements: a million activities take
    /// about a second.
    pub fn declare<'a>(
        &mut self,
        run: i64,
        kinds: &[String],
        contexts: &[String],
        activities: impl IntoIterator<Item = ActivityDecl<'a>>,
    ) -> Result<Vec<i64>, JournalError> {
        let path = self.path.clone();
        let sqlite = |source| JournalError::Sqlite {
            path: path.clone(),
            source,
        };
        let invalid = |detail: String| JournalError::Invalid {
            path: path.clone(),
            detail,
        };
        let tx = self.conn.transaction().map_err(sqlite)?;
        let kind_keys = named_keys(&tx, "kinds", "name", "kind", kinds).map_err(sqlite)?;
        let context_keys =
            named_keys(&tx, "contexts", "text", "context", contexts).map_err(sqlite)?;
        let fresh: bool = tx
            .query_row("SELECT NOT EXISTS (SELECT 1 FROM activities)", [], |row| {
                row.get(0)
            })
            .map_err(sqlite)?;
        let activities = activities.into_iter();
        let mut keys = Vec::with_capacity(activities.size_hint().0);
        if fresh {
            // Building the id index once, from sorted ids, after the rows
            // are in takes a third of the time of a million inserts into
            // it; a duplicate id then fails the CREATE, and the transaction.
            tx.execute_batch("DROP INDEX activities_by_id")
                .map_err(sqlite)?;
        }
        {
            let mut insert = tx.prepare(INSERT_ACTIVITY).map_err(sqlite)?;
            // Prepared only for a resume: without the id index (dropped
            // above for a first run) they could not be.
            let mut resume = match fresh {
                true => None,
                false => Some(Resume {
                    find: tx.prepare(FIND_ACTIVITY).map_err(sqlite)?,
                    rerun: tx.prepare(RERUN_ACTIVITY).map_err(sqlite)?,
                    respec: tx.prepare(RESPEC_ACTIVITY).map_err(sqlite)?,
                }),
            };
            for a in activities {
                let kind = kind_keys.get(a.kind).ok_or_else(|| {
                    invalid(format!(
                        "activity {:?} has kind {} of {}",
                        a.id,
                        a.kind,
                        kinds.len()
                    ))
                })?;
                let context = context_keys.get(a.context).ok_or_else(|| {
                    invalid(format!(
                        "activity {:?} has context {} of {}",
                        a.id,
                        a.context,
                        contexts.len()
                    ))
                })?;
                // The hash's 64 bits as SQLite's signed integer.
                let hash = a.spec_hash as i64;
                let found = match &mut resume {
                    Some(resume) => resume
                        .find
                        .query_row([a.id], |row| {
                            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
                        })
                        .optional()
                        .map_err(sqlite)?,
                    None => None,
                };
                let key = if let (Some(resume), Some((key, was_kind, was_context, was_hash))) =
                    (&mut resume, found)
                {
                    // One lookup by id, then a write by number only where
                    // something changes: most of a resumed run's done half
                    // is neither rerun nor changed, and is left alone.
                    if a.rerun {
                        (resume.rerun)
                            .execute(params![key, kind, context, hash, run])
                            .map_err(sqlite)?;
                    } else if (was_kind, was_context, was_hash) != (*kind, *context, hash) {
                        (resume.respec)
                            .execute(params![key, kind, context, hash])
                            .map_err(sqlite)?;
                    }
                    key
                } else {
                    insert
                        .execute(params![a.id, kind, context, hash, run])
                        .map_err(sqlite)?;
                    tx.last_insert_rowid()
                };
                keys.push(key);
            }
        }
        if fresh {
            tx.execute_batch(INDEX_IDS).map_err(sqlite)?;
        }
        tx.commit().map_err(sqlite)?;
        Ok(keys)
    }

    /// Records what happened to some activities in run `run`, in one
    /// transaction: their attempts and their new states.
    pub fn record(&mut self, run: i64, updates: &[ActivityUpdate]) -> Result<(), JournalError> {
        let Journal { conn, path, slots } = self;
        let sqlite = |source| JournalError::Sqlite {
            path: path.clone(),
            source,
        };
        let tx = conn.transaction().map_err(sqlite)?;
        let written = (|| {
            let mut attempt = tx.prepare_cached(
                "INSERT OR REPLACE INTO attempts(run, activity, attempt, slot, started, ended,
                    outcome, exit_code, signal, message, cpu_seconds, stdout, stderr,
                    stdout_bytes, stderr_bytes, stream, stream_offset, stream_length)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16,
                         ?17, ?18)",
            )?;
            let mut state = tx.prepare_cached(
                "UPDATE activities SET state = ?2, run = ?3, message = ?4 WHERE activity = ?1",
            )?;
            for update in updates {
                for a in &update.attempts {
                    let slot = match slots.get(run, &a.node, a.executor, &a.labels) {
                        Some(slot) => slot,
                        None => {
                            let slot = slot_of(&tx, run, &a.node, a.executor, &a.labels)?;
                            slots.insert(run, &a.node, a.executor, &a.labels, slot);
                            slot
                        }
                    };
                    let stream = a.stream.as_ref();
                    attempt.execute(params![
                        run,
                        update.activity,
                        a.attempt,
                        slot,
                        a.started,
                        a.ended,
                        a.outcome,
                        a.exit_code,
                        a.signal,
                        a.message,
                        a.cpu_seconds,
                        a.stdout,
                        a.stderr,
                        a.stdout_bytes,
                        a.stderr_bytes,
                        stream.map(|s| &s.file),
                        stream.map(|s| s.offset),
                        stream.map(|s| s.length),
                    ])?;
                }
                state.execute(params![
                    update.activity,
                    update.state.as_str(),
                    run,
                    update.message
                ])?;
            }
            Ok(())
        })();
        match written.and_then(|()| tx.commit()) {
            Ok(()) => Ok(()),
            Err(source) => {
                // Executors this transaction added are gone with it.
                *slots = SlotCache::default();
                Err(sqlite(source))
            }
        }
    }

    /// Records how run `run` ended.
    pub fn end_run(&mut self, run: i64, status: RunStatus) -> Result<(), JournalError> {
        self.sql(|c| {
            c.execute(
                "UPDATE runs SET status = ?2, ended = ?3 WHERE run = ?1",
                params![run, status.as_str(), unix_seconds(SystemTime::now())],
            )?;
            Ok(())
        })
    }

    /// Calls `visit` with the id and spec hash of each activity that is
    /// done: what a resume may skip. Rows stream from the database, so a
    /// million of them need no map of their own.
    pub fn for_each_done(&self, mut visit: impl FnMut(&str, u64)) -> Result<(), JournalError> {
        self.sql(|c| {
            let mut query =
                c.prepare("SELECT id, spec_hash FROM activities WHERE state = 'done'")?;
            let mut rows = query.query([])?;
            while let Some(row) = rows.next()? {
                let id = row.get_ref(0)?.as_str()?;
                visit(id, row.get::<_, i64>(1)? as u64);
            }
            Ok(())
        })
    }

    /// Spec hashes of the activities that are done, by id; a map, for
    /// small journals (a runner uses [`Journal::for_each_done`]).
    pub fn done(&self) -> Result<HashMap<String, u64>, JournalError> {
        let mut done = HashMap::new();
        self.for_each_done(|id, hash| {
            done.insert(id.to_string(), hash);
        })?;
        Ok(done)
    }

    /// Every run, oldest first.
    pub fn runs(&self) -> Result<Vec<RunRow>, JournalError> {
        self.sql(|c| {
            let mut query = c.prepare(
                "SELECT run, graph_path, graph_hash, started, ended, status, host, command_line,
                        output_dir
                 FROM runs ORDER BY run",
            )?;
            let rows = query.query_map([], |row| {
                Ok(RunRow {
                    run: row.get(0)?,
                    graph_path: row.get(1)?,
                    graph_hash: row.get(2)?,
                    started: row.get(3)?,
                    ended: row.get(4)?,
                    status: row.get(5)?,
                    host: row.get(6)?,
                    command_line: row.get(7)?,
                    output_dir: row.get(8)?,
                })
            })?;
            rows.collect()
        })
    }

    /// The files run `run`'s graph was read from, `(name, text)`, in the
    /// order [`NewRun::sources`] gave them.
    pub fn sources(&self, run: i64) -> Result<Vec<(String, String)>, JournalError> {
        self.sql(|c| {
            let mut query =
                c.prepare("SELECT name, text FROM run_sources WHERE run = ?1 ORDER BY rowid")?;
            let rows = query.query_map([run], |row| Ok((row.get(0)?, row.get(1)?)))?;
            rows.collect()
        })
    }

    /// Every activity kind, in graph order: the order graphs first
    /// declared them in.
    pub fn kinds(&self) -> Result<Vec<KindRow>, JournalError> {
        self.sql(|c| {
            let mut query = c.prepare("SELECT kind, name FROM kinds ORDER BY kind")?;
            let rows = query.query_map([], |row| {
                Ok(KindRow {
                    kind: row.get(0)?,
                    name: row.get(1)?,
                })
            })?;
            rows.collect()
        })
    }

    /// The executors run `run` listed.
    pub fn executors(&self, run: i64) -> Result<Vec<ExecutorRow>, JournalError> {
        self.sql(|c| {
            let mut query = c.prepare(
                "SELECT executor, node, labels, cores FROM executors
                 WHERE run = ?1 AND cores IS NOT NULL
                 ORDER BY node, executor",
            )?;
            let rows = query.query_map([run], |row| {
                Ok(ExecutorRow {
                    executor: row.get(0)?,
                    node: row.get(1)?,
                    labels: row.get(2)?,
                    cores: row.get(3)?,
                })
            })?;
            rows.collect()
        })
    }

    /// Every executor of run `run` with its number: the listed ones and
    /// those known only from attempts, by node, then index.
    pub fn executor_slots(&self, run: i64) -> Result<Vec<ExecutorSlot>, JournalError> {
        self.sql(|c| {
            let mut query = c.prepare(
                "SELECT slot, executor, node, labels, cores FROM executors WHERE run = ?1
                 ORDER BY node, executor, slot",
            )?;
            let rows = query.query_map([run], |row| {
                Ok(ExecutorSlot {
                    slot: row.get(0)?,
                    executor: row.get(1)?,
                    node: row.get(2)?,
                    labels: row.get(3)?,
                    cores: row.get(4)?,
                })
            })?;
            rows.collect()
        })
    }

    /// Every activity's row, in id order.
    pub fn activities(&self) -> Result<Vec<ActivityRow>, JournalError> {
        self.sql(|c| {
            let mut query = c.prepare(
                "SELECT a.activity, a.id, k.name, a.spec_hash, c.text, a.state, a.run, a.message
                 FROM activities a
                 JOIN kinds k ON k.kind = a.kind
                 JOIN contexts c ON c.context = a.context
                 ORDER BY a.id",
            )?;
            let rows = query.query_map([], |row| {
                Ok(ActivityRow {
                    activity: row.get(0)?,
                    id: row.get(1)?,
                    kind: row.get(2)?,
                    spec_hash: row.get::<_, i64>(3)? as u64,
                    context: row.get(4)?,
                    state: ActivityState::parse(&row.get::<_, String>(5)?),
                    run: row.get(6)?,
                    message: row.get(7)?,
                })
            })?;
            rows.collect()
        })
    }

    /// How many activities are in each state, by the run that set it: the
    /// figures of a report, counted by SQLite without reading the rows out.
    pub fn state_counts(&self) -> Result<Vec<StateCount>, JournalError> {
        self.sql(|c| {
            let mut query =
                c.prepare("SELECT state, run, count(*) FROM activities GROUP BY state, run")?;
            let rows = query.query_map([], |row| {
                Ok(StateCount {
                    state: ActivityState::parse(row.get_ref(0)?.as_str()?),
                    run: row.get(1)?,
                    count: row.get::<_, i64>(2)? as u64,
                })
            })?;
            rows.collect()
        })
    }

    /// The attempts of run `run`, or of every run, in start order, with
    /// the activity's id and the executor's node, index and labels.
    pub fn attempts(&self, run: Option<i64>) -> Result<Vec<AttemptRow>, JournalError> {
        self.sql(|c| {
            let mut query = c.prepare(&format!(
                "{ATTEMPT_ROWS} WHERE ?1 IS NULL OR t.run = ?1 ORDER BY t.started, a.id, t.attempt"
            ))?;
            let rows = query.query_map([run], attempt_row)?;
            rows.collect()
        })
    }

    /// The attempts of the activity with graph id `id`, in every run, by
    /// run then attempt; none if the journal has no such activity.
    pub fn attempts_of(&self, id: &str) -> Result<Vec<AttemptRow>, JournalError> {
        self.sql(|c| {
            // `run IN` lets SQLite look the attempts up by their key, run
            // by run, instead of reading every attempt of every run.
            let mut query = c.prepare(&format!(
                "{ATTEMPT_ROWS}
                 WHERE t.run IN (SELECT run FROM runs)
                   AND t.activity = (SELECT activity FROM activities WHERE id = ?1)
                 ORDER BY t.run, t.attempt"
            ))?;
            let rows = query.query_map([id], attempt_row)?;
            rows.collect()
        })
    }

    /// Calls `visit` with each attempt of run `run`, by activity number
    /// then attempt, until it breaks: what a report reads of a million
    /// attempts, streamed, with numbers for the names
    /// ([`Journal::kinds`], [`Journal::executor_slots`]).
    pub fn scan_attempts(
        &self,
        run: i64,
        mut visit: impl FnMut(AttemptFacts<'_>) -> ControlFlow<()>,
    ) -> Result<(), JournalError> {
        self.sql(|c| {
            let mut query = c.prepare(
                "SELECT t.activity, a.id, a.kind, t.attempt, t.slot, t.started, t.ended,
                        t.outcome, t.exit_code, t.cpu_seconds
                 FROM attempts t JOIN activities a ON a.activity = t.activity
                 WHERE t.run = ?1",
            )?;
            let mut rows = query.query([run])?;
            while let Some(row) = rows.next()? {
                let facts = AttemptFacts {
                    activity: row.get(0)?,
                    id: row.get_ref(1)?.as_str()?,
                    kind: row.get(2)?,
                    attempt: row.get(3)?,
                    slot: row.get(4)?,
                    started: row.get(5)?,
                    ended: row.get(6)?,
                    outcome: row.get_ref(7)?.as_str()?,
                    exit_code: row.get(8)?,
                    cpu_seconds: row.get(9)?,
                };
                if visit(facts).is_break() {
                    break;
                }
            }
            Ok(())
        })
    }

    fn transaction<R>(
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

/// The columns of an [`AttemptRow`], names joined in, for [`attempt_row`].
const ATTEMPT_ROWS: &str = "
    SELECT t.run, a.id, t.attempt, e.node, e.executor, e.labels, t.started, t.ended,
           t.outcome, t.exit_code, t.signal, t.message, t.cpu_seconds, t.stdout,
           t.stderr, t.stdout_bytes, t.stderr_bytes, t.stream, t.stream_offset,
           t.stream_length
    FROM attempts t
    JOIN activities a ON a.activity = t.activity
    JOIN executors e ON e.slot = t.slot";

/// The row of [`ATTEMPT_ROWS`] as an [`AttemptRow`].
fn attempt_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<AttemptRow> {
    let file: Option<String> = row.get(17)?;
    Ok(AttemptRow {
        run: row.get(0)?,
        activity: row.get(1)?,
        attempt: row.get(2)?,
        node: row.get(3)?,
        executor: row.get(4)?,
        labels: row.get(5)?,
        started: row.get(6)?,
        ended: row.get(7)?,
        outcome: row.get(8)?,
        exit_code: row.get(9)?,
        signal: row.get(10)?,
        message: row.get(11)?,
        cpu_seconds: row.get(12)?,
        stdout: row.get(13)?,
        stderr: row.get(14)?,
        stdout_bytes: row.get(15)?,
        stderr_bytes: row.get(16)?,
        stream: match file {
            Some(file) => Some(StreamPlace {
                file,
                offset: row.get::<_, Option<i64>>(18)?.unwrap_or(0),
                length: row.get::<_, Option<i64>>(19)?.unwrap_or(0),
            }),
            None => None,
        },
    })
}

/// The numbers of `names` in the two-column `table` (`key` and the unique
/// `column`), adding the ones it lacks at the end, in order.
fn named_keys(
    tx: &rusqlite::Transaction<'_>,
    table: &str,
    column: &str,
    key: &str,
    names: &[String],
) -> rusqlite::Result<Vec<i64>> {
    let mut add = tx.prepare(&format!(
        "INSERT INTO {table}({column}) VALUES (?1) ON CONFLICT({column}) DO NOTHING"
    ))?;
    let mut find = tx.prepare(&format!("SELECT {key} FROM {table} WHERE {column} = ?1"))?;
    names
        .iter()
        .map(|name| {
            add.execute([name])?;
            find.query_row([name], |row| row.get(0))
        })
        .collect()
}

/// The number of run `run`'s executor `executor` of `node` with `labels`,
/// adding it (not listed: no cores) if the run has no such executor.
fn slot_of(
    tx: &rusqlite::Transaction<'_>,
    run: i64,
    node: &str,
    executor: i64,
    labels: &str,
) -> rusqlite::Result<i64> {
    tx.execute(
        "INSERT INTO executors(run, node, executor, labels) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT(run, node, executor, labels) DO NOTHING",
        params![run, node, executor, labels],
    )?;
    tx.query_row(
        "SELECT slot FROM executors WHERE run = ?1 AND node = ?2 AND executor = ?3
         AND labels = ?4",
        params![run, node, executor, labels],
        |row| row.get(0),
    )
}

/// Seconds since the Unix epoch, as the journal stores times.
pub fn unix_seconds(time: SystemTime) -> f64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests;

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
