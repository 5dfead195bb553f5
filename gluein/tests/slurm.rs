//! Glide-in on a real Slurm: `scripts/test.sh` starts one with
//! `scripts/slurm-local.sh` and sets `SLURM_CONF` and
//! `CONSTELLATION_REQUIRE_SLURM=1`; elsewhere this test says it skipped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_constellation");

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("slurm-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

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

struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn constellation(dir: &Path) -> Command {
    let mut command = Command::new(BIN);
    command
        .current_dir(dir)
        .env("CONSTELLATION_HOME", dir.join("home"));
    command
}

fn text(output: &Output) -> String {
    format!(
        "{:?}\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn allocation_ids(dir: &Path) -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(dir.join("home/allocations"))
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            e.path()
                .is_dir()
                .then(|| e.file_name().to_string_lossy().into_owned())
        })
        .collect();
    ids.sort();
    ids
}

fn job_id(dir: &Path, allocation: &str) -> String {
    let state = std::fs::read_to_string(
        dir.join("home/allocations")
            .join(allocation)
            .join("state.json"),
    )
    .unwrap();
    let value: serde_json::Value = serde_json::from_str(&state).unwrap();
    value["job_id"].as_str().unwrap().to_string()
}

#[test]
fn two_slurm_pilots_run_a_bag_and_a_cancelled_pilots_work_runs_on_the_other() {
    if !slurm_available() {
        return;
    }
    let dir = scratch("bag");
    let pool_file = dir.join("pool.json");
    let _pool = Guard(
        constellation(&dir)
            .args([
                "pool",
                "start",
                "--listen",
                "/ip4/127.0.0.1/tcp/0",
                "--pool-file",
            ])
            .arg(&pool_file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while !pool_file.exists() {
        assert!(Instant::now() < deadline, "no pool file");
        std::thread::sleep(Duration::from_millis(50));
    }
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
