//! Who may use a pool, and who owns its pool file, with real processes on
//! loopback: every pool has a key, and another local user, who cannot read
//! it, cannot run work on the pool's agents; a second `pool start` on a
//! live pool's file is refused and leaves it alone; a pool node killed
//! with `kill -9` and started again on its state directory is the same
//! node at the same address.

mod common;

use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{
    log, pool_file_pid, pool_start_args, run, scratch, spawn_agent, start_pool, start_pool_with,
    text, wait_exit, Guard, BIN,
};

/// The user and group `nobody`: another local user, without the key.
const NOBODY: u32 = 65534;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {mode:o} {}: {e}", path.display()));
}

/// Whether users other than the owner may reach `path` (search permission
/// on it and every directory above it).
fn others_can_reach(path: &Path) -> bool {
    path.ancestors()
        .filter(|p| !p.as_os_str().is_empty())
        .all(|p| std::fs::metadata(p).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
}

/// Runs `command` to its end, killing it and failing the test if it takes
/// longer than `limit`.
fn output_within(mut command: Command, limit: Duration, what: &str) -> Output {
    let mut child = Guard(
        command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {what}: {e}")),
    );
    // Pipes are read on threads, so a chatty child cannot block on them.
    let mut stdout = child.0.stdout.take().expect("stdout");
    let mut stderr = child.0.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut bytes).ok();
        bytes
    });
    let err = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut stderr, &mut bytes).ok();
        bytes
    });
    let status = wait_exit(&mut child, limit).unwrap_or_else(|| {
        let _ = child.0.kill();
        panic!("{what} still ran after {limit:?}: it must fail, and fail within a bound")
    });
    Output {
        status,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    }
}

/// Removes the directory when the test ends.
struct RemoveDir(PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn another_local_user_without_the_key_is_refused() {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        println!("skipped: not root (running commands as another user needs root)");
        return;
    }
    // A directory other users can reach, as a home directory on a shared
    // machine is: only the modes of the pool's own files keep them out.
    let mut dir = scratch("pool-security-nobody");
    let mut _remove = None;
    if !others_can_reach(&dir) {
        dir = std::env::temp_dir().join(format!("constellation-nobody-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        _remove = Some(RemoveDir(dir.clone()));
    }
    chmod(&dir, 0o755);
    assert!(others_can_reach(&dir), "{} is not reachable", dir.display());
    // Where `nobody` may write: its working directory, and the marker's.
    let open = dir.join("open");
    std::fs::create_dir_all(&open).unwrap();
    chmod(&open, 0o777);
    let marker = open.join("marker");
    let binary = if others_can_reach(Path::new(BIN)) {
        PathBuf::from(BIN)
    } else {
        let copy = dir.join("bin");
        std::fs::create_dir_all(&copy).unwrap();
        chmod(&copy, 0o755);
        std::fs::copy(BIN, copy.join("constellation")).expect("copy the binary");
        chmod(&copy.join("constellation"), 0o755);
        copy.join("constellation")
    };

    let _pool = start_pool(&dir);
    let pool_file = dir.join("pool.json");
    let key_file = dir.join("pool.key");
    assert_eq!(mode(&pool_file), 0o600, "the pool file is its owner's only");
    assert_eq!(mode(&key_file), 0o600, "the key is its owner's only");
    // An agent of the pool's owner: the one `nobody` must not reach.
    let _agent = spawn_agent(&dir, 1, "cpu", &[]);
    let evil = open.join("evil.toml");
    std::fs::write(
        &evil,
        format!(
            "[[activity]]\nid = \"evil\"\nscript = \"touch {}\"\n",
            marker.display()
        ),
    )
    .unwrap();
    chmod(&evil, 0o644);
    // A copy of the pool file others can read, as a careless user might
    // leave: the key still keeps them out. (In a directory only its owner
    // may write: one in `open` could be anyone's, and is refused.)
    let leaked = dir.join("leaked-pool.json");
    std::fs::copy(&pool_file, &leaked).unwrap();
    chmod(&leaked, 0o644);
    let address =
        serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(&pool_file).unwrap())
            .unwrap()["addresses"][0]
            .as_str()
            .unwrap()
            .to_string();
    let as_nobody = |args: &[String], env_key: Option<&str>| {
        let mut command = Command::new(&binary);
        command
            .args(args)
            .current_dir(&open)
            .env("HOME", &open)
            .env("CONSTELLATION_HOME", open.join("home"))
            .env_remove("CONSTELLATION_KEY")
            .uid(NOBODY)
            .gid(NOBODY);
        if let Some(key) = env_key {
            command.env("CONSTELLATION_KEY", key);
        }
        let what = format!("`constellation {}` as nobody", args.join(" "));
        let out = output_within(command, Duration::from_secs(60), &what);
        println!("{what}: {}", text(&out));
        assert!(!out.status.success(), "{what} succeeded: {}", text(&out));
        out
    };
    let pool_arg = pool_file.to_str().unwrap();
    let evil_arg = evil.to_str().unwrap();
    let run_args = |pool: &str| -> Vec<String> {
        [
            "run",
            evil_arg,
            "--pool",
            pool,
            "--wait-agents",
            "1",
            "--wait-timeout",
            "5s",
            "--progress",
            "none",
        ]
        .map(String::from)
        .to_vec()
    };
    // What `nobody` says, run with the pool file `pool`, and as an agent on
    // it: both are refused.
    let run_and_agent_say = |pool: &str| {
        [
            run_args(pool),
            ["agent", "--pool", pool].map(String::from).to_vec(),
        ]
        .map(|args| text(&as_nobody(&args, None)))
    };

    // The pool file itself is out of reach.
    for said in run_and_agent_say(pool_arg) {
        assert!(
            said.contains("cannot read the pool file")
                && said.contains("ermission denied")
                && said.contains(pool_arg),
            "{said}"
        );
    }
    // With the leaked pool file, the key is out of reach.
    for said in run_and_agent_say(leaked.to_str().unwrap()) {
        assert!(
            said.contains("cannot read the pool key")
                && said.contains(key_file.to_str().unwrap())
                && said.contains("whoever joins the pool must be able to read its key file"),
            "{said}"
        );
    }
    // A pool file in a directory anyone may write is not trusted at all:
    // whoever planted it would choose the pool, and the key.
    let planted = open.join("planted-pool.json");
    std::fs::copy(&pool_file, &planted).unwrap();
    chmod(&planted, 0o644);
    for said in run_and_agent_say(planted.to_str().unwrap()) {
        assert!(
            said.contains(&format!("refusing {}", planted.display()))
                && said.contains("may be changed by other users"),
            "{said}"
        );
    }
    // With the address alone there is no key to join with ...
    let said = text(&as_nobody(&run_args(&address), None));
    assert!(said.contains("has no key"), "{said}");
    // ... and a key of one's own does not open the pool: its node refuses
    // the connection, and the runner finds no agent.
    let wrong = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    as_nobody(&run_args(&address), Some(wrong));

    // Had any of them reached the agent, it would have touched the marker
    // by now; give a late one a moment to show.
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        !marker.exists(),
        "another user ran a command on the pool: {}",
        log(&dir, "cpu.log")
    );
    assert_eq!(mode(&pool_file), 0o600);
    assert_eq!(mode(&key_file), 0o600);
}

