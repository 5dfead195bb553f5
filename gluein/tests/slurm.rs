//! Glide-in on a real Slurm: `scripts/test.sh` starts one with
//! `scripts/slurm-local.sh` and sets `SLURM_CONF` and
//! `CONSTELLATION_REQUIRE_SLURM=1`; elsewhere these tests say they skipped.
//!
//! The tests take turns ([`slurm_turn`]): the local cluster may have only
//! two CPUs, and a pilot left pending behind another test's pilots would
//! make both tests wait on each other.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{
    allocation_dir, allocation_ids, allocation_state, constellation, log, marks, run, run_on_pool,
    scratch, sleepers, spawn_agent, start_pool, text, wait_exit,
};

/// One test at a time on the cluster; a failed test does not stop the next.
fn slurm_turn() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
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

fn job_id(dir: &Path, allocation: &str) -> String {
    allocation_state(dir, allocation)["job_id"]
        .as_str()
        .expect("a job id")
        .to_string()
}

#[test]
fn two_slurm_pilots_run_a_bag_and_a_cancelled_pilots_work_runs_on_the_other() {
    let _turn = slurm_turn();
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

/// Cancels the job when the test ends, so a failed test leaves no pilot
/// behind (a job that already ended makes `scancel` complain, harmlessly).
struct JobGuard(String);

impl Drop for JobGuard {
    fn drop(&mut self) {
        let _ = Command::new("scancel").arg(&self.0).output();
    }
}

/// Now, in Unix nanoseconds: the clock of `date +%s%N` in the marks.
fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos()
}

