//! A simulated run as a run journal, in the schema `constellation run`
//! writes, so that `constellation report` summarizes and plots it like a
//! real run: one executor row per simulated executor (named by its node),
//! one activity per simulated activity, one attempt row per attempt.
//!
//! An attempt row is executor time. A simulated parent (a pair's
//! `detect-nova`) does its own work when it starts, then submits its
//! children and suspends, holding no executor until the last of them
//! reports, when it finishes at no cost. Its row therefore covers its own
//! work only, from its start; were it to span the wait as well, executors
//! would look busy with parents and children at once (the report then
//! showed 132 % executor use for scenario 2's many-task run).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::SystemTime;

use constellation::sim::{AttemptEnd, SimReport};
use constellation::ActivityId;
use journal::{
    ActivityDecl, ActivityState, ActivityUpdate, ExecutorRow, Journal, JournalError, NewAttempt,
    NewRun, RunStatus,
};

/// Writes `report` to a new journal at `path` (which must not exist),
/// described as `description`. Simulated seconds are laid out from now,
/// so the report's clock times are those of the moment of writing.
pub fn write(report: &SimReport, path: &Path, description: &str) -> Result<(), JournalError> {
    let mut journal = Journal::create(path)?;
    let run = journal.begin_run(&NewRun {
        graph_path: format!("simulated: {description}"),
        graph_hash: String::new(),
        host: "simulator".into(),
        command_line: std::env::args().collect::<Vec<_>>().join(" "),
        output_dir: String::new(),
        sources: Vec::new(),
    })?;
    let executors: Vec<ExecutorRow> = (report.executors.iter())
        .map(|e| ExecutorRow {
            executor: i64::from(e.index),
            node: report.node_name(e.node).to_string(),
            labels: e.labels.clone(),
            cores: i64::from(e.cores),
        })
        .collect();
    journal.record_executors(run, &executors)?;
    let labels: BTreeMap<(u32, u32), &str> = (report.executors.iter())
        .map(|e| ((e.node, e.index), e.labels.as_str()))
        .collect();
    let start = journal::unix_seconds(SystemTime::now());
    let mut attempts: BTreeMap<String, (u32, u32, Vec<NewAttempt>)> = BTreeMap::new();
    for record in &report.records {
        let id = activity_name(record.activity);
        let entry = attempts
            .entry(id.clone())
            .or_insert_with(|| (record.kind, record.contexts, Vec::new()));
        let completed = record.outcome == AttemptEnd::Completed;
        entry.2.push(NewAttempt {
            attempt: i64::from(record.attempt),
            node: report.node_name(record.node).to_string(),
            executor: i64::from(record.executor),
            labels: (labels.get(&(record.node, record.executor)).copied())
                .unwrap_or_default()
                .to_string(),
            started: start + record.start,
            ended: start + record.start + record.busy.min(record.end - record.start),
            outcome: if completed { "exited" } else { "signalled" }.into(),
            exit_code: completed.then_some(0),
            signal: (!completed).then_some(9),
            message: (!completed).then(|| "its node died".to_string()),
            cpu_seconds: Some(record.busy),
            stdout: None,
            stderr: None,
            stdout_bytes: None,
            stderr_bytes: None,
            stream: None,
        });
    }
    // The simulator numbers kinds and context lists as the journal does;
    // a number past its lists (none it writes) reads as an empty name.
    let with_empty = |names: &[String]| {
        let mut names = names.to_vec();
        names.push(String::new());
        names
    };
    let (kinds, contexts) = (with_empty(&report.kinds), with_empty(&report.context_lists));
    let index = |names: &[String], i: u32| (i as usize).min(names.len() - 1);
    let declared = (attempts.iter()).map(|(id, (kind, context, _))| ActivityDecl {
        id,
        kind: index(&kinds, *kind),
        context: index(&contexts, *context),
        spec_hash: 0,
        rerun: true,
    });
    let keys = journal.declare(run, &kinds, &contexts, declared)?;
    let updates: Vec<ActivityUpdate> = (attempts.into_values().zip(keys))
        .map(|((_, _, rows), activity)| {
            let done = rows.iter().any(|row| row.exit_code == Some(0));
            ActivityUpdate {
                activity,
                state: if done {
                    ActivityState::Done
                } else {
                    ActivityState::Failed
                },
                message: None,
                attempts: rows,
            }
        })
        .collect();
    journal.record(run, &updates)?;
    let status = if report.lost == 0 {
        RunStatus::Succeeded
    } else {
        RunStatus::Failed
    };
    journal.end_run(run, status)
}

/// The activity's name in the journal: its origin node's number and its
/// sequence number there. The simulator numbers its nodes 1, 2, ..., and
/// an id's display form shortens the node to its first eight hex digits,
/// the same for all of them: activities of different nodes then shared
/// a name, and the journal kept one attempt of each name (scenario 3
/// showed 7,336 of its attempts).
fn activity_name(id: ActivityId) -> String {
    format!("n{}-{}", id.origin().uuid().as_u128(), id.seq())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fsutil::test_dir;
    use constellation::net::Strategy;
    use constellation::sim::{simulate, ComparisonSetup};

    #[test]
    fn every_attempt_of_every_node_is_a_row_and_rows_are_executor_time() {
        // A seeding parent per site submits its share there: children of
        // different nodes have the same sequence numbers.
        let mut setup = ComparisonSetup::new(16, 2);
        setup.activities = 64;
        setup.every_site = true;
        let model = setup.model(Strategy::Hierarchical);
        let report = simulate(&model, &setup.workload()).unwrap();
        assert_eq!(report.completed, 64 + 2);
        let dir = test_dir("sim-journal");
        let path = dir.as_ref().join("run.db");
        write(&report, &path, "two sites").unwrap();
        let rows = Journal::open(&path).unwrap().attempts(None).unwrap();
        assert_eq!(rows.len(), report.records.len());
        for row in &rows {
            let record = (report.records.iter())
                .find(|r| activity_name(r.activity) == row.activity)
                .unwrap();
            let held = row.recorded.ended - row.recorded.started;
            assert!((held - record.busy).abs() < 1e-6, "{row:?} {record:?}");
        }
    }
}
