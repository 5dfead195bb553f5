//! Journals written with the journal crate's own API, and the SVG reading,
//! for the report's tests here and for the tests of `constellation report`
//! in gluein/tests/report.rs, which includes this file by path: both build
//! runs the same way.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use journal::{ExecutorRow, NewAttempt, NewRun};

/// A fresh directory for one test, under cargo's scratch space for tests.
pub fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("report-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

pub fn new_run() -> NewRun {
    NewRun {
        graph_path: "pipeline.toml".into(),
        graph_hash: "abc123".into(),
        host: "fs0".into(),
        command_line: "constellation run pipeline.toml".into(),
        output_dir: "out".into(),
        sources: vec![("pipeline.toml".into(), "# the graph".into())],
    }
}

pub fn executor(node: &str, index: i64, labels: &str, cores: i64) -> ExecutorRow {
    ExecutorRow {
        executor: index,
        node: node.into(),
        labels: labels.into(),
        cores,
    }
}

/// An attempt on `node`/`executor` from `start` to `end` seconds after `t0`.
pub struct Try<'a> {
    pub node: &'a str,
    pub executor: i64,
    pub attempt: i64,
    pub start: f64,
    pub end: f64,
    pub exit: i64,
    pub cpu: Option<f64>,
}

pub fn attempt(t0: f64, t: &Try<'_>) -> NewAttempt {
    NewAttempt {
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
        stream: None,
    }
}

pub fn try_on(node: &str, executor: i64, start: f64, end: f64) -> Try<'_> {
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

/// Where a text element of exactly `text` starts in an SVG (plotters writes
/// the text on a line of its own).
pub fn legend_entry(svg: &str, text: &str) -> Option<usize> {
    svg.find(&format!(">\n{text}\n</text>"))
}
