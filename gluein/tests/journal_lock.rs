//! One writer per journal, across processes (issue 20: two `--resume`s of
//! one journal both ran all its pending activities, and both exited 0).
//! A runner holds its journal's lock for as long as it runs; a second
//! runner is refused before it runs anything, and the lock goes with its
//! runner, `kill -9` included. Runs the real `constellation` binary.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use common::{constellation, scratch, text, wait_exit, wait_while_running, Guard};

/// How long a test waits for anything a run does; generous, so that the
/// tests pass on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(120);

/// Where the journal goes: in a directory of runs, so that
/// `constellation runs` lists it.
const JOURNAL: &str = "constellation-runs/manual/journal.db";

/// Writes `dir/slow.toml`: three activities that sleep 2 s, and a gate
/// that runs until `dir/release` exists (at most 120 s), so that the run
/// lasts as long as the test needs it to. Each command first leaves a
/// marker `dir/marks/ID.$WHO`: the test gives each runner its own `WHO`,
/// and so can tell which runner ran what.
fn slow_graph(dir: &Path) -> PathBuf {
    let marks = dir.join("marks");
    std::fs::create_dir_all(&marks).expect("marks directory");
    let graph = dir.join("slow.toml");
    std::fs::write(
        &graph,
        format!(
            "[[activity]]\nid = \"nap-{{i}}\"\nfor = {{ i = \"1..=3\" }}\n\
             script = \"touch {marks}/nap-{{i}}.$WHO; sleep 2\"\n\n\
             [[activity]]\nid = \"gate\"\n\
             script = \"touch {marks}/gate.$WHO; n=0; while [ ! -e {release} ] && [ $n -lt 600 ]; do sleep 0.2; n=$((n+1)); done\"\n",
            marks = marks.display(),
            release = dir.join("release").display(),
        ),
    )
    .expect("graph file");
    graph
}

/// The markers left by the runner called `who`.
fn marks_of(dir: &Path, who: &str) -> Vec<String> {
    let suffix = format!(".{who}");
    let mut names: Vec<String> = std::fs::read_dir(dir.join("marks"))
        .expect("marks directory")
        .map(|e| e.expect("mark").file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(&suffix))
        .collect();
    names.sort();
    names
}

/// Starts `constellation run slow.toml ARGS` in `dir` as runner `who`,
/// with its output in `dir/WHO.log`.
fn start_runner(dir: &Path, who: &str, args: &[&str]) -> Guard {
    let log = std::fs::File::create(dir.join(format!("{who}.log"))).expect("log file");
    Guard(
        constellation(dir)
            .args(["run", "slow.toml", "-n", "2", "--progress", "none"])
            .args(args)
            .env("WHO", who)
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("start constellation run"),
    )
}

/// Runs `constellation run slow.toml ARGS` in `dir` as runner `who`, to
/// its end or for [`PATIENCE`] at most.
fn run_to_end(dir: &Path, who: &str, args: &[&str]) -> Output {
    let child = constellation(dir)
        .args(["run", "slow.toml", "-n", "2", "--progress", "none"])
        .args(args)
        .env("WHO", who)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start constellation run");
    let pid = child.id();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(child.wait_with_output());
    });
    match receiver.recv_timeout(PATIENCE) {
        Ok(output) => output.expect("run ends"),
        Err(_) => {
            // SAFETY: sending a signal to the child this test started.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("runner {who} did not end within {PATIENCE:?}")
        }
    }
}

/// Waits until the runner of `dir` has recorded its run in the journal and
/// started a command, which it does only once it holds the journal.
fn wait_until_running(dir: &Path, runner: &mut Guard, who: &str) {
    wait_while_running(
        runner,
        PATIENCE,
        || {
            let recorded = journal::Journal::open_read_only(&dir.join(JOURNAL))
                .and_then(|j| j.runs())
                .is_ok_and(|runs| !runs.is_empty());
            (recorded && !marks_of(dir, who).is_empty()).then_some(())
        },
        || {
            format!(
                "runner {who} to record its run and run a command:\n{}",
                common::log(dir, &format!("{who}.log"))
            )
        },
    );
}

/// `constellation runs --json` in `dir`, parsed.
fn runs_json(dir: &Path) -> Vec<serde_json::Value> {
    let out = common::run(dir, &["runs", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)))
}

