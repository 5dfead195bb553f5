//! The run journal: an embedded SQLite database that records every run of
//! an activity graph — the graph itself, each activity's state, every
//! attempt with where and when it ran, and the executors the run had.
//!
//! Resume reads it to skip work that is done, and reports read it to draw
//! utilization. It needs no server: it is one file, and users can query it
//! with `sqlite3` directly; [`SCHEMA`] documents every table and column.
//!
//! Writes are transactions of their own, so a runner killed at any moment
//! leaves a consistent database: what was recorded stays recorded.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{params, Connection, OpenFlags, OptionalExtension};

/// The SQL that creates the journal's tables, with a comment on every column.
pub const SCHEMA: &str = include_str!("schema.sql");

/// The schema version this crate reads and writes.
pub const SCHEMA_VERSION: i64 = 1;

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
#[derive(Debug, Clone)]
pub struct NewRun {
    /// The graph file as given.
    pub graph_path: String,
    /// The expanded graph as JSON.
    pub graph_spec: String,
    /// A hash of `graph_spec`.
    pub graph_hash: String,
    /// Where the runner runs.
    pub host: String,
    /// The command line, for the record.
    pub command_line: String,
    /// Where this run's output files go.
    pub output_dir: String,
}

/// An activity as the graph declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActivityDecl {
    /// The graph id.
    pub id: String,
    /// The file entry's id before sweep expansion.
    pub kind: String,
    /// A hash of everything that decides what the activity does.
    pub spec_hash: String,
    /// Where it may run, as text.
    pub context: String,
    /// Ids it runs after.
    pub after: Vec<String>,
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

/// One attempt to run an activity.
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
    /// The graph id.
    pub id: String,
    /// The file entry's id before sweep expansion.
    pub kind: String,
    /// Hash of its spec.
    pub spec_hash: String,
    /// Where it may run.
    pub context: String,
    /// Its state after the latest run.
    pub state: ActivityState,
    /// The run that set the state.
    pub run: i64,
    /// Why it failed or was cancelled.
    pub message: Option<String>,
}

/// A run's row.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRow {
    /// 1 for the first run, then one more per resume.
    pub run: i64,
    /// The graph file.
    pub graph_path: String,
    /// Hash of the expanded graph.
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
    /// The graph id.
    pub id: String,
    /// Its new state.
    pub state: ActivityState,
    /// Why it failed or was cancelled.
    pub message: Option<String>,
    /// The attempts it made in this run (none for a cancelled one).
    pub attempts: Vec<AttemptRow>,
}