/// `squeue`'s state for the job, or "" once it has left the queue.
fn queued_state(job: &str) -> String {
    let out = Command::new("squeue")
        .args(["-h", "-j", job, "-o", "%T"])
        .output()
        .expect("run squeue");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The upper bound of the end of the walltime of the agent whose executors'
/// labels start with `label`, in Unix nanoseconds, from the walltime left
/// that `constellation status` reports, once that agent has joined.
fn agent_deadline(dir: &Path, label: &str, job: &str, walltime_s: f64) -> u128 {
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        let out = run(dir, &["status", "--pool", "pool.json", "--json"]);
        // The answer was computed before now: now + left is at or after
        // the agent's deadline.
        let answered = unix_nanos();
        // status exits 1 when some member gives no answer (one that has
        // just left can still be listed); the agent's own answer is what
        // counts here, and a silent agent is simply asked again.
        let json: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("status --json printed no JSON: {}", text(&out)));
        let agent = (json["members"].as_array().expect("a member list").iter()).find(|m| {
            m["role"] == "agent"
                && (m["executors"].as_array().into_iter().flatten())
                    .any(|e| e["labels"].as_str().unwrap_or_default().starts_with(label))
        });
        if let Some(agent) = agent {
            let left = agent["walltime_left_s"]
                .as_f64()
                .unwrap_or_else(|| panic!("the pilot's agent has no walltime: {json}"));
            assert!(
                left > 0.0 && left <= walltime_s,
                "the pilot's agent has {left} s left, not at most {walltime_s} s: {json}"
            );
            return answered + (left * 1e9) as u128;
        }
        assert!(
            Instant::now() < give_up,
            "the `{label}` pilot's agent did not join within 60 s (job {job}: {:?}): {json}",
            queued_state(job)
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// `agent ran N activities` from an agent's log.
fn activities_ran(log: &str) -> Option<usize> {
    log.lines()
        .find_map(|line| line.strip_prefix("agent ran ")?.strip_suffix(" activities"))
        .and_then(|n| n.parse().ok())
}

#[test]
fn a_slurm_pilot_with_a_short_walltime_takes_no_activity_it_cannot_finish() {
    let _turn = slurm_turn();
    if !slurm_available() {
        return;
    }
    let started = Instant::now();
    let dir = scratch("slurm-walltime");
    let _pool = start_pool(&dir);
    // A 1 min job: its agent gets 30 s, the job's walltime less the 30 s
    // margin to leave in.
    let submitted = constellation(&dir)
        .args(["glidein", "slurm", "--nodes", "1", "--walltime", "1m"])
        .args(["--executors-per-node", "1", "--context", "short", "--pool"])
        .arg(dir.join("pool.json"))
        .output()
        .unwrap();
    assert!(submitted.status.success(), "{}", text(&submitted));
    let allocations = allocation_ids(&dir);
    assert_eq!(allocations.len(), 1, "{allocations:?}");
    let pilot = allocation_dir(&dir, &allocations[0]);
    let script = std::fs::read_to_string(pilot.join("pilot.sh")).unwrap();
    assert!(script.contains("--walltime 30s"), "{script}");
    let job = job_id(&dir, &allocations[0]);
    let _job = JobGuard(job.clone());
    let deadline = agent_deadline(&dir, "short,", &job, 30.0);
    // The other agent outlives the bag, with two executors. It starts only
    // now so that waiting for Slurm does not count towards its idle time.
    let mut long = spawn_agent(&dir, 2, "long", &["--idle-timeout", "3s"]);

    // 36 activities of 3 s on at most 3 executors take at least 36 s, and
    // the bag starts after the pilot's agent has joined: work is left when
    // its 30 s end, so whatever it stops taking, it stops by choice.
    let graph = sleepers(&dir, 36, 3.0);
    let ran = run_on_pool(&dir, &graph, 2, &["--wait-timeout", "60s"]);
    assert!(ran.status.success(), "{}", text(&ran));

    // The pilot's agent left on its own: Slurm did not have to end the job.
    // (Some Slurm versions list an ended job under its final state.)
    let give_up = Instant::now() + Duration::from_secs(90);
    let active = [
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
    ];
    while active.contains(&queued_state(&job).as_str()) {
        assert!(
            Instant::now() < give_up,
            "job {job} still {} long after its agent's walltime; agent log:\n{}",
            queued_state(&job),
            log(&pilot, "stderr")
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let shown = Command::new("scontrol")
        .args(["show", "job", &job])
        .output()
        .unwrap();
    let shown = text(&shown);
    let agent_log = log(&pilot, "stderr");
    assert!(
        shown.contains("JobState=COMPLETED"),
        "job {job} did not complete (Slurm ended it?):\n{shown}\nagent log:\n{agent_log}"
    );
    assert!(
        agent_log.contains("agent leaving: the walltime ends"),
        "the pilot's agent did not leave for its walltime:\n{agent_log}"
    );
    let long_status = wait_exit(&mut long, Duration::from_secs(30));
    let long_log = log(&dir, "long.log");
    assert!(long_status.is_some_and(|s| s.success()), "{long_log}");

    let marks = marks(&dir);
    assert_eq!(marks.len(), 36, "every activity ran: {marks:?}");
    assert!(marks.iter().all(|(_, start, end)| end > start), "{marks:?}");
    let short: Vec<_> = marks.iter().filter(|m| m.0 == "short").collect();
    let on_long = marks.iter().filter(|m| m.0 == "long").count();
    assert_eq!(
        short.len() + on_long,
        36,
        "only the agents ran work: {marks:?}"
    );
    assert!(
        !short.is_empty(),
        "the pilot's agent ran nothing: {marks:?}"
    );
    // Each activity finished once: the agents' own counts match their marks
    // (one that finished on the pilot and then ran again on the other
    // agent, whose mark replaced the first, would make them disagree).
    // Work killed with the pilot is ruled out above: the job completed,
    // and its agent left for its walltime, which waits for what it runs.
    assert_eq!(
        activities_ran(&agent_log),
        Some(short.len()),
        "the pilot's agent finished other work than it recorded:\n{agent_log}"
    );
    assert_eq!(
        activities_ran(&long_log),
        Some(on_long),
        "the long agent finished other work than it recorded:\n{long_log}"
    );
    for (_, _, end) in &short {
        assert!(
            *end < deadline,
            "an activity on the pilot ended {:.1} s after its agent's walltime: {short:?}",
            (*end - deadline) as f64 / 1e9
        );
    }
    assert!(
        marks.iter().any(|(_, start, _)| *start > deadline),
        "the bag ended before the pilot's walltime, so it shows nothing: {marks:?}"
    );
    let last = short.iter().map(|m| m.2).max().unwrap_or_default();
    println!(
        "the pilot ran {} of 36, its last ending {:.1} s before its agent's walltime; \
         {:.0} s in all",
        short.len(),
        (deadline - last) as f64 / 1e9,
        started.elapsed().as_secs_f64()
    );
}
