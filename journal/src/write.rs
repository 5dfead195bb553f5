//! Writing to the journal: runs begun and ended, their executors,
//! activities declared (and matched against an earlier run on resume), and
//! attempts and states recorded, each write a transaction of its own.

use std::collections::HashMap;
use std::time::SystemTime;

use rusqlite::{params, OptionalExtension};

use crate::error::JournalError;
use crate::open::{Journal, INDEX_IDS};
use crate::rows::{
    unix_seconds, ActivityDecl, ActivityUpdate, ExecutorRow, NewAttempt, NewRun, RunStatus,
};

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

/// The executors [`Journal::record`] has looked up or added, so that an
/// attempt costs no query for its executor: per node name, its
/// `(run, executor index, labels, slot)`s (a node has few).
#[derive(Default)]
pub(crate) struct SlotCache {
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

impl Journal {
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
        self.record_with(run, updates, &[])
    }

    /// [`record`](Self::record), and in the same transaction, after the
    /// updates, `more` attempts `(activity, attempt)` that change no
    /// activity's state: executions lost with their node, and executions
    /// after their activity had settled. An attempt with the number of one
    /// recorded before replaces it (a lost one whose result came after all).
    pub fn record_with(
        &mut self,
        run: i64,
        updates: &[ActivityUpdate],
        more: &[(i64, NewAttempt)],
    ) -> Result<(), JournalError> {
        let Journal {
            conn, path, slots, ..
        } = self;
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
            let updated =
                (updates.iter()).flat_map(|u| u.attempts.iter().map(move |a| (u.activity, a)));
            let more = more.iter().map(|(activity, a)| (*activity, a));
            for (activity, a) in updated.chain(more) {
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
                    activity,
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
            for update in updates {
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
