//! `constellation glidein` as a user runs it, with real processes: the
//! local backend's agents join a real pool and run a bag, then are
//! cancelled; a hanging batch system query cannot hang `glidein list`; the
//! PBS flavor is detected from `qstat --version` or chosen.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{
    agent_pids, alive, allocation_dir, allocation_ids, allocation_state, constellation, log, marks,
    run, run_on_pool, scratch, sleepers, start_pool, text, AgentsGuard,
};

/// Waits up to `limit` for `done`, panicking with `what` after that.
fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn local_pilot_agents_run_a_bag_and_leave_when_cancelled() {
    let dir = scratch("glidein-local");
    let _pool = start_pool(&dir);
    let submitted = run(
        &dir,
        &[
            "glidein",
            "local",
            "--nodes",
            "2",
            "--walltime",
            "10m",
            "--executors-per-node",
            "1",
            "--context",
            "glided",
            "--pool",
            "pool.json",
        ],
    );
    assert!(submitted.status.success(), "{}", text(&submitted));
    let ids = allocation_ids(&dir);
    assert_eq!(ids.len(), 1, "{ids:?}");
    let id = &ids[0];
    let alloc = allocation_dir(&dir, id);
    let _agents = AgentsGuard(alloc.clone());
    assert_eq!(allocation_state(&dir, id)["state"]["kind"], "running");

    let graph = sleepers(&dir, 12, 0.2);
    let ran = run_on_pool(&dir, &graph, 2, &["--wait-timeout", "60s"]);
    let agent_logs = || {
        format!(
            "{}{}",
            log(&alloc, "agent-1.stderr"),
            log(&alloc, "agent-2.stderr")
        )
    };
    assert!(ran.status.success(), "{}\n{}", text(&ran), agent_logs());
    let marks = marks(&dir);
    assert_eq!(marks.len(), 12, "every activity ran once");
    assert!(
        marks.iter().all(|m| m.0 == "glided"),
        "only the glided agents ran work: {marks:?}"
    );

    let agents = agent_pids(&alloc);
    assert_eq!(agents.len(), 2, "{agents:?}");
    let listed = run(&dir, &["glidein", "list"]);
    assert!(listed.status.success(), "{}", text(&listed));
    let listing = String::from_utf8_lossy(&listed.stdout).into_owned();
    let line = listing.lines().find(|l| l.starts_with(id.as_str()));
    assert!(line.is_some_and(|l| l.ends_with("running")), "{listing}");
    assert_eq!(listed_state(&dir, id), "running");

    let cancelled = run(&dir, &["glidein", "cancel", id]);
    assert!(cancelled.status.success(), "{}", text(&cancelled));
    for (_, pid) in &agents {
        wait_for("the agents to leave", Duration::from_secs(30), || {
            !alive(*pid)
        });
    }
    // The pilot saw its agents leave cleanly and recorded that.
    let status = alloc.join("exit_status");
    wait_for("the pilot's exit status", Duration::from_secs(10), || {
        status.is_file()
    });
    assert_eq!(log(&alloc, "exit_status").trim(), "0", "{}", agent_logs());
    for i in 1..=2 {
        let stderr = log(&alloc, &format!("agent-{i}.stderr"));
        assert!(stderr.contains("joined"), "{stderr}");
        assert!(stderr.contains("agent leaving: asked to stop"), "{stderr}");
    }
    let listed = run(&dir, &["glidein", "list"]);
    let listing = String::from_utf8_lossy(&listed.stdout).into_owned();
    let line = listing.lines().find(|l| l.starts_with(id.as_str()));
    assert!(line.is_some_and(|l| l.ends_with("cancelled")), "{listing}");
    assert_eq!(listed_state(&dir, id), "cancelled");
}

/// The state `glidein list --json` gives allocation `id`.
fn listed_state(dir: &Path, id: &str) -> String {
    let listed = run(dir, &["glidein", "list", "--json"]);
    assert!(listed.status.success(), "{}", text(&listed));
    let json: serde_json::Value = serde_json::from_slice(&listed.stdout)
        .unwrap_or_else(|e| panic!("glidein list --json: {e}\n{}", text(&listed)));
    let allocations = json["allocations"]
        .as_array()
        .expect("an allocations array");
    let entry = (allocations.iter())
        .find(|a| a["id"] == id)
        .unwrap_or_else(|| panic!("no {id} in {json}"));
    assert!(
        entry["dir"].as_str().is_some_and(|d| d.ends_with(id)),
        "{entry}"
    );
    entry["state"].as_str().expect("a state").to_string()
}

