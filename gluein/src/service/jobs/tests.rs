//! The job service with processes: a shell script stands in for the
//! runner.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use journal::{ActivityState, ActivityUpdate, Journal, NewRun, RunStatus};

use super::counts::cancel_pending;
use super::supervisor::{CANCELLED_ACTIVITY, MAX_RESUMES, TICK};
use super::{JobService, JobStore, ServiceConfig};
use crate::service::{
    JobState, JobSubmission, JobSummary, ServiceRequest, ServiceResponse, SubmittedFiles,
};

/// A stand-in for `constellation run`, run by `/bin/sh`: it notes how
/// it was started in `CWD/launches`, its pid and the signals it gets
/// beside the job's journal, and ends once `CWD/go` exists, with the
/// status in `CWD/exit-code` (0 without one), after printing
/// `CWD/last-words` if there is one. While `CWD/die` exists it kills
/// itself with SIGKILL at once, as the OOM killer would.
const FAKE_RUNNER: &str = r#"
dir=$(dirname "$6")
echo "$5 $6" >> "$PWD/launches"
echo $$ > "$dir/fake.pid"
if [ -e "$PWD/die" ]; then echo "dying" >&2; kill -9 $$; fi
trap 'echo interrupted >> "$dir/fake.signals"; exit 130' INT
trap 'echo terminated >> "$dir/fake.signals"; exit 130' TERM
while [ ! -e "$PWD/go" ]; do sleep 0.05; done
if [ -e "$PWD/last-words" ]; then cat "$PWD/last-words" >&2; fi
exit "$(cat "$PWD/exit-code" 2>/dev/null || echo 0)"
"#;

/// Far more than anything here takes on an idle machine.
const LIMIT: Duration = Duration::from_secs(30);

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "gluein-jobs-supervisor-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("state")).expect("scratch directory");
    std::fs::write(dir.join("fake-runner.sh"), FAKE_RUNNER).expect("fake runner");
    std::fs::write(
        dir.join("graph.toml"),
        "[[activity]]\nid = \"a-{n}\"\nfor = { n = \"1..=3\" }\nscript = \"true\"\n",
    )
    .expect("graph file");
    dir
}

fn config(dir: &Path, max_jobs: usize) -> ServiceConfig {
    ServiceConfig {
        state_dir: dir.join("state"),
        pool_file: dir.join("pool.json"),
        max_jobs,
        program: PathBuf::from("/bin/sh"),
        program_args: vec![dir.join("fake-runner.sh").into_os_string()],
    }
}

fn submission(dir: &Path, priority: i32) -> JobSubmission {
    JobSubmission {
        graph: PathBuf::from("graph.toml"),
        cwd: dir.to_path_buf(),
        name: None,
        relabel: Vec::new(),
        context_file: None,
        priority,
        wait_for_labels: false,
        submitter: "tester@here".to_string(),
        files: None,
        token: None,
    }
}

fn submit(service: &JobService, job: JobSubmission) -> u64 {
    match service.handle(ServiceRequest::Submit(job)) {
        Ok(ServiceResponse::Submitted { id }) => id,
        other => panic!("not submitted: {other:?}"),
    }
}

