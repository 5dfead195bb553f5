//! Nothing a command starts outlives it, under either mechanism.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::cgroup::remove_stale_cgroups;
use super::subreaper::{become_subreaper, child_pids, children};
use super::*;
use crate::shell::process::run_once_tracked;
use crate::shell::{Capture, ShellOutcome, ShellSpec};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// A fresh directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tracking-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Whether `pid` is a live process (not a zombie).
fn alive(pid: libc::pid_t) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat.rsplit_once(')').map_or("", |(_, s)| s.trim_start());
        !state.starts_with('Z') && !state.starts_with('X')
    })
}

/// Runs the repro under `tracking`: a child that calls `setsid`
/// and would sleep for minutes. It must be dead, and reaped, as soon as
/// the command has ended, normally or by its timeout.
fn detached_child_dies_with_its_command(tracking: &ProcessTracking, timeout: bool) {
    let name = format!("{tracking:?}-{timeout}").replace(|c: char| !c.is_alphanumeric(), "");
    let dir = scratch(&name);
    let script = if timeout {
        "setsid sleep 312 & echo $! > detached.pid; sleep 60"
    } else {
        "setsid sleep 312 & echo $! > detached.pid; sleep 1"
    };
    // Output to files: a surviving child holding a pipe would keep the
    // reader, and with it the test, waiting for 312 s.
    let mut spec = ShellSpec::script(script).cwd(&dir).output_dir(&dir);
    if timeout {
        // Long enough for the shell to start the detached child on a
        // loaded machine.
        spec = spec.timeout(Duration::from_secs(5));
    }
    let files = crate::shell::output::OutputFiles::at(dir.join("stdout"), dir.join("stderr"));
    let done = run_once_tracked(&spec, &[], Some(&files), tracking);
    if timeout {
        assert!(
            matches!(done.outcome, ShellOutcome::TimedOut { .. }),
            "{:?}",
            done.outcome
        );
    } else {
        assert_eq!(done.outcome, ShellOutcome::Exited { code: 0 });
    }
    let pid: libc::pid_t = std::fs::read_to_string(dir.join("detached.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let survived = alive(pid);
    if survived {
        // SAFETY: only the test's own stray sleep.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert!(
        !survived,
        "the detached `sleep 312` ({pid}) outlived its command under {tracking:?}"
    );
    if let ProcessTracking::Subreaper = tracking {
        assert!(
            std::fs::metadata(format!("/proc/{pid}")).is_err(),
            "the detached child {pid} was killed but not reaped"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_detached_child_dies_with_its_command_under_the_subreaper() {
    detached_child_dies_with_its_command(&ProcessTracking::Subreaper, false);
}

#[test]
fn a_detached_child_dies_at_a_timeout_under_the_subreaper() {
    detached_child_dies_with_its_command(&ProcessTracking::Subreaper, true);
}

#[test]
fn a_detached_child_dies_with_its_command_in_a_cgroup() {
    match ProcessTracking::cgroup() {
        Ok(tracking) => detached_child_dies_with_its_command(&tracking, false),
        Err(why) => println!("skipped: cgroup v2 tracking is not available here: {why}"),
    }
}

#[test]
fn a_detached_child_dies_at_a_timeout_in_a_cgroup() {
    match ProcessTracking::cgroup() {
        Ok(tracking) => detached_child_dies_with_its_command(&tracking, true),
        Err(why) => println!("skipped: cgroup v2 tracking is not available here: {why}"),
    }
}

#[test]
fn a_commands_cgroup_is_removed_when_it_ends() {
    let tracking = match ProcessTracking::cgroup() {
        Ok(tracking) => tracking,
        Err(why) => {
            println!("skipped: cgroup v2 tracking is not available here: {why}");
            return;
        }
    };
    let ProcessTracking::Cgroup { parent } = &tracking else {
        unreachable!("ProcessTracking::cgroup gives cgroup tracking")
    };
    let spec = ShellSpec::script("cat /proc/self/cgroup").capture(Capture::Memory { limit: 4096 });
    let done = run_once_tracked(&spec, &[], None, &tracking);
    let text = done.stdout.text().unwrap();
    let own = text.lines().find_map(|l| l.strip_prefix("0::")).unwrap();
    let name = own.rsplit('/').next().unwrap();
    assert!(
        name.starts_with("constellation-"),
        "the command ran in {own}"
    );
    assert!(!parent.join(name).exists(), "cgroup {name} was left behind");
}

#[test]
fn the_cgroups_of_a_process_that_is_gone_are_emptied_and_removed() {
    let parent = match ProcessTracking::cgroup() {
        Ok(ProcessTracking::Cgroup { parent }) => parent,
        other => {
            println!("skipped: cgroup v2 tracking is not available here: {other:?}");
            return;
        }
    };
    let mut gone = Command::new("/bin/sh").args(["-c", ":"]).spawn().unwrap();
    gone.wait().unwrap();
    let stale = parent.join(format!("constellation-{}-1", gone.id()));
    std::fs::create_dir(&stale).unwrap();
    let mut left = Command::new("sleep").arg("315").spawn().unwrap();
    std::fs::write(stale.join("cgroup.procs"), left.id().to_string()).unwrap();
    remove_stale_cgroups(&parent);
    let removed = !stale.exists();
    // The sweep returns once the cgroup is empty: the sleep is a zombie.
    let killed = left.try_wait().unwrap();
    if killed.is_none() {
        let _ = left.kill();
        let _ = left.wait();
    }
    assert!(removed, "{} was left behind", stale.display());
    assert!(
        killed.is_some(),
        "the process in the stale cgroup was not killed"
    );
}

#[test]
fn another_commands_detached_child_is_left_alone() {
    // Two commands at once under the subreaper: the one that ends first
    // must not kill the other's detached child.
    let dir = scratch("neighbour");
    let tracking = ProcessTracking::Subreaper;
    let long = ShellSpec::script(
        // Ends when the test says so (or after 60 s, should it fail first).
        "setsid sleep 313 & echo $! > long.pid; \
         for i in $(seq 1200); do [ -e go ] && break; sleep 0.05; done",
    )
    .cwd(&dir)
    .capture(Capture::Discard);
    let neighbour = std::thread::spawn({
        let tracking = tracking.clone();
        move || run_once_tracked(&long, &[], None, &tracking)
    });
    let pid_file = dir.join("long.pid");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !pid_file.exists() {
        assert!(Instant::now() < deadline, "the long command never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    let short = ShellSpec::script("setsid sleep 314 & sleep 0.1").capture(Capture::Discard);
    run_once_tracked(&short, &[], None, &tracking);
    let pid: libc::pid_t = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let spared = alive(pid);
    std::fs::write(dir.join("go"), "").unwrap();
    neighbour.join().unwrap();
    assert!(
        spared,
        "the other command's detached child {pid} was killed"
    );
    assert!(
        !alive(pid),
        "the detached child {pid} outlived its own command"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Minor page faults of the calling thread so far.
fn thread_faults() -> i64 {
    // SAFETY: rusage is plain data that getrusage fills in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer.
    assert_eq!(
        unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) },
        0
    );
    usage.ru_minflt
}

/// The pages of a 64 MiB region of this thread's memory that `start`
/// (which starts a command and waits for it) made copy-on-write: a
/// `fork` marks every page of the parent so, and the parent's next
/// write to each one faults; a start that borrows the memory until
/// the `exec` (`CLONE_VM | CLONE_VFORK`) marks none. Unlike a timing,
/// the count does not depend on the machine's load. Returns the
/// faults and the number of pages.
fn pages_copied_on_write_by(start: impl FnOnce()) -> (i64, i64) {
    const LENGTH: usize = 64 << 20;
    // SAFETY: a fresh private anonymous mapping, unmapped below.
    let region = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            LENGTH,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(region, libc::MAP_FAILED);
    // Small pages, so that each counts: a huge page faults once.
    // SAFETY: advice on the mapping just made.
    unsafe { libc::madvise(region, LENGTH, libc::MADV_NOHUGEPAGE) };
    let page = 4096;
    let touch = |value: u8| {
        for offset in (0..LENGTH).step_by(page) {
            // SAFETY: inside the mapping, which is writable.
            unsafe { region.cast::<u8>().add(offset).write_volatile(value) };
        }
    };
    touch(1);
    start();
    let before = thread_faults();
    touch(2);
    let faults = thread_faults() - before;
    // SAFETY: the mapping made above, no longer used.
    unsafe { libc::munmap(region, LENGTH) };
    (faults, (LENGTH / page) as i64)
}

#[test]
fn starting_a_command_copies_none_of_this_process_memory() {
    // The measure itself: a start with a `pre_exec` hook, which makes
    // std fork, as joining a cgroup once did.
    let (faults, pages) = pages_copied_on_write_by(|| {
        let mut command = Command::new("true");
        // SAFETY: the hook does nothing.
        unsafe { command.pre_exec(|| Ok(())) };
        assert!(command.status().unwrap().success());
    });
    assert!(
        faults >= pages / 2,
        "a fork made only {faults} of {pages} pages copy-on-write: the measure is blind here"
    );
    let mut trackings = vec![ProcessTracking::Subreaper];
    match ProcessTracking::cgroup() {
        Ok(tracking) => trackings.push(tracking),
        Err(why) => println!("cgroup tracking not tested: {why}"),
    }
    for tracking in trackings {
        let spec = ShellSpec::command("true").capture(Capture::Discard);
        let (faults, pages) = pages_copied_on_write_by(|| {
            let done = run_once_tracked(&spec, &[], None, &tracking);
            assert_eq!(done.outcome, ShellOutcome::Exited { code: 0 });
        });
        // A few faults may come from this thread's own work meanwhile.
        assert!(
            faults < pages / 8,
            "starting a command under {tracking:?} made {faults} of {pages} pages \
             copy-on-write: it forked, and its cost grows with this process's memory"
        );
    }
}

#[test]
fn a_command_is_in_its_cgroup_before_it_can_fork() {
    let tracking = match ProcessTracking::cgroup() {
        Ok(tracking) => tracking,
        Err(why) => {
            println!("skipped: cgroup v2 tracking is not available here: {why}");
            return;
        }
    };
    // The detached child is started at once and its command ends at
    // once: a command that joined its cgroup only after it began would
    // often fork the child outside it, where nothing would kill it.
    let spec = ShellSpec::script("setsid sleep 316 </dev/null >/dev/null 2>&1 & echo $!")
        .capture(Capture::Memory { limit: 64 });
    let mut survivors = Vec::new();
    for _ in 0..40 {
        let done = run_once_tracked(&spec, &[], None, &tracking);
        assert_eq!(done.outcome, ShellOutcome::Exited { code: 0 });
        let pid: libc::pid_t = done.stdout.text().unwrap().trim().parse().unwrap();
        if alive(pid) {
            survivors.push(pid);
        }
    }
    for &pid in &survivors {
        // SAFETY: only the test's own stray sleeps.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert!(
        survivors.is_empty(),
        "detached children outlived their commands: {survivors:?}"
    );
}

#[test]
fn an_adopted_orphan_is_among_this_process_children() {
    become_subreaper();
    // `sh` starts a sleep and exits: the sleep is reparented here.
    let output = Command::new("/bin/sh")
        .args(["-c", "sleep 318 </dev/null >/dev/null 2>&1 & echo $!"])
        .output()
        .unwrap();
    let orphan: libc::pid_t = String::from_utf8(output.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let listed = child_pids().map(|pids| pids.contains(&orphan));
    let found = children().iter().any(|c| c.pid == orphan);
    // SAFETY: the test's own orphan, now this process's child.
    unsafe { libc::kill(orphan, libc::SIGKILL) };
    let _ = crate::shell::exit::wait_for_exit(orphan, Some(Instant::now() + KILL_PATIENCE));
    let mut status = 0;
    // SAFETY: our child; reaps it.
    unsafe { libc::waitpid(orphan, &mut status, 0) };
    assert_ne!(
        listed,
        Some(false),
        "the children files miss the orphan {orphan}"
    );
    assert!(
        found,
        "the orphan {orphan} is not among this process's children"
    );
    assert!(
        !children()
            .iter()
            .any(|c| c.pid == 1 || c.pid == std::process::id() as libc::pid_t),
        "a process that is not a child is listed"
    );
}
