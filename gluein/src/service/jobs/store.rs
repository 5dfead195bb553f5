//! The job journal: `jobs.db` in the pool's state directory, one SQLite
//! table of the jobs submitted to the pool, so that a pool node killed and
//! started again on the same state directory knows every job and where it
//! stood.
//!
//! It is of the same family as run journals: WAL, a schema version in a
//! `meta` table, a comment on every column ([`SCHEMA`]), readable with
//! `sqlite3`. Every write is a statement of its own, so a pool node killed
//! at any moment leaves it consistent.

use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context as _};
use rusqlite::{params, Connection, OptionalExtension, Row};

use crate::service::{JobCounts, JobState, JobSubmission};

/// The SQL that creates the job journal, with a comment on every column.
pub const SCHEMA: &str = "
-- What this file is: key = 'schema_version', value = the version.
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,  -- the setting's name
    value TEXT NOT NULL      -- its value
);

-- One row per job submitted to the pool.
CREATE TABLE jobs (
    id               INTEGER PRIMARY KEY AUTOINCREMENT, -- the job's id: 1, 2, 3 ..., never reused
    name             TEXT NOT NULL,    -- what `jobs` lists it as (the graph file's stem by default)
    state            TEXT NOT NULL,    -- queued | running | succeeded | failed | cancelled
    priority         INTEGER NOT NULL, -- higher starts first among queued jobs
    graph            TEXT NOT NULL,    -- the graph file, absolute
    cwd              TEXT NOT NULL,    -- the runner's working directory: where the submitter was
    relabel          TEXT NOT NULL,    -- the --relabel FROM=TO rules, a JSON list of strings
    context_file     TEXT,             -- the --context-file, absolute, if any
    wait_for_labels  INTEGER NOT NULL, -- 1: work no agent offers yet waits for one (run --wait-for-labels)
    submitter        TEXT NOT NULL,    -- user@host of whoever submitted it
    submitted        REAL NOT NULL,    -- Unix seconds
    started          REAL,             -- when its runner first started, Unix seconds
    ended            REAL,             -- when it reached a final state, Unix seconds
    journal          TEXT NOT NULL,    -- its run journal: STATE/jobs/ID/journal.db
    runner_pid       INTEGER,          -- the process id of its latest runner, on this machine
    message          TEXT,             -- why it failed or was cancelled, in words
    activities       INTEGER NOT NULL, -- activities in the graph when it was submitted
    cancel_requested INTEGER NOT NULL DEFAULT 0, -- 1 once `cancel` asked for it: its runner is stopping
    final_counts     TEXT,             -- its activities by state when it ended, JSON (a JobCounts)
    submit_token     TEXT              -- the token its `submit` sent: a retried submit gets this job back
);
CREATE UNIQUE INDEX jobs_by_submit_token ON jobs(submit_token);
";

/// What an older job journal, made before submit tokens, gets at open:
/// the column and its index (a NULL token is no token, and never matches).
const ADD_SUBMIT_TOKEN: &str = "
ALTER TABLE jobs ADD COLUMN submit_token TEXT;
CREATE UNIQUE INDEX jobs_by_submit_token ON jobs(submit_token);
";

/// The schema version this build reads and writes.
pub const SCHEMA_VERSION: i64 = 1;

/// The job journal's file name in the state directory.
pub const JOBS_DB: &str = "jobs.db";

/// One job as the job journal has it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRow {
    /// Its id.
    pub id: u64,
    /// Its name.
    pub name: String,
    /// Where it stands.
    pub state: JobState,
    /// Higher starts first.
    pub priority: i32,
    /// The graph file, absolute.
    pub graph: PathBuf,
    /// The runner's working directory.
    pub cwd: PathBuf,
    /// `--relabel` rules.
    pub relabel: Vec<String>,
    /// `--context-file`.
    pub context_file: Option<PathBuf>,
    /// Queue work no agent offers yet.
    pub wait_for_labels: bool,
    /// `user@host`.
    pub submitter: String,
    /// Unix seconds.
    pub submitted: f64,
    /// When its runner first started.
    pub started: Option<f64>,
    /// When it ended.
    pub ended: Option<f64>,
    /// Its run journal.
    pub journal: PathBuf,
    /// Its latest runner's process id.
    pub runner_pid: Option<u32>,
    /// Why it failed or was cancelled.
    pub message: Option<String>,
    /// Activities in the graph at submission.
    pub activities: u64,
    /// Whether `cancel` asked for it while it ran.
    pub cancel_requested: bool,
    /// Its activities by state when it ended.
    pub final_counts: Option<JobCounts>,
}

