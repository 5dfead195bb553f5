//! The report over journals written with the journal crate's own API.

use std::path::{Path, PathBuf};

use gluein::report::{plot, Report, ReportError, WallEnd};
use journal::{
    ActivityDecl, ActivityState, ActivityUpdate, AttemptRow, ExecutorRow, Journal, NewRun,
    RunStatus,
};

/// A fresh directory for one test, under cargo's scratch space for tests.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("report-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

fn new_run() -> NewRun {
    NewRun {
        graph_path: "pipeline.toml".into(),
        graph_spec: "{}".into(),
        graph_hash: "abc123".into(),
        host: "fs0".into(),
        command_line: "constellation run pipeline.toml".into(),
        output_dir: "out".into(),
    }
}

fn decl(id: &str, kind: &str) -> ActivityDecl {
    ActivityDecl {
        id: id.into(),
        kind: kind.into(),
        spec_hash: "h".into(),
        context: "anywhere".into(),
        after: vec![],
        rerun: true,
    }
}

fn executor(node: &str, index: i64, labels: &str, cores: i64) -> ExecutorRow {
    ExecutorRow {
        executor: index,
        node: node.into(),
        labels: labels.into(),
        cores,
    }
}

/// An attempt on `node`/`executor` from `start` to `end` seconds after `t0`.
struct Try<'a> {
    node: &'a str,
    executor: i64,
    attempt: i64,
    start: f64,
    end: f64,
    exit: i64,
    cpu: Option<f64>,
}

fn attempt(t0: f64, activity: &str, t: &Try<'_>) -> AttemptRow {
    AttemptRow {
        run: 0,
        activity: activity.into(),
        attempt: t.attempt,
        node: t.node.into(),
        executor: t.executor,
        labels: "cpu,anywhere".into(),
        started: t0 + t.start,
        ended: t0 + t.end,
        outcome: "exited".into(),
        exit_code: Some(t.exit),
        signal: None,
        message: None,
        cpu_seconds: t.cpu,
        stdout: None,
        stderr: None,
        stdout_bytes: None,
        stderr_bytes: None,
    }
}

fn update(t0: f64, id: &str, state: ActivityState, tries: &[Try<'_>]) -> ActivityUpdate {
    ActivityUpdate {
        id: id.into(),
        state,
        message: None,
        attempts: tries.iter().map(|t| attempt(t0, id, t)).collect(),
    }
}

fn try_on(node: &str, executor: i64, start: f64, end: f64) -> Try<'_> {
    Try {
        node,
        executor,
        attempt: 1,
        start,
        end,
        exit: 0,
        cpu: None,
    }
}

/// A run with three executors (two cpu with 2 cores, one gpu with 1 core)
/// and six attempts over 20 seconds; `end` says whether the run records its
/// end. Returns the journal and the run's start time.
fn small_run(dir: &Path, end: bool) -> (Journal, f64) {
    let mut journal = Journal::create(&dir.join("run.db")).expect("create");
    let run = journal.begin_run(&new_run()).expect("begin");
    let t0 = journal.runs().expect("runs")[0].started;
    journal
        .record_executors(
            run,
            &[
                executor("n1", 0, "cpu,cores=2,anywhere", 2),
                executor("n1", 1, "cpu,anywhere", 2),
                executor("n2", 0, "gpu,anywhere", 1),
            ],
        )
        .expect("executors");
    journal
        .declare(
            run,
            &[
                decl("sim-1", "sim-{i}"),
                decl("sim-2", "sim-{i}"),
                decl("sim-3", "sim-{i}"),
                decl("sim-4", "sim-{i}"),
                decl("render-a", "render-{x}"),
                decl("render-b", "render-{x}"),
            ],
        )
        .expect("declare");
    let done = ActivityState::Done;
    journal
        .record(
            run,
            &[
                update(
                    t0,
                    "sim-1",
                    done,
                    &[Try {
                        cpu: Some(20.0),
                        ..try_on("n1", 0, 0.0, 10.0)
                    }],
                ),
                update(
                    t0,
                    "sim-2",
                    done,
                    &[
                        Try {
                            exit: 1,
                            ..try_on("n1", 1, 0.0, 4.0)
                        },
                        Try {
                            attempt: 2,
                            cpu: Some(6.0),
                            ..try_on("n1", 1, 5.0, 11.0)
                        },
                    ],
                ),
                update(t0, "sim-3", done, &[try_on("n1", 0, 10.0, 16.0)]),
                update(t0, "render-a", done, &[try_on("n2", 0, 2.0, 8.0)]),
                update(t0, "render-b", done, &[try_on("n2", 0, 8.0, 20.0)]),
            ],
        )
        .expect("record");
    if end {
        journal.end_run(run, RunStatus::Succeeded).expect("end");
    }
    (journal, t0)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-5
}

