//! `constellation run` as a user runs it: the real binary in a child
//! process, real shell commands, a real journal.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use journal::{ActivityState, Journal};

/// A fresh directory for one test, removed when the test passes (a failed
/// test keeps it, for a look at its journal and output).
struct WorkDir(PathBuf);

impl std::ops::Deref for WorkDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn workdir(name: &str) -> WorkDir {
    let dir = std::env::temp_dir().join(format!("constellation-run-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    WorkDir(dir)
}

fn constellation(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_constellation"));
    command.current_dir(dir).env("RUST_LOG", "error");
    command
}

fn run(dir: &Path, args: &[&str]) -> Output {
    let output = constellation(dir).arg("run").args(args).output().unwrap();
    eprintln!(
        "--- constellation run {args:?}: {}\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn states(journal: &Path) -> Vec<(String, ActivityState)> {
    Journal::open_read_only(journal)
        .unwrap()
        .activities()
        .unwrap()
        .into_iter()
        .map(|a| (a.id, a.state))
        .collect()
}

#[test]
fn a_diamond_runs_each_node_after_its_inputs() {
    let dir = workdir("diamond");
    std::fs::write(
        dir.join("diamond.toml"),
        r#"
[[activity]]
id = "a"
script = "echo a > a.txt"

[[activity]]
id = "b-{i}"
for = { i = "1..=2" }
script = "cat a.txt > b{i}.txt && echo b{i} | tee -a b{i}.txt"
after = ["a"]

[[activity]]
id = "d"
script = "cat b1.txt b2.txt > d.txt"
after = ["b-*"]
"#,
    )
    .unwrap();
    let output = run(&dir, &["diamond.toml", "-n", "2", "--journal", "j.db"]);
    assert!(output.status.success());
    assert_eq!(
        std::fs::read_to_string(dir.join("d.txt")).unwrap(),
        "a\nb1\na\nb2\n"
    );
    let states = states(&dir.join("j.db"));
    assert_eq!(states.len(), 4);
    assert!(
        states.iter().all(|(_, s)| *s == ActivityState::Done),
        "{states:?}"
    );
    let journal = Journal::open_read_only(&dir.join("j.db")).unwrap();
    let attempts = journal.attempts(Some(1)).unwrap();
    let at = |id: &str| attempts.iter().find(|a| a.activity == id).unwrap().clone();
    assert!(
        at("b-1").recorded.started >= at("a").recorded.ended
            && at("b-2").recorded.started >= at("a").recorded.ended
    );
    assert!(at("d").recorded.started >= at("b-1").recorded.ended.max(at("b-2").recorded.ended));
    assert!(at("b-1")
        .recorded
        .stdout
        .as_deref()
        .unwrap()
        .ends_with("output/b-1/stdout"));
    // `d` printed nothing: its files and folder are gone, and the journal
    // names no file for it.
    assert_eq!(
        (at("d").recorded.stdout, at("d").recorded.stderr),
        (None, None)
    );
    assert!(!dir.join("output/d").exists());
    assert_eq!(journal.runs().unwrap()[0].status, "succeeded");
    assert_eq!(journal.executors(1).unwrap().len(), 2);
}

#[test]
fn a_thousand_wide_fan_out_fans_back_in() {
    let dir = workdir("fan");
    std::fs::create_dir_all(dir.join("parts")).unwrap();
    std::fs::write(
        dir.join("fan.toml"),
        r#"
[[activity]]
id = "part-{i}"
for = { i = "1..=1000" }
command = "sh"
args = ["-c", "echo {i} > parts/{i}"]

[[activity]]
id = "join"
script = "cat parts/* | sort -n | awk '{{s += $1}} END {{print NR, s}}' > joined"
after = ["part-*"]
"#,
    )
    .unwrap();
    let output = run(&dir, &["fan.toml", "-n", "2", "--journal", "j.db"]);
    assert!(output.status.success());
    assert_eq!(
        std::fs::read_to_string(dir.join("joined")).unwrap(),
        "1000 500500\n"
    );
    let journal = Journal::open_read_only(&dir.join("j.db")).unwrap();
    let attempts = journal.attempts(None).unwrap();
    assert_eq!(attempts.len(), 1001, "each activity ran exactly once");
    let join = attempts.iter().find(|a| a.activity == "join").unwrap();
    let last_part = attempts
        .iter()
        .filter(|a| a.activity != "join")
        .map(|a| a.recorded.ended)
        .fold(0.0, f64::max);
    assert!(
        join.recorded.started >= last_part,
        "the fan-in waited for every part"
    );
}

#[test]
fn a_permanent_failure_is_retried_then_reported_with_its_stderr() {
    let dir = workdir("failure");
    std::fs::write(
        dir.join("fail.toml"),
        r#"
[[activity]]
id = "fine"
script = "true"

[[activity]]
id = "flaky"
script = "echo attempt $CONSTELLATION_ATTEMPT >&2; echo 'disk quota exceeded on /scratch' >&2; exit 3"
retries = 1
after = ["fine"]

[[activity]]
id = "downstream-{i}"
for = { i = "1..=3" }
script = "touch should-not-exist"
after = ["flaky"]

[[activity]]
id = "independent"
script = "touch independent-ran"
"#,
    )
    .unwrap();
    let output = run(&dir, &["fail.toml", "-n", "2", "--journal", "j.db"]);
    assert_eq!(output.status.code(), Some(1), "a failed graph exits 1");
    let said = text(&output);
    assert!(said.contains("FAILED flaky"), "{said}");
    assert!(
        said.contains("exited with status 3 on the last of 2 attempts"),
        "{said}"
    );
    assert!(
        said.contains("| disk quota exceeded on /scratch"),
        "the stderr tail: {said}"
    );
    assert!(said.contains("3 cancelled because of a failure"), "{said}");
    assert!(!dir.join("should-not-exist").exists());
    assert!(dir.join("independent-ran").exists());
    let journal = Journal::open_read_only(&dir.join("j.db")).unwrap();
    let flaky: Vec<_> = (journal.attempts(None).unwrap().into_iter())
        .filter(|a| a.activity == "flaky")
        .collect();
    assert_eq!(flaky.len(), 2);
    assert!(flaky.iter().all(|a| a.recorded.exit_code == Some(3)));
    assert!(flaky[1]
        .recorded
        .stderr
        .as_deref()
        .unwrap()
        .ends_with("stderr.2"));
    let states = states(&dir.join("j.db"));
    let cancelled = states
        .iter()
        .filter(|(_, s)| *s == ActivityState::Cancelled)
        .count();
    assert_eq!(cancelled, 3);
    assert_eq!(journal.runs().unwrap()[0].status, "failed");
}

#[test]
fn relabelling_moves_work_from_cpu_to_gpu_executors() {
    let dir = workdir("relabel");
    std::fs::write(
        dir.join("g.toml"),
        r#"
[[activity]]
id = "work-{i}"
for = { i = "1..=8" }
script = "echo $CONSTELLATION_LABELS"
context = "cpu"
"#,
    )
    .unwrap();
    let labels = |journal: &str| -> BTreeSet<String> {
        Journal::open_read_only(&dir.join(journal))
            .unwrap()
            .attempts(None)
            .unwrap()
            .into_iter()
            .map(|a| a.recorded.labels)
            .collect()
    };
    let pool = ["-n", "1", "--context", "cpu", "--add-executors", "1:gpu"];
    let plain = run(
        &dir,
        &[&["g.toml", "--journal", "cpu.db"][..], &pool].concat(),
    );
    assert!(plain.status.success());
    let cpu_labels = labels("cpu.db");
    assert_eq!(cpu_labels.len(), 1);
    assert!(
        cpu_labels.iter().all(|l| l.starts_with("cpu,")),
        "{cpu_labels:?}"
    );

    let moved = run(
        &dir,
        &[
            &["g.toml", "--journal", "gpu.db", "--relabel", "cpu=gpu"][..],
            &pool,
        ]
        .concat(),
    );
    assert!(moved.status.success());
    assert!(text(&moved).contains("retargeted 8 activities"));
    assert_eq!(labels("gpu.db"), BTreeSet::from(["gpu".to_string()]));

    std::fs::write(
        dir.join("contexts.toml"),
        "\"work-[1-4]\" = \"gpu\"\n\"work-*\" = \"gpu\"\n",
    )
    .unwrap();
    let by_file = run(
        &dir,
        &[
            &[
                "g.toml",
                "--journal",
                "file.db",
                "--context-file",
                "contexts.toml",
            ][..],
            &pool,
        ]
        .concat(),
    );
    assert!(by_file.status.success());
    assert!(text(&by_file).contains("context rule `work-[1-4]` matches no activity"));
    assert_eq!(labels("file.db"), BTreeSet::from(["gpu".to_string()]));
}

#[test]
fn bad_input_gets_a_clear_error_and_runs_nothing() {
    let dir = workdir("bad");
    std::fs::write(
        dir.join("cycle.toml"),
        "[[activity]]\nid = \"a\"\nscript = \"touch ran\"\nafter = [\"b\"]\n\n[[activity]]\nid = \"b\"\nscript = \"true\"\nafter = [\"a\"]\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("gpu.toml"),
        "[[activity]]\nid = \"kernel\"\nscript = \"touch ran\"\ncontext = \"gpu\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("ok.toml"),
        "[[activity]]\nid = \"fine\"\nscript = \"touch ran\"\n",
    )
    .unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["missing.toml"], "cannot read the graph file"),
        (&["cycle.toml"], "the dependencies form a cycle"),
        (
            &["gpu.toml", "-n", "1", "--context", "cpu"],
            "gpu.toml:4:11: kernel needs [gpu], which no executor offers",
        ),
        (&["gpu.toml", "--relabel", "gpu"], "FROM=TO"),
        (
            &["gpu.toml", "--add-executors", "x:gpu"],
            "not a number of executors",
        ),
        (
            &["gpu.toml", "--context-file", "nope.toml"],
            "cannot read the context file",
        ),
        (&["ok.toml", "--resume", "nope.db"], "does not exist"),
        (
            &["ok.toml", "--resume", "gpu.toml"],
            "not a constellation journal",
        ),
    ];
    for (args, expected) in cases {
        let output = run(&dir, args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let said = text(&output);
        assert!(
            said.contains(expected),
            "{args:?}: wanted {expected:?} in {said}"
        );
        assert!(!said.contains("panicked"), "{said}");
    }
    assert!(!dir.join("ran").exists());
    assert!(
        !dir.join("constellation-runs").exists(),
        "no journal for a refused run"
    );
}

#[test]
fn an_activity_reading_a_file_waits_for_the_activity_writing_it() {
    // No `after`: only `inputs` and `outputs` say that `b` needs `a`. Two
    // executors, so `b` would start beside `a` and find no file.
    let dir = workdir("files");
    std::fs::write(
        dir.join("files.toml"),
        r#"
[[activity]]
id = "b"
script = "cat x.txt > y.txt"
inputs = ["x.txt"]
outputs = ["y.txt"]

[[activity]]
id = "a"
script = "sleep 1; echo written > x.txt.part; mv x.txt.part x.txt"
cwd = "."
outputs = ["./x.txt"]
"#,
    )
    .unwrap();
    let output = run(&dir, &["files.toml", "-n", "2", "--journal", "j.db"]);
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(
        std::fs::read_to_string(dir.join("y.txt")).unwrap(),
        "written\n"
    );
    assert_eq!(
        states(&dir.join("j.db")),
        [
            ("a".to_string(), ActivityState::Done),
            ("b".to_string(), ActivityState::Done)
        ]
    );
}

#[test]
fn an_activity_no_executor_can_run_is_named_at_its_line_and_column() {
    let dir = workdir("unmatched");
    std::fs::write(
        dir.join("places.toml"),
        "[[activity]]\nid = \"prepare\"\nscript = \"touch ran\"\n\n\
         [[activity]]\nid = \"kernel-{i}\"\nfor = { i = \"1..=3\" }\nscript = \"touch ran\"\n\
         context = \"gpu\"\n\n\
         [[activity]]\nid = \"plain\"\nscript = \"touch ran\"\n",
    )
    .unwrap();
    // One executor offering only `cpu`: neither `gpu` nor the default
    // context (`anywhere`) is offered.
    let output = run(
        &dir,
        &["places.toml", "-n", "0", "--add-executors", "1:cpu"],
    );
    assert_eq!(output.status.code(), Some(2));
    let said = text(&output);
    for expected in [
        "places.toml:2:6: prepare needs [anywhere], which no executor offers",
        "places.toml:9:11: kernel-2 needs [gpu], which no executor offers",
        "places.toml:12:6: plain needs [anywhere], which no executor offers",
        "5 activities can run on no executor of this pool; the executors offer:\n  [cpu]",
    ] {
        assert!(said.contains(expected), "wanted {expected:?} in {said}");
    }
    assert!(!dir.join("ran").exists());
}

/// Kills the runner with SIGKILL in the middle of a graph, then resumes:
/// nothing the journal calls done runs again, and everything gets done.
#[test]
fn a_killed_run_resumes_without_redoing_finished_work() {
    let dir = workdir("resume");
    // Four chains of ten; each step appends its id to ran.log first, so the
    // log shows every start, even of a step the kill cut short.
    let mut graph = String::new();
    for chain in 0..4 {
        for step in 0..10 {
            graph.push_str(&format!(
                "[[activity]]\nid = \"c{chain}-{step}\"\nscript = \"echo c{chain}-{step} >> ran.log; sleep 0.05\"\n"
            ));
            if step > 0 {
                graph.push_str(&format!("after = [\"c{chain}-{}\"]\n", step - 1));
            }
            graph.push('\n');
        }
    }
    std::fs::write(dir.join("chains.toml"), graph).unwrap();
    let all: BTreeSet<String> = (0..4)
        .flat_map(|c| (0..10).map(move |s| format!("c{c}-{s}")))
        .collect();

    let mut child = constellation(&dir)
        .args([
            "run",
            "chains.toml",
            "--journal",
            "run.db",
            "-n",
            "2",
            "--progress",
            "none",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Kill once a good part, not all, is journaled as done.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let done = Journal::open_read_only(&dir.join("run.db"))
            .and_then(|j| j.done())
            .map_or(0, |d| d.len());
        if done >= 12 {
            break;
        }
        assert!(Instant::now() < deadline, "the run made no progress");
        assert!(
            child.try_wait().unwrap().is_none(),
            "the runner ended before the kill"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // Let commands the runner left behind finish their line in the log.
    std::thread::sleep(Duration::from_millis(300));

    let journal = Journal::open_read_only(&dir.join("run.db")).unwrap();
    let done_before: BTreeSet<String> = journal.done().unwrap().into_keys().collect();
    assert!(
        done_before.len() >= 12 && done_before.len() < all.len(),
        "{done_before:?}"
    );
    assert_eq!(
        journal.runs().unwrap()[0].status,
        "running",
        "killed: no end recorded"
    );
    drop(journal);
    let log_before = std::fs::read_to_string(dir.join("ran.log")).unwrap();
    let ran_before: Vec<&str> = log_before.lines().collect();
    for id in &done_before {
        assert!(
            ran_before.contains(&id.as_str()),
            "{id} is done but never ran"
        );
    }

    let resumed = run(&dir, &["chains.toml", "--resume", "run.db", "-n", "2"]);
    assert!(resumed.status.success());
    assert!(text(&resumed).contains(&format!("({} done before, skipped)", done_before.len())));
    let log_after = std::fs::read_to_string(dir.join("ran.log")).unwrap();
    let ran_after: Vec<&str> = log_after[log_before.len()..].lines().collect();
    for id in &ran_after {
        assert!(
            !done_before.contains(*id),
            "{id} was done, yet ran again on resume"
        );
    }
    let ran: BTreeSet<String> = (ran_before.iter().chain(&ran_after))
        .map(|s| s.to_string())
        .collect();
    assert_eq!(ran, all, "every activity ran");
    let journal = Journal::open_read_only(&dir.join("run.db")).unwrap();
    assert_eq!(journal.done().unwrap().len(), all.len());
    let runs = journal.runs().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[1].status, "succeeded");
    assert!(runs[1].output_dir.ends_with("output.run2"));
}

/// Issue 22's repro through the CLI, with each way of tracking a command's
/// processes: a child that calls `setsid` must not outlive its command,
/// whether it ends by itself or by its timeout.
#[test]
fn a_detached_child_does_not_outlive_its_command() {
    for tracking in ["subreaper", "auto"] {
        let dir = workdir(&format!("setsid-{tracking}"));
        std::fs::write(
            dir.join("detached.toml"),
            r#"
[[activity]]
id = "ends"
script = "setsid sleep 312 & echo $! > ends.pid; sleep 1"

[[activity]]
id = "times-out"
script = "setsid sleep 312 & echo $! > times-out.pid; sleep 60"
timeout = "5s"
"#,
        )
        .unwrap();
        let output = constellation(&dir)
            .env("CONSTELLATION_PROCESS_TRACKING", tracking)
            .args(["run", "detached.toml", "-n", "2", "--journal", "j.db"])
            .output()
            .unwrap();
        let report = text(&output);
        assert!(!output.status.success(), "{report}");
        assert!(report.contains("times-out"), "{report}");
        for id in ["ends", "times-out"] {
            let pid: i32 = std::fs::read_to_string(dir.join(format!("{id}.pid")))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            let alive = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(") ")
                    .is_some_and(|(_, rest)| !rest.starts_with('Z'))
            });
            if alive {
                // SAFETY: only this test's own stray sleep.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            assert!(
                !alive,
                "{id}'s detached child {pid} outlived the run ({tracking})"
            );
        }
    }
}

/// Issue 22: a failing command's error output was read whole to show its
/// last lines (1 GB of it put the runner at 3.16 GB of memory and printed a
/// 1 GB line). Here 200 MB on one line: the report stays short, and the
/// runner's peak memory far below the stream's size.
#[test]
fn a_failure_with_huge_error_output_is_reported_briefly() {
    let dir = workdir("huge-stderr");
    std::fs::write(
        dir.join("loud.toml"),
        r#"
[[activity]]
id = "loud"
script = "head -c 200000000 /dev/zero | tr '\\0' x >&2; echo >&2; echo 'fatal: out of cheese' >&2; exit 3"
"#,
    )
    .unwrap();
    // Reaped by libc::wait4 below, which clippy does not see.
    #[allow(clippy::zombie_processes)]
    let mut child = constellation(&dir)
        .args(["run", "loud.toml", "--journal", "j.db"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let stderr_reader = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut text).unwrap();
        text
    });
    let mut report = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut report).unwrap();
    report.push_str(&stderr_reader.join().unwrap());
    // wait4, not Child::wait: it also reports the runner's peak memory.
    let mut status = 0;
    // SAFETY: rusage is plain data that wait4 fills in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointers; the pid is our unreaped child.
    let reaped = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(reaped, child.id() as i32);
    let peak_mib = usage.ru_maxrss / 1024;
    eprintln!(
        "report of {} bytes, runner peak {peak_mib} MiB:\n{report}",
        report.len()
    );
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) != 0);
    assert!(report.contains("fatal: out of cheese"), "{report}");
    assert!(
        report.len() < 8 * 1024,
        "a report of {} bytes",
        report.len()
    );
    assert!(peak_mib < 100, "the runner peaked at {peak_mib} MiB");
}

