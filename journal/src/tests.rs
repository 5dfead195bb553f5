use super::*;

fn decl(id: &str, hash: &str, rerun: bool) -> ActivityDecl {
    ActivityDecl {
        rerun,
        id: id.to_string(),
        kind: id.to_string(),
        spec_hash: hash.to_string(),
        context: "anywhere".to_string(),
        after: vec![],
    }
}

fn new_run() -> NewRun {
    NewRun {
        graph_path: "g.toml".into(),
        graph_spec: "{}".into(),
        graph_hash: "h".into(),
        host: "here".into(),
        command_line: "constellation run g.toml".into(),
        output_dir: "out".into(),
    }
}

fn attempt(activity: &str, code: i64) -> AttemptRow {
    AttemptRow {
        run: 0,
        activity: activity.to_string(),
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
    }
}

fn update(id: &str, state: ActivityState) -> ActivityUpdate {
    ActivityUpdate {
        id: id.to_string(),
        state,
        message: None,
        attempts: vec![attempt(
            id,
            if state == ActivityState::Done { 0 } else { 1 },
        )],
    }
}

#[test]
fn a_resume_keeps_done_work_with_the_same_spec_and_nothing_else() {
    let dir = std::env::temp_dir().join(format!("journal-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = dir.join("sub/run.db");
    let mut journal = Journal::create(&path).unwrap();
    let run = journal.begin_run(&new_run()).unwrap();
    assert_eq!(run, 1);
    journal
        .declare(
            run,
            &[
                decl("a", "1", true),
                decl("b", "1", true),
                decl("c", "1", true),
            ],
        )
        .unwrap();
    journal
        .record(
            run,
            &[
                update("a", ActivityState::Done),
                update("b", ActivityState::Failed),
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
    assert_eq!(done["a"], "1");
    let second = journal.begin_run(&new_run()).unwrap();
    assert_eq!(second, 2);
    // `a` is done with the same spec, so the runner skips it; `b` failed
    // and `c` changed its spec, so they run again.
    journal
        .declare(
            second,
            &[
                decl("a", "1", false),
                decl("b", "1", true),
                decl("c", "2", true),
            ],
        )
        .unwrap();
    let rows = journal.activities().unwrap();
    let state = |id: &str| rows.iter().find(|r| r.id == id).unwrap().clone();
    assert_eq!(state("a").state, ActivityState::Done);
    assert_eq!(state("a").run, 1);
    assert_eq!(state("b").state, ActivityState::Pending);
    assert_eq!(state("c").spec_hash, "2");
    journal.end_run(second, RunStatus::Succeeded).unwrap();
    let runs = journal.runs().unwrap();
    assert_eq!(runs[0].status, "running");
    assert_eq!(runs[1].status, "succeeded");
    assert!(runs[1].ended.is_some());
    let attempts = journal.attempts(Some(1)).unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0].cpu_seconds, Some(0.25));
    assert!(journal.attempts(Some(2)).unwrap().is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn other_files_are_not_taken_for_journals() {
    let dir = std::env::temp_dir().join(format!("journal-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = dir.join("notes.txt");
    std::fs::write(
        &text,
        "this is not sqlite, just some text that is long enough",
    )
    .unwrap();
    let error = Journal::open(&text).err().unwrap().to_string();
    assert!(error.contains("not a constellation journal"), "{error}");
    let missing = Journal::open(&dir.join("missing.db"))
        .err()
        .unwrap()
        .to_string();
    assert!(missing.contains("does not exist"), "{missing}");
    std::fs::remove_dir_all(&dir).unwrap();
}
