//! A run's record: the journal (the same SQLite format `constellation run`
//! writes, so `constellation report` reads it) and the time per step.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use journal::{
    ActivityDecl, ActivityState, ActivityUpdate, ExecutorRow, Journal, NewAttempt, NewRun,
    RunStatus,
};

use crate::pipeline::StepTiming;
use crate::run::{RunRecord, Version};

/// The timings that are activities on the pool: the steps of the many-task
/// version and of the sequential reference, the pairs of the monolithic one.
fn activities(record: &RunRecord, version: Version) -> Vec<&StepTiming> {
    record
        .outcomes
        .iter()
        .flat_map(|o| &o.steps)
        .filter(|t| match version {
            Version::Monolithic => t.kind == "pair",
            _ => t.kind != "pair",
        })
        .collect()
}

/// A journal for one run, opened when the run starts so that it records
/// the run's real start time.
pub struct RunJournal {
    journal: Journal,
    run: i64,
    host: String,
}

impl RunJournal {
    /// Creates a new journal at `path` (which must not exist) and starts a
    /// run described as `description`.
    pub fn begin(path: &Path, description: &str) -> Result<RunJournal, journal::JournalError> {
        let host = executors::probe::hostname();
        let mut journal = Journal::create(path)?;
        let run = journal.begin_run(&NewRun {
            graph_path: description.to_string(),
            graph_hash: String::new(),
            host: host.clone(),
            command_line: std::env::args().collect::<Vec<_>>().join(" "),
            output_dir: String::new(),
            sources: Vec::new(),
        })?;
        Ok(RunJournal { journal, run, host })
    }

    /// Records what the run did: its executors, and each activity with its
    /// one attempt (steps, or pairs for the monolithic version).
    pub fn finish(
        mut self,
        record: &RunRecord,
        version: Version,
    ) -> Result<(), journal::JournalError> {
        let (run, host) = (self.run, self.host.clone());
        let executors: Vec<ExecutorRow> = record
            .executors
            .iter()
            .map(|e| ExecutorRow {
                executor: e.index as i64,
                node: host.clone(),
                labels: e.labels.clone(),
                cores: e.cores as i64,
            })
            .collect();
        self.journal.record_executors(run, &executors)?;
        let timings = activities(record, version);
        let kinds = distinct(timings.iter().map(|t| t.kind.as_str()));
        let contexts = distinct(timings.iter().map(|t| t.labels.as_str()));
        let declared = timings.iter().map(|t| ActivityDecl {
            id: &t.id,
            kind: kinds.binary_search(&t.kind).unwrap_or(0),
            context: contexts.binary_search(&t.labels).unwrap_or(0),
            spec_hash: 0,
            rerun: true,
        });
        let keys = self.journal.declare(run, &kinds, &contexts, declared)?;
        let updates: Vec<ActivityUpdate> = (timings.iter().zip(keys))
            .map(|(t, key)| update(key, t, &host, &record.executors))
            .collect();
        self.journal.record(run, &updates)?;
        let failed = record.outcomes.iter().any(|o| o.result.is_err());
        self.journal.end_run(
            run,
            if failed {
                RunStatus::Failed
            } else {
                RunStatus::Succeeded
            },
        )
    }
}

/// The distinct `names`, sorted (steps carry their kind and labels as text).
fn distinct<'a>(names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut names: Vec<String> = names.map(str::to_string).collect();
    names.sort();
    names.dedup();
    names
}

fn update(
    activity: i64,
    t: &StepTiming,
    host: &str,
    executors: &[crate::run::ExecutorInfo],
) -> ActivityUpdate {
    let executor = t.executor.unwrap_or(0);
    let labels = if t.labels.is_empty() {
        executors
            .get(executor)
            .map(|e| e.labels.clone())
            .unwrap_or_default()
    } else {
        t.labels.clone()
    };
    let ok = t.error.is_none();
    ActivityUpdate {
        activity,
        state: if ok {
            ActivityState::Done
        } else {
            ActivityState::Failed
        },
        message: t.error.clone(),
        attempts: vec![NewAttempt {
            attempt: 1,
            node: host.to_string(),
            executor: executor as i64,
            labels,
            started: t.started,
            ended: t.ended,
            outcome: "exited".into(),
            exit_code: Some(if ok { 0 } else { 1 }),
            signal: None,
            message: t.error.clone(),
            cpu_seconds: None,
            stdout: None,
            stderr: None,
            stdout_bytes: None,
            stderr_bytes: None,
            stream: None,
        }],
    }
}

/// Seconds spent per step kind over a run.
#[derive(Debug, Clone, PartialEq)]
pub struct StepTable {
    /// Per kind in pipeline order: (kind, count, total seconds, mean, max).
    pub rows: Vec<(String, usize, f64, f64, f64)>,
    /// Wall-clock seconds of the whole run.
    pub wall: f64,
}

impl StepTable {
    /// The steps of every pair of `record` (inside monolithic pairs too).
    pub fn of(record: &RunRecord) -> StepTable {
        let mut kinds: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for t in record.outcomes.iter().flat_map(|o| &o.steps) {
            if t.kind != "pair" {
                kinds
                    .entry(t.kind.clone())
                    .or_default()
                    .push(t.ended - t.started);
            }
        }
        let rows = kinds
            .into_iter()
            .map(|(kind, seconds)| {
                let total: f64 = seconds.iter().sum();
                let max = seconds.iter().copied().fold(0.0, f64::max);
                let mean = total / seconds.len() as f64;
                (kind, seconds.len(), total, mean, max)
            })
            .collect();
        StepTable {
            rows,
            wall: record.ended - record.started,
        }
    }
}

impl fmt::Display for StepTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<15} {:>6} {:>10} {:>9} {:>9}",
            "step", "count", "total s", "mean s", "max s"
        )?;
        for (kind, count, total, mean, max) in &self.rows {
            writeln!(
                f,
                "{kind:<15} {count:>6} {total:>10.3} {mean:>9.4} {max:>9.4}"
            )?;
        }
        write!(f, "wall clock {:.2} s", self.wall)
    }
}
