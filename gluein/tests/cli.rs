//! How `constellation` behaves around its work, run as users run it (the
//! real binary, real pipes, real journals): logs without colour codes off a
//! terminal, a quiet end when the reader of its output goes away, error
//! texts that say each thing once, `--progress bar` refused where it would
//! draw nothing, reports from read-only journals, plots without the
//! rasterizer's warnings, and what glide-in pilots ask a batch system for.

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use journal::{
    ActivityDecl, ActivityState, ActivityUpdate, ExecutorRow, Journal, NewAttempt, NewRun,
    RunStatus,
};

/// A fresh directory for one test, under cargo's scratch space for tests
/// (kept, for a look after a failure).
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cli-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// `constellation` in `dir`, with its glide-in allocations under `dir`.
fn constellation(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_constellation"));
    command
        .current_dir(dir)
        .env("CONSTELLATION_HOME", dir.join("home"))
        .env_remove("RUST_LOG");
    command
}

fn output(command: &mut Command) -> Output {
    let output = command.output().expect("start constellation");
    eprintln!(
        "--- {command:?}: {}\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A one-activity graph file in `dir`.
fn tiny_graph(dir: &Path) -> &'static str {
    std::fs::write(
        dir.join("tiny.toml"),
        "[[activity]]\nid = \"hello\"\ncommand = \"true\"\n",
    )
    .expect("graph file");
    "tiny.toml"
}

/// A journal at `path` of one finished run: `attempts` attempts of one
/// kind, round-robin on `executors` executors, each `duration` seconds
/// long and started `step` seconds after the one before.
fn journal_of(path: &Path, attempts: usize, executors: i64, step: f64, duration: f64) {
    let mut journal = Journal::create(path).expect("create the journal");
    let run = journal
        .begin_run(&NewRun {
            graph_path: "sweep.toml".into(),
            graph_hash: "0".into(),
            host: "node1".into(),
            command_line: "constellation run sweep.toml".into(),
            output_dir: "out".into(),
            sources: vec![("sweep.toml".into(), "# a sweep".into())],
        })
        .expect("begin the run");
    let t0 = journal.runs().expect("runs")[0].started;
    let rows: Vec<ExecutorRow> = (0..executors)
        .map(|executor| ExecutorRow {
            executor,
            node: "node1".into(),
            labels: "cpu".into(),
            cores: 1,
        })
        .collect();
    journal.record_executors(run, &rows).expect("executors");
    let ids: Vec<String> = (0..attempts).map(|i| format!("step-{i}")).collect();
    let declarations = ids.iter().map(|id| ActivityDecl {
        id,
        kind: 0,
        context: 0,
        spec_hash: 1,
        rerun: true,
    });
    let keys = journal
        .declare(
            run,
            &["step-{i}".to_string()],
            &["cpu".to_string()],
            declarations,
        )
        .expect("declare");
    let updates: Vec<ActivityUpdate> = (keys.iter().enumerate())
        .map(|(i, &activity)| {
            let started = t0 + i as f64 * step;
            ActivityUpdate {
                activity,
                state: ActivityState::Done,
                message: None,
                attempts: vec![NewAttempt {
                    attempt: 1,
                    node: "node1".into(),
                    executor: i as i64 % executors,
                    labels: "cpu".into(),
                    started,
                    ended: started + duration,
                    outcome: "exited".into(),
                    exit_code: Some(0),
                    signal: None,
                    message: None,
                    cpu_seconds: Some(duration),
                    stdout: None,
                    stderr: None,
                    stdout_bytes: None,
                    stderr_bytes: None,
                    stream: None,
                }],
            }
        })
        .collect();
    journal.record(run, &updates).expect("record");
    journal
        .end_run(run, RunStatus::Succeeded)
        .expect("end the run");
}

#[test]
fn logs_into_a_pipe_have_no_colour_codes() {
    let dir = scratch("no-ansi");
    // Nothing listens on port 1: the network driver warns that it could not
    // connect, until the status query gives up.
    let out = output(
        constellation(&dir)
            .args([
                "status",
                "--pool",
                "/ip4/127.0.0.1/tcp/1",
                "--timeout",
                "2s",
            ])
            // Every pool has a key: without one the command stops before
            // it dials anything, and there would be no warning to look at.
            .env(
                "CONSTELLATION_KEY",
                "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            )
            .stderr(Stdio::piped()),
    );
    assert_eq!(out.status.code(), Some(2));
    let log = stderr(&out);
    assert!(
        log.contains("WARN") && log.contains("could not connect"),
        "the warning is logged: {log:?}"
    );
    assert!(!log.contains('\x1b'), "no ANSI escape codes: {log:?}");
}

#[test]
fn a_reader_that_stops_early_ends_the_report_quietly() {
    let dir = scratch("broken-pipe");
    // Several hundred kilobytes of JSON: more than a pipe holds, so the
    // report is still writing when the reader goes away.
    journal_of(&dir.join("run.db"), 3_000, 4, 0.01, 0.05);
    let mut child = constellation(&dir)
        .args(["report", "run.db", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start constellation report");
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("read the first line");
    // The reader (and with it the pipe) is dropped here, like `head -1`'s.
    assert_eq!(first.trim(), "{");
    let out = child.wait_with_output().expect("wait for the report");
    let log = stderr(&out);
    eprintln!("status {}; stderr: {log}", out.status);
    assert!(!log.contains("panicked"), "no panic: {log:?}");
    assert!(log.is_empty(), "nothing on stderr: {log:?}");
    assert!(
        out.status.success() || out.status.signal() == Some(libc::SIGPIPE),
        "ends as `cat` would, by SIGPIPE (or succeeds): {}",
        out.status
    );
}

#[test]
fn error_texts_say_each_cause_once() {
    let dir = scratch("error-texts");
    for (args, expected) in [
        (
            &["--nodes", "0", "--walltime", "1h"][..],
            "error: invalid glide-in request: --nodes must be at least 1\n",
        ),
        (
            &[
                "--nodes",
                "1",
                "--walltime",
                "1h",
                "--executors-per-node",
                "0",
            ][..],
            "error: invalid glide-in request: --executors-per-node must be at least 1 \
             (leave it out to let the agent decide)\n",
        ),
        (
            &["--nodes", "1", "--walltime", "1s"][..],
            "error: invalid glide-in request: --walltime 1s is too short: agents stop 30s \
             early to leave cleanly, so ask for at least 60s (e.g. `--walltime 10m`)\n",
        ),
    ] {
        let out = output(
            constellation(&dir)
                .args(["glidein", "slurm", "--dry-run"])
                .args(args),
        );
        assert_eq!(out.status.code(), Some(2));
        assert_eq!(stderr(&out), expected);
    }
    // An I/O error under a message that already says it.
    let home = dir.join("home-is-a-file");
    std::fs::write(&home, "").expect("a file");
    let out = output(
        constellation(&dir)
            .args(["glidein", "list"])
            .env("CONSTELLATION_HOME", &home),
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        format!(
            "error: could not list {}/allocations: Not a directory (os error 20)\n",
            home.display()
        )
    );
}

#[test]
fn a_progress_bar_into_a_pipe_is_refused_with_the_reason() {
    let dir = scratch("progress-bar");
    let graph = tiny_graph(&dir);
    let out = output(
        constellation(&dir)
            .args(["run", graph, "--progress", "bar"])
            .stderr(Stdio::piped()),
    );
    assert_eq!(out.status.code(), Some(2));
    let text = stderr(&out);
    assert!(
        text.contains("--progress bar needs stderr to be a terminal")
            && text.contains("--progress lines"),
        "{text}"
    );
    assert!(
        !dir.join("constellation-runs").exists(),
        "nothing ran, no journal was made"
    );
    // Lines work there, and say nothing of bars.
    let out = output(constellation(&dir).args(["run", graph, "--progress", "lines"]));
    assert!(out.status.success());
    let help = output(constellation(&dir).args(["run", "--help"]));
    assert!(String::from_utf8_lossy(&help.stdout).contains("refused when stderr is not a terminal"));
}

/// Whether this process may make a user and mount namespace, where a
/// read-only bind mount makes a read-only medium without privileges.
fn can_mount_read_only() -> bool {
    Command::new("unshare")
        .args(["--user", "--map-root-user", "--mount", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// A journal of one short run in `dir`, made by `constellation run`.
fn real_journal(dir: &Path) -> PathBuf {
    let graph = tiny_graph(dir);
    let out = output(constellation(dir).args(["run", graph, "--progress", "none"]));
    assert!(out.status.success());
    let runs = dir.join("constellation-runs");
    let run = std::fs::read_dir(&runs)
        .expect("runs directory")
        .next()
        .expect("one run")
        .expect("run directory")
        .path();
    run.join("journal.db")
}

#[test]
fn a_journal_on_a_read_only_medium_is_reported() {
    if !can_mount_read_only() {
        eprintln!(
            "skipped: `unshare --user --map-root-user --mount` is not allowed here, \
             so no read-only medium can be made without privileges"
        );
        return;
    }
    let dir = scratch("read-only-medium");
    let medium = dir.join("medium");
    std::fs::create_dir_all(&medium).expect("medium directory");
    std::fs::copy(real_journal(&dir), medium.join("journal.db")).expect("copy the journal");
    // The journal's directory, mounted read-only over itself (EROFS), and
    // `constellation report` on it, in a namespace of their own.
    let out = output(
        Command::new("unshare")
            .args(["--user", "--map-root-user", "--mount", "sh", "-c"])
            .arg(r#"mount --bind -o ro "$1" "$1" && exec "$2" report "$1/journal.db""#)
            .args(["sh", medium.to_str().expect("UTF-8 path")])
            .arg(env!("CARGO_BIN_EXE_constellation"))
            .env_remove("RUST_LOG"),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("run 1") && report.contains("tiny.toml"),
        "{report}"
    );
    assert!(
        std::fs::read_dir(&medium).expect("medium").count() == 1,
        "nothing beside the journal was left"
    );
}

/// `constellation` in `dir` as a user whom file modes bind: this user, or
/// for root, whom they do not bind, `nobody` through `setpriv`; `None`
/// where root cannot become `nobody` (no setpriv, or `nobody` cannot reach
/// the binary).
fn constellation_bound_by_file_modes(dir: &Path) -> Option<Command> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some(constellation(dir));
    }
    let as_nobody = || {
        let mut command = Command::new("setpriv");
        command.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
        command.arg(env!("CARGO_BIN_EXE_constellation"));
        command
    };
    let works = as_nobody()
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    works.then(|| {
        let mut command = as_nobody();
        command.current_dir(dir).env_remove("RUST_LOG");
        command
    })
}

/// A copy of a journal in `dir/shelf`, with `mode`, in a directory of
/// `dir_mode`, readable by everyone on the way there.
fn shelved_journal(dir: &Path, mode: u32, dir_mode: u32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let journal = real_journal(dir);
    let shelf = dir.join("shelf");
    std::fs::create_dir_all(&shelf).expect("shelf directory");
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::copy(journal, shelf.join("journal.db")).expect("copy the journal");
    std::fs::set_permissions(
        shelf.join("journal.db"),
        std::fs::Permissions::from_mode(mode),
    )
    .expect("chmod");
    std::fs::set_permissions(&shelf, std::fs::Permissions::from_mode(dir_mode)).expect("chmod");
    shelf.join("journal.db")
}

/// Gives the shelved `journal` and its directory back to their owner, so
/// that the next run of the test can remove them.
fn unshelve(journal: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let shelf = journal.parent().expect("the shelf");
    std::fs::set_permissions(shelf, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::set_permissions(journal, std::fs::Permissions::from_mode(0o644)).expect("chmod");
}

#[test]
fn a_journal_the_user_may_only_read_is_reported() {
    let dir = scratch("read-only-files");
    let Some(mut command) = constellation_bound_by_file_modes(&dir) else {
        eprintln!("skipped: root, and `setpriv` cannot run the binary as nobody");
        return;
    };
    let journal = shelved_journal(&dir, 0o444, 0o555);
    let out = output(command.args(["report", "shelf/journal.db"]));
    unshelve(&journal);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("tiny.toml"));
}

#[test]
fn a_journal_the_user_may_not_read_is_not_called_a_foreign_file() {
    let dir = scratch("unreadable-file");
    let Some(mut command) = constellation_bound_by_file_modes(&dir) else {
        eprintln!("skipped: root, and `setpriv` cannot run the binary as nobody");
        return;
    };
    let journal = shelved_journal(&dir, 0o000, 0o755);
    let out = output(command.args(["report", "shelf/journal.db"]));
    unshelve(&journal);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "error: cannot read journal shelf/journal.db: Permission denied (os error 13)\n"
    );
}

#[test]
fn files_that_are_no_journal_say_what_they_are() {
    let dir = scratch("not-a-journal");
    std::fs::write(
        dir.join("notes.db"),
        "some text, not SQLite at all, long enough",
    )
    .expect("a text file");
    let out = output(constellation(&dir).args(["report", "notes.db"]));
    assert!(stderr(&out).contains("notes.db is not a constellation journal"));
    // A directory is something no journal can be, but it is not a file of
    // another kind either.
    std::fs::create_dir_all(dir.join("dir.db")).expect("a directory");
    let out = output(constellation(&dir).args(["report", "dir.db"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("dir.db is not a constellation journal (it is a directory)"),
        "{}",
        stderr(&out)
    );
}

/// A journal of schema version 1, written by `constellation run` of the
/// build before the compact journal (commit 5e39ffa; host names replaced).
const VERSION_1_JOURNAL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/journal-v1.db");

/// `report` and `--resume` refuse a journal of the old schema with both
/// versions named, and leave it as it was.
#[test]
fn a_version_1_journal_is_refused_by_report_and_resume() {
    let dir = scratch("version-1");
    std::fs::copy(VERSION_1_JOURNAL, dir.join("old.db")).expect("copy the journal");
    let before = std::fs::read(dir.join("old.db")).expect("read the journal");
    let expected = "journal old.db has schema version 1, but this build of constellation \
                    reads version 2 only";
    let out = output(constellation(&dir).args(["report", "old.db"]));
    assert!(!out.status.success());
    assert!(stderr(&out).contains(expected), "{}", stderr(&out));

    std::fs::write(
        dir.join("tiny.toml"),
        "[[activity]]\nid = \"hello\"\ncommand = \"true\"\n",
    )
    .expect("a graph");
    let out = output(constellation(&dir).args([
        "run",
        "tiny.toml",
        "-n",
        "1",
        "--progress",
        "none",
        "--resume",
        "old.db",
    ]));
    assert!(!out.status.success());
    assert!(stderr(&out).contains(expected), "{}", stderr(&out));
    assert!(!dir.join("output.run2").exists(), "nothing ran");
    let after = std::fs::read(dir.join("old.db")).expect("read the journal");
    assert!(before == after, "the old journal was changed");
}

#[test]
fn plots_draw_no_rectangle_the_rasterizer_rejects() {
    let dir = scratch("plot-rects");
    // Two thousand attempts far shorter than a pixel of a 25-minute run:
    // each is drawn a pixel wide, at every fraction of a pixel.
    journal_of(&dir.join("run.db"), 2_000, 4, 0.7385, 0.001);
    let out = output(constellation(&dir).args(["report", "run.db", "--plot", "plot.svg"]));
    assert!(out.status.success());
    let svg = std::fs::read_to_string(dir.join("plot.svg")).expect("the SVG");
    let mut rects = 0;
    for rect in svg.split("<rect").skip(1) {
        for size in ["width", "height"] {
            let value: f64 = rect
                .split(&format!(" {size}=\""))
                .nth(1)
                .and_then(|v| v.split('"').next())
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("a rectangle without a numeric {size}: <rect{rect}"));
            assert!(value > 0.0, "a rectangle of {size} {value}: <rect{rect}");
        }
        rects += 1;
    }
    assert!(rects >= 2_000, "every attempt drawn: {rects} rectangles");
    // The PNG goes through usvg/resvg, which log what they skip.
    let out = output(
        constellation(&dir)
            .args(["report", "run.db", "--plot", "plot.png"])
            .env("RUST_LOG", "warn"),
    );
    assert!(out.status.success());
    assert_eq!(stderr(&out), "plot: plot.png\n");
}

#[test]
fn slurm_pilots_ask_for_the_cores_their_executors_use() {
    let dir = scratch("slurm-cpus");
    let dry_run = |extra: &[&str]| {
        let out = output(
            constellation(&dir)
                .args([
                    "glidein",
                    "slurm",
                    "--nodes",
                    "2",
                    "--walltime",
                    "1h",
                    "--dry-run",
                ])
                .args(extra),
        );
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = dry_run(&["--executors-per-node", "4"]);
    assert!(text.contains("\n#SBATCH --cpus-per-task=4\n"), "{text}");
    assert!(
        text.contains("srun --nodes=2 --ntasks-per-node=1 --cpus-per-task=4 "),
        "{text}"
    );
    assert!(
        text.contains("# Asks 2 node(s) for one agent task each with 4 CPUs"),
        "the dry run says what is asked for: {text}"
    );
    let text = dry_run(&[]);
    assert!(text.contains("\n#SBATCH --exclusive\n"), "{text}");
    assert!(text.contains("--cpus-per-task=\"$cpus\""), "{text}");
    assert!(
        text.contains("# Asks 2 whole node(s) (--exclusive)"),
        "{text}"
    );
}
