//! `constellation report` on journals written with the journal crate's own
//! API; the report's own tests are in the report crate (report/tests).

// The report crate's test journals: `constellation report` is tested on
// runs built the same way.
#[path = "../../report/tests/journals/mod.rs"]
mod journals;

use std::path::Path;

use journal::{
    ActivityDecl, ActivityState, ActivityUpdate, ExecutorRow, Journal, NewAttempt, RunStatus,
};
use journals::{attempt, executor, legend_entry, new_run, scratch, try_on, Try};

/// The same through the real command: `constellation run` records the
/// graph, `constellation report --plot` names the kinds in the file's order
/// (not by name, total time, or first start: zeta runs last).
#[test]
fn the_plotted_legend_of_a_real_run_follows_the_graph_file() {
    let dir = scratch("legend-cli");
    std::fs::write(
        dir.join("graph.toml"),
        r#"
[[activity]]
id = "zeta"
script = "true"
after = ["mid-*"]

[[activity]]
id = "alpha-{i}"
for = { i = "1..=2" }
script = "sleep 0.1"

[[activity]]
id = "mid-{i}"
for = { i = "1..=2" }
script = "sleep 0.4"
"#,
    )
    .expect("graph file");
    let binary = env!("CARGO_BIN_EXE_constellation");
    let run = std::process::Command::new(binary)
        .current_dir(&dir)
        .env("RUST_LOG", "error")
        .args(["run", "graph.toml", "-n", "2", "--journal", "j.db"])
        .output()
        .expect("constellation run");
    assert!(run.status.success(), "{run:?}");
    let report = std::process::Command::new(binary)
        .current_dir(&dir)
        .args(["report", "j.db", "--plot", "plot.svg"])
        .output()
        .expect("constellation report");
    assert!(report.status.success(), "{report:?}");
    let svg = std::fs::read_to_string(dir.join("plot.svg")).expect("read svg");
    let at = |entry: &str| legend_entry(&svg, entry).unwrap_or_else(|| panic!("{entry}: {svg}"));
    assert!(at("zeta (1)") < at("alpha-{i} (2)"), "{svg}");
    assert!(at("alpha-{i} (2)") < at("mid-{i} (2)"), "{svg}");
}

/// A sweep of 100,000 activities as a runner journals it, written
/// straight through the journal's API (`declare` once, `record` in
/// batches of 1,000): activity n's one attempt fails where n % 1000 is 1,
/// it fails once and succeeds on a retry where n % 1000 is 501, and the
/// last 100 never run (50 cancelled, 50 left pending). Two kinds, the
/// first 60,000 activities `sim-{n}` and the rest `render-{n}`, on 8
/// executors of two nodes.
fn hundred_thousand_run(path: &Path) {
    const COUNT: usize = 100_000;
    let mut journal = Journal::create(path).expect("create");
    let run = journal.begin_run(&new_run()).expect("begin");
    let t0 = journal.runs().expect("runs")[0].started;
    let executors: Vec<ExecutorRow> = (0..8)
        .map(|i| executor(&format!("node{}", i / 4), i % 4, "cpu,anywhere", 1))
        .collect();
    journal
        .record_executors(run, &executors)
        .expect("executors");
    let ids: Vec<String> = (0..COUNT)
        .map(|n| match n < 60_000 {
            true => format!("sim-{n}"),
            false => format!("render-{n}"),
        })
        .collect();
    let kinds = ["sim-{n}".to_string(), "render-{n}".to_string()];
    let activities = ids.iter().enumerate().map(|(n, id)| ActivityDecl {
        id,
        kind: usize::from(n >= 60_000),
        context: 0,
        spec_hash: n as u64,
        rerun: true,
    });
    let keys = journal
        .declare(run, &kinds, &["anywhere".to_string()], activities)
        .expect("declare");
    assert_eq!(keys.len(), COUNT);
    let mut free = [0.0f64; 8];
    let mut updates = Vec::new();
    for (n, &activity) in keys.iter().enumerate() {
        let slot = n % 8;
        let e = &executors[slot];
        let mut attempt = |exit: i64, number: i64| {
            let start = free[slot];
            free[slot] += 0.002;
            NewAttempt {
                cpu_seconds: Some(0.001),
                ..attempt(
                    t0,
                    &Try {
                        attempt: number,
                        exit,
                        ..try_on(&e.node, e.executor, start, start + 0.0015)
                    },
                )
            }
        };
        let (state, attempts) = if n >= COUNT - 50 {
            (ActivityState::Pending, None)
        } else if n >= COUNT - 100 {
            (ActivityState::Cancelled, Some(vec![]))
        } else if n % 1000 == 1 {
            (ActivityState::Failed, Some(vec![attempt(1, 1)]))
        } else if n % 1000 == 501 {
            (
                ActivityState::Done,
                Some(vec![attempt(1, 1), attempt(0, 2)]),
            )
        } else {
            (ActivityState::Done, Some(vec![attempt(0, 1)]))
        };
        if let Some(attempts) = attempts {
            updates.push(ActivityUpdate {
                activity,
                state,
                message: None,
                attempts,
            });
        }
        if updates.len() == 1_000 {
            journal
                .record(run, &std::mem::take(&mut updates))
                .expect("record");
        }
    }
    journal.record(run, &updates).expect("record");
    journal.end_run(run, RunStatus::Failed).expect("end");
}

/// The words of the report's line that starts with `start`.
fn line_words(report: &str, start: &str) -> Vec<String> {
    let line = (report.lines())
        .find(|l| l.trim_start().starts_with(start))
        .unwrap_or_else(|| panic!("no line {start:?} in\n{report}"));
    line.split_whitespace().map(str::to_string).collect()
}

/// `constellation report` on a journal of 100,000 activities prints the
/// counts of every attempt and state. (Version 1 read every activity's row
/// and the expanded graph to make it; version 2 counts states in SQLite
/// and reads attempts as numbers.)
#[test]
fn the_report_of_a_hundred_thousand_activities_counts_them_all() {
    let dir = scratch("hundred-thousand");
    hundred_thousand_run(&dir.join("run.db"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_constellation"))
        .current_dir(&dir)
        .args(["report", "run.db"])
        .output()
        .expect("run constellation report");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(
            "attempts in run 1: 100000 on 99900 activities, 200 failed, \
             100 retries (attempts after the first)"
        ),
        "{text}"
    );
    // done, failed, cancelled, pending, total
    let states = ["99800", "100", "50", "50", "100000"];
    assert_eq!(
        line_words(&text, "last set by run 1")[5..],
        states,
        "{text}"
    );
    assert_eq!(line_words(&text, "whole journal")[2..], states, "{text}");
    assert!(text.contains("executors  8 (8 cpu) with 8 cores"), "{text}");
    // Attempts by kind, failed ones included: sim has 60 retries.
    let sim = line_words(&text, "sim-{n}");
    assert_eq!(sim[1], "60060", "{text}");
    let render = line_words(&text, "render-{n}");
    assert_eq!(render[1], "39940", "{text}");
}
