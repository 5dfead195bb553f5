//! Files a pool trusts, with the real `pool start`: a key, state
//! directory or lock that another local user planted is refused, with a
//! message naming the path and the fix, and nothing is written through a
//! planted link (issue 33, items 1 and 2).
//!
//! Files of another user are made with `chown`, which needs root (the
//! tests run as root here and in CI); those checks are skipped, saying
//! so, for other users.

mod common;

use std::os::unix::fs::{chown, symlink, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{exited, log, pool_start_args, scratch, spawn, start_pool_with, wait_exit, Guard};

/// The user and group `nobody`: another local user.
const NOBODY: u32 = 65534;

/// How long a refused `pool start` may take on a loaded machine.
const LIMIT: Duration = Duration::from_secs(60);

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {mode:o} {}: {e}", path.display()));
}

/// Whether this test may make files another user's.
fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    println!("skipped: not root (making a file another user's needs root)");
    false
}

/// `dir/NAME`, a directory with `mode`, as a shared project directory or
/// `/tmp` is.
fn shared_dir(dir: &Path, name: &str, mode: u32) -> PathBuf {
    let shared = dir.join(name);
    std::fs::create_dir(&shared).unwrap();
    chmod(&shared, mode);
    shared
}

/// Gives `path` to `nobody`, as if that user had made it.
fn give_to_nobody(path: &Path) {
    chown(path, Some(NOBODY), Some(NOBODY))
        .unwrap_or_else(|e| panic!("chown nobody {}: {e}", path.display()));
}

/// Runs `pool start` in `dir` with the pool file `pool.json` and `extra`
/// arguments, which must be refused (exit status 2) within [`LIMIT`]
/// without writing the pool file; returns what it said.
fn refused_start(dir: &Path, extra: &[&str]) -> String {
    let mut pool = spawn(
        dir,
        &[&pool_start_args("pool.json")[..], extra].concat(),
        "refused.log",
    );
    let status = exited(&mut pool, LIMIT, dir, "refused.log");
    let said = log(dir, "refused.log");
    assert_eq!(status.code(), Some(2), "{said}");
    assert!(
        !dir.join("pool.json").exists(),
        "a refused start wrote its pool file: {said}"
    );
    said
}

/// Stops the pool node of `pool` as a user does (SIGTERM), so that it
/// removes its pool file.
fn stop(mut pool: Guard) {
    // SAFETY: sending a signal to our own child process.
    unsafe { libc::kill(pool.0.id() as i32, libc::SIGTERM) };
    let status = wait_exit(&mut pool, LIMIT);
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
}

/// Asserts that `said` refuses `path` for `why`, and tells how to move the
/// pool's files to a directory of one's own.
fn assert_refused(said: &str, path: &str, why: &str) {
    assert!(
        said.contains(&format!("refusing {path}: {why}")),
        "should refuse {path} ({why}): {said}"
    );
    assert!(said.contains("--pool-file ~/pools/NAME.json"), "{said}");
}

#[test]
fn pool_start_refuses_a_key_another_user_planted() {
    if !is_root() {
        return;
    }
    let dir = scratch("trust-planted-key");
    // /tmp-like (sticky): nobody may write here, and made its key first.
    let shared = shared_dir(&dir, "tmp", 0o1777);
    let planted = shared.join("pool.key");
    constellation::net::key::write_new_file(&planted).unwrap();
    give_to_nobody(&planted);
    let said = refused_start(&shared, &[]);
    assert_refused(
        &said,
        "pool.key",
        "it is owned by uid 65534 (nobody), not by you; another user may have planted it",
    );

    // In a directory anyone may write without the sticky bit, a key that
    // was there before is refused even when it is this user's: another
    // user may have replaced it.
    let open = shared_dir(&dir, "open", 0o777);
    constellation::net::key::write_new_file(&open.join("pool.key")).unwrap();
    let said = refused_start(&open, &[]);
    assert_refused(
        &said,
        "pool.key",
        &format!(
            "it was already there, and its directory {} may be changed by other users",
            open.display()
        ),
    );
}