/// The job journal, open to read and write. The pool node's job service
/// is its only writer: it holds a lock on the state directory
/// ([`super::JobService::start`]).
pub struct JobStore {
    conn: Connection,
    path: PathBuf,
    /// Where each job's own directory goes: `STATE/jobs`.
    jobs_dir: PathBuf,
}

impl JobStore {
    /// Opens `STATE/jobs.db`, creating it if missing; jobs' directories
    /// go under `STATE/jobs/`.
    pub fn open(state_dir: &Path) -> anyhow::Result<JobStore> {
        JobStore::open_at(&state_dir.join(JOBS_DB), &state_dir.join("jobs"))
    }

    /// Opens the job journal at `path`, creating it if missing, with
    /// jobs' directories under `jobs_dir`.
    pub fn open_at(path: &Path, jobs_dir: &Path) -> anyhow::Result<JobStore> {
        // A link, or another user's file, is never opened: a job journal
        // swapped in by another user would run that user's jobs.
        match trust::check_file(path) {
            Ok(()) => {}
            Err(error) if error.io_kind() == Some(std::io::ErrorKind::NotFound) => {}
            Err(error) => {
                return Err(crate::poolfile::trusted_error(error))
                    .with_context(|| format!("cannot open the job journal {}", path.display()))
            }
        }
        let conn = Connection::open(path)
            .with_context(|| format!("cannot open the job journal {}", path.display()))?;
        // A file without a single table is new: one a pool node killed
        // between creating the file and its schema left (empty, or with
        // only SQLite's header). It is made a job journal here, rather
        // than refused at every start from then on.
        let existed = conn
            .query_row("SELECT count(*) > 0 FROM sqlite_master", [], |row| {
                row.get(0)
            })
            .with_context(|| format!("{} is not a job journal", path.display()))?;
        let store = JobStore {
            conn,
            path: path.to_path_buf(),
            jobs_dir: jobs_dir.to_path_buf(),
        };
        store.sql(|c| c.busy_timeout(Duration::from_secs(10)))?;
        if existed {
            store.check_version()?;
            store.add_submit_tokens()?;
        }
        store.sql(|c| {
            c.pragma_update(None, "journal_mode", "WAL")?;
            c.pragma_update(None, "synchronous", "NORMAL")
        })?;
        if !existed {
            store.sql(|c| {
                let tx = c.unchecked_transaction()?;
                tx.execute_batch(SCHEMA)?;
                tx.execute(
                    "INSERT INTO meta(key, value) VALUES ('schema_version', ?1)",
                    [SCHEMA_VERSION.to_string()],
                )?;
                tx.commit()
            })?;
        }
        Ok(store)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory of job `id`: its run journal, runner log and
    /// progress file.
    pub fn job_dir(&self, id: u64) -> PathBuf {
        self.jobs_dir.join(id.to_string())
    }

    fn check_version(&self) -> anyhow::Result<()> {
        let version: Option<String> = self
            .conn
            .query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |row| row.get(0),
            )
            .optional()
            .with_context(|| format!("{} is not a job journal", self.path.display()))?;
        match version.as_deref().map(str::parse::<i64>) {
            Some(Ok(SCHEMA_VERSION)) => Ok(()),
            Some(Ok(found)) => bail!(
                "the job journal {} has schema version {found}; this build reads {SCHEMA_VERSION}",
                self.path.display()
            ),
            _ => bail!(
                "{} is not a job journal (it has no schema version)",
                self.path.display()
            ),
        }
    }

    /// Adds the submit token column to a job journal made before it.
    fn add_submit_tokens(&self) -> anyhow::Result<()> {
        self.sql(|c| {
            let has: bool = c.query_row(
                "SELECT count(*) > 0 FROM pragma_table_info('jobs') WHERE name = 'submit_token'",
                [],
                |row| row.get(0),
            )?;
            match has {
                true => Ok(()),
                false => c.execute_batch(ADD_SUBMIT_TOKEN),
            }
        })
    }

    /// The job that a submit with `token` made, if one did.
    pub fn job_with_token(&self, token: &str) -> anyhow::Result<Option<u64>> {
        self.sql(|c| {
            c.query_row(
                "SELECT id FROM jobs WHERE submit_token = ?1",
                [token],
                |row| row.get::<_, i64>(0),
            )
            .optional()
        })
        .map(|id| id.map(|id| id as u64))
    }

