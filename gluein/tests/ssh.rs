//! The ssh backend against a real OpenSSH server: the test runs its own
//! `sshd` on a free loopback port with throw-away host and user keys, and
//! `constellation glidein ssh --ssh-option ...` starts real agents through
//! it that join a real pool, run a bag, and are cancelled.
//!
//! Without `/usr/sbin/sshd` (package `openssh-server`) the test says it
//! skipped; `scripts/test.sh` installs it and sets
//! `CONSTELLATION_REQUIRE_SSHD=1`, which turns a skip into a failure.

mod common;

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    agent_pids, alive, allocation_dir, allocation_ids, log, marks, run, run_on_pool, scratch,
    sleepers, start_pool, text, AgentsGuard, Guard,
};

const SSHD: &str = "/usr/sbin/sshd";
/// sshd's privilege separation directory (Debian's build), which it
/// insists on even when only root logs in.
const PRIVSEP_DIR: &str = "/run/sshd";

/// A private sshd for one test, killed when dropped.
struct Sshd {
    _guard: Guard,
    port: u16,
    /// The user's private key, which the server accepts.
    key: PathBuf,
}

/// Says why the test cannot run here: a failure if the caller promised an
/// sshd, a printed skip otherwise.
fn skip(reason: &str) -> Option<Sshd> {
    assert!(
        std::env::var_os("CONSTELLATION_REQUIRE_SSHD").is_none(),
        "CONSTELLATION_REQUIRE_SSHD is set, but {reason}"
    );
    println!("skipped: {reason}");
    None
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(program).is_file()))
}

fn is_root() -> bool {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() == 0 }
}

/// Creates a key pair `dir/name` and `dir/name.pub`.
fn keygen(dir: &Path, name: &str) -> PathBuf {
    let key = dir.join(name);
    let out = Command::new("ssh-keygen")
        .args([
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "constellation-test",
            "-f",
        ])
        .arg(&key)
        .output()
        .expect("run ssh-keygen");
    assert!(out.status.success(), "ssh-keygen: {}", text(&out));
    key
}

/// A port that was free a moment ago (the OS picks it; sshd has no port 0).
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("local address").port()
}

