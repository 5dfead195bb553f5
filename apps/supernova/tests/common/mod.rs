//! Helpers shared by the integration tests.

// Each test file uses its own subset of these helpers.
#![allow(dead_code)]

pub mod fits_header;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh, empty directory under the system's temporary directory, unique
/// to this process and call (tests run in parallel in one process).
pub fn scratch(name: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "supernova-test-{}-{name}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs the `supernova` binary under test with `args` in `cwd` and waits
/// for it.
pub fn supernova(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_supernova"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("start supernova")
}

/// Runs `supernova generate --out data` in `cwd` with `options`, written
/// as on a command line ("--pairs 3 --seed 7"); the test fails if it fails.
pub fn generate(cwd: &Path, data: &Path, options: &str) {
    let mut args = vec!["generate", "--out", data.to_str().unwrap()];
    args.extend(options.split_whitespace());
    let generated = supernova(&args, cwd);
    assert!(generated.status.success(), "{}", text(&generated));
}

/// Runs `supernova graph` in `dir` to write the graph file `graph` for the
/// dataset at `data`, with work directories under `dir/work` and candidate
/// lists in `results`; the test fails if it fails.
pub fn write_graph(dir: &Path, data: &Path, graph: &Path, results: &Path) {
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
            results.to_str().unwrap(),
        ],
        dir,
    );
    assert!(written.status.success(), "{}", text(&written));
}

/// A finished command's status, stdout and stderr, for assertion messages.
pub fn text(output: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The `constellation` binary of this workspace, built if a narrower
/// `cargo test` did not build it.
pub fn constellation_binary() -> PathBuf {
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
