//! End-to-end tests of the high-level API: canned batch system output for
//! Slurm and PBS, and real processes (fake agent, fake ssh) for local/ssh.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::*;
use crate::glidein::alloc::testing::{write_executable, TempDir};
use crate::glidein::alloc::{PIDS_FILE, STATE_FILE};
use crate::glidein::runner::testing::{fail, ok, FakeRunner, Reply};

const T0: f64 = 1_686_561_241.0; // 2023-06-12T09:14:01Z

macro_rules! fixture {
    ($path:literal) => {
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fixtures/glidein/",
            $path
        ))
    };
}

fn slurm_spec() -> PilotSpec {
    let mut spec = PilotSpec::new(
        Backend::Slurm,
        4,
        Duration::from_secs(7_200),
        "/home/alice/pool.json",
        "/opt/constellation/bin/constellation",
    );
    spec.executors_per_node = Some(16);
    spec.raw_args = vec!["--account=proj42".into(), "--partition=compute".into()];
    spec
}

fn dirs(root: &Path) -> Vec<String> {
    alloc::list(root)
        .unwrap()
        .iter()
        .map(|a| a.id().to_string())
        .collect()
}

#[test]
fn slurm_submit_records_the_job() {
    let tmp = TempDir::new("submit");
    let root = tmp.path();
    let runner = FakeRunner::new(vec![ok(fixture!("slurm/sbatch_parsable.txt"))]);
    let alloc = submit(&slurm_spec(), root, &runner, T0).unwrap();

    assert_eq!(alloc.id(), "slurm-20230612T091401Z");
    let script_path = alloc.path(PILOT_SCRIPT);
    let calls = runner.calls.borrow();
    assert_eq!(calls[0].0, "sbatch");
    assert_eq!(
        calls[0].1,
        [
            "--parsable",
            "--account=proj42",
            "--partition=compute",
            script_path.to_str().unwrap()
        ]
    );
    let script = fs::read_to_string(&script_path).unwrap();
    assert!(script.contains("#SBATCH --nodes=4\n"));
    assert!(
        !script.contains("proj42"),
        "raw args belong on the command line"
    );
    let mode = fs::metadata(&script_path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o755);

    let loaded = alloc::load(alloc.dir()).unwrap();
    assert_eq!(loaded.record.job_id.as_deref(), Some("1834512"));
    assert_eq!(loaded.record.state, JobState::Pending);
    assert_eq!(loaded.record.attempts, 1);
    assert_eq!(loaded.record.nodes, 4);
    assert_eq!(loaded.record.walltime_secs, 7_200);
    assert_eq!(loaded.record.submitted_at, T0);
    assert_eq!(loaded.record.last_error, None);
    assert!(alloc.path(STDOUT_FILE).is_file() && alloc.path(STDERR_FILE).is_file());
    assert_eq!(
        backoff::load(root, Backend::Slurm)
            .unwrap()
            .next_allowed(T0),
        Gate::Open
    );
}

#[test]
fn pbs_submit_records_the_job() {
    let tmp = TempDir::new("pbs");
    let mut spec = slurm_spec();
    spec.backend = Backend::Pbs;
    spec.raw_args = vec!["-A".into(), "proj42".into()];
    let runner = FakeRunner::new(vec![ok(fixture!("pbs/qsub_torque.txt"))]);
    let alloc = submit(&spec, tmp.path(), &runner, T0).unwrap();
    assert_eq!(
        alloc.record.job_id.as_deref(),
        Some("48213.torque01.cluster.example.org")
    );
    assert_eq!(runner.programs(), ["qsub"]);
    assert_eq!(runner.calls.borrow()[0].1[..2], ["-A", "proj42"]);
    let script = fs::read_to_string(alloc.path(PILOT_SCRIPT)).unwrap();
    assert!(script.contains("#PBS -l nodes=4:ppn=16\n"));
}

