//! The `supernova` command as users call it: the step scripts run as a
//! graph under `constellation run` give the same candidates as the Rust
//! many-task version, and bad input gets a clear error, not a panic.

mod common;
use common::scratch;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn supernova(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_supernova"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("start supernova")
}

fn text(output: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The `constellation` binary of this workspace, built if a narrower
/// `cargo test` did not build it.
fn constellation_binary() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_BIN_EXE_supernova"));
    let binary = here.with_file_name("constellation");
    if !binary.exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", "gluein", "--bin", "constellation"])
            .status()
            .expect("run cargo");
        assert!(status.success(), "building the constellation binary failed");
    }
    binary
}

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
    let dir = scratch("graph");
    let data = dir.join("data");
    let generated = supernova(
        &[
            "generate",
            "--out",
            data.to_str().unwrap(),
            "--pairs",
            "2",
            "--seed",
            "5",
            "--min-size",
            "320",
            "--max-size",
            "448",
        ],
        &dir,
    );
    assert!(generated.status.success(), "{}", text(&generated));

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
    let written = supernova(
        &[
            "graph",
            "--data",
            data.to_str().unwrap(),
            "--out",
            graph.to_str().unwrap(),
            "--work",
            dir.join("work").to_str().unwrap(),
            "--results",
            dir.join("scripted").to_str().unwrap(),
        ],
        &dir,
    );
    assert!(written.status.success(), "{}", text(&written));
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
fn eval_reproduces_scenario_2_and_the_emulation_agrees_with_the_simulator() {
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

    // Real processes on loopback, a few pairs, a fast clock.
    let out = supernova(
        &[
            "eval",
            "emulate",
            "--emulate-pairs",
            "24",
            "--emulate-scale",
            "0.002",
        ],
        &dir,
    );
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    let rows: Vec<&str> = (shown.lines())
        .filter(|l| l.starts_with("anywhere") || l.starts_with("location"))
        .collect();
    assert_eq!(rows.len(), 4, "{shown}");
    for row in rows {
        let difference: f64 = (row.split_whitespace().last().unwrap())
            .trim_end_matches('%')
            .parse()
            .unwrap();
        // The unsorted configurations only: at this clock the runtime's
        // real-time pauses (an idle thief backs off up to 50 ms, 25
        // modelled seconds here) weigh on the sorted ones' tails. The 10%
        // agreement is measured at 80 pairs and 0.01 by scripts/eval/run.sh.
        if row.starts_with("anywhere ") || row.starts_with("location sorted  ") {
            assert!(difference.abs() < 25.0, "{row}\n{shown}");
        }
    }

    let bad = supernova(&["eval", "scenario1", "--seeds", "0"], &dir);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
    assert!(text(&bad).contains("--seeds must be at least 1"));
}
