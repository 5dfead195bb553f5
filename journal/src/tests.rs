use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use rusqlite::Connection;

use super::*;

/// A fresh directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("journal-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `dir/notes.txt`, a file that is not a journal (nor SQLite).
fn not_a_journal(dir: &Path) -> PathBuf {
    let text = dir.join("notes.txt");
    std::fs::write(
        &text,
        "this is not sqlite, just some text that is long enough",
    )
    .unwrap();
    text
}

fn decl(id: &str, hash: u64, rerun: bool) -> ActivityDecl<'_> {
    ActivityDecl {
        id,
        kind: 0,
        context: 0,
        spec_hash: hash,
        rerun,
    }
}

fn names(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn new_run() -> NewRun {
    NewRun {
        graph_path: "g.toml".into(),
        graph_hash: "h".into(),
        host: "here".into(),
        command_line: "constellation run g.toml".into(),
        output_dir: "out".into(),
        sources: vec![("g.toml".into(), "[[activity]]\nid = \"a\"\n".into())],
    }
}

fn attempt(code: i64) -> NewAttempt {
    NewAttempt {
        attempt: 1,
        node: "here".into(),
        executor: 0,
        labels: "cpu,anywhere".into(),
        started: 10.0,
        ended: 11.5,
        outcome: "exited".into(),
        exit_code: Some(code),
        signal: None,
        message: None,
        cpu_seconds: Some(0.25),
        stdout: Some("out/a/stdout".into()),
        stderr: None,
        stdout_bytes: Some(3),
        stderr_bytes: None,
        stream: None,
    }
}

fn update(activity: i64, state: ActivityState) -> ActivityUpdate {
    ActivityUpdate {
        activity,
        state,
        message: None,
        attempts: vec![attempt(if state == ActivityState::Done { 0 } else { 1 })],
    }
}

#[test]
fn a_resume_keeps_done_work_with_the_same_spec_and_nothing_else() {
    let dir = scratch("resume");
    let path = dir.join("sub/run.db");
    let mut journal = Journal::create(&path).unwrap();
    let run = journal.begin_run(&new_run()).unwrap();
    assert_eq!(run, 1);
    let (kinds, contexts) = (names(&["k"]), names(&["anywhere"]));
    let keys = journal
        .declare(
            run,
            &kinds,
            &contexts,
            [decl("a", 1, true), decl("b", 1, true), decl("c", 1, true)],
        )
        .unwrap();
    assert_eq!(keys.len(), 3);
    journal
        .record(
            run,
            &[
                update(keys[0], ActivityState::Done),
                update(keys[1], ActivityState::Failed),
            ],
        )
        .unwrap();
    drop(journal);
    assert!(matches!(
        Journal::create(&path),
        Err(JournalError::Exists(_))
    ));

    let mut journal = Journal::open(&path).unwrap();
    let done = journal.done().unwrap();
    assert_eq!(done.len(), 1);
    assert_eq!(done["a"], 1);
    let second = journal.begin_run(&new_run()).unwrap();
    assert_eq!(second, 2);
    // `a` is done with the same spec, so the runner skips it; `b` failed
    // and `c` changed its spec, so they run again. `d` is new, and comes
    // first: the keys follow the declaration, not the table.
    let again = journal
        .declare(
            second,
            &kinds,
            &contexts,
            [
                decl("d", 1, true),
                decl("a", 1, false),
                decl("b", 1, true),
                decl("c", u64::MAX, true),
            ],
        )
        .unwrap();
    assert_eq!(&again[1..], &keys[..]);
    assert!(!keys.contains(&again[0]));
    let rows = journal.activities().unwrap();
    let state = |id: &str| rows.iter().find(|r| r.id == id).unwrap().clone();
    assert_eq!(state("a").state, ActivityState::Done);
    assert_eq!(state("a").run, 1);
    assert_eq!(state("b").state, ActivityState::Pending);
    assert_eq!(state("b").run, 2);
    // All 64 bits of a hash come back.
    assert_eq!(state("c").spec_hash, u64::MAX);
    assert_eq!(state("d").kind, "k");
    assert_eq!(state("d").context, "anywhere");
    // Declared again under another kind, still skipped: the kind follows,
    // the state and the run that set it stay.
    let renamed = journal
        .declare(
            second,
            &names(&["k", "k2"]),
            &contexts,
            [ActivityDecl {
                kind: 1,
                ..decl("a", 1, false)
            }],
        )
        .unwrap();
    assert_eq!(renamed[0], keys[0]);
    let a = journal
        .activities()
        .unwrap()
        .into_iter()
        .find(|r| r.id == "a");
    let a = a.unwrap();
    assert_eq!(
        (a.kind.as_str(), a.state, a.run),
        ("k2", ActivityState::Done, 1)
    );
    journal.end_run(second, RunStatus::Succeeded).unwrap();
    let runs = journal.runs().unwrap();
    assert_eq!(runs[0].status, "running");
    assert_eq!(runs[1].status, "succeeded");
    assert!(runs[1].ended.is_some());
    let attempts = journal.attempts(Some(1)).unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0].recorded.cpu_seconds, Some(0.25));
    assert!(journal.attempts(Some(2)).unwrap().is_empty());
    assert_eq!(journal.sources(2).unwrap(), new_run().sources);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn attempts_read_back_with_their_names_and_stream_places() {
    let dir = scratch("names");
    let mut journal = Journal::create(&dir.join("run.db")).unwrap();
    let run = journal.begin_run(&new_run()).unwrap();
    journal
        .record_executors(
            run,
            &[ExecutorRow {
                executor: 0,
                node: "here".into(),
                labels: "cpu,anywhere".into(),
                cores: 2,
            }],
        )
        .unwrap();
    let kinds = names(&["prepare", "detect-{n}"]);
    let contexts = names(&["anywhere", "gpu"]);
    let keys = journal
        .declare(
            run,
            &kinds,
            &contexts,
            [
                ActivityDecl {
                    id: "prepare",
                    kind: 0,
                    context: 0,
                    spec_hash: 7,
                    rerun: true,
                },
                ActivityDecl {
                    id: "detect-1",
                    kind: 1,
                    context: 1,
                    spec_hash: 8,
                    rerun: true,
                },
            ],
        )
        .unwrap();
    let streamed = NewAttempt {
        node: "agent".into(),
        executor: 3,
        labels: "gpu".into(),
        stdout: None,
        stream: Some(StreamPlace {
            file: "out/stream-0".into(),
            offset: 4096,
            length: 17,
        }),
        ..attempt(0)
    };
    journal
        .record(
            run,
            &[
                update(keys[0], ActivityState::Done),
                ActivityUpdate {
                    attempts: vec![streamed.clone()],
                    ..update(keys[1], ActivityState::Done)
                },
            ],
        )
        .unwrap();
    // A second batch on the same executors adds none.
    journal
        .record(
            run,
            &[ActivityUpdate {
                attempts: vec![NewAttempt {
                    attempt: 2,
                    ..streamed
                }],
                ..update(keys[1], ActivityState::Done)
            }],
        )
        .unwrap();
    let attempts = journal.attempts(Some(run)).unwrap();
    let detect: Vec<&AttemptRow> = attempts
        .iter()
        .filter(|a| a.activity == "detect-1")
        .collect();
    assert_eq!(detect.len(), 2);
    assert_eq!(
        (
            detect[0].recorded.node.as_str(),
            detect[0].recorded.executor
        ),
        ("agent", 3)
    );
    assert_eq!(detect[0].recorded.labels, "gpu");
    assert_eq!(
        detect[0].recorded.stream,
        Some(StreamPlace {
            file: "out/stream-0".into(),
            offset: 4096,
            length: 17,
        })
    );
    let prepare = attempts.iter().find(|a| a.activity == "prepare").unwrap();
    assert_eq!(prepare.recorded.stream, None);
    assert_eq!(prepare.recorded.stdout.as_deref(), Some("out/a/stdout"));
    // The listed executor, and the agent known only from its attempts.
    assert_eq!(journal.executors(run).unwrap().len(), 1);
    let slots = journal.executor_slots(run).unwrap();
    assert_eq!(slots.len(), 2);
    assert_eq!(slots[0].node, "agent");
    assert_eq!(slots[0].cores, None);
    assert_eq!(slots[1].cores, Some(2));
    let kinds_read: Vec<String> = journal
        .kinds()
        .unwrap()
        .into_iter()
        .map(|k| k.name)
        .collect();
    assert_eq!(kinds_read, kinds);

    let mut scanned = Vec::new();
    journal
        .scan_attempts(run, |a| {
            scanned.push((a.id.to_string(), a.attempt, a.slot, a.kind));
            ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(scanned.len(), 3);
    assert!(scanned.contains(&("detect-1".to_string(), 2, slots[0].slot, 2)));
    let counts = journal.state_counts().unwrap();
    assert_eq!(
        counts,
        vec![StateCount {
            state: ActivityState::Done,
            run,
            count: 2
        }]
    );

    // The views give sqlite3 users names.
    let conn = Connection::open(dir.join("run.db")).unwrap();
    let (node, kind): (String, String) = conn
        .query_row(
            "SELECT node, kind FROM attempt_list WHERE activity = 'detect-1' AND attempt = 2",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    assert_eq!((node.as_str(), kind.as_str()), ("agent", "detect-{n}"));
    let hash: String = conn
        .query_row(
            "SELECT spec_hash FROM activity_list WHERE id = 'detect-1'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(hash, "0000000000000008");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn other_files_are_not_taken_for_journals() {
    let dir = scratch("bad");
    let text = not_a_journal(&dir);
    let error = Journal::open(&text).err().unwrap().to_string();
    assert!(error.contains("not a constellation journal"), "{error}");
    let missing = Journal::open(&dir.join("missing.db"))
        .err()
        .unwrap()
        .to_string();
    assert!(missing.contains("does not exist"), "{missing}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The first lines of version 1's schema, as an older build wrote them.
const VERSION_1: &str = "
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    INSERT INTO meta VALUES ('schema_version', '1');
    CREATE TABLE runs (run INTEGER PRIMARY KEY, graph_path TEXT NOT NULL,
        graph_hash TEXT NOT NULL, graph_spec TEXT NOT NULL, started REAL NOT NULL,
        ended REAL, status TEXT NOT NULL, host TEXT NOT NULL, command_line TEXT NOT NULL,
        output_dir TEXT NOT NULL);
    CREATE TABLE activities (id TEXT PRIMARY KEY, kind TEXT NOT NULL,
        spec_hash TEXT NOT NULL, context TEXT NOT NULL, after TEXT NOT NULL,
        state TEXT NOT NULL, run INTEGER NOT NULL, message TEXT);";

#[test]
fn a_version_1_journal_is_refused_with_both_versions_named() {
    let dir = scratch("v1");
    let path = dir.join("old.db");
    Connection::open(&path)
        .unwrap()
        .execute_batch(VERSION_1)
        .unwrap();
    for error in [
        Journal::open(&path).err().unwrap(),
        Journal::open_read_only(&path).err().unwrap(),
    ] {
        assert!(
            matches!(error, JournalError::OtherVersion { found: 1, .. }),
            "{error:?}"
        );
        let message = error.to_string();
        assert!(message.contains("has schema version 1"), "{message}");
        assert!(message.contains("reads version 2 only"), "{message}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn declarations_that_refer_to_no_kind_are_refused() {
    let dir = scratch("bad-kind");
    let mut journal = Journal::create(&dir.join("run.db")).unwrap();
    let run = journal.begin_run(&new_run()).unwrap();
    let error = journal
        .declare(
            run,
            &names(&["k"]),
            &names(&["anywhere"]),
            [ActivityDecl {
                kind: 1,
                ..decl("a", 1, true)
            }],
        )
        .err()
        .unwrap();
    assert!(error.to_string().contains("has kind 1 of 1"), "{error}");
    // Nothing of the refused declaration stays, and the id index it
    // dropped to build later is back: a second declaration of the same
    // id finds the first.
    assert!(journal.activities().unwrap().is_empty());
    let (kinds, contexts) = (names(&["k"]), names(&["anywhere"]));
    let first = journal
        .declare(run, &kinds, &contexts, [decl("a", 1, true)])
        .unwrap();
    let again = journal
        .declare(run, &kinds, &contexts, [decl("a", 2, true)])
        .unwrap();
    assert_eq!(first, again);
    assert_eq!(journal.activities().unwrap().len(), 1);
    // Two activities of one id are refused, and leave nothing either.
    let dir2 = scratch("duplicate");
    let mut fresh = Journal::create(&dir2.join("run.db")).unwrap();
    let run = fresh.begin_run(&new_run()).unwrap();
    let error = fresh
        .declare(
            run,
            &kinds,
            &contexts,
            [decl("a", 1, true), decl("a", 1, true)],
        )
        .err()
        .unwrap();
    assert!(error.to_string().contains("UNIQUE"), "{error}");
    assert!(fresh.activities().unwrap().is_empty());
    std::fs::remove_dir_all(&dir2).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Writes a run of `count` activities of one sweep, each done in one
/// attempt, in batches of 1,000 as a runner commits them; returns the
/// seconds `declare` took, by the clock and of CPU.
fn sweep_run(path: &Path, count: usize) -> (f64, f64) {
    let mut journal = Journal::create(path).unwrap();
    let run = journal.begin_run(&new_run()).unwrap();
    journal
        .record_executors(
            run,
            &[0, 1].map(|executor| ExecutorRow {
                executor,
                node: "login-node-01.cluster.example.org".into(),
                labels: "cpu,cores=2,mem=7,host:login-node-01,anywhere".into(),
                cores: 1,
            }),
        )
        .unwrap();
    let ids: Vec<String> = (0..count).map(|n| format!("sweep-{n}")).collect();
    let (started, cpu) = (std::time::Instant::now(), cpu_seconds());
    let keys = journal
        .declare(
            run,
            &names(&["sweep-{n}"]),
            &names(&["anywhere"]),
            ids.iter().enumerate().map(|(n, id)| ActivityDecl {
                id,
                kind: 0,
                context: 0,
                spec_hash: (n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
                rerun: true,
            }),
        )
        .unwrap();
    let declared = (started.elapsed().as_secs_f64(), cpu_seconds() - cpu);
    let t0 = 1.8e9;
    for batch in keys.chunks(1_000) {
        let updates: Vec<ActivityUpdate> = batch
            .iter()
            .map(|&key| ActivityUpdate {
                activity: key,
                state: ActivityState::Done,
                message: None,
                attempts: vec![NewAttempt {
                    node: "login-node-01.cluster.example.org".into(),
                    executor: key % 2,
                    labels: "cpu,cores=2,mem=7,host:login-node-01,anywhere".into(),
                    started: t0 + key as f64 * 0.001,
                    ended: t0 + key as f64 * 0.001 + 0.0017,
                    cpu_seconds: Some(0.0009),
                    stdout: None,
                    stdout_bytes: Some(0),
                    stderr_bytes: Some(0),
                    ..attempt(0)
                }],
            })
            .collect();
        journal.record(run, &updates).unwrap();
    }
    journal.end_run(run, RunStatus::Succeeded).unwrap();
    declared
}

/// User and system CPU seconds of this process so far (Linux; 0 elsewhere),
/// for figures taken on a busy machine.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields 14 and 15, counted after the command name's closing bracket.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    match (ticks(11), ticks(12)) {
        (Some(user), Some(system)) => (user + system) / 100.0,
        _ => 0.0,
    }
}

/// Bytes of the journal at `path` per activity, once closed (its WAL
/// checkpointed into it).
fn bytes_per_activity(path: &Path, count: usize) -> f64 {
    std::fs::metadata(path).unwrap().len() as f64 / count as f64
}

/// 100,000 activities with an attempt each: version 1 took about 950
/// bytes each (the expanded graph in `runs`, names repeated in every
/// attempt, two text indexes); version 2 keeps the graph as its source
/// and numbers for names.
#[test]
fn a_hundred_thousand_activities_take_under_two_hundred_bytes_each() {
    let dir = scratch("compact");
    let path = dir.join("run.db");
    sweep_run(&path, 100_000);
    let per_activity = bytes_per_activity(&path, 100_000);
    assert!(per_activity < 200.0, "{per_activity:.0} bytes per activity");
    let journal = Journal::open_read_only(&path).unwrap();
    let mut done = 0;
    journal.for_each_done(|_, _| done += 1).unwrap();
    assert_eq!(done, 100_000);
    let mut attempts = 0;
    journal
        .scan_attempts(1, |_| {
            attempts += 1;
            ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(attempts, 100_000);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The figures of a million: run with `cargo test -p journal --release --
/// --ignored --nocapture`. With `KEEP_JOURNAL=FILE` the journal is left
/// there (e.g. to time `constellation report` on it).
#[test]
#[ignore = "a million activities: a measurement, for release builds"]
fn a_million_activities_measured() {
    let dir = scratch("million");
    let path = dir.join("run.db");
    let started = std::time::Instant::now();
    let (declared, declare_cpu) = sweep_run(&path, 1_000_000);
    let written = started.elapsed().as_secs_f64();
    let journal = Journal::open_read_only(&path).unwrap();
    let read = std::time::Instant::now();
    let mut done = 0;
    journal.for_each_done(|_, _| done += 1).unwrap();
    let done_seconds = read.elapsed().as_secs_f64();
    assert_eq!(done, 1_000_000);
    eprintln!(
        "1M activities: declared in {declared:.2} s ({declare_cpu:.2} s CPU), all written in {written:.2} s, \
         done read in {done_seconds:.2} s; {} bytes, {:.0} per activity",
        std::fs::metadata(&path).unwrap().len(),
        bytes_per_activity(&path, 1_000_000)
    );
    drop(journal);
    if let Some(keep) = std::env::var_os("KEEP_JOURNAL") {
        std::fs::copy(&path, keep).unwrap();
    }

    // A resume that reruns every other activity: the other half is left
    // as it is.
    let mut journal = Journal::open(&path).unwrap();
    let ids: Vec<String> = (0..1_000_000).map(|n| format!("sweep-{n}")).collect();
    let (started, cpu) = (std::time::Instant::now(), cpu_seconds());
    let run = journal.begin_run(&new_run()).unwrap();
    let keys = journal
        .declare(
            run,
            &names(&["sweep-{n}"]),
            &names(&["anywhere"]),
            ids.iter().enumerate().map(|(n, id)| ActivityDecl {
                id,
                kind: 0,
                context: 0,
                spec_hash: (n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
                rerun: n % 2 == 0,
            }),
        )
        .unwrap();
    eprintln!(
        "resume of 1M, half rerun: declared in {:.2} s ({:.2} s CPU)",
        started.elapsed().as_secs_f64(),
        cpu_seconds() - cpu
    );
    assert_eq!(keys[999_999], 1_000_000);
    let mut done = 0;
    journal.for_each_done(|_, _| done += 1).unwrap();
    assert_eq!(done, 500_000);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_second_writer_in_this_process_is_refused_while_the_first_lives() {
    let dir = scratch("lock-in-process");
    let path = dir.join("run.db");
    let first = Journal::create(&path).unwrap();
    // std's file locks are flock's: two handles conflict even in one process.
    let error = Journal::open(&path)
        .err()
        .expect("a second writer is refused");
    match &error {
        JournalError::InUse { path: held, writer } => {
            assert_eq!(held, &path);
            assert_eq!(writer.pid, Some(std::process::id()), "{error}");
            assert!(writer.started.is_some(), "{error}");
        }
        other => panic!("expected InUse, got {other:?}"),
    }
    let message = error.to_string();
    assert!(
        message.contains("is in use by another run (pid ")
            && message.contains("wait for it to end, or stop it"),
        "{message}"
    );
    // Reports read a journal in use, and can tell that it is.
    let reader = Journal::open_read_only(&path).unwrap();
    assert!(reader.runs().unwrap().is_empty());
    let writer = Journal::writer(&path).unwrap().expect("held");
    assert_eq!(writer.pid, Some(std::process::id()));
    drop(reader);
    // A reader takes no lock: the writer still holds it, and no other may.
    assert!(matches!(
        Journal::open(&path),
        Err(JournalError::InUse { .. })
    ));
    drop(first);
    assert_eq!(Journal::writer(&path).unwrap(), None);
    let again = Journal::open(&path).unwrap();
    assert!(Journal::writer(&path).unwrap().is_some());
    drop(again);
    // An ended run leaves its lock file empty: it names no process.
    assert_eq!(std::fs::read_to_string(lock_path(&path)).unwrap(), "");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_lock_file_whose_holder_is_gone_is_taken() {
    let dir = scratch("lock-stale");
    let path = dir.join("run.db");
    drop(Journal::create(&path).unwrap());
    // What a runner killed with -9 leaves: its name, and no lock.
    std::fs::write(lock_path(&path), "pid=999999\nhost=elsewhere\nstarted=1\n").unwrap();
    assert_eq!(Journal::writer(&path).unwrap(), None);
    let journal = Journal::open(&path).unwrap();
    let writer = Journal::writer(&path).unwrap().expect("held");
    assert_eq!(writer.pid, Some(std::process::id()));
    assert_ne!(writer.host.as_deref(), Some("elsewhere"));
    drop(journal);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_file_that_is_not_a_journal_gets_no_lock_file() {
    let dir = scratch("lock-not-journal");
    let text = not_a_journal(&dir);
    assert!(matches!(
        Journal::open(&text),
        Err(JournalError::NotAJournal { .. })
    ));
    assert!(!lock_path(&text).exists());
    // Nor does a journal with no lock file count as in use.
    assert_eq!(Journal::writer(&dir.join("missing.db")).unwrap(), None);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_lock_file_that_cannot_be_made_is_a_clear_error() {
    let dir = scratch("lock-blocked");
    let path = dir.join("run.db");
    drop(Journal::create(&path).unwrap());
    // A directory where the lock file should be.
    std::fs::remove_file(lock_path(&path)).unwrap();
    std::fs::create_dir(lock_path(&path)).unwrap();
    let error = Journal::open(&path).err().expect("refused");
    assert!(
        matches!(error, JournalError::UntrustedLock { .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("cannot lock journal")
            && message.contains("run.db.lock")
            && message.contains("it is a directory"),
        "{message}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_lock_file_that_is_a_link_is_refused_and_its_target_left_alone() {
    let dir = scratch("lock-link");
    let path = dir.join("run.db");
    drop(Journal::create(&path).unwrap());
    // Another user's link, pointing the runner's pid at a file of ours.
    let precious = dir.join("precious");
    std::fs::write(&precious, "keep me").unwrap();
    std::fs::remove_file(lock_path(&path)).unwrap();
    std::os::unix::fs::symlink(&precious, lock_path(&path)).unwrap();
    let error = Journal::open(&path).err().expect("refused");
    let message = error.to_string();
    assert!(
        matches!(error, JournalError::UntrustedLock { .. }) && message.contains("symbolic link"),
        "{message}"
    );
    assert_eq!(std::fs::read_to_string(&precious).unwrap(), "keep me");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn writers_are_described_with_what_their_lock_file_says() {
    let full = Writer {
        pid: Some(4242),
        host: Some("node7".into()),
        started: Some(1_764_079_931.5),
    };
    assert_eq!(
        full.to_string(),
        "pid 4242 on node7, started 2025-11-25T14:12:11Z"
    );
    assert_eq!(Writer::default().to_string(), "a runner that is starting");
    assert_eq!(
        lock::utc_text(951_782_400.0),
        "2000-02-29T00:00:00Z",
        "a leap day"
    );
    assert_eq!(lock::utc_text(0.0), "1970-01-01T00:00:00Z");
    assert_eq!(lock::utc_text(-1.0), "-1 (Unix seconds)");
}

#[test]
fn of_two_threads_creating_one_journal_exactly_one_gets_it() {
    let dir = scratch("lock-create-race");
    let path = dir.join("run.db");
    let barrier = std::sync::Barrier::new(2);
    let results: Vec<Result<Journal, JournalError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    Journal::create(&path)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let made = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(
        made,
        1,
        "{:?}",
        results.iter().map(|r| r.as_ref().err()).collect::<Vec<_>>()
    );
    for error in results.iter().filter_map(|r| r.as_ref().err()) {
        assert!(
            matches!(error, JournalError::InUse { .. } | JournalError::Exists(_)),
            "{error:?}"
        );
    }
    drop(results);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn more_attempts_keep_the_state_and_lost_ones_and_extra_ones_are_counted() {
    let dir = scratch("more-attempts");
    let mut journal = Journal::create(&dir.join("run.db")).unwrap();
    let run = journal.begin_run(&new_run()).unwrap();
    let (kinds, contexts) = (names(&["k"]), names(&["anywhere"]));
    let keys = journal
        .declare(
            run,
            &kinds,
            &contexts,
            [decl("a", 1, true), decl("b", 1, true)],
        )
        .unwrap();
    assert_eq!(journal.last_attempt(run, keys[0]).unwrap(), 0);
    let lost = NewAttempt {
        attempt: 1,
        node: "there#1".into(),
        outcome: LOST.into(),
        exit_code: None,
        message: Some("the agent there#1 died or left while it ran".into()),
        ..attempt(0)
    };
    // `a` is lost with its node, and stays pending; its rerun succeeds.
    journal
        .record_with(run, &[], &[(keys[0], lost.clone())])
        .unwrap();
    assert_eq!(
        journal.activities().unwrap()[0].state,
        ActivityState::Pending
    );
    assert_eq!(journal.last_attempt(run, keys[0]).unwrap(), 1);
    let rerun = ActivityUpdate {
        attempts: vec![NewAttempt {
            attempt: 2,
            ..attempt(0)
        }],
        ..update(keys[0], ActivityState::Done)
    };
    // `b` is done, then an extra execution of it fails: it stays done.
    let extra = NewAttempt {
        attempt: 2,
        message: Some(format!(
            "{EXTRA_EXECUTION}: it ran again after it had settled"
        )),
        ..attempt(1)
    };
    journal
        .record_with(
            run,
            &[rerun, update(keys[1], ActivityState::Done)],
            &[(keys[1], extra)],
        )
        .unwrap();
    let states: Vec<ActivityState> = (journal.activities().unwrap().iter())
        .map(|a| a.state)
        .collect();
    assert_eq!(states, [ActivityState::Done, ActivityState::Done]);
    assert_eq!(journal.last_attempt(run, keys[0]).unwrap(), 2);
    assert_eq!(journal.last_attempt(run, keys[1]).unwrap(), 2);
    assert_eq!(journal.attempts(Some(run)).unwrap().len(), 4);
    let counted = journal.re_executions(run).unwrap();
    assert_eq!(counted, ReExecutions { lost: 1, extra: 1 });
    assert_eq!(counted.total(), 2);
    assert_eq!(
        journal.re_executions(run + 1).unwrap(),
        ReExecutions::default()
    );

    // A lost attempt whose result comes after all is replaced by it.
    journal
        .record_with(
            run,
            &[],
            &[(
                keys[0],
                NewAttempt {
                    node: "there#1".into(),
                    ..attempt(0)
                },
            )],
        )
        .unwrap();
    assert_eq!(journal.attempts(Some(run)).unwrap().len(), 4);
    assert_eq!(journal.re_executions(run).unwrap().lost, 0);
}