#[test]
fn failed_submissions_back_off_then_pause() {
    let tmp = TempDir::new("backoff-e2e");
    let root = tmp.path();
    let spec = slurm_spec();
    let account_error = fixture!("slurm/sbatch_error_account.txt");

    // 1st failure: recorded in the allocation and in the governor.
    let runner = FakeRunner::new(vec![fail(1, account_error)]);
    let err = submit(&spec, root, &runner, T0).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("sbatch --parsable --account=proj42"), "{msg}");
    assert!(
        msg.contains("Invalid account or account/partition"),
        "{msg}"
    );
    let GlideinError::SubmitFailed { dir, .. } = &err else {
        panic!("{err:?}")
    };
    let failed = alloc::load(dir).unwrap();
    assert!(matches!(failed.record.state, JobState::Failed { .. }));
    assert!(failed
        .record
        .last_error
        .unwrap()
        .contains("Invalid account"));
    assert_eq!(failed.record.job_id, None);

    // Within the 5 s wait: refused without running anything or creating a dir.
    let idle = FakeRunner::new(vec![]);
    let msg = submit(&spec, root, &idle, T0 + 2.0)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("backing off") && msg.contains("try again in 3 s"),
        "{msg}"
    );
    assert_eq!(dirs(root).len(), 1);

    // Failures 2..5 at the earliest allowed times: 5, 10, 20, 40 s apart.
    let mut now = T0;
    for delay in [5.0, 10.0, 20.0, 40.0] {
        now += delay;
        let runner = FakeRunner::new(vec![fail(1, account_error)]);
        assert!(matches!(
            submit(&spec, root, &runner, now),
            Err(GlideinError::SubmitFailed { .. })
        ));
    }
    assert_eq!(dirs(root).len(), 5);

    // Paused: even much later, until resumed.
    let msg = submit(&spec, root, &idle, now + 86_400.0)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("paused after 5 consecutive failures"), "{msg}");
    assert!(msg.contains("Invalid account"), "{msg}");
    assert!(msg.contains("backoff-slurm.json"), "{msg}");

    resume(root, Backend::Slurm).unwrap();
    let runner = FakeRunner::new(vec![ok("99\n")]);
    submit(&spec, root, &runner, now + 86_400.0).unwrap();
    assert_eq!(
        backoff::load(root, Backend::Slurm).unwrap(),
        Governor::new(Backend::Slurm)
    );
}

#[test]
fn missing_sbatch_is_explained_and_not_backed_off() {
    let tmp = TempDir::new("missing");
    let runner = FakeRunner::new(vec![Reply::Missing]);
    let msg = submit(&slurm_spec(), tmp.path(), &runner, T0)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("`sbatch` was not found on PATH"), "{msg}");
    assert!(msg.contains("Slurm login node"), "{msg}");
    let gov = backoff::load(tmp.path(), Backend::Slurm).unwrap();
    assert_eq!(gov.consecutive_failures, 0);
}

#[test]
fn unparseable_sbatch_output_is_a_failure() {
    let tmp = TempDir::new("garbage");
    let runner = FakeRunner::new(vec![ok("Submitted batch job 12\n")]);
    let msg = submit(&slurm_spec(), tmp.path(), &runner, T0)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("could not understand the output of `sbatch"),
        "{msg}"
    );
    assert_eq!(
        backoff::load(tmp.path(), Backend::Slurm)
            .unwrap()
            .consecutive_failures,
        1
    );
}

#[test]
fn invalid_requests_create_nothing() {
    let tmp = TempDir::new("invalid");
    let mut spec = slurm_spec();
    spec.nodes = 0;
    let runner = FakeRunner::new(vec![]);
    let msg = submit(&spec, tmp.path(), &runner, T0)
        .unwrap_err()
        .to_string();
    assert!(
        msg.starts_with("invalid glide-in request: --nodes"),
        "{msg}"
    );
    let spaced = tmp.path().join("my allocations");
    let msg = submit(&slurm_spec(), &spaced, &runner, T0)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("#SBATCH directive"), "{msg}");
    assert!(!spaced.exists());
    assert!(dirs(tmp.path()).is_empty());
}

#[test]
fn resubmit_retries_in_the_same_directory() {
    let tmp = TempDir::new("resubmit");
    let root = tmp.path();
    let runner = FakeRunner::new(vec![fail(1, fixture!("slurm/sbatch_error_controller.txt"))]);
    let Err(GlideinError::SubmitFailed { dir, .. }) = submit(&slurm_spec(), root, &runner, T0)
    else {
        panic!("submission should fail")
    };
    let mut alloc = alloc::load(&dir).unwrap();
    let idle = FakeRunner::new(vec![]);
    assert!(matches!(
        resubmit(&mut alloc, root, &idle, T0 + 1.0),
        Err(GlideinError::BackingOff { .. })
    ));
    let runner = FakeRunner::new(vec![ok("1834513\n")]);
    resubmit(&mut alloc, root, &runner, T0 + 5.0).unwrap();
    let loaded = alloc::load(&dir).unwrap();
    assert_eq!(loaded.record.attempts, 2);
    assert_eq!(loaded.record.job_id.as_deref(), Some("1834513"));
    assert_eq!(loaded.record.state, JobState::Pending);
    let msg = resubmit(&mut alloc, root, &idle, T0 + 10.0)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("only failed submissions"), "{msg}");
}