/// Lets the gate activity, and so the run, end.
fn release(dir: &Path) {
    std::fs::write(dir.join("release"), "").expect("release file");
}

#[test]
fn a_resume_of_a_journal_in_use_is_refused_until_its_runner_ends() {
    let dir = scratch("journal-lock-in-use");
    slow_graph(&dir);
    let mut first = start_runner(&dir, "first", &["--journal", JOURNAL]);
    // Whatever happens below, the gate must not outlive the test.
    let _release = ReleaseOnDrop(dir.clone());
    wait_until_running(&dir, &mut first, "first");

    let refused = run_to_end(&dir, "second", &["--resume", JOURNAL]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{}", text(&refused));
    let expected = format!(
        "the journal {JOURNAL} is in use by another run (pid {} on ",
        first.0.id()
    );
    assert!(stderr.contains(&expected), "{}", text(&refused));
    assert!(
        stderr.contains("wait for it to end, or stop it"),
        "{}",
        text(&refused)
    );
    assert_eq!(
        marks_of(&dir, "second"),
        Vec::<String>::new(),
        "the refused runner ran commands"
    );

    // A report, and the list of runs, read the journal in use.
    let report = common::run(&dir, &["report", JOURNAL]);
    assert!(report.status.success(), "{}", text(&report));
    let runs = runs_json(&dir);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["status"], "running", "{runs:?}");
    assert_eq!(runs[0]["pid"], first.0.id(), "{runs:?}");

    release(&dir);
    let status = wait_exit(&mut first, PATIENCE).expect("the first run ends once released");
    assert!(
        status.success(),
        "{status:?}\n{}",
        common::log(&dir, "first.log")
    );
    assert_eq!(
        marks_of(&dir, "first"),
        ["gate.first", "nap-1.first", "nap-2.first", "nap-3.first"]
    );

    // Now the journal is free: a resume is accepted, and finds all done.
    let resumed = run_to_end(&dir, "third", &["--resume", JOURNAL]);
    assert!(resumed.status.success(), "{}", text(&resumed));
    assert!(
        !String::from_utf8_lossy(&resumed.stderr).contains("in use"),
        "{}",
        text(&resumed)
    );
    let runs = runs_json(&dir);
    assert_eq!(runs[0]["status"], "succeeded", "{runs:?}");
    assert_eq!(runs[0]["runs"], 2, "{runs:?}");
    assert_eq!(runs[0]["done"], 4, "{runs:?}");
}

#[test]
fn after_kill_9_of_its_runner_a_journal_is_resumed() {
    let dir = scratch("journal-lock-kill-9");
    slow_graph(&dir);
    let mut first = start_runner(&dir, "first", &["--journal", JOURNAL]);
    let _release = ReleaseOnDrop(dir.clone());
    wait_until_running(&dir, &mut first, "first");
    let pid = first.0.id();

    first.0.kill().expect("kill -9 the runner");
    first.0.wait().expect("the runner is reaped");
    // The lock file still names the dead runner; only its lock is gone.
    let lock = std::fs::read_to_string(dir.join(format!("{JOURNAL}.lock"))).expect("lock file");
    assert!(lock.contains(&format!("pid={pid}\n")), "{lock:?}");
    let runs = runs_json(&dir);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["status"], "stopped", "{runs:?}");
    assert_eq!(runs[0]["pid"], serde_json::Value::Null, "{runs:?}");
    let table = common::run(&dir, &["runs"]);
    assert!(
        String::from_utf8_lossy(&table.stdout).contains("stopped (runner gone)"),
        "{}",
        text(&table)
    );

    // The killed runner's commands may still run (they are in process
    // groups of their own); released, the gate ends, and so will the
    // resumed one's.
    release(&dir);
    let resumed = run_to_end(&dir, "after", &["--resume", JOURNAL]);
    assert!(resumed.status.success(), "{}", text(&resumed));
    assert!(
        !marks_of(&dir, "after").is_empty(),
        "the resume ran nothing, though the killed run had work left"
    );
    let runs = runs_json(&dir);
    assert_eq!(runs[0]["status"], "succeeded", "{runs:?}");
    assert_eq!(runs[0]["done"], 4, "{runs:?}");
}

/// Creates `DIR/release` when dropped, so that a gate activity left
/// running by a failed test ends.
struct ReleaseOnDrop(PathBuf);

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        release(&self.0);
    }
}
