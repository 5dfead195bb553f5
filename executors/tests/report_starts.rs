//! Shell activities that report their starts: the parent hears of each
//! attempt before its command runs, then of the result, all as
//! `ShellReport`s, and the executor that announced an attempt runs it
//! before it takes other work.

use std::time::{Duration, SystemTime};

use constellation::collect::MultiEventCollector;
use constellation::Pool;
use executors::shell::{Capture, RetryPolicy, ShellActivity, ShellReport, ShellSpec};

/// Runs `specs`, each reporting its starts, on a pool of one executor, and
/// returns the `expected` reports in the order the parent got them.
fn reports(specs: Vec<ShellSpec>, expected: usize) -> Vec<ShellReport> {
    let pool = Pool::builder().executors(1).start().unwrap();
    let (collector, results) = MultiEventCollector::new(expected);
    let parent = pool.submit(collector).unwrap();
    for spec in specs {
        let activity = ShellActivity::new(spec.capture(Capture::Memory { limit: 4096 }))
            .reply_to(parent)
            .report_starts();
        pool.submit(activity).unwrap();
    }
    let events = results
        .wait_timeout(Duration::from_secs(120))
        .expect("every start and every result is reported");
    pool.done().unwrap();
    events
        .into_iter()
        .map(|event| event.take().expect("a shell report"))
        .collect()
}

#[test]
fn each_attempt_is_announced_before_its_command_runs() {
    let flaky = "[ \"$CONSTELLATION_ATTEMPT\" -ge 3 ]";
    let policy = RetryPolicy {
        delay: Duration::from_millis(10),
        ..RetryPolicy::attempts(4)
    };
    let before = SystemTime::now();
    let got = reports(
        vec![ShellSpec::script(flaky).name("flaky").retry(policy)],
        4,
    );
    let (starts, ended): (Vec<_>, Vec<_>) = got
        .iter()
        .partition(|r| matches!(r, ShellReport::Started(_)));
    assert_eq!(starts.len(), 3, "{got:?}");
    let ShellReport::Ended(result) = ended[0] else {
        unreachable!("partitioned");
    };
    assert!(result.is_success(), "{result:?}");
    assert_eq!(result.history.len(), 3);
    assert!(
        matches!(got.last(), Some(ShellReport::Ended(_))),
        "the result comes last: {got:?}"
    );
    for (k, report) in starts.iter().enumerate() {
        let ShellReport::Started(started) = report else {
            unreachable!("partitioned");
        };
        assert_eq!(started.attempt, k as u32 + 1);
        assert_eq!(started.activity, result.activity);
        assert_eq!(started.name.as_deref(), Some("flaky"));
        assert_eq!((started.node, started.executor), (result.node, 0));
        assert_eq!(started.host, result.host);
        assert_eq!(started.labels, result.executor_labels);
        let record = &result.history[k];
        assert_eq!(record.attempt, started.attempt);
        assert!(
            before <= started.started && started.started <= record.started,
            "announced at {:?}, ran at {:?}",
            started.started,
            record.started
        );
    }
}

#[test]
fn an_announced_attempt_runs_before_its_executor_takes_other_work() {
    let specs = (0..4)
        .map(|k| ShellSpec::script("sleep 0.1").name(format!("s{k}")))
        .collect();
    let got = reports(specs, 8);
    // One executor: each activity's start is followed by its own result,
    // never by another's start.
    for pair in got.chunks(2) {
        let [ShellReport::Started(started), ShellReport::Ended(result)] = pair else {
            panic!("a start, then its result: {got:?}");
        };
        assert_eq!(started.activity, result.activity, "{got:?}");
        assert!(result.is_success(), "{result:?}");
    }
}