    fn sql<R>(
        &self,
        operate: impl FnOnce(&Connection) -> rusqlite::Result<R>,
    ) -> anyhow::Result<R> {
        operate(&self.conn).with_context(|| format!("job journal {}", self.path.display()))
    }

    /// Stores a new job, queued, makes its directory, and returns its id.
    /// `activities` is the size of its graph, for its counts until its
    /// runner journals them. An id whose directory is already there (a
    /// job journal lost or replaced, its jobs' folders left) is skipped:
    /// a new job never shows an old one's journal. `place` is called with
    /// the new id before the row is committed (to move the job's files
    /// into [`job_dir`](Self::job_dir)); if it fails, no job is stored.
    pub fn submit(
        &mut self,
        job: &JobSubmission,
        name: &str,
        activities: u64,
        place: impl FnOnce(u64) -> anyhow::Result<()>,
    ) -> anyhow::Result<u64> {
        let relabel = serde_json::to_string(&job.relabel).expect("strings are JSON");
        let in_journal = || format!("job journal {}", self.path.display());
        // One transaction: the id, its folder and the row go together (a
        // folder made for a row that is then not written stays empty,
        // and is skipped like any other).
        let tx = self.conn.unchecked_transaction().with_context(in_journal)?;
        let last: i64 = tx
            .query_row(
                "SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'jobs'), 0)",
                [],
                |row| row.get(0),
            )
            .with_context(in_journal)?;
        let id = self.make_job_dir(last as u64 + 1)?;
        let journal = self.job_dir(id).join("journal.db");
        tx.execute(
            "INSERT INTO jobs(id, name, state, priority, graph, cwd, relabel, context_file,
                              wait_for_labels, submitter, submitted, journal, activities,
                              submit_token)
             VALUES (?1, ?2, 'queued', ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            params![
                id as i64,
                name,
                job.priority,
                path_text(&job.graph),
                path_text(&job.cwd),
                relabel,
                job.context_file.as_deref().map(path_text),
                job.wait_for_labels,
                job.submitter,
                now(),
                path_text(&journal),
                activities as i64,
                job.token,
            ],
        )
        .with_context(in_journal)?;
        place(id)?;
        tx.commit().with_context(in_journal)?;
        Ok(id)
    }
    /// Makes the directory of a new job (mode 0700), with the id `first`
    /// or, when its directory is already there, the next id whose
    /// directory is not; returns that id. Never makes `STATE/jobs`
    /// itself: a state directory removed under the pool node is not
    /// made again.
    fn make_job_dir(&self, first: u64) -> anyhow::Result<u64> {
        let mut id = first;
        loop {
            let dir = self.job_dir(id);
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => return Ok(id),
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => id += 1,
                Err(error) => {
                    return Err(error).with_context(|| {
                        format!("cannot create the job directory {}", dir.display())
                    })
                }
            }
        }
    }

    /// Every job, or only those queued or running, oldest first.
    pub fn list(&self, all: bool) -> anyhow::Result<Vec<JobRow>> {
        let filter = if all {
            ""
        } else {
            "WHERE state IN ('queued', 'running')"
        };
        self.rows(&format!("{SELECT_JOB} {filter} ORDER BY id"), [])
    }

    /// Job `id`, if there is one.
    pub fn get(&self, id: u64) -> anyhow::Result<Option<JobRow>> {
        Ok(self
            .rows(&format!("{SELECT_JOB} WHERE id = ?1"), [id as i64])?
            .pop())
    }

    /// The jobs whose runner runs (or ran when the pool node stopped).
    pub fn running(&self) -> anyhow::Result<Vec<JobRow>> {
        self.rows(
            &format!("{SELECT_JOB} WHERE state = 'running' ORDER BY id"),
            [],
        )
    }

    /// The queued job to start next: highest priority first, then the
    /// one submitted first.
    pub fn next_to_start(&self) -> anyhow::Result<Option<JobRow>> {
        Ok(self
            .rows(
                &format!(
                    "{SELECT_JOB} WHERE state = 'queued' ORDER BY priority DESC, id ASC LIMIT 1"
                ),
                [],
            )?
            .pop())
    }

    /// Job `id`'s runner started as process `pid`: the job runs. Its
    /// start time is the first runner's.
    pub fn set_running(&mut self, id: u64, pid: u32) -> anyhow::Result<()> {
        self.sql(|c| {
            c.execute(
                "UPDATE jobs SET state = 'running', runner_pid = ?2,
                        started = coalesce(started, ?3)
                 WHERE id = ?1",
                params![id as i64, pid, now()],
            )
        })?;
        Ok(())
    }

    /// Job `id` was asked to cancel while it runs.
    pub fn set_cancel_requested(&mut self, id: u64) -> anyhow::Result<()> {
        self.sql(|c| {
            c.execute(
                "UPDATE jobs SET cancel_requested = 1 WHERE id = ?1",
                [id as i64],
            )
        })?;
        Ok(())
    }

    /// Job `id` ended in `state` (a final one), for the reason `message`,
    /// with its activities as `counts` stood then.
    pub fn set_ended(
        &mut self,
        id: u64,
        state: JobState,
        message: Option<&str>,
        counts: Option<&JobCounts>,
    ) -> anyhow::Result<()> {
        if !state.is_final() {
            bail!("job {id} cannot end {state}: not a final state");
        }
        let counts = counts.map(|c| serde_json::to_string(c).expect("counts are JSON"));
        self.sql(|c| {
            c.execute(
                "UPDATE jobs SET state = ?2, message = ?3, ended = ?4, final_counts = ?5
                 WHERE id = ?1",
                params![id as i64, state.as_str(), message, now(), counts],
            )
        })?;
        Ok(())
    }

    fn rows<P: rusqlite::Params>(&self, query: &str, params: P) -> anyhow::Result<Vec<JobRow>> {
        self.sql(|c| {
            let mut statement = c.prepare(query)?;
            let rows = statement.query_map(params, job_row)?;
            rows.collect()
        })
    }
}

