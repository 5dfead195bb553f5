//! Reading the journal: what a resume may skip, and the runs, activities,
//! attempts and executors that reports show, names joined back in.

use std::collections::HashMap;
use std::ops::ControlFlow;

use crate::error::JournalError;
use crate::open::Journal;
use crate::rows::{
    ActivityRow, ActivityState, AttemptFacts, AttemptRow, ExecutorRow, ExecutorSlot, KindRow,
    NewAttempt, ReExecutions, RunRow, StateCount, StreamPlace, EXTRA_EXECUTION, LOST,
};
// Where the sources come from, for a doc link.
#[cfg(doc)]
use crate::rows::NewRun;

impl Journal {
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
    /// order [`NewRun::sources`] gave them. A job's runner gives each
    /// file's digest as its text: the pool node keeps the files themselves
    /// in the job's folder (see the schema's `run_sources`).
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

    /// The highest attempt number of `activity` in run `run`; 0 if it has
    /// none. The next execution's attempts are numbered after it.
    pub fn last_attempt(&self, run: i64, activity: i64) -> Result<i64, JournalError> {
        self.sql(|c| {
            c.query_row(
                "SELECT COALESCE(MAX(attempt), 0) FROM attempts WHERE run = ?1 AND activity = ?2",
                [run, activity],
                |row| row.get(0),
            )
        })
    }

    /// What run `run` executed beyond one execution per activity:
    /// executions lost with their node, and extra ones after their
    /// activity had settled.
    pub fn re_executions(&self, run: i64) -> Result<ReExecutions, JournalError> {
        self.sql(|c| {
            c.query_row(
                "SELECT COALESCE(SUM(outcome = ?2), 0),
                        COALESCE(SUM(substr(message, 1, length(?3)) = ?3), 0)
                 FROM attempts WHERE run = ?1",
                rusqlite::params![run, LOST, EXTRA_EXECUTION],
                |row| {
                    Ok(ReExecutions {
                        lost: row.get::<_, i64>(0)? as usize,
                        extra: row.get::<_, i64>(1)? as usize,
                    })
                },
            )
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
        recorded: NewAttempt {
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
        },
    })
}
