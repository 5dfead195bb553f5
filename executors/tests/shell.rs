//! Shell activities run real child processes on a real embedded pool.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{alive, pid_in, scratch};
use constellation::collect::MultiEventCollector;
use constellation::{ExecutorContext, Pool, Resources};
use executors::shell::{
    output_folder_name, Capture, MpiLauncher, MpiProgram, Output, RetryOn, RetryPolicy,
    ShellActivity, ShellOutcome, ShellResult, ShellSpec,
};

/// Runs `specs` on `pool` and returns their results in submission order.
fn run_on(pool: &Pool, specs: Vec<ShellSpec>) -> Vec<ShellResult> {
    let (collector, results) = MultiEventCollector::new(specs.len());
    let parent = pool.submit(collector).unwrap();
    let ids: Vec<_> = specs
        .into_iter()
        .map(|spec| {
            pool.submit(ShellActivity::new(spec).reply_to(parent))
                .unwrap()
        })
        .collect();
    let events = results
        .wait_timeout(Duration::from_secs(60))
        .expect("every shell activity reports, even when it fails");
    let mut results: Vec<ShellResult> = events.into_iter().map(|e| e.take().unwrap()).collect();
    results.sort_by_key(|r| ids.iter().position(|id| *id == r.activity));
    results
}

fn run(specs: Vec<ShellSpec>) -> Vec<ShellResult> {
    let pool = Pool::builder().executors(2).start().unwrap();
    let results = run_on(&pool, specs);
    pool.done().unwrap();
    results
}

fn memory() -> Capture {
    Capture::Memory { limit: 1 << 16 }
}

fn text(output: &Output) -> String {
    output.text().expect("output was kept")
}

#[test]
fn arguments_environment_directory_and_stdin_reach_the_command() {
    let dir = scratch("inputs");
    std::fs::write(dir.join("input.txt"), "line one\nline two\n").unwrap();
    let results = run(vec![
        ShellSpec::command("printf")
            .args(["%s|%s", "a b", "$HOME"])
            .capture(memory()),
        ShellSpec::script("echo \"$GREETING from $(basename \"$PWD\"), arg $1\"; wc -l")
            .arg("first")
            .env("GREETING", "hello")
            .cwd(&dir)
            .stdin_file(dir.join("input.txt"))
            .capture(memory()),
    ]);
    // No shell between us and printf: `$HOME` arrives as written.
    assert_eq!(text(&results[0].stdout), "a b|$HOME");
    let expected = format!(
        "hello from {}, arg first\n2\n",
        dir.file_name().unwrap().to_str().unwrap()
    );
    assert_eq!(text(&results[1].stdout), expected);
    assert!(results.iter().all(ShellResult::is_success));
}

#[test]
fn output_goes_to_files_in_a_directory_per_activity() {
    let dir = scratch("files");
    let results = run(vec![
        ShellSpec::script("echo out; echo err >&2")
            .name("step/one")
            .output_dir(&dir),
        ShellSpec::script("echo unnamed").output_dir(&dir),
    ]);
    let named = &results[0];
    assert_eq!(named.stdout, Output::File(dir.join("step%2Fone/stdout")));
    assert_eq!(named.stderr, Output::File(dir.join("step%2Fone/stderr")));
    assert_eq!(text(&named.stdout), "out\n");
    assert_eq!(text(&named.stderr), "err\n");
    let unnamed = results[1].stdout.path().unwrap();
    let expected_dir = output_folder_name(&results[1].activity.to_string());
    assert_eq!(unnamed, &dir.join(expected_dir).join("stdout"));
    assert_eq!(text(&results[1].stdout), "unnamed\n");
    assert!(named.duration > Duration::ZERO);
}

#[test]
fn failures_are_reported_as_results_with_clear_messages() {
    let dir = scratch("failures");
    let results = run(vec![
        ShellSpec::script("echo 'bad input on line 7' >&2; exit 3")
            .name("calibrate")
            .output_dir(&dir),
        ShellSpec::command("no-such-program-constellation").capture(memory()),
        ShellSpec::command("true")
            .cwd(dir.join("missing"))
            .capture(memory()),
        ShellSpec::command("cat")
            .stdin_file(dir.join("absent.txt"))
            .capture(memory()),
        ShellSpec::script("kill -TERM $$").capture(memory()),
    ]);
    assert_eq!(results[0].outcome, ShellOutcome::Exited { code: 3 });
    let message = results[0].clone().check().unwrap_err().to_string();
    assert!(message.contains("calibrate"), "{message}");
    assert!(message.contains("exited with status 3"), "{message}");
    assert!(
        message.contains(&dir.join("calibrate/stderr").display().to_string()),
        "{message}"
    );
    let reason = |r: &ShellResult| match &r.outcome {
        ShellOutcome::StartFailed { reason } => reason.clone(),
        other => panic!("expected a start failure, got {other:?}"),
    };
    assert!(reason(&results[1]).contains("not found on PATH"));
    assert!(reason(&results[2]).contains("working directory"));
    assert!(reason(&results[3]).contains("absent.txt"));
    assert_eq!(results[4].outcome, ShellOutcome::Signalled { signal: 15 });
}

