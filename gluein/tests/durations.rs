//! One duration format on the command line and in graph files (issue 22):
//! `250ms` and `1:00:00` work in both, and a bare `30`, which used to mean
//! minutes on the command line and seconds in a graph, is refused in both
//! with the units to add. Runs the real `constellation` binary.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{constellation, run, scratch, text};

const NO_UNIT: &str = "`30` has no unit: write `30s` for seconds or `30m` for minutes";

fn write_graph(dir: &Path, name: &str, body: &str) -> String {
    std::fs::write(dir.join(name), body).expect("graph file");
    name.to_string()
}

#[test]
fn the_command_line_takes_unit_and_clock_forms() {
    let dir = scratch("durations-cli-forms");
    for (walltime, sbatch_time) in [
        ("1:00:00", "#SBATCH --time=01:00:00"),
        ("90m", "#SBATCH --time=01:30:00"),
        ("1-02:00:00", "#SBATCH --time=1-02:00:00"),
        ("2d", "#SBATCH --time=2-00:00:00"),
    ] {
        // `--command-timeout 250ms`: the old command-line parser refused
        // milliseconds ("unit `s` has no number before it").
        let out = run(
            &dir,
            &[
                "glidein",
                "--command-timeout",
                "250ms",
                "slurm",
                "--dry-run",
                "--nodes",
                "1",
                "--walltime",
                walltime,
            ],
        );
        assert!(out.status.success(), "{walltime}: {}", text(&out));
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(script.contains(sbatch_time), "{walltime}: {script}");
    }
}

#[test]
fn a_walltime_of_milliseconds_is_read_and_then_found_too_short() {
    let dir = scratch("durations-cli-millis");
    let out = run(
        &dir,
        &[
            "glidein",
            "slurm",
            "--dry-run",
            "--nodes",
            "1",
            "--walltime",
            "250ms",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The parser took it (no "has no number"); the pilot rules refuse it,
    // quoting it as written rather than as `0s`.
    assert!(
        stderr.contains("--walltime 250ms is too short") && stderr.contains("at least 60s"),
        "{stderr}"
    );
}

#[test]
fn the_command_line_refuses_a_bare_number_naming_both_units() {
    let dir = scratch("durations-cli-bare");
    let graph = write_graph(
        &dir,
        "g.toml",
        "[[activity]]\nid = \"a\"\nscript = \"true\"\n",
    );
    for args in [
        &[
            "glidein",
            "slurm",
            "--dry-run",
            "--nodes",
            "1",
            "--walltime",
            "30",
        ][..],
        &["glidein", "--command-timeout", "30", "list"][..],
        &["agent", "--pool", "none.json", "--idle-timeout", "30"][..],
        &["run", &graph, "--pool", "none.json", "--wait-timeout", "30"][..],
        &["status", "--pool", "none.json", "--timeout", "30"][..],
    ] {
        let out = run(&dir, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(NO_UNIT), "{args:?}: {stderr}");
    }
    assert!(
        !dir.join("constellation-runs").exists(),
        "a refused argument runs nothing"
    );
}

#[test]
fn a_graph_takes_milliseconds_and_clocks() {
    let dir = scratch("durations-graph-forms");
    let graph = write_graph(
        &dir,
        "g.toml",
        "[[activity]]\nid = \"slow\"\nscript = \"sleep 60\"\ntimeout = \"250ms\"\n\n\
         [[activity]]\nid = \"quick\"\nscript = \"true\"\ntimeout = \"1:00:00\"\n",
    );
    let started = Instant::now();
    let out = run(&dir, &["run", &graph, "-n", "2", "--progress", "none"]);
    // Far below the minute the slow activity would sleep, and far above
    // what the run takes on a busy machine.
    assert!(
        started.elapsed() < Duration::from_secs(45),
        "the 250ms timeout did not cut the minute's sleep short: {}",
        text(&out)
    );
    assert_eq!(out.status.code(), Some(1), "slow fails: {}", text(&out));
    let all = text(&out);
    assert!(all.contains("timed out after 250ms"), "{all}");
    assert!(!all.contains("quick: "), "quick succeeds: {all}");
}

#[test]
fn a_graph_refuses_a_bare_number_at_its_line_and_column() {
    let dir = scratch("durations-graph-bare");
    for value in ["30", "\"30\""] {
        let graph = write_graph(
            &dir,
            "g.toml",
            &format!("[[activity]]\nid = \"a\"\nscript = \"true\"\ntimeout = {value}\n"),
        );
        let out = constellation(&dir)
            .args(["run", &graph, "--progress", "none"])
            .output()
            .expect("run constellation");
        assert!(!out.status.success(), "{value}: {}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("g.toml:4:11: {NO_UNIT}")),
            "{value}: {stderr}"
        );
    }
    assert!(
        !dir.join("constellation-runs").exists(),
        "a refused graph runs nothing"
    );
}