/// Starts an sshd in `dir` that lets this user in with a fresh key, or
/// says why it cannot.
fn start_sshd(dir: &Path) -> Option<Sshd> {
    if !Path::new(SSHD).is_file() {
        return skip(&format!("no {SSHD} (install openssh-server)"));
    }
    for tool in ["ssh", "ssh-keygen"] {
        if !on_path(tool) {
            return skip(&format!("no `{tool}` on PATH (install openssh-client)"));
        }
    }
    if !Path::new(PRIVSEP_DIR).is_dir() {
        if !is_root() {
            return skip(&format!(
                "sshd needs its privilege separation directory {PRIVSEP_DIR}, which only root can create"
            ));
        }
        if let Err(e) = std::fs::create_dir_all(PRIVSEP_DIR) {
            return skip(&format!("could not create {PRIVSEP_DIR}: {e}"));
        }
    }
    let host_key = keygen(dir, "host_key");
    let key = keygen(dir, "user_key");
    let authorized = dir.join("authorized_keys");
    std::fs::copy(key.with_extension("pub"), &authorized).expect("authorized_keys");
    let port = free_port();
    let config = dir.join("sshd_config");
    std::fs::write(
        &config,
        format!(
            "ListenAddress 127.0.0.1\n\
             Port {port}\n\
             HostKey {host_key}\n\
             AuthorizedKeysFile {authorized}\n\
             PidFile {pid}\n\
             # The scratch directory's owner and modes are not sshd's business.\n\
             StrictModes no\n\
             UsePAM no\n\
             PasswordAuthentication no\n\
             KbdInteractiveAuthentication no\n\
             PubkeyAuthentication yes\n\
             # Tests run as root in containers: keys only, as for everyone.\n\
             PermitRootLogin prohibit-password\n",
            host_key = host_key.display(),
            authorized = authorized.display(),
            pid = dir.join("sshd.pid").display(),
        ),
    )
    .expect("sshd_config");
    let sshd_log = std::fs::File::create(dir.join("sshd.log")).expect("sshd log");
    let mut guard = Guard(
        Command::new(SSHD)
            .args(["-D", "-e", "-f"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(sshd_log.try_clone().expect("sshd log"))
            .stderr(sshd_log)
            .spawn()
            .expect("start sshd"),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        let exited = guard.0.try_wait().expect("try_wait");
        assert!(
            exited.is_none() && Instant::now() < deadline,
            "sshd did not come up on port {port} ({exited:?}): {}",
            log(dir, "sshd.log")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(Sshd {
        _guard: guard,
        port,
        key,
    })
}

/// The options a cluster user would give for this server: its port, the
/// key, and no host key checks (its host key is as new as it is).
fn ssh_options(sshd: &Sshd) -> Vec<String> {
    vec![
        format!("Port={}", sshd.port),
        format!("IdentityFile={}", sshd.key.display()),
        "StrictHostKeyChecking=no".to_string(),
        "UserKnownHostsFile=/dev/null".to_string(),
        "LogLevel=ERROR".to_string(),
    ]
}

fn user_name() -> String {
    let out = Command::new("id").arg("-un").output().expect("run id");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn ssh_pilot_through_a_real_sshd_runs_a_bag_and_is_cancelled() {
    let dir = scratch("ssh-bag");
    let Some(sshd) = start_sshd(&dir) else {
        return;
    };
    let options = ssh_options(&sshd);
    // The server answers as ssh itself will be asked, before any agent.
    let mut probe = Command::new("ssh");
    for option in &options {
        probe.arg("-o").arg(option);
    }
    let probe = probe
        .args(["-o", "BatchMode=yes", "127.0.0.1", "echo ok"])
        .stdin(Stdio::null())
        .output()
        .expect("run ssh");
    assert!(
        probe.status.success() && String::from_utf8_lossy(&probe.stdout).trim() == "ok",
        "ssh to the test sshd failed: {}\nsshd log:\n{}",
        text(&probe),
        log(&dir, "sshd.log")
    );

    let _pool = start_pool(&dir);
    // Two hosts that are this machine under two names, one with a user.
    let second = format!("{}@localhost", user_name());
    let hosts = format!("127.0.0.1,{second}");
    let mut args = vec![
        "glidein",
        "ssh",
        "--hosts",
        &hosts,
        "--nodes",
        "2",
        "--walltime",
        "10m",
        "--executors-per-node",
        "2",
        "--context",
        "via-ssh",
        "--pool",
        "pool.json",
    ];
    for option in &options {
        args.extend(["--ssh-option", option]);
    }
    let submitted = run(&dir, &args);
    let ids = allocation_ids(&dir);
    assert_eq!(ids.len(), 1, "{}", text(&submitted));
    let id = &ids[0];
    let alloc = allocation_dir(&dir, id);
    let _agents = AgentsGuard(alloc.clone());
    assert!(
        submitted.status.success(),
        "{}\npilot stderr:\n{}\nsshd log:\n{}",
        text(&submitted),
        log(&alloc, "stderr"),
        log(&dir, "sshd.log")
    );
    let agents = agent_pids(&alloc);
    let mut names: Vec<&str> = agents.iter().map(|(host, _)| host.as_str()).collect();
    names.sort();
    assert_eq!(names, ["127.0.0.1", second.as_str()], "{agents:?}");

    let agent_logs = || {
        format!(
            "{}{}",
            log(&alloc, "127.0.0.1.stderr"),
            log(&alloc, &format!("{second}.stderr"))
        )
    };
    let graph = sleepers(&dir, 16, 0.2);
    let ran = run_on_pool(&dir, &graph, 2, &["--wait-timeout", "60s"]);
    assert!(ran.status.success(), "{}\n{}", text(&ran), agent_logs());
    let marks = marks(&dir);
    assert_eq!(marks.len(), 16, "every activity ran once");
    assert!(
        marks.iter().all(|m| m.0 == "via-ssh"),
        "only the agents started over ssh ran work: {marks:?}"
    );

    // `list` asks the hosts over ssh (`kill -0`), with the same options.
    let listed = run(&dir, &["glidein", "list"]);
    assert!(listed.status.success(), "{}", text(&listed));
    let listing = String::from_utf8_lossy(&listed.stdout).into_owned();
    let line = listing.lines().find(|l| l.starts_with(id.as_str()));
    assert!(line.is_some_and(|l| l.ends_with("running")), "{listing}");

    let cancelled = run(&dir, &["glidein", "cancel", id]);
    assert!(
        cancelled.status.success(),
        "{}\nsshd log:\n{}",
        text(&cancelled),
        log(&dir, "sshd.log")
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    for (host, pid) in &agents {
        while alive(*pid) {
            assert!(
                Instant::now() < deadline,
                "the agent on {host} ({pid}) did not leave: {}",
                agent_logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let logs = agent_logs();
    assert_eq!(
        logs.matches("agent leaving: asked to stop").count(),
        2,
        "{logs}"
    );
    let listed = run(&dir, &["glidein", "list"]);
    let listing = String::from_utf8_lossy(&listed.stdout).into_owned();
    let line = listing.lines().find(|l| l.starts_with(id.as_str()));
    assert!(line.is_some_and(|l| l.ends_with("cancelled")), "{listing}");
}