#[test]
fn refresh_follows_the_job_and_keeps_state_on_errors() {
    let tmp = TempDir::new("refresh");
    let runner = FakeRunner::new(vec![ok("1834512\n")]);
    let mut alloc = submit(&slurm_spec(), tmp.path(), &runner, T0).unwrap();

    let runner = FakeRunner::new(vec![ok(fixture!("slurm/squeue_running.txt"))]);
    assert_eq!(refresh(&mut alloc, &runner).unwrap(), JobState::Running);

    let runner = FakeRunner::new(vec![fail(1, fixture!("slurm/squeue_controller_down.txt"))]);
    let msg = refresh(&mut alloc, &runner).unwrap_err().to_string();
    assert!(
        msg.contains("could not get the state of allocation slurm-"),
        "{msg}"
    );
    let loaded = alloc::load(alloc.dir()).unwrap();
    assert_eq!(
        loaded.record.state,
        JobState::Running,
        "state kept on error"
    );
    assert!(loaded
        .record
        .last_error
        .unwrap()
        .contains("Unable to contact"));

    let runner = FakeRunner::new(vec![
        ok(""),
        ok(fixture!("slurm/scontrol_21.08_completed.txt")),
    ]);
    let done = JobState::Finished { exit: Some(0) };
    assert_eq!(refresh(&mut alloc, &runner).unwrap(), done);
    let loaded = alloc::load(alloc.dir()).unwrap();
    assert_eq!(loaded.record.state, done);
    assert_eq!(loaded.record.last_error, None);

    // Terminal: no more queries.
    let idle = FakeRunner::new(vec![]);
    assert_eq!(refresh(&mut alloc, &idle).unwrap(), done);
}

#[test]
fn refresh_pbs_pro_history() {
    let tmp = TempDir::new("refresh-pbs");
    let mut spec = slurm_spec();
    spec.backend = Backend::Pbs;
    spec.raw_args.clear();
    let runner = FakeRunner::new(vec![ok(fixture!("pbs/qsub_pbspro.txt"))]);
    let mut alloc = submit(&spec, tmp.path(), &runner, T0).unwrap();
    let runner = FakeRunner::new(vec![
        fail(35, fixture!("pbs/qstat_pbspro_finished.txt")),
        ok(fixture!("pbs/qstat_pbspro2022_finished.txt")),
    ]);
    assert_eq!(
        refresh(&mut alloc, &runner).unwrap(),
        JobState::Finished { exit: Some(0) }
    );
}

#[test]
fn cancel_batch_jobs() {
    let tmp = TempDir::new("cancel");
    let runner = FakeRunner::new(vec![ok("1834512\n"), ok("1834513\n")]);
    let mut a = submit(&slurm_spec(), tmp.path(), &runner, T0).unwrap();
    let mut b = submit(&slurm_spec(), tmp.path(), &runner, T0).unwrap();
    assert_eq!(b.id(), "slurm-20230612T091401Z-2");

    let runner = FakeRunner::new(vec![ok("")]);
    assert_eq!(cancel(&mut a, &runner).unwrap(), CancelOutcome::Cancelled);
    assert_eq!(
        runner.calls.borrow()[0],
        ("scancel".to_string(), vec!["1834512".to_string()])
    );
    assert_eq!(
        alloc::load(a.dir()).unwrap().record.state,
        JobState::Cancelled
    );
    // Cancelling again does nothing.
    let idle = FakeRunner::new(vec![]);
    assert_eq!(cancel(&mut a, &idle).unwrap(), CancelOutcome::AlreadyOver);

    let runner = FakeRunner::new(vec![fail(1, fixture!("slurm/scancel_denied.txt"))]);
    let msg = cancel(&mut b, &runner).unwrap_err().to_string();
    assert!(
        msg.contains("could not cancel allocation slurm-20230612T091401Z-2"),
        "{msg}"
    );
    assert_eq!(
        alloc::load(b.dir()).unwrap().record.state,
        JobState::Pending
    );

    let runner = FakeRunner::new(vec![fail(
        1,
        fixture!("slurm/scancel_already_completed.txt"),
    )]);
    assert_eq!(cancel(&mut b, &runner).unwrap(), CancelOutcome::AlreadyOver);
    assert!(alloc::load(b.dir()).unwrap().record.state.is_terminal());
}