#[test]
fn json_summary_says_what_the_text_says() {
    let dir = workdir("json");
    std::fs::write(
        dir.join("g.toml"),
        r#"
[[activity]]
id = "ok-{i}"
for = { i = "1..=3" }
script = "true"

[[activity]]
id = "bad"
script = "echo broken >&2; exit 4"

[[activity]]
id = "after-bad"
script = "true"
after = ["bad"]
"#,
    )
    .unwrap();
    let output = run(&dir, &["g.toml", "-n", "2", "--journal", "j.db", "--json"]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}):\n{}", text(&output)));
    assert_eq!(json["status"], "failed", "{json}");
    assert_eq!(json["run"], 1, "{json}");
    assert!(
        json["journal"]
            .as_str()
            .is_some_and(|j| j.ends_with("j.db")),
        "{json}"
    );
    let counts = &json["activities"];
    assert_eq!(
        (counts["total"].as_u64(), counts["done"].as_u64()),
        (Some(5), Some(3)),
        "{json}"
    );
    assert_eq!(counts["failed"], 1, "{json}");
    assert_eq!(counts["cancelled"], 1, "{json}");
    let failures = json["failures"].as_array().expect("a failures array");
    assert!(
        failures
            .iter()
            .any(|f| f.as_str().is_some_and(|f| f.contains("bad"))),
        "{json}"
    );
}
