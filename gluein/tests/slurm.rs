//! Glide-in on a real Slurm: `scripts/test.sh` starts one with
//! `scripts/slurm-local.sh` and sets `SLURM_CONF` and
//! `CONSTELLATION_REQUIRE_SLURM=1`; elsewhere this test says it skipped.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{allocation_ids, allocation_state, constellation, scratch, start_pool, text};

/// Whether a Slurm cluster answers; fails instead of skipping when the
/// test script promised one.
fn slurm_available() -> bool {
    let up = std::env::var_os("SLURM_CONF").is_some()
        && Command::new("sinfo")
            .arg("-h")
            .output()
            .is_ok_and(|o| o.status.success());
    if !up {
        assert!(
            std::env::var_os("CONSTELLATION_REQUIRE_SLURM").is_none(),
            "CONSTELLATION_REQUIRE_SLURM is set but no Slurm answers (SLURM_CONF={:?})",
            std::env::var_os("SLURM_CONF")
        );
        println!(
            "skipped: no Slurm here; start one with `eval \"$(scripts/slurm-local.sh start)\"`"
        );
    }
    up
}

fn job_id(dir: &Path, allocation: &str) -> String {
    allocation_state(dir, allocation)["job_id"]
        .as_str()
        .expect("a job id")
        .to_string()
}

#[test]
fn two_slurm_pilots_run_a_bag_and_a_cancelled_pilots_work_runs_on_the_other() {
    if !slurm_available() {
        return;
    }
    let dir = scratch("slurm-bag");
    let pool_file = dir.join("pool.json");
    let _pool = start_pool(&dir);
    for label in ["first", "second"] {
        let submitted = constellation(&dir)
            .args(["glidein", "slurm", "--nodes", "1", "--walltime", "10m"])
            .args(["--executors-per-node", "1", "--context", label, "--pool"])
            .arg(&pool_file)
            .output()
            .unwrap();
        assert!(submitted.status.success(), "{}", text(&submitted));
    }
    let allocations = allocation_ids(&dir);
    assert_eq!(allocations.len(), 2, "{allocations:?}");
    for allocation in &allocations {
        let script = dir
            .join("home/allocations")
            .join(allocation)
            .join("pilot.sh");
        let script = std::fs::read_to_string(script).unwrap();
        assert!(
            script.contains("srun") && script.contains("agent"),
            "{script}"
        );
    }

    let marks = dir.join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let graph = dir.join("bag.toml");
    std::fs::write(
        &graph,
        format!(
            "[[activity]]\nid = \"item-{{n}}\"\nfor = {{ n = \"1..=24\" }}\n\
             script = \"sleep 0.5; echo $CONSTELLATION_LABELS >> {}/{{n}}\"\n",
            marks.display()
        ),
    )
    .unwrap();
    let runner = constellation(&dir)
        .args(["run", graph.to_str().unwrap(), "--pool"])
        .arg(&pool_file)
        .args([
            "--wait-agents",
            "2",
            "--wait-timeout",
            "60s",
            "--progress",
            "none",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Cancel the first pilot once work is flowing.
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_dir(&marks).unwrap().count() < 3 {
        assert!(Instant::now() < deadline, "no work ran on the pilots");
        std::thread::sleep(Duration::from_millis(100));
    }
    let cancelled = job_id(&dir, &allocations[0]);
    let scancel = Command::new("scancel").arg(&cancelled).output().unwrap();
    assert!(scancel.status.success(), "{}", text(&scancel));
    let output = runner.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", text(&output));

    let done: Vec<String> = std::fs::read_dir(&marks)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    assert_eq!(done.len(), 24, "every item of the bag completed");
    let ran_on = |label: &str| done.iter().filter(|m| m.starts_with(label)).count();
    assert!(ran_on("second") > 0, "the surviving pilot ran nothing");
    println!(
        "first pilot ran {}, second {}, of 24",
        ran_on("first"),
        ran_on("second")
    );

    let list = constellation(&dir)
        .args(["glidein", "list"])
        .output()
        .unwrap();
    assert!(list.status.success(), "{}", text(&list));
    let listed = String::from_utf8_lossy(&list.stdout).to_string();
    assert!(
        listed.contains(&allocations[0]) && listed.contains(&allocations[1]),
        "{listed}"
    );
    let cancel = constellation(&dir)
        .args(["glidein", "cancel", &allocations[1]])
        .output()
        .unwrap();
    assert!(cancel.status.success(), "{}", text(&cancel));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let queue = Command::new("squeue")
            .args(["-h", "-o", "%i"])
            .output()
            .unwrap();
        let jobs = String::from_utf8_lossy(&queue.stdout).to_string();
        if !jobs
            .lines()
            .any(|j| j.trim() == cancelled || j.trim() == job_id(&dir, &allocations[1]))
        {
            break;
        }
        assert!(Instant::now() < deadline, "pilots still queued: {jobs}");
        std::thread::sleep(Duration::from_millis(200));
    }
}