/// The columns [`job_row`] reads, in its order.
const SELECT_JOB: &str = "SELECT id, name, state, priority, graph, cwd, relabel, context_file,
    wait_for_labels, submitter, submitted, started, ended, journal, runner_pid, message,
    activities, cancel_requested, final_counts FROM jobs";

/// A row of [`SELECT_JOB`]. A value this build cannot read (a state
/// or JSON written by another) is an error, not a guess.
fn job_row(row: &Row<'_>) -> rusqlite::Result<JobRow> {
    let bad = |column: usize, error: String| {
        rusqlite::Error::FromSqlConversionFailure(column, rusqlite::types::Type::Text, error.into())
    };
    let state: String = row.get(2)?;
    let relabel: String = row.get(6)?;
    let counts: Option<String> = row.get(18)?;
    Ok(JobRow {
        id: row.get::<_, i64>(0)? as u64,
        name: row.get(1)?,
        state: state.parse().map_err(|e| bad(2, e))?,
        priority: row.get(3)?,
        graph: PathBuf::from(row.get::<_, String>(4)?),
        cwd: PathBuf::from(row.get::<_, String>(5)?),
        relabel: serde_json::from_str(&relabel).map_err(|e| bad(6, e.to_string()))?,
        context_file: row.get::<_, Option<String>>(7)?.map(PathBuf::from),
        wait_for_labels: row.get(8)?,
        submitter: row.get(9)?,
        submitted: row.get(10)?,
        started: row.get(11)?,
        ended: row.get(12)?,
        journal: PathBuf::from(row.get::<_, String>(13)?),
        runner_pid: row.get(14)?,
        message: row.get(15)?,
        activities: row.get::<_, i64>(16)? as u64,
        cancel_requested: row.get(17)?,
        final_counts: match counts {
            Some(text) => Some(serde_json::from_str(&text).map_err(|e| bad(18, e.to_string()))?),
            None => None,
        },
    })
}

/// A path as the job journal stores it. Paths that are not UTF-8 are
/// stored lossily: the service refuses them at submission
/// ([`super::supervisor`]), so none gets here.
fn path_text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