fn wait_dead(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(pid) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// The command in `dir` wrote the pid of a background child to
/// `background.pid`; that child must be gone.
fn assert_background_child_died(dir: &Path) {
    let background = pid_in(&dir.join("background.pid"));
    assert!(
        wait_dead(background),
        "background child {background} survived"
    );
}

#[test]
fn a_timeout_kills_the_whole_process_group() {
    let dir = scratch("timeout");
    let started = Instant::now();
    let results = run(vec![ShellSpec::script(
        "sleep 60 & echo $! > background.pid; sleep 60",
    )
    .cwd(&dir)
    .timeout(Duration::from_millis(500))
    .capture(memory())]);
    assert_eq!(
        results[0].outcome,
        ShellOutcome::TimedOut {
            after: Duration::from_millis(500)
        }
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_background_child_died(&dir);
}

#[test]
fn background_processes_do_not_outlive_a_finished_command() {
    let dir = scratch("orphans");
    let results = run(vec![ShellSpec::script(
        "sleep 60 > /dev/null 2>&1 & echo $! > background.pid; echo done",
    )
    .cwd(&dir)
    .capture(memory())]);
    assert_eq!(text(&results[0].stdout), "done\n");
    assert_background_child_died(&dir);
}

#[test]
fn failed_attempts_are_retried_with_their_output_kept() {
    let dir = scratch("retries");
    let flaky = "echo attempt $CONSTELLATION_ATTEMPT; [ \"$CONSTELLATION_ATTEMPT\" -ge 3 ]";
    let policy = RetryPolicy {
        delay: Duration::from_millis(10),
        ..RetryPolicy::attempts(4)
    };
    let results = run(vec![
        ShellSpec::script(flaky)
            .name("flaky")
            .output_dir(&dir)
            .retry(policy),
        ShellSpec::script("exit 1")
            .name("stubborn")
            .output_dir(&dir)
            .retry(RetryPolicy {
                retry_on: RetryOn::TimeoutOrSignal,
                ..policy
            }),
    ]);
    assert!(results[0].is_success());
    assert_eq!(results[0].attempts, 3);
    assert_eq!(text(&results[0].stdout), "attempt 3\n");
    let first = std::fs::read_to_string(dir.join("flaky/stdout")).unwrap();
    let second = std::fs::read_to_string(dir.join("flaky/stdout.2")).unwrap();
    assert_eq!(
        (first.as_str(), second.as_str()),
        ("attempt 1\n", "attempt 2\n")
    );
    // A non-zero exit is an answer under TimeoutOrSignal: no second try.
    assert_eq!(results[1].attempts, 1);
    assert!(!results[1].is_success());
}

/// Every file and folder under `root`, relative to it and sorted.
fn tree(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            found.push(path.strip_prefix(root).unwrap().display().to_string());
            if path.symlink_metadata().unwrap().is_dir() {
                pending.push(path);
            }
        }
    }
    found.sort();
    found
}

