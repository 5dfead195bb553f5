//! `constellation glidein` as a user runs it, with real processes: the
//! ssh backend's options are checked before anything runs.

mod common;

use std::process::Command;

use common::{run, scratch, text};

#[test]
fn ssh_options_are_only_for_ssh_and_must_look_like_ssh_options() {
    let dir = scratch("glidein-ssh-options");
    let bad = run(
        &dir,
        &[
            "glidein",
            "ssh",
            "--hosts",
            "n1",
            "--walltime",
            "1h",
            "--ssh-option=-p 2222",
            "--dry-run",
        ],
    );
    assert!(!bad.status.success());
    assert!(
        text(&bad).contains("ssh option `-p 2222` is invalid"),
        "{}",
        text(&bad)
    );
    let good = run(
        &dir,
        &[
            "glidein",
            "ssh",
            "--hosts",
            "n1",
            "--walltime",
            "1h",
            "--ssh-option",
            "Port=2222",
            "--dry-run",
        ],
    );
    assert!(good.status.success(), "{}", text(&good));
    assert!(
        text(&good).contains("ssh -o 'Port=2222' -o 'BatchMode=yes'"),
        "{}",
        text(&good)
    );
    let elsewhere = Command::new(common::BIN)
        .args([
            "glidein",
            "slurm",
            "--walltime",
            "1h",
            "--ssh-option",
            "Port=2",
        ])
        .output()
        .expect("run constellation");
    assert_eq!(elsewhere.status.code(), Some(2), "{}", text(&elsewhere));
}
