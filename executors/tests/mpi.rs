//! Runs the `mpi-selftest` binary under `mpiexec -n 3` as a real MPI job.
//!
//! Needs MPICH (or another MPI) whose `mpiexec` is on `PATH`, or named by
//! `MPIEXEC`. Without one the tests fail rather than skip: a CI that lost
//! its MPI should say so.

#![cfg(feature = "mpi")]

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// A run that takes longer is killed, with everything it started.
const TIMEOUT: Duration = Duration::from_secs(120);

const RANKS: &str = "3";

/// What one `mpiexec` run left behind.
struct Run {
    /// `None` if it ran over [`TIMEOUT`] and was killed.
    status: Option<ExitStatus>,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

/// Runs `mpiexec -n 3 mpi-selftest ARGS…`, killing its process group if it
/// takes longer than [`TIMEOUT`].
fn mpiexec_selftest(args: &[&str]) -> Run {
    let mpiexec = std::env::var("MPIEXEC").unwrap_or_else(|_| "mpiexec".to_string());
    let selftest = env!("CARGO_BIN_EXE_mpi-selftest");
    let mut child = match Command::new(&mpiexec)
        .args(["-n", RANKS, selftest])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so that a timeout kills the ranks too.
        .process_group(0)
        .spawn()
    {
        Ok(child) => child,
        Err(error) => panic!(
            "cannot start `{mpiexec}`: {error}. These tests need an MPI launcher: install MPICH \
             (apt-get install mpich libmpich-dev) or set MPIEXEC to one. They fail instead of \
             skipping so that a CI without MPI is noticed."
        ),
    };
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let out = thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err = thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if started.elapsed() > TIMEOUT => {
                let group = i32::try_from(child.id()).expect("pids fit in i32");
                // SAFETY: kill(2) with a negative pid signals that process
                // group, which `process_group(0)` made the job's alone.
                unsafe { libc::kill(-group, libc::SIGKILL) };
                let _ = child.wait();
                break None;
            }
            Ok(None) => thread::sleep(Duration::from_millis(50)),
            Err(error) => panic!("waiting for {mpiexec}: {error}"),
        }
    };
    let run = Run {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
        elapsed: started.elapsed(),
    };
    println!(
        "--- mpiexec -n {RANKS} mpi-selftest {} ({:.1?}, {:?}) ---\n{}--- stderr ---\n{}",
        args.join(" "),
        run.elapsed,
        run.status,
        run.stdout,
        run.stderr
    );
    run
}

#[test]
fn selftest_passes_on_three_ranks() {
    let run = mpiexec_selftest(&[RANKS]);
    let Some(status) = run.status else {
        panic!("mpi-selftest ran over {TIMEOUT:?} and was killed");
    };
    assert!(status.success(), "mpi-selftest failed: {status}");
    for check in [
        "ranks",
        "dot-product",
        "monte-carlo-pi",
        "rank-context",
        "too-many-ranks",
        "no-mpi-link",
        "rank-error",
        "decode-error",
        "panic",
        "recovered",
        "pool-done",
    ] {
        let line = format!("ok   {check}: ");
        assert!(
            run.stdout.lines().any(|l| l.starts_with(&line)),
            "no passing `{check}` check in the output"
        );
    }
    assert!(run.stdout.contains(
        "ok   dot-product: n=10000000 ranks=3 dot=99999990000000 closed-form=99999990000000"
    ));
    assert!(run
        .stdout
        .contains("ok   monte-carlo-pi: ranks=3 samples=3000000"));
    assert!(run.stdout.contains("mpi-selftest: all 11 checks passed"));
    assert!(!run.stdout.contains("FAIL"));
}

#[test]
fn a_rank_that_panics_alone_aborts_the_job_instead_of_hanging() {
    let run = mpiexec_selftest(&[RANKS, "--lonely-panic"]);
    let Some(status) = run.status else {
        panic!("the job hung: it ran over {TIMEOUT:?} and was killed");
    };
    assert!(!status.success(), "the job should have been aborted");
    assert!(
        !run.stdout.contains("FAIL"),
        "the job went on after the panic"
    );
    assert!(
        run.stderr
            .contains("Aborting the MPI job so that it does not hang"),
        "the panicking rank did not say why it aborted"
    );
    assert!(run.elapsed < Duration::from_secs(60), "{:?}", run.elapsed);
}

#[test]
fn a_panicking_main_program_still_shuts_every_rank_down() {
    let run = mpiexec_selftest(&[RANKS, "--main-panics"]);
    let Some(status) = run.status else {
        panic!("the job hung: it ran over {TIMEOUT:?} and was killed");
    };
    assert!(!status.success(), "rank 0 should exit with an error");
    assert!(run
        .stdout
        .contains("main-panics: one M-task first: ok on 3 ranks"));
    assert!(run
        .stderr
        .contains("the main program panicked on rank 0: the main program panics on purpose"));
    assert!(!run.stderr.contains("Abort"), "no rank should abort");
}