#[test]
fn streams_a_command_wrote_nothing_to_leave_no_files() {
    let dir = scratch("quiet");
    let policy = RetryPolicy {
        delay: Duration::from_millis(10),
        ..RetryPolicy::attempts(3)
    };
    let results = run(vec![
        ShellSpec::command("true").name("quiet").output_dir(&dir),
        ShellSpec::script("exit 5")
            .name("fails-quietly")
            .output_dir(&dir),
        // Quiet failures, then an attempt that speaks: only its file stays.
        ShellSpec::script("[ $CONSTELLATION_ATTEMPT -ge 3 ] && echo third")
            .name("late")
            .output_dir(&dir)
            .retry(policy),
        // Output first, then quiet retries: the first attempt's file stays.
        ShellSpec::script("[ $CONSTELLATION_ATTEMPT = 1 ] && echo first >&2; exit 1")
            .name("early")
            .output_dir(&dir)
            .retry(policy),
        ShellSpec::command("no-such-program-constellation")
            .name("missing")
            .output_dir(&dir),
    ]);
    assert!(results[0].is_success());
    assert_eq!(
        (&results[0].stdout, &results[0].stderr),
        (&Output::Empty, &Output::Empty)
    );
    assert_eq!(results[0].stdout.text().as_deref(), Some(""));
    let message = results[1].clone().check().unwrap_err().to_string();
    assert!(
        message.ends_with("exited with status 5; it wrote no error output"),
        "{message}"
    );
    assert!(results[2].is_success());
    assert_eq!(results[2].stdout, Output::File(dir.join("late/stdout.3")));
    assert_eq!(text(&results[2].stdout), "third\n");
    let history = &results[2].history;
    assert_eq!(history.len(), 3);
    assert!(history[..2]
        .iter()
        .all(|a| a.stdout.is_none() && a.stdout_bytes == 0));
    assert_eq!(history[2].stdout_bytes, 6);
    assert_eq!(results[3].attempts, 3);
    assert_eq!(results[3].stderr, Output::Empty);
    assert_eq!(results[3].history[0].stderr, Some(dir.join("early/stderr")));
    assert!(matches!(
        results[4].outcome,
        ShellOutcome::StartFailed { .. }
    ));
    assert_eq!(
        tree(&dir),
        ["early", "early/stderr", "late", "late/stdout.3"]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn memory_capture_keeps_the_first_bytes_and_counts_the_rest() {
    let results = run(vec![
        ShellSpec::script("head -c 1000000 /dev/zero").capture(Capture::Memory { limit: 1000 })
    ]);
    match &results[0].stdout {
        Output::Memory { bytes, truncated } => {
            assert_eq!(bytes.len(), 1000);
            assert_eq!(*truncated, 999_000);
        }
        other => panic!("expected memory output, got {other:?}"),
    }
}

#[test]
fn commands_see_their_executor_as_environment_and_go_where_their_context_says() {
    let gpu: ExecutorContext = "gpu,gpu:test-model".parse().unwrap();
    let pool = Pool::builder()
        .executors(1)
        .executor_with_resources(gpu, Resources::new().with_env("CUDA_VISIBLE_DEVICES", "3"))
        .start()
        .unwrap();
    let show = "echo $CONSTELLATION_EXECUTOR $CONSTELLATION_LABELS ${CUDA_VISIBLE_DEVICES:-none}";
    let results = run_on(
        &pool,
        vec![
            ShellSpec::script(show)
                .context("gpu".parse().unwrap())
                .capture(memory()),
            ShellSpec::script(show)
                .context("anywhere".parse().unwrap())
                .capture(memory()),
        ],
    );
    pool.done().unwrap();
    assert_eq!(text(&results[0].stdout), "1 gpu,gpu:test-model 3\n");
    assert_eq!(text(&results[1].stdout), "0 anywhere none\n");
    assert_eq!(results[0].executor_labels, "gpu,gpu:test-model");
}

#[test]
fn a_shell_activity_for_a_context_nobody_offers_is_refused_at_submit() {
    let pool = Pool::builder().executors(1).start().unwrap();
    let spec = ShellSpec::command("true").context("gpu".parse().unwrap());
    let refused = pool.submit(ShellActivity::new(spec));
    assert!(refused.is_err());
    pool.done().unwrap();
}

#[test]
fn mpi_programs_are_launched_with_their_rank_count() {
    let dir = scratch("mpi-launcher");
    let fake = dir.join("fake-launcher");
    std::fs::write(&fake, "#!/bin/sh\nprintf '%s\\n' \"$*\"\n").unwrap();
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&fake)
        .status()
        .unwrap();
    let program = || MpiProgram::new(3, "./solver").args(["--grid", "a b"]);
    let results = run(vec![
        program()
            .launcher(MpiLauncher::Mpiexec { hosts: vec![] })
            .launcher_path(&fake)
            .into_spec()
            .capture(memory()),
        program()
            .launcher(MpiLauncher::Mpiexec {
                hosts: vec!["n1".into(), "n2".into()],
            })
            .launcher_path(&fake)
            .into_spec()
            .capture(memory()),
        program()
            .launcher_path(&fake)
            .into_spec()
            .env("SLURM_JOB_ID", "42")
            .capture(memory()),
        program()
            .launcher_path(&fake)
            .into_spec()
            .env("PBS_NODEFILE", "/var/spool/pbs/nodes")
            .capture(memory()),
    ]);
    let lines: Vec<String> = results.iter().map(|r| text(&r.stdout)).collect();
    assert_eq!(lines[0], "-n 3 ./solver --grid a b\n");
    assert_eq!(lines[1], "-n 3 -hosts n1,n2 ./solver --grid a b\n");
    assert_eq!(lines[2], "-n 3 ./solver --grid a b\n");
    assert_eq!(
        lines[3],
        "-n 3 -f /var/spool/pbs/nodes ./solver --grid a b\n"
    );
}