/// `constellation status --pool pool.json --json` in `dir`, parsed; it must
/// succeed.
fn status(dir: &Path) -> serde_json::Value {
    let out = run(dir, &["status", "--pool", "pool.json", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    serde_json::from_slice(&out.stdout).expect("status --json prints JSON")
}

#[test]
fn a_second_pool_on_a_live_pool_file_is_refused_and_leaves_it_alone() {
    let dir = scratch("pool-security-second");
    let mut first = start_pool(&dir);
    let pool_file = dir.join("pool.json");
    assert_eq!(mode(&pool_file), 0o600);
    assert_eq!(mode(&dir.join("pool.key")), 0o600);
    assert_eq!(mode(&dir.join("pool.state")), 0o700);
    assert_eq!(mode(&dir.join("pool.state/identity")), 0o600);
    let before = std::fs::read(&pool_file).unwrap();

    let mut command = common::constellation(&dir);
    command.args(pool_start_args("pool.json"));
    let second = output_within(command, Duration::from_secs(60), "a second pool start");
    let said = text(&second);
    assert_eq!(second.status.code(), Some(2), "{said}");
    assert!(
        said.contains("the pool file pool.json belongs to a live pool")
            && said.contains(&format!("pid {}", first.0.id())),
        "{said}"
    );
    assert_eq!(
        std::fs::read(&pool_file).unwrap(),
        before,
        "the refused start changed the live pool's file"
    );

    // Another pool file, but the first pool's state directory: refused too,
    // as two nodes with one identity would be one peer id twice.
    let mut command = common::constellation(&dir);
    command
        .args(pool_start_args("other.json"))
        .args(["--state-dir", "pool.state"]);
    let third = output_within(
        command,
        Duration::from_secs(60),
        "a pool on a used state dir",
    );
    let said = text(&third);
    assert_eq!(third.status.code(), Some(2), "{said}");
    assert!(said.contains("in use by another pool node"), "{said}");
    assert!(!dir.join("other.json").exists());

    // The first pool still serves: an agent joins it.
    let _agent = spawn_agent(&dir, 1, "cpu", &["--walltime", "1h"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let json = status(&dir);
        let members = json["members"].as_array().expect("a member list");
        if members.iter().any(|m| m["role"] == "agent") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the agent never joined the first pool: {json}\n{}",
            log(&dir, "cpu.log")
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // SAFETY: sending a signal to our own child process.
    unsafe { libc::kill(first.0.id() as i32, libc::SIGTERM) };
    let stopped = wait_exit(&mut first, Duration::from_secs(30));
    assert!(
        stopped.is_some_and(|s| s.success()),
        "{stopped:?}: {}",
        log(&dir, "pool.log")
    );
    assert!(!pool_file.exists(), "the stopped pool left its pool file");
}

#[test]
fn a_pool_killed_and_started_again_on_its_state_dir_keeps_its_address() {
    let dir = scratch("pool-security-restart");
    let mut first = start_pool_with(&dir, &["--state-dir", "state"], "first.log");
    let pool_file = dir.join("pool.json");
    let addresses = |path: &Path| {
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        json["addresses"].clone()
    };
    let before = addresses(&pool_file);
    assert!(
        before[0].as_str().is_some_and(|a| a.contains("/p2p/")),
        "{before}"
    );
    assert_eq!(mode(&dir.join("state")), 0o700);
    // kill -9: the node has no chance to remove its pool file.
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    assert!(pool_file.exists(), "a killed pool leaves its file behind");
    let dead = first.0.id();

    let _second = start_pool_with(&dir, &["--state-dir", "state"], "second.log");
    let said = log(&dir, "second.log");
    assert!(
        said.contains(&format!(
            "replacing the stale pool file pool.json (its pool, pid {dead}, is gone)"
        )) && said.contains("its previous identity"),
        "{said}"
    );
    assert_eq!(
        addresses(&pool_file),
        before,
        "same peer id and port after the restart:\n{said}"
    );
    assert_ne!(pool_file_pid(&pool_file), Some(dead));
    assert_eq!(mode(&pool_file), 0o600);
    // And it is a pool that answers.
    let json = status(&dir);
    assert_eq!(json["members"][0]["role"], "pool", "{json}");
}