#[test]
fn dry_run_shows_everything_and_touches_nothing() {
    let tmp = TempDir::new("dry");
    let root = tmp.path().join("allocations");
    let text = dry_run(&slurm_spec(), &root, T0).unwrap();
    let dir = root.join("slurm-20230612T091401Z");
    assert!(text.contains(&format!("(not created): {}", dir.display())));
    assert!(text.contains("#SBATCH --time=02:00:00\n"));
    assert!(text.contains("srun --nodes=4"));
    assert!(text.ends_with(&format!(
        "sbatch --parsable --account=proj42 --partition=compute {}/pilot.sh\n",
        dir.display()
    )));
    assert!(!root.exists());

    let mut ssh = slurm_spec();
    ssh.backend = Backend::Ssh;
    ssh.raw_args.clear();
    ssh.hosts = vec!["n1".into(), "n2".into()];
    ssh.nodes = 2;
    let text = dry_run(&ssh, &root, T0).unwrap();
    assert!(text.contains("cancel.sh ---"));
    assert!(text.ends_with("/pilot.sh\n") && text.contains("\nbash "));
}

// ---------------------------------------------------------------------
// Real processes: local and ssh backends with a fake agent (and fake ssh).
// ---------------------------------------------------------------------

/// A fake `constellation` that prints its arguments, then either exits or
/// waits (at most 30 s) for SIGTERM.
fn fake_agent(dir: &Path, linger: bool) -> PathBuf {
    let path = dir.join(if linger {
        "lingering agent"
    } else {
        "quick agent"
    });
    // The trap is set before the arguments are printed, so once they are
    // visible the agent is ready for SIGTERM.
    let text = if linger {
        "#!/bin/bash\ntrap 'kill $! 2>/dev/null; exit 0' TERM\nprintf '%s\\n' \"$@\"\n\
         sleep 30 &\nwait $!\n"
    } else {
        "#!/bin/bash\nprintf '%s\\n' \"$@\"\nexit 0\n"
    };
    write_executable(&path, text);
    path
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn local_spec(agent: PathBuf, nodes: usize) -> PilotSpec {
    let mut spec = PilotSpec::new(
        Backend::Local,
        nodes,
        Duration::from_secs(600),
        "/tmp/pool file.json",
        agent,
    );
    spec.context = Some("it's \"quoted\" $HOME `x`".into());
    spec
}

#[test]
fn local_pilot_runs_agents_and_records_exit_status() {
    let tmp = TempDir::new("local run");
    let root = tmp.path().join("it's allocations");
    let spec = local_spec(fake_agent(tmp.path(), false), 2);
    let runner = SystemRunner::new();
    let mut alloc = submit(&spec, &root, &runner, T0).unwrap();
    assert_eq!(alloc.record.state, JobState::Running);
    let pid: u32 = alloc.record.job_id.as_deref().unwrap().parse().unwrap();
    assert!(pid > 0);

    let status = alloc.path(alloc::EXIT_STATUS_FILE);
    wait_for("the local pilot to finish", || status.is_file());
    assert_eq!(
        refresh(&mut alloc, &runner).unwrap(),
        JobState::Finished { exit: Some(0) }
    );
    let args = fs::read_to_string(alloc.path("agent-2.stdout")).unwrap();
    assert_eq!(
        args,
        "agent\n--pool\n/tmp/pool file.json\n--context\nit's \"quoted\" $HOME `x`\n\
         --walltime\n570s\n"
    );
    assert_eq!(
        direct::parse_pids(&fs::read_to_string(alloc.path(PIDS_FILE)).unwrap()).len(),
        2
    );
}

#[test]
fn local_pilot_can_be_cancelled() {
    let tmp = TempDir::new("local-cancel");
    let spec = local_spec(fake_agent(tmp.path(), true), 2);
    let runner = SystemRunner::new();
    let mut alloc = submit(&spec, tmp.path(), &runner, T0).unwrap();
    for i in 1..=2 {
        let out = alloc.path(&format!("agent-{i}.stdout"));
        wait_for("the agents to start", || {
            fs::read_to_string(&out).is_ok_and(|t| t.contains("--walltime"))
        });
    }
    assert_eq!(refresh(&mut alloc, &runner).unwrap(), JobState::Running);
    assert_eq!(
        cancel(&mut alloc, &runner).unwrap(),
        CancelOutcome::Cancelled
    );
    // The pilot sees its agents leave and records their (clean) exit.
    let status = alloc.path(alloc::EXIT_STATUS_FILE);
    wait_for("the pilot to record its exit", || status.is_file());
    assert_eq!(fs::read_to_string(status).unwrap().trim(), "0");
    assert_eq!(
        alloc::load(alloc.dir()).unwrap().record.state,
        JobState::Cancelled
    );
}

/// True if `pid` exists and is not a zombie (an orphan's zombie lingers
/// where PID 1 does not reap, as in some containers).
fn process_alive(pid: &str) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// A fake `ssh` that runs the remote command locally, as the remote login
/// shell would; host `down` is unreachable (exit 255, like ssh). Each call
/// appends its `-o` options, one line per call, to `ssh-options.log`.
fn fake_ssh_path(dir: &Path) -> String {
    let bin = dir.join("fake-bin");
    fs::create_dir_all(&bin).unwrap();
    let log = dir.join("ssh-options.log");
    write_executable(
        &bin.join("ssh"),
        &format!(
        "#!/bin/bash\n\
         options=()\n\
         while [ \"$1\" = \"-o\" ]; do options+=(\"$2\"); shift 2; done\n\
         echo \"${{options[*]}}\" >> {}\n\
         host=$1; shift\n\
         if [ \"$host\" = down ]; then echo \"ssh: connect to host down port 22: No route to host\" >&2; exit 255; fi\n\
         exec bash -c \"$*\"\n",
            script::shell_quote(&log.to_string_lossy())
        ),
    );
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

#[test]
fn ssh_pilot_starts_tracks_and_cancels_agents() {
    let tmp = TempDir::new("ssh e2e");
    let root = tmp.path().join("allocs with space");
    let runner = SystemRunner::with_search_path(fake_ssh_path(tmp.path()));
    let mut spec = local_spec(fake_agent(tmp.path(), true), 3);
    spec.backend = Backend::Ssh;
    spec.hosts = vec!["node1".into(), "alice@node2".into(), "down".into()];
    spec.ssh_options = vec!["Port=2222".into(), "IdentityFile=/k/my key".into()];

    let mut alloc = submit(&spec, &root, &runner, T0).unwrap();
    assert_eq!(alloc.record.state, JobState::Running);
    let warning = alloc.record.last_error.clone().unwrap();
    assert!(
        warning.contains("could not start an agent on down"),
        "{warning}"
    );
    let log = fs::read_to_string(alloc.path(STDOUT_FILE)).unwrap();
    assert!(log.contains("started 2 of 3 agents"), "{log}");

    let agents = direct::parse_pids(&fs::read_to_string(alloc.path(PIDS_FILE)).unwrap());
    let mut hosts: Vec<_> = agents.iter().map(|a| a.host.as_str()).collect();
    hosts.sort();
    assert_eq!(hosts, ["alice@node2", "node1"]);
    for host in ["node1", "alice@node2"] {
        let out = alloc.path(&format!("{host}.stdout"));
        wait_for("the agents to print their arguments", || {
            fs::read_to_string(&out).is_ok_and(|t| t.contains("--walltime"))
        });
    }
    let args = fs::read_to_string(alloc.path("node1.stdout")).unwrap();
    assert!(args.contains("\nit's \"quoted\" $HOME `x`\n"), "{args}");

    assert_eq!(refresh(&mut alloc, &runner).unwrap(), JobState::Running);
    assert_eq!(
        cancel(&mut alloc, &runner).unwrap(),
        CancelOutcome::Cancelled
    );
    for agent in &agents {
        let pid = agent.pid.to_string();
        wait_for("the agents to stop", || !process_alive(&pid));
    }
    let state = fs::read_to_string(alloc.path(STATE_FILE)).unwrap();
    assert!(state.contains("\"cancelled\""), "{state}");
    // Every ssh call (3 starts, 1+ alive checks, 2 kills) had the user's
    // options first, then ours.
    let calls = fs::read_to_string(tmp.path().join("ssh-options.log")).unwrap();
    assert!(calls.lines().count() >= 6, "{calls}");
    for call in calls.lines() {
        assert_eq!(
            call, "Port=2222 IdentityFile=/k/my key BatchMode=yes ConnectTimeout=10",
            "{calls}"
        );
    }
}

#[test]
fn ssh_pilot_with_no_reachable_host_fails() {
    let tmp = TempDir::new("ssh-down");
    let runner = SystemRunner::with_search_path(fake_ssh_path(tmp.path()));
    let mut spec = local_spec(fake_agent(tmp.path(), false), 1);
    spec.backend = Backend::Ssh;
    spec.hosts = vec!["down".into()];
    let msg = submit(&spec, tmp.path(), &runner, T0)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("could not start an agent on down"), "{msg}");
    assert_eq!(
        backoff::load(tmp.path(), Backend::Ssh)
            .unwrap()
            .consecutive_failures,
        1
    );
}