#[test]
fn figures_of_a_small_run_are_exact() {
    let dir = scratch("figures");
    let (journal, _) = small_run(&dir, true);
    let report = Report::from_journal_with_bins(&journal, None, 20).expect("report");

    assert_eq!(report.run.run, 1);
    assert_eq!(report.run.wall_end, WallEnd::Recorded);
    assert!(close(report.run.makespan, 20.0));
    assert!(close(report.timeline.span, 20.0));
    assert!(close(report.timeline.bin_seconds, 1.0));

    let a = &report.attempts;
    assert_eq!((a.total, a.failed, a.retries, a.activities), (6, 1, 1, 5));
    assert_eq!(a.with_cpu_seconds, 2);
    assert_eq!(report.states.journal.done, 5);
    assert_eq!(report.states.journal.pending, 1);
    assert_eq!(report.states.set_by_run.total(), 6);

    // Kinds come most total time first: sim 4+6+10+6 = 26 s, render 18 s.
    let sim = &report.kinds[0];
    assert_eq!(sim.kind, "sim-{i}");
    assert_eq!((sim.attempts, sim.failed), (4, 1));
    assert!(close(sim.min, 4.0) && close(sim.median, 6.0) && close(sim.max, 10.0));
    assert!(close(sim.total, 26.0));
    assert_eq!(sim.cpu_seconds, Some(26.0));
    let render = &report.kinds[1];
    assert_eq!(render.kind, "render-{x}");
    assert!(close(render.min, 6.0) && close(render.median, 9.0) && close(render.max, 12.0));
    assert_eq!(render.cpu_seconds, None);

    // In second 2..3 all three executors are busy; in 4..5 two (sim-2's
    // first try ended at 4); in 16..17 only the gpu one.
    let busy = &report.timeline.executors_busy;
    assert!(close(busy[2], 1.0), "{busy:?}");
    assert!(close(busy[4], 2.0 / 3.0), "{busy:?}");
    assert!(close(busy[16], 1.0 / 3.0), "{busy:?}");
    assert!(close(report.timeline.mean_executors_busy, 44.0 / 60.0));

    // sim-1 spreads 20 CPU seconds over 10 s: 2 of the 5 cores.
    let cores = report.timeline.cores_busy.as_ref().expect("core use");
    assert_eq!(report.timeline.cores, 5);
    assert!(close(cores[2], 0.4), "{cores:?}");
    // sim-2's retry adds 6 CPU seconds over 5..11: one more core.
    assert!(close(cores[6], 0.6), "{cores:?}");

    let lane = |label: &str| {
        report
            .lanes
            .iter()
            .find(|l| l.label == label)
            .unwrap_or_else(|| panic!("no lane {label}"))
    };
    assert_eq!(lane("cpu").executors, 2);
    assert!(close(lane("cpu").busy[2], 1.0));
    assert!(close(lane("cpu").busy[4], 0.5));
    assert!(close(lane("gpu").busy[16], 1.0));

    let names: Vec<String> = report.executors.iter().map(|e| e.name()).collect();
    assert_eq!(names, ["n1/0", "n1/1", "n2/0"]);
    assert_eq!(report.bars.len(), 6);
    assert_eq!(report.bars.iter().filter(|b| b.failed).count(), 1);

    let text = report.to_string();
    assert!(text.contains("sim-{i}"), "{text}");
    assert!(text.contains("start to recorded end"), "{text}");
    assert!(text.contains("73.3% of executor time"), "{text}");
}

#[test]
fn a_killed_runner_is_measured_to_its_last_attempt() {
    let dir = scratch("killed");
    let (journal, _) = small_run(&dir, false);
    let report = Report::from_journal(&journal, Some(1)).expect("report");
    assert_eq!(report.run.ended, None);
    assert_eq!(report.run.status, "running");
    assert_eq!(report.run.wall_end, WallEnd::LastAttempt);
    assert!(close(report.run.wall_seconds, 20.0));
    let text = report.to_string();
    assert!(text.contains("no end was recorded"), "{text}");
}

#[test]
fn attempts_on_executors_the_run_did_not_list_still_count() {
    let dir = scratch("unlisted");
    let mut journal = Journal::create(&dir.join("run.db")).expect("create");
    let run = journal.begin_run(&new_run()).expect("begin");
    let t0 = journal.runs().expect("runs")[0].started;
    journal.declare(run, &[decl("x", "x")]).expect("declare");
    journal
        .record(
            run,
            &[update(
                t0,
                "x",
                ActivityState::Done,
                &[try_on("m", 3, 0.0, 2.0)],
            )],
        )
        .expect("record");
    let report = Report::from_journal_with_bins(&journal, None, 2).expect("report");
    assert_eq!(report.executors.len(), 1);
    assert!(!report.executors[0].listed);
    assert_eq!(report.executors[0].lane, "cpu");
    assert!(close(report.timeline.mean_executors_busy, 1.0));
    assert!(report.timeline.cores_busy.is_none());
}

