//! The `supernova` command as users call it: the step scripts run as a
//! graph under `constellation run` give the same candidates as the Rust
//! many-task version, and bad input gets a clear error, not a panic.

mod common;
use common::{constellation_binary, generate, scratch, supernova, text, write_graph};

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

/// Held by the tests that load the cores or that measure real time.
static CPU: Mutex<()> = Mutex::new(());

fn candidate_files(dir: &Path) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&path).unwrap())
        })
        .collect();
    files.sort();
    files
}

#[test]
fn the_step_scripts_as_a_graph_give_the_same_candidates_as_the_rust_activities() {
    let _busy = CPU.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("graph");
    let data = dir.join("data");
    generate(
        &dir,
        &data,
        "--pairs 2 --seed 5 --min-size 320 --max-size 448",
    );

    let rust = dir.join("rust");
    let ran = supernova(
        &[
            "run",
            "--data",
            data.to_str().unwrap(),
            "--out",
            rust.to_str().unwrap(),
            "-n",
            "2",
        ],
        &dir,
    );
    assert!(ran.status.success(), "{}", text(&ran));
    let stdout = String::from_utf8_lossy(&ran.stdout);
    assert!(stdout.contains("precision"), "{stdout}");
    assert!(stdout.contains("7.2-compare"), "{stdout}");
    assert!(rust.join("utilization.png").exists());

    let graph = dir.join("pipeline.toml");
    write_graph(&dir, &data, &graph, &dir.join("scripted"));
    let run = Command::new(constellation_binary())
        .args(["run", graph.to_str().unwrap(), "-n", "2"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", text(&run));
    assert_eq!(
        candidate_files(&dir.join("scripted")),
        candidate_files(&rust.join("results")),
        "the scripted graph and the Rust activities disagree"
    );
    assert!(
        !dir.join("work").join("pair-0001").exists(),
        "cleanup did not run"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_gets_a_clear_error() {
    let dir = scratch("errors");
    let missing = supernova(&["run", "--data", "no-such-dataset"], &dir);
    assert_eq!(missing.status.code(), Some(2), "{}", text(&missing));
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains("no-such-dataset") && err.contains("supernova generate"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");

    std::fs::create_dir_all(dir.join("full")).unwrap();
    std::fs::write(dir.join("full/keep.txt"), "precious").unwrap();
    let refused = supernova(&["generate", "--out", "full"], &dir);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("not empty"));
    assert_eq!(
        std::fs::read_to_string(dir.join("full/keep.txt")).unwrap(),
        "precious"
    );

    std::fs::create_dir_all(dir.join("broken")).unwrap();
    std::fs::write(dir.join("broken/manifest.json"), "{ not json").unwrap();
    let broken = supernova(&["run", "--data", "broken"], &dir);
    assert_eq!(broken.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&broken.stderr).contains("manifest.json"));

    let no_work = supernova(
        &["step", "detect", "--work", "nowhere", "--epoch", "a"],
        &dir,
    );
    assert_eq!(no_work.status.code(), Some(2));
    let err = String::from_utf8_lossy(&no_work.stderr);
    assert!(err.contains("a.fits") && !err.contains("panicked"), "{err}");

    let bad_epoch = supernova(&["step", "detect", "--work", "x", "--epoch", "c"], &dir);
    assert!(String::from_utf8_lossy(&bad_epoch.stderr).contains("`a` or `b`"));

    let not_fits = dir.join("notfits");
    std::fs::create_dir_all(&not_fits).unwrap();
    std::fs::write(not_fits.join("a.fits"), "SIMPLE? no").unwrap();
    let garbage = supernova(
        &["step", "detect", "--work", "notfits", "--epoch", "a"],
        &dir,
    );
    assert_eq!(garbage.status.code(), Some(2), "{}", text(&garbage));
    assert!(!String::from_utf8_lossy(&garbage.stderr).contains("panicked"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn eval_reproduces_scenario_2_and_writes_journals_the_report_reads() {
    let dir = scratch("eval");
    let journals = dir.join("journals");
    let out = supernova(
        &[
            "eval",
            "scenario2",
            "--seeds",
            "1",
            "--profile",
            "paper",
            "--out",
            journals.to_str().unwrap(),
        ],
        &dir,
    );
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    for expected in [
        "1/48",
        "6/8",
        "48/1",
        "many-task 48/1",
        "best monolithic",
        "paper: 20% better",
    ] {
        assert!(shown.contains(expected), "{expected:?} missing:\n{shown}");
    }
    // The simulated run is a journal `constellation report` reads.
    let db = journals.join("scenario2-paper-many-task.db");
    assert!(db.exists() && journals.join("scenario2-paper-many-task.png").exists());
    let report = Command::new(constellation_binary())
        .args(["report", db.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(report.status.success(), "{}", text(&report));
    // Rows are executor time: a suspended pair holds no executor, so the
    // executors are never busier than all of them at once.
    let summary = text(&report);
    let use_line = (summary.lines())
        .find(|line| line.trim_start().starts_with("mean use"))
        .unwrap_or_else(|| panic!("no mean use line:\n{summary}"));
    let executor_use: f64 = use_line
        .split_whitespace()
        .nth(2)
        .and_then(|share| share.trim_end_matches('%').parse().ok())
        .unwrap_or_else(|| panic!("unreadable: {use_line}"));
    assert!(
        (50.0..=100.0).contains(&executor_use),
        "many-task on 48 executors: {use_line}"
    );

    let bad = supernova(&["eval", "scenario1", "--seeds", "0"], &dir);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
    assert!(text(&bad).contains("--seeds must be at least 1"));
}

#[test]
fn the_emulated_runtime_agrees_with_the_simulator() {
    // Real time is what this test measures: keep the pipeline tests of
    // this file off the two cores meanwhile.
    let _quiet = CPU.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("emulate");
    // Real processes on loopback, a few pairs, a fast clock.
    let out = supernova(
        &[
            "eval",
            "emulate",
            "--emulate-pairs",
            "24",
            "--emulate-scale",
            "0.002",
            "--emulate-runs",
            "3",
        ],
        &dir,
    );
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    let rows: Vec<Vec<&str>> = (shown.lines())
        .filter(|l| l.starts_with("anywhere") || l.starts_with("location"))
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), 4, "{shown}");
    let seconds =
        |cell: &str| -> f64 { cell.parse().unwrap_or_else(|_| panic!("{cell:?}\n{shown}")) };
    let mut emulated = Vec::new();
    for row in &rows {
        let [name, simulated, range, emulated_median, _, difference] = row[..] else {
            panic!("{row:?}\n{shown}");
        };
        let (low, high) = range.split_once('-').unwrap();
        let (low, high, median) = (seconds(low), seconds(high), seconds(emulated_median));
        // Which executor takes the last large pair sets a 24-pair run's
        // makespan; the simulator's seeds and the real runs spread by
        // tens of per cent. A run far outside that spread has gone wrong:
        // copies not waited out, pairs run twice, a stalled steal.
        assert!(
            (0.7 * low..=1.3 * high).contains(&median),
            "{name}: emulated {median} s against a simulated {low}-{high} s\n{shown}"
        );
        if name == "location sorted" {
            // Labels alone decide where each pair runs, and no pair
            // moves: the two must agree closely.
            let difference = seconds(difference.trim_end_matches('%').trim_start_matches('+'));
            assert!(difference.abs() < 10.0, "{name}: {difference}%\n{shown}");
            assert!(
                (seconds(simulated) - low).abs() < 1.0,
                "one order only\n{shown}"
            );
        }
        emulated.push(median);
    }
    // The paper's effect on the real runtime: data locality beats taking
    // pairs anywhere in any order.
    assert!(
        emulated[2] < emulated[0] && emulated[3] < emulated[0],
        "{shown}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