/// An open journal.
pub struct Journal {
    conn: Connection,
    path: PathBuf,
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
        journal.check_version()?;
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
        };
        journal.check_version()?;
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
            Some(Ok(other)) => Err(not_a_journal(format!(
                " of schema version {SCHEMA_VERSION} (it has version {other})"
            ))),
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
        // WAL with NORMAL sync: a commit survives a killed process (the
        // crash that matters for resume) at a fraction of FULL's cost; only
        // a power cut can lose the last commits.
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(error)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(error)?;
        conn.busy_timeout(Duration::from_secs(10)).map_err(error)?;
        Ok(Journal {
            conn,
            path: path.to_path_buf(),
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

    /// Records the start of a run and returns its number.
    pub fn begin_run(&mut self, run: &NewRun) -> Result<i64, JournalError> {
        self.sql(|c| {
            c.execute(
                "INSERT INTO runs(graph_path, graph_hash, graph_spec, started, status, host,
                                  command_line, output_dir)
                 VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?6, ?7)",
                params![
                    run.graph_path,
                    run.graph_hash,
                    run.graph_spec,
                    unix_seconds(SystemTime::now()),
                    run.host,
                    run.command_line,
                    run.output_dir
                ],
            )?;
            Ok(c.last_insert_rowid())
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
                "INSERT OR REPLACE INTO executors(run, executor, node, labels, cores)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?;
            for e in executors {
                insert.execute(params![run, e.executor, e.node, e.labels, e.cores])?;
            }
            Ok(())
        })
    }

    /// Declares the graph's activities for run `run`: new ones are
    /// pending, and so are the ones marked to run again; the others (done
    /// before, and skipped by this run) keep their state and the run that
    /// set it. Activities of an earlier run that the graph no longer has are
    /// left alone.
    pub fn declare(&mut self, run: i64, activities: &[ActivityDecl]) -> Result<(), JournalError> {
        self.transaction(|tx| {
            let mut upsert = tx.prepare(
                "INSERT INTO activities(id, kind, spec_hash, context, after, state, run)
                 VALUES (?1, ?2, ?3, ?4, ?5, 'pending', ?6)
                 ON CONFLICT(id) DO UPDATE SET
                    kind = excluded.kind, spec_hash = excluded.spec_hash,
                    context = excluded.context, after = excluded.after,
                    state = CASE WHEN ?7 THEN 'pending' ELSE state END,
                    run = CASE WHEN ?7 THEN excluded.run ELSE run END,
                    message = CASE WHEN ?7 THEN NULL ELSE message END",
            )?;
            for a in activities {
                upsert.execute(params![
                    a.id,
                    a.kind,
                    a.spec_hash,
                    a.context,
                    json_list(&a.after),
                    run,
                    a.rerun
                ])?;
            }
            Ok(())
        })
    }

    /// Records what happened to some activities in run `run`, in one
    /// transaction: their attempts and their new states.
    pub fn record(&mut self, run: i64, updates: &[ActivityUpdate]) -> Result<(), JournalError> {
        self.transaction(|tx| {
            let mut attempt = tx.prepare(
                "INSERT OR REPLACE INTO attempts(run, activity, attempt, node, executor, labels,
                    started, ended, outcome, exit_code, signal, message, cpu_seconds,
                    stdout, stderr, stdout_bytes, stderr_bytes)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
            )?;
            let mut state = tx.prepare(
                "UPDATE activities SET state = ?2, run = ?3, message = ?4 WHERE id = ?1",
            )?;
            for update in updates {
                for a in &update.attempts {
                    attempt.execute(params![
                        run,
                        update.id,
                        a.attempt,
                        a.node,
                        a.executor,
                        a.labels,
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
                        a.stderr_bytes
                    ])?;
                }
                state.execute(params![
                    update.id,
                    update.state.as_str(),
                    run,
                    update.message
                ])?;
            }
            Ok(())
        })
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

    /// Spec hashes of the activities that are done, by id: what a resume may skip.
    pub fn done(&self) -> Result<HashMap<String, String>, JournalError> {
        self.sql(|c| {
            let mut query =
                c.prepare("SELECT id, spec_hash FROM activities WHERE state = 'done'")?;
            let rows = query.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
            rows.collect()
        })
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

    /// The graph spec (JSON) that run `run` ran.
    pub fn graph_spec(&self, run: i64) -> Result<Option<String>, JournalError> {
        self.sql(|c| {
            c.query_row("SELECT graph_spec FROM runs WHERE run = ?1", [run], |row| {
                row.get(0)
            })
            .optional()
        })
    }

    /// The executors of run `run`.
    pub fn executors(&self, run: i64) -> Result<Vec<ExecutorRow>, JournalError> {
        self.sql(|c| {
            let mut query = c.prepare(
                "SELECT executor, node, labels, cores FROM executors WHERE run = ?1
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

    /// Every activity's row, in id order.
    pub fn activities(&self) -> Result<Vec<ActivityRow>, JournalError> {
        self.sql(|c| {
            let mut query = c.prepare(
                "SELECT id, kind, spec_hash, context, state, run, message FROM activities
                 ORDER BY id",
            )?;
            let rows = query.query_map([], |row| {
                Ok(ActivityRow {
                    id: row.get(0)?,
                    kind: row.get(1)?,
                    spec_hash: row.get(2)?,
                    context: row.get(3)?,
                    state: ActivityState::parse(&row.get::<_, String>(4)?),
                    run: row.get(5)?,
                    message: row.get(6)?,
                })
            })?;
            rows.collect()
        })
    }

    /// The attempts of run `run`, or of every run, in start order.
    pub fn attempts(&self, run: Option<i64>) -> Result<Vec<AttemptRow>, JournalError> {
        self.sql(|c| {
            let mut query = c.prepare(
                "SELECT run, activity, attempt, node, executor, labels, started, ended, outcome,
                        exit_code, signal, message, cpu_seconds, stdout, stderr, stdout_bytes,
                        stderr_bytes
                 FROM attempts WHERE ?1 IS NULL OR run = ?1 ORDER BY started, activity, attempt",
            )?;
            let rows = query.query_map([run], |row| {
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
                })
            })?;
            rows.collect()
        })
    }

    fn transaction(
        &mut self,
        operate: impl FnOnce(&rusqlite::Transaction<'_>) -> rusqlite::Result<()>,
    ) -> Result<(), JournalError> {
        let path = self.path.clone();
        let error = |source| JournalError::Sqlite {
            path: path.clone(),
            source,
        };
        let tx = self.conn.transaction().map_err(error)?;
        operate(&tx).map_err(error)?;
        tx.commit().map_err(error)
    }
}

/// Seconds since the Unix epoch, as the journal stores times.
pub fn unix_seconds(time: SystemTime) -> f64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn json_list(items: &[String]) -> String {
    serde_json::to_string(items).expect("a list of strings always encodes")
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