fn job(service: &JobService, id: u64) -> JobSummary {
    match service.handle(ServiceRequest::Job { id }) {
        Ok(ServiceResponse::Job { job }) => job,
        other => panic!("no job {id}: {other:?}"),
    }
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + LIMIT;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {LIMIT:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn launches(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("launches"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn journal_of(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("state/jobs/{id}/journal.db"))
}

/// A run journal at `path` with activities `a`, `b`, `c` (`a` done)
/// and one run, ended with `status` unless `None`.
fn write_journal(path: &Path, status: Option<RunStatus>) -> Journal {
    let mut journal = Journal::create(path).unwrap();
    let run = journal.begin_run(&NewRun::default()).unwrap();
    let declared = ["a", "b", "c"].map(|id| journal::ActivityDecl {
        id,
        kind: 0,
        context: 0,
        spec_hash: 1,
        rerun: true,
    });
    let keys = journal
        .declare(run, &["k".to_string()], &["cpu".to_string()], declared)
        .unwrap();
    let done = ActivityUpdate {
        activity: keys[0],
        state: ActivityState::Done,
        message: None,
        attempts: Vec::new(),
    };
    journal.record(run, &[done]).unwrap();
    if let Some(status) = status {
        journal.end_run(run, status).unwrap();
    }
    journal
}

#[test]
fn submissions_are_checked_before_they_are_stored() {
    let dir = scratch("checks");
    std::fs::write(dir.join("broken.toml"), "[[activity]]\nscript = 3\n").unwrap();
    let service = JobService::start(config(&dir, 0)).unwrap();
    let refused = |job: JobSubmission| match service.handle(ServiceRequest::Submit(job)) {
        Err(reason) => reason,
        other => panic!("accepted: {other:?}"),
    };
    let missing = JobSubmission {
        graph: "nowhere.toml".into(),
        ..submission(&dir, 0)
    };
    let missing = refused(missing);
    assert!(
        missing.contains("cannot read the graph file")
            && missing.contains("nowhere.toml")
            && missing.contains("shares with the pool node"),
        "{missing}"
    );
    let broken = JobSubmission {
        graph: "broken.toml".into(),
        ..submission(&dir, 0)
    };
    assert!(refused(broken).contains("error(s) in the graph file"));
    let gone = JobSubmission {
        cwd: dir.join("gone"),
        ..submission(&dir, 0)
    };
    assert!(refused(gone).contains("is not a directory"));
    let relative = JobSubmission {
        cwd: "here".into(),
        ..submission(&dir, 0)
    };
    assert!(refused(relative).contains("not an absolute path"));
    let relabel = JobSubmission {
        relabel: vec!["cpu".to_string()],
        ..submission(&dir, 0)
    };
    assert!(refused(relabel).contains("--relabel `cpu` is not FROM=TO"));
    let context = JobSubmission {
        context_file: Some("contexts.toml".into()),
        ..submission(&dir, 0)
    };
    let context = refused(context);
    assert!(
        context.contains("cannot read the context file") && context.contains("contexts.toml"),
        "{context}"
    );
    let long_name = JobSubmission {
        name: Some("n".repeat(100_000)),
        ..submission(&dir, 0)
    };
    assert!(refused(long_name).contains("at most 200 are allowed"));
    let forged = JobSubmission {
        name: Some("x\n7  forged  succeeded".to_string()),
        ..submission(&dir, 0)
    };
    assert!(refused(forged).contains("control character"));
    assert!(
        std::fs::read_dir(dir.join("state/jobs"))
            .unwrap()
            .next()
            .is_none(),
        "refused submissions leave no files"
    );

    // No slots (max_jobs 0): it stays queued, with its graph's size.
    let id = submit(&service, submission(&dir, 0));
    assert_eq!(id, 1, "refused submissions take no id");
    let queued = job(&service, id);
    assert_eq!(
        (queued.state, queued.name.as_str()),
        (JobState::Queued, "graph")
    );
    assert_eq!(queued.graph, dir.join("graph.toml"));
    assert_eq!((queued.counts.waiting, queued.counts.total), (3, 3));
    assert_eq!(queued.journal, journal_of(&dir, 1));
    match service.handle(ServiceRequest::Jobs { all: false }) {
        Ok(ServiceResponse::Jobs { jobs }) => assert_eq!(jobs, vec![queued]),
        other => panic!("{other:?}"),
    }
    let unknown = service.handle(ServiceRequest::Job { id: 9 }).unwrap_err();
    assert_eq!(unknown, "no job 9 in this pool");
    let kill = ServiceRequest::KillOrigin {
        origin: "n1".to_string(),
    };
    assert!(service.handle(kill).unwrap_err().contains("not an agent"));
    service.stop(LIMIT);
    assert!(launches(&dir).is_empty(), "nothing started");
}

#[test]
fn queued_jobs_take_free_slots_by_priority_then_submit_order() {
    let dir = scratch("slots");
    let service = JobService::start(config(&dir, 1)).unwrap();
    let first = submit(&service, submission(&dir, 0));
    wait_until("the first job starts", || launches(&dir).len() == 1);
    let low = submit(&service, submission(&dir, 0));
    let high = submit(&service, submission(&dir, 5));
    let high2 = submit(&service, submission(&dir, 5));
    std::thread::sleep(4 * TICK);
    assert_eq!(launches(&dir).len(), 1, "one slot: the others wait");
    assert_eq!(job(&service, first).state, JobState::Running);
    assert_eq!(job(&service, high).state, JobState::Queued);
    std::fs::write(dir.join("go"), "").unwrap();
    wait_until("every job succeeds", || {
        [first, low, high, high2]
            .iter()
            .all(|&id| job(&service, id).state == JobState::Succeeded)
    });
    let started: Vec<String> = [first, high, high2, low]
        .iter()
        .map(|&id| format!("--journal {}", journal_of(&dir, id).display()))
        .collect();
    assert_eq!(launches(&dir), started);
    let done = job(&service, low);
    assert!(done.started.is_some() && done.ended.is_some() && done.message.is_none());
    service.stop(LIMIT);
}

#[test]
fn a_cancel_stops_a_running_job_and_a_queued_one_never_starts() {
    let dir = scratch("cancel");
    let service = JobService::start(config(&dir, 1)).unwrap();
    let running = submit(&service, submission(&dir, 0));
    let queued = submit(&service, submission(&dir, 0));
    wait_until("the first job starts", || launches(&dir).len() == 1);

    let answer = service.handle(ServiceRequest::Cancel { id: queued });
    let Ok(ServiceResponse::Job { job: cancelled }) = answer else {
        panic!("{answer:?}");
    };
    assert_eq!(cancelled.state, JobState::Cancelled);
    assert_eq!(
        cancelled.message.as_deref(),
        Some("cancelled before it started")
    );

    let answer = service.handle(ServiceRequest::Cancel { id: running });
    let Ok(ServiceResponse::Job { job: stopping }) = answer else {
        panic!("{answer:?}");
    };
    assert!(matches!(
        stopping.state,
        JobState::Running | JobState::Cancelled
    ));
    wait_until("the running job is cancelled", || {
        job(&service, running).state == JobState::Cancelled
    });
    let signals = std::fs::read_to_string(dir.join("state/jobs/1/fake.signals")).unwrap();
    assert_eq!(signals, "interrupted\n", "its runner got SIGINT");
    let again = service.handle(ServiceRequest::Cancel { id: running });
    assert_eq!(again.unwrap_err(), "job 1 has already ended: cancelled");
    std::thread::sleep(4 * TICK);
    assert_eq!(
        launches(&dir).len(),
        1,
        "the cancelled queued job never ran"
    );
    service.stop(LIMIT);
}

#[test]
fn a_runner_that_fails_fails_its_job_with_its_last_words() {
    let dir = scratch("fails");
    std::fs::write(dir.join("go"), "").unwrap();
    std::fs::write(dir.join("exit-code"), "2").unwrap();
    std::fs::write(
        dir.join("last-words"),
        "noise\nerror: the pool is on fire\n",
    )
    .unwrap();
    let service = JobService::start(config(&dir, 2)).unwrap();
    let id = submit(&service, submission(&dir, 0));
    wait_until("the job fails", || {
        job(&service, id).state == JobState::Failed
    });
    let message = job(&service, id).message.unwrap_or_default();
    assert!(
        message.contains("its runner exited with status 2"),
        "{message}"
    );
    assert!(message.contains("error: the pool is on fire"), "{message}");
    let log = std::fs::read_to_string(dir.join("state/jobs/1/runner.log")).unwrap();
    assert!(log.starts_with("== "), "each start is headed: {log}");
    assert!(log.contains("run "), "with its command line: {log}");
    service.stop(LIMIT);
}

#[test]
fn a_runner_killed_by_a_signal_is_resumed_a_few_times_then_fails_its_job() {
    let dir = scratch("killed");
    std::fs::write(dir.join("die"), "").unwrap();
    std::fs::write(dir.join("go"), "").unwrap();
    let service = JobService::start(config(&dir, 2)).unwrap();
    let id = submit(&service, submission(&dir, 0));
    wait_until("the job fails", || {
        job(&service, id).state == JobState::Failed
    });
    assert_eq!(
        launches(&dir).len(),
        1 + MAX_RESUMES as usize,
        "started once, resumed {MAX_RESUMES} times: {:?}",
        launches(&dir)
    );
    let message = job(&service, id).message.unwrap_or_default();
    assert!(
        message.starts_with("its runner was killed by signal 9, and it was resumed 3 times"),
        "{message}"
    );
    assert!(message.contains("dying"), "with its last words: {message}");

    // One that dies and is resumed goes on, once its runner lives.
    let second = submit(&service, submission(&dir, 0));
    wait_until("the second job is resumed", || launches(&dir).len() >= 6);
    std::fs::remove_file(dir.join("die")).unwrap();
    wait_until("the second job succeeds", || {
        job(&service, second).state == JobState::Succeeded
    });
    service.stop(LIMIT);
}

#[test]
fn a_restart_settles_resumes_restarts_or_waits_for_the_jobs_left_running() {
    let dir = scratch("restart");
    let dead = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    drop(dead.wait_with_output());
    {
        // As the job service makes it before it opens the store.
        std::fs::create_dir(dir.join("state/jobs")).unwrap();
        let mut store = JobStore::open(&dir.join("state")).unwrap();
        for _ in 0..4 {
            let id = store
                .submit(&submission(&dir, 0), "left", 3, |_| Ok(()))
                .unwrap();
            store.set_running(id, dead_pid).unwrap();
        }
    }
    drop(write_journal(
        &journal_of(&dir, 1),
        Some(RunStatus::Succeeded),
    ));
    drop(write_journal(
        &journal_of(&dir, 2),
        Some(RunStatus::Interrupted),
    ));
    // Job 3 never wrote a journal; job 4's runner still writes its own.
    let mut busy = write_journal(&journal_of(&dir, 4), None);

    let service = JobService::start(config(&dir, 4)).unwrap();
    assert_eq!(
        job(&service, 1).state,
        JobState::Succeeded,
        "settled at once"
    );
    wait_until("jobs 2 and 3 start again", || launches(&dir).len() == 2);
    let mut again = launches(&dir);
    again.sort();
    assert_eq!(
        again,
        vec![
            format!("--journal {}", journal_of(&dir, 3).display()),
            format!("--resume {}", journal_of(&dir, 2).display()),
        ]
    );
    let adopted = job(&service, 4);
    assert_eq!(adopted.state, JobState::Running, "waits for its runner");
    assert_eq!((adopted.counts.done, adopted.counts.waiting), (1, 2));
    let failed = ActivityUpdate {
        activity: 2,
        state: ActivityState::Failed,
        message: Some("exit 1".to_string()),
        attempts: Vec::new(),
    };
    busy.record(1, &[failed]).unwrap();
    busy.end_run(1, RunStatus::Failed).unwrap();
    drop(busy);
    wait_until("the adopted job ends", || {
        job(&service, 4).state == JobState::Failed
    });
    let message = job(&service, 4).message.unwrap_or_default();
    assert!(
        message.starts_with("1 activity failed, 0 cancelled"),
        "{message}"
    );

    // A clean stop: the runners get SIGTERM, their jobs stay running.
    service.stop(LIMIT);
    for id in [2, 3] {
        let signals = dir.join(format!("state/jobs/{id}/fake.signals"));
        assert_eq!(std::fs::read_to_string(signals).unwrap(), "terminated\n");
    }
    let store = JobStore::open(&dir.join("state")).unwrap();
    let left: Vec<u64> = store.running().unwrap().iter().map(|j| j.id).collect();
    assert_eq!(left, vec![2, 3], "left running, to resume");
}

#[test]
fn one_job_service_per_state_directory() {
    let dir = scratch("owner");
    let service = JobService::start(config(&dir, 1)).unwrap();
    let error = JobService::start(config(&dir, 1)).err().expect("refused");
    let text = format!("{error:#}");
    assert!(text.contains("another pool node"), "{text}");
    assert!(
        text.contains(&format!("pid {}", std::process::id())),
        "{text}"
    );
    service.stop(LIMIT);
    drop(service);
    JobService::start(config(&dir, 1))
        .expect("free again")
        .stop(LIMIT);
}

#[test]
fn a_cancel_marks_what_the_journal_still_has_pending() {
    let dir = scratch("cancel-pending");
    let path = journal_of(&dir, 1);
    drop(write_journal(&path, None));
    assert_eq!(cancel_pending(&path).unwrap(), 2);
    let journal = Journal::open_read_only(&path).unwrap();
    let states: Vec<(String, ActivityState, Option<String>)> = (journal.activities().unwrap())
        .into_iter()
        .map(|a| (a.id, a.state, a.message))
        .collect();
    let cancelled = Some(CANCELLED_ACTIVITY.to_string());
    assert_eq!(
        states,
        vec![
            ("a".to_string(), ActivityState::Done, None),
            ("b".to_string(), ActivityState::Cancelled, cancelled.clone()),
            ("c".to_string(), ActivityState::Cancelled, cancelled),
        ]
    );
    assert_eq!(journal.runs().unwrap()[0].status, "interrupted");
    assert_eq!(cancel_pending(&dir.join("none.db")).unwrap(), 0);
}

#[test]
fn a_submit_sent_twice_with_one_token_makes_one_job() {
    let dir = scratch("token");
    let service = JobService::start(config(&dir, 0)).unwrap();
    let job = JobSubmission {
        token: Some("5eed".to_string()),
        ..submission(&dir, 0)
    };
    let first = submit(&service, job.clone());
    let again = submit(&service, job.clone());
    assert_eq!(first, again, "the retry gets the job the first try made");
    let other = submit(
        &service,
        JobSubmission {
            token: Some("f00d".to_string()),
            ..job
        },
    );
    assert_ne!(other, first);
    match service.handle(ServiceRequest::Jobs { all: true }) {
        Ok(ServiceResponse::Jobs { jobs }) => assert_eq!(jobs.len(), 2),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_job_keeps_the_files_it_was_submitted_with_private() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = scratch("kept");
    let service = JobService::start(config(&dir, 0)).unwrap();
    let sent =
        "[[activity]]\nid = \"p-{n}\"\nfor = { n = { file = \"n.txt\" } }\nscript = \"true\"\n";
    let sending = JobSubmission {
        files: Some(Box::new(SubmittedFiles {
            graph: sent.to_string(),
            sweeps: vec![("n.txt".to_string(), "1\n2\n".to_string())],
            context: None,
        })),
        ..submission(&dir, 0)
    };
    let id = submit(&service, sending);
    let kept = dir.join(format!("state/jobs/{id}"));
    assert_eq!(
        std::fs::read_to_string(kept.join("graph.toml")).unwrap(),
        sent
    );
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&kept.join("graph.toml")), 0o600);
    assert_eq!(mode(&kept), 0o700);
    let sweep = kept.join("sweeps").join(graph::kept_sweep_name("n.txt"));
    assert_eq!(std::fs::read_to_string(sweep).unwrap(), "1\n2\n");
    assert_eq!(
        job(&service, id).counts.total,
        2,
        "the sent graph counts, not the file graph.toml beside it"
    );
}
