//! The repository's scripts, run for real with stand-ins for the programs
//! they start, so what they call is seen without hours of work.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// An executable shell script at `path`.
fn stand_in(path: &Path, body: &str) {
    std::fs::create_dir_all(path.parent().expect("a directory")).expect("directory");
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).expect("script");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

#[test]
fn the_evaluation_runs_the_binaries_of_cargo_target_dir() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("scripts-eval-target-dir");
    let _ = std::fs::remove_dir_all(&dir);
    // A `cargo` that builds nothing, and a target directory elsewhere whose
    // binaries say how they were called.
    stand_in(&dir.join("bin/cargo"), "exit 0");
    let target = dir.join("elsewhere");
    stand_in(&target.join("release/supernova"), "echo \"supernova $*\"");
    stand_in(
        &target.join("release/examples/sim_scale"),
        "echo \"sim_scale $*\"",
    );
    let out_dir = dir.join("out");
    let path = format!(
        "{}:{}",
        dir.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = Command::new("bash")
        .arg(root().join("scripts/eval/run.sh"))
        .arg(&out_dir)
        .env("PATH", path)
        .env("CARGO_TARGET_DIR", &target)
        .env("SEEDS", "1")
        .output()
        .expect("run scripts/eval/run.sh");
    let stdout = String::from_utf8_lossy(&output.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{}", output.status);
    assert!(
        stdout.contains("supernova eval scenario1 scenario2 scenario3 --seeds 1")
            && stdout.contains("supernova eval strategies failure")
            && stdout.contains("sim_scale --runs 3"),
        "the binaries under CARGO_TARGET_DIR ran: {stdout}"
    );
    let tables = std::fs::read_to_string(out_dir.join("tables.txt")).expect("tables.txt");
    assert!(tables.contains("sim_scale --runs 3"), "{tables}");
}