#[test]
fn bad_runs_and_empty_journals_are_named() {
    let dir = scratch("bad-run");
    let empty = Journal::create(&dir.join("empty.db")).expect("create");
    assert!(matches!(
        Report::from_journal(&empty, None),
        Err(ReportError::NoRuns(_))
    ));

    let (mut journal, _) = small_run(&dir, true);
    let error = Report::from_journal(&journal, Some(7)).expect_err("no run 7");
    assert!(matches!(error, ReportError::NoSuchRun { run: 7, .. }));
    assert!(error.to_string().contains("only run 1"), "{error}");
    journal.begin_run(&new_run()).expect("second run");
    let error = Report::from_journal(&journal, Some(0)).expect_err("no run 0");
    assert!(error.to_string().contains("runs 1, 2"), "{error}");
    // The latest run is the default, even with no attempts yet.
    let report = Report::from_journal(&journal, None).expect("report");
    assert_eq!(report.run.run, 2);
    assert_eq!(report.attempts.total, 0);
    assert_eq!(report.run.wall_end, WallEnd::Unknown);
    assert!(report.to_string().contains("no attempts"));
    plot(&report, &dir.join("empty.svg")).expect("an empty run still plots");
    plot(&report, &dir.join("empty.png")).expect("an empty run still plots");
}

#[test]
fn a_corrupt_attempt_is_an_error_not_a_panic() {
    let dir = scratch("corrupt");
    let mut journal = Journal::create(&dir.join("run.db")).expect("create");
    let run = journal.begin_run(&new_run()).expect("begin");
    journal.declare(run, &[decl("x", "x")]).expect("declare");
    journal
        .record(
            run,
            &[update(
                100.0,
                "x",
                ActivityState::Done,
                &[try_on("m", 0, 5.0, 2.0)],
            )],
        )
        .expect("record");
    let error = Report::from_journal(&journal, None).expect_err("corrupt");
    assert!(matches!(error, ReportError::Corrupt { .. }));
    assert!(
        error.to_string().contains("ends 3.000 s before it starts"),
        "{error}"
    );
}

#[test]
fn plots_are_written_as_svg_and_png_and_nothing_else() {
    let dir = scratch("plots");
    let (journal, _) = small_run(&dir, true);
    let report = Report::from_journal(&journal, None).expect("report");

    let svg = dir.join("util.svg");
    plot(&report, &svg).expect("svg");
    let text = std::fs::read_to_string(&svg).expect("read svg");
    assert!(text.starts_with("<svg"), "{}", &text[..text.len().min(80)]);
    assert!(text.contains("n1/0") && text.contains("sim-{i}"));

    let png = dir.join("util.PNG");
    plot(&report, &png).expect("png");
    let bytes = std::fs::read(&png).expect("read png");
    assert!(bytes.len() > 1000);
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");

    let error = plot(&report, &dir.join("util.jpg")).expect_err("jpg");
    assert!(matches!(error, ReportError::UnsupportedFormat(_)));
    assert!(error.to_string().contains(".svg or .png"), "{error}");
    assert!(plot(&report, &dir.join("util")).is_err());
}