#[test]
fn a_pool_started_in_an_open_directory_makes_its_files_there_once() {
    let dir = scratch("trust-open-directory");
    let open = shared_dir(&dir, "open", 0o777);
    // Nothing planted: the pool makes its own key, lock and state directory.
    let pool = start_pool_with(&open, &[], "pool.log");
    assert_eq!(
        std::fs::metadata(open.join("pool.state"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o700
    );
    stop(pool);
    // Started again, it finds them, and others could have replaced them.
    let said = refused_start(&open, &[]);
    assert!(
        said.contains("refusing pool.json.lock: it was already there"),
        "{said}"
    );
}

#[test]
fn pool_start_refuses_a_state_directory_others_may_write_or_own() {
    let dir = scratch("trust-planted-state");
    // Made by another user with mode 0777, as the attack did; made here
    // (so that it runs without root too), the mode alone is refused.
    let state = dir.join("pool.state");
    std::fs::create_dir(&state).unwrap();
    chmod(&state, 0o777);
    let said = refused_start(&dir, &[]);
    assert_refused(
        &said,
        "pool.state",
        "group or others may write it (mode 0777)",
    );
    assert!(
        !state.join("lock").exists() && !state.join("jobs.db").exists(),
        "nothing is written in a refused state directory"
    );
    if !is_root() {
        return;
    }
    chmod(&state, 0o700);
    give_to_nobody(&state);
    let said = refused_start(&dir, &[]);
    assert_refused(&said, "pool.state", "it is owned by uid 65534 (nobody)");

    // A state directory of this user's with another user's job journal
    // in it (swapped in while the pool was stopped).
    std::fs::remove_dir_all(&state).unwrap();
    stop(start_pool_with(&dir, &[], "pool.log"));
    let jobs = state.join("jobs.db");
    assert!(jobs.exists());
    give_to_nobody(&jobs);
    let said = refused_start(&dir, &[]);
    assert!(
        said.contains(&format!(
            "refusing {}: it is owned by uid 65534 (nobody)",
            jobs.display()
        )),
        "{said}"
    );
}

#[test]
fn pool_start_writes_no_pid_through_a_planted_lock_link() {
    let dir = scratch("trust-lock-links");
    let precious = dir.join("precious");
    std::fs::write(&precious, "keep me").unwrap();
    let assert_untouched = |said: &str| {
        assert_eq!(
            std::fs::read_to_string(&precious).unwrap(),
            "keep me",
            "the pool wrote through a link: {said}"
        );
    };

    symlink(&precious, dir.join("pool.json.lock")).unwrap();
    let said = refused_start(&dir, &[]);
    assert_refused(&said, "pool.json.lock", "it is a symbolic link");
    assert_untouched(&said);
    std::fs::remove_file(dir.join("pool.json.lock")).unwrap();

    // The state directory's own lock, and the job service's.
    let state = dir.join("pool.state");
    std::fs::create_dir(&state).unwrap();
    chmod(&state, 0o700);
    for lock in ["lock", "jobs.db.lock"] {
        let link = state.join(lock);
        symlink(&precious, &link).unwrap();
        let said = refused_start(&dir, &[]);
        assert!(
            said.contains(&format!("pool.state/{lock}: it is a symbolic link")),
            "{said}"
        );
        assert_untouched(&said);
        std::fs::remove_file(&link).unwrap();
    }

    // A key that is a link (to a key of this user's, even) is not read.
    let real = dir.join("real.key");
    constellation::net::key::write_new_file(&real).unwrap();
    // The starts above got as far as making the pool's own key.
    let _ = std::fs::remove_file(dir.join("pool.key"));
    symlink(&real, dir.join("pool.key")).unwrap();
    let said = refused_start(&dir, &[]);
    assert_refused(&said, "pool.key", "it is a symbolic link");
}

#[test]
fn a_key_that_is_a_device_is_refused_for_what_it_is() {
    let dir = scratch("trust-device-key");
    let said = refused_start(&dir, &["--key-file", "/dev/zero"]);
    assert!(
        said.contains("refusing /dev/zero: it is a character device, not a regular file"),
        "{said}"
    );
    assert!(!said.contains("chmod"), "{said}");
}