/// Writes executable bash scripts `name` (with `body`) into `dir/bin` and
/// returns a PATH that finds them first.
fn fake_tools(dir: &Path, tools: &[(&str, &str)]) -> String {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin directory");
    for (name, body) in tools {
        let path = bin.join(name);
        std::fs::write(&path, format!("#!/bin/bash\n{body}\n")).expect("fake tool");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .expect("executable");
    }
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

fn glidein(dir: &Path, path: &str, args: &[&str]) -> Output {
    constellation(dir)
        .env("PATH", path)
        .arg("glidein")
        .args(args)
        .output()
        .expect("run constellation glidein")
}

#[test]
fn hanging_batch_commands_are_cut_off_at_the_command_timeout() {
    let dir = scratch("glidein-timeout");
    std::fs::write(dir.join("pool.json"), "{}").expect("pool file");
    let path = fake_tools(
        &dir,
        &[
            ("sbatch", "echo 4242"),
            ("squeue", "sleep 30"),
            ("scancel", "sleep 30"),
        ],
    );
    let submitted = glidein(
        &dir,
        &path,
        &["slurm", "--walltime", "10m", "--pool", "pool.json"],
    );
    assert!(submitted.status.success(), "{}", text(&submitted));
    let id = &allocation_ids(&dir)[0];

    let started = Instant::now();
    let listed = glidein(&dir, &path, &["list", "--command-timeout", "1s"]);
    let elapsed = started.elapsed();
    assert!(listed.status.success(), "{}", text(&listed));
    assert!(elapsed < Duration::from_secs(10), "list took {elapsed:?}");
    let listing = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(
        listing.contains("pending (could not ask:")
            && listing.contains("`squeue")
            && listing.contains("timed out")
            && listing.contains("within 1 s"),
        "{listing}"
    );

    // The environment variable sets it too, for cancel as for list.
    let started = Instant::now();
    let cancelled = constellation(&dir)
        .env("PATH", &path)
        .env("CONSTELLATION_GLIDEIN_TIMEOUT", "1s")
        .args(["glidein", "cancel", id])
        .output()
        .expect("run constellation glidein cancel");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(!cancelled.status.success(), "{}", text(&cancelled));
    assert!(
        text(&cancelled).contains("`scancel 4242` timed out"),
        "{}",
        text(&cancelled)
    );
}

#[test]
fn the_pbs_flavor_is_asked_of_qstat_or_chosen() {
    let dir = scratch("glidein-pbs-flavor");
    let dry = |path: &str, extra: &[&str]| {
        let mut args = vec!["pbs", "--nodes", "2", "--walltime", "1h", "--dry-run"];
        args.extend(extra);
        let out = glidein(&dir, path, &args);
        assert!(out.status.success(), "{}", text(&out));
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let pro = fake_tools(&dir, &[("qstat", "echo 'pbs_version = 2022.1.1'")]);
    let (script, said) = dry(&pro, &[]);
    assert!(said.contains("PBS flavor: pro"), "{said}");
    assert!(
        script.contains("#PBS -l select=2:mpiprocs=1\n") && script.contains("\npbsdsh -- "),
        "{script}"
    );
    // Chosen: qstat is not asked (this one would fail the test if it were).
    let (script, said) = dry(&pro, &["--pbs-flavor", "torque"]);
    assert!(!said.contains("PBS flavor"), "{said}");
    assert!(
        script.contains("#PBS -l nodes=2\n") && script.contains("\npbsdsh -u "),
        "{script}"
    );
    // A qstat that says nothing useful: Torque, and the user is told why.
    let broken = fake_tools(
        &dir,
        &[("qstat", "echo 'cannot connect to server' >&2; exit 2")],
    );
    let (script, said) = dry(&broken, &[]);
    assert!(
        said.contains("PBS flavor: torque") && said.contains("cannot connect to server"),
        "{said}"
    );
    assert!(script.contains("\npbsdsh -u "), "{script}");
}

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