fn now() -> f64 {
    journal::unix_seconds(SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("gluein-jobs-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // The job service makes `jobs` beside the journal before it opens it.
        std::fs::create_dir_all(dir.join("jobs")).expect("scratch directory");
        dir
    }

    fn submission(graph: &str, priority: i32) -> JobSubmission {
        JobSubmission {
            graph: PathBuf::from(format!("/graphs/{graph}.toml")),
            cwd: PathBuf::from("/home/user"),
            name: None,
            relabel: vec!["cpu=gpu".to_string()],
            context_file: None,
            priority,
            wait_for_labels: false,
            submitter: "user@host".to_string(),
            files: None,
            token: None,
        }
    }

    /// A job without files to place.
    fn no_files(_: u64) -> anyhow::Result<()> {
        Ok(())
    }

    #[test]
    fn a_new_job_never_takes_the_id_of_a_folder_already_there() {
        let dir = scratch("folders");
        let mut store = JobStore::open(&dir).unwrap();
        assert_eq!(
            store.submit(&submission("a", 0), "a", 1, no_files).unwrap(),
            1
        );
        let old = store.job_dir(1).join("journal.db");
        std::fs::write(&old, "the old job's journal").unwrap();
        // The job journal lost, its jobs' folders left (and one more made
        // by a pool node that went on without it).
        drop(store);
        std::fs::create_dir(dir.join("jobs/2")).unwrap();
        std::fs::remove_file(dir.join(JOBS_DB)).unwrap();
        let mut store = JobStore::open(&dir).unwrap();
        let id = store.submit(&submission("b", 0), "b", 1, no_files).unwrap();
        assert_eq!(id, 3, "ids 1 and 2 have folders");
        let job = store.get(id).unwrap().unwrap();
        assert_eq!(job.journal, dir.join("jobs/3/journal.db"));
        assert!(dir.join("jobs/3").is_dir());
        assert_eq!(
            std::fs::read_to_string(&old).unwrap(),
            "the old job's journal"
        );
        assert_eq!(
            store.submit(&submission("c", 0), "c", 1, no_files).unwrap(),
            4
        );
        // Without `jobs` (the state directory removed), nothing is made.
        std::fs::remove_dir_all(dir.join("jobs")).unwrap();
        let why = format!(
            "{:#}",
            store
                .submit(&submission("d", 0), "d", 1, no_files)
                .unwrap_err()
        );
        assert!(why.contains("cannot create the job directory"), "{why}");
        assert!(!dir.join("jobs").exists());
        assert_eq!(
            store.list(true).unwrap().len(),
            2,
            "no row without its folder"
        );
    }

    #[test]
    fn queued_jobs_start_by_priority_then_in_submit_order() {
        let dir = scratch("order");
        let mut store = JobStore::open(&dir).unwrap();
        let low = store
            .submit(&submission("low", 0), "low", 3, no_files)
            .unwrap();
        let high = store
            .submit(&submission("high", 5), "high", 3, no_files)
            .unwrap();
        let low2 = store
            .submit(&submission("low2", 0), "low2", 3, no_files)
            .unwrap();
        let high2 = store
            .submit(&submission("high2", 5), "high2", 3, no_files)
            .unwrap();
        assert_eq!(
            (low, high, low2, high2),
            (1, 2, 3, 4),
            "ids count up from 1"
        );
        let mut order = Vec::new();
        while let Some(job) = store.next_to_start().unwrap() {
            store.set_running(job.id, 100 + job.id as u32).unwrap();
            order.push(job.id);
        }
        assert_eq!(order, vec![high, high2, low, low2]);
        let running: Vec<u64> = store.running().unwrap().iter().map(|j| j.id).collect();
        assert_eq!(running, vec![1, 2, 3, 4]);
        assert_eq!(store.get(2).unwrap().unwrap().runner_pid, Some(102));
    }

    #[test]
    fn a_job_reads_back_as_submitted_and_ends_once() {
        let dir = scratch("fields");
        let mut store = JobStore::open(&dir).unwrap();
        let mut job = submission("g", -1);
        job.context_file = Some(PathBuf::from("/home/user/contexts.toml"));
        job.wait_for_labels = true;
        let id = store.submit(&job, "named", 12, no_files).unwrap();
        let row = store.get(id).unwrap().expect("the job");
        assert_eq!(row.name, "named");
        assert_eq!(row.state, JobState::Queued);
        assert_eq!(row.priority, -1);
        assert_eq!(row.graph, job.graph);
        assert_eq!(row.cwd, job.cwd);
        assert_eq!(row.relabel, job.relabel);
        assert_eq!(row.context_file, job.context_file);
        assert!(row.wait_for_labels);
        assert_eq!(row.activities, 12);
        assert_eq!(row.journal, dir.join("jobs/1/journal.db"));
        assert_eq!((row.started, row.ended, row.runner_pid), (None, None, None));

        store.set_running(id, 42).unwrap();
        let first_start = store.get(id).unwrap().unwrap().started.expect("started");
        store.set_running(id, 43).unwrap();
        let again = store.get(id).unwrap().unwrap();
        assert_eq!(again.started, Some(first_start), "the first start stays");
        assert_eq!(again.runner_pid, Some(43));

        assert!(store.set_ended(id, JobState::Running, None, None).is_err());
        let counts = JobCounts {
            done: 11,
            failed: 1,
            total: 12,
            ..JobCounts::default()
        };
        store
            .set_ended(
                id,
                JobState::Failed,
                Some("1 activity failed"),
                Some(&counts),
            )
            .unwrap();
        let ended = store.get(id).unwrap().unwrap();
        assert_eq!(ended.state, JobState::Failed);
        assert_eq!(ended.message.as_deref(), Some("1 activity failed"));
        assert_eq!(ended.final_counts, Some(counts));
        assert!(ended.ended.is_some());
        assert!(
            store.list(false).unwrap().is_empty(),
            "ended jobs are not active"
        );
        assert_eq!(store.list(true).unwrap().len(), 1);
        assert!(store.get(99).unwrap().is_none());
    }

    #[test]
    fn the_job_journal_survives_a_reopen_and_refuses_other_files() {
        let dir = scratch("reopen");
        {
            let mut store = JobStore::open(&dir).unwrap();
            let id = store.submit(&submission("g", 0), "g", 1, no_files).unwrap();
            store.set_running(id, 7).unwrap();
            store.set_cancel_requested(id).unwrap();
        }
        let mut store = JobStore::open(&dir).unwrap();
        let running = store.running().unwrap();
        assert_eq!(running.len(), 1);
        assert!(running[0].cancel_requested);
        assert_eq!(
            store.submit(&submission("h", 0), "h", 1, no_files).unwrap(),
            2
        );

        let other = dir.join("other.db");
        Connection::open(&other)
            .unwrap()
            .execute_batch("CREATE TABLE t(x)")
            .unwrap();
        let error = JobStore::open_at(&other, &dir).err().expect("refused");
        assert!(
            format!("{error:#}").contains("not a job journal"),
            "{error:#}"
        );
    }

    #[test]
    fn a_submit_token_finds_its_job_also_in_a_journal_made_before_tokens() {
        let dir = scratch("tokens");
        // A job journal as builds before submit tokens made it.
        let cut = SCHEMA.find("\n    submit_token").expect("the token column");
        let old_schema =
            SCHEMA[..cut].replacen("final_counts     TEXT,", "final_counts     TEXT", 1) + "\n);";
        let old = Connection::open(dir.join(JOBS_DB)).unwrap();
        old.execute_batch(&old_schema).unwrap();
        old.execute(
            "INSERT INTO meta(key, value) VALUES ('schema_version', '1')",
            [],
        )
        .unwrap();
        drop(old);

        let mut store = JobStore::open(&dir).unwrap();
        let mut job = submission("g", 0);
        job.token = Some("0123abcd".to_string());
        let id = store.submit(&job, "g", 1, no_files).unwrap();
        assert_eq!(store.job_with_token("0123abcd").unwrap(), Some(id));
        assert_eq!(store.job_with_token("ffff").unwrap(), None);
        let twice = store.submit(&job, "g", 1, no_files);
        assert!(
            twice.is_err(),
            "one job per token, also if the service did not look first"
        );
        let untokened = store.submit(&submission("h", 0), "h", 1, no_files).unwrap();
        let again = store.submit(&submission("i", 0), "i", 1, no_files).unwrap();
        assert_ne!(untokened, again, "jobs without a token never match");
        let failed = store.submit(&submission("j", 0), "j", 1, |_| anyhow::bail!("no room"));
        assert!(failed.is_err());
        assert_eq!(
            store.list(true).unwrap().len(),
            3,
            "a job whose files failed is not stored"
        );
    }

    #[test]
    fn an_empty_file_a_killed_pool_node_left_becomes_a_job_journal() {
        let dir = scratch("empty");
        std::fs::write(dir.join(JOBS_DB), "").unwrap();
        let mut store = JobStore::open(&dir).expect("an empty file is a new journal");
        assert_eq!(
            store.submit(&submission("g", 0), "g", 1, no_files).unwrap(),
            1
        );
        let other = dir.join("garbage.db");
        std::fs::write(
            &other,
            "not a database at all, but some text of a fair length",
        )
        .unwrap();
        let error = JobStore::open_at(&other, &dir).err().expect("refused");
        assert!(
            format!("{error:#}").contains("not a job journal"),
            "{error:#}"
        );
    }
}