/// A realistic run for looking at: two nodes, three cpu executors and one
/// gpu executor, three kinds, 60 activities and one failed attempt that is
/// retried. Writes `report-sample/sample.{png,svg,txt}` under cargo's test
/// scratch directory.
#[test]
fn a_realistic_sample_plots() {
    let dir = scratch("sample");
    let mut journal = Journal::create(&dir.join("run.db")).expect("create");
    let run = journal.begin_run(&new_run()).expect("begin");
    let t0 = journal.runs().expect("runs")[0].started;
    let executors = [
        executor("fs0", 0, "cpu,cores=4,host:fs0,anywhere", 4),
        executor("fs0", 1, "cpu,cores=4,host:fs0,anywhere", 4),
        executor("fs1", 0, "cpu,cores=4,host:fs1,anywhere", 4),
        executor("fs1", 1, "gpu,host:fs1,anywhere", 1),
    ];
    journal
        .record_executors(run, &executors)
        .expect("executors");

    // A small deterministic generator keeps the sample the same every run.
    let mut seed: u64 = 42;
    let mut random = move || {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (seed >> 33) as f64 / (1u64 << 31) as f64
    };
    let mut decls = Vec::new();
    let mut updates = Vec::new();
    // Cpu executors fetch then classify; the gpu one detects in between.
    let mut free: [f64; 4] = [0.5, 0.8, 1.1, 6.0];
    for i in 0..20 {
        for (kind, lane) in [
            ("fetch-{night}", 0),
            ("detect-{pair}", 1),
            ("classify-{pair}", 0),
        ] {
            let id = kind
                .replace("{night}", &i.to_string())
                .replace("{pair}", &i.to_string());
            decls.push(decl(&id, kind));
            let slot = if lane == 1 {
                3
            } else {
                (0..3)
                    .min_by(|&a, &b| free[a].total_cmp(&free[b]))
                    .unwrap_or(0)
            };
            let length = match kind {
                "fetch-{night}" => 1.5 + 2.0 * random(),
                "detect-{pair}" => 2.0 + random(),
                _ => 3.0 + 4.0 * random(),
            };
            let e = &executors[slot];
            let cores = e.cores as f64;
            let mut tries = Vec::new();
            let mut start = free[slot];
            if i == 7 && lane == 0 && kind == "classify-{pair}" {
                tries.push(Try {
                    exit: 137,
                    cpu: Some(0.8 * length * cores / 2.0),
                    ..try_on(&e.node, e.executor, start, start + length / 2.0)
                });
                start += length / 2.0 + 0.3;
            }
            let attempt = tries.len() as i64 + 1;
            tries.push(Try {
                attempt,
                cpu: Some(length * cores * (0.4 + 0.5 * random())),
                ..try_on(&e.node, e.executor, start, start + length)
            });
            free[slot] = start + length + 0.1 + 0.4 * random();
            let update = update(t0, &id, ActivityState::Done, &tries);
            updates.push(update);
        }
    }
    journal.declare(run, &decls).expect("declare");
    journal.record(run, &updates).expect("record");
    journal.end_run(run, RunStatus::Succeeded).expect("end");

    let report = Report::from_journal(&journal, None).expect("report");
    assert_eq!(report.attempts.total, 61);
    assert_eq!(report.attempts.failed, 1);
    let text = report.to_string();
    println!("{text}");
    std::fs::write(dir.join("sample.txt"), &text).expect("text");
    plot(&report, &dir.join("sample.png")).expect("png");
    plot(&report, &dir.join("sample.svg")).expect("svg");
}

/// Many executors with long host names and more kinds than the legend
/// names: rows thin out, labels stay apart, the legend is capped. Writes
/// `report-large/large.png` under cargo's test scratch directory.
#[test]
fn a_large_run_plots_with_a_capped_legend() {
    let dir = scratch("large");
    let mut journal = Journal::create(&dir.join("run.db")).expect("create");
    let run = journal.begin_run(&new_run()).expect("begin");
    let t0 = journal.runs().expect("runs")[0].started;
    let nodes: Vec<String> = (0..12)
        .map(|n| format!("node{n:03}.cluster.example.org"))
        .collect();
    let mut executors = Vec::new();
    for node in &nodes {
        for e in 0..4 {
            let labels = if e == 3 {
                "gpu,anywhere"
            } else {
                "cpu,anywhere"
            };
            executors.push(executor(node, e, labels, 2));
        }
    }
    journal
        .record_executors(run, &executors)
        .expect("executors");
    let mut decls = Vec::new();
    let mut updates = Vec::new();
    for (slot, e) in executors.iter().enumerate() {
        let mut t = slot as f64 * 0.7;
        for i in 0..40 {
            let kind = format!("step{}-{{item}}", (slot + i) % 15);
            let id = format!("{kind}-{slot}-{i}");
            let length = 1.0 + ((slot * 7 + i * 13) % 10) as f64;
            decls.push(decl(&id, &kind));
            let failed = (slot * 40 + i) % 97 == 0;
            let state = if failed {
                ActivityState::Failed
            } else {
                ActivityState::Done
            };
            updates.push(update(
                t0,
                &id,
                state,
                &[Try {
                    exit: i64::from(failed),
                    cpu: Some(length),
                    ..try_on(&e.node, e.executor, t, t + length)
                }],
            ));
            t += length + 0.5;
        }
    }
    journal.declare(run, &decls).expect("declare");
    journal.record(run, &updates).expect("record");
    let report = Report::from_journal(&journal, None).expect("report");
    assert_eq!(report.executors.len(), 48);
    assert_eq!(report.kinds.len(), 15);
    assert_eq!(report.states.journal.failed, report.attempts.failed);
    std::fs::write(dir.join("large.txt"), report.to_string()).expect("text");
    plot(&report, &dir.join("large.png")).expect("png");
}
