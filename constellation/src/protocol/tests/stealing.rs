//! Stealing and hand-over: who is asked, what a loot carries, and that
//! every activity handed over is settled once it ends.

use std::time::Duration;

use super::fake_host::{Reclaim, REFUSED};
use super::harness::Cluster;
use super::{millis, secs};
use crate::protocol::Message;

#[test]
fn an_idle_node_steals_half_a_queue_and_the_victim_settles_each_end() -> Result<(), String> {
    let mut c = Cluster::new(2);
    c.form(secs(10))?;
    let mut jobs: Vec<_> = (0..10).map(|_| c.submit(0, millis(100))).collect();
    jobs.sort();
    c.executors_on(1, true);
    c.run_until(secs(10), "the thief ran all ten", |c| {
        c.host(1).finished.len() == 10
    })?;
    // The victim's executors are off: everything ran at the thief, which
    // asked again each time it ran dry, and got half of what was left.
    let sizes: Vec<usize> = (c.log.loots.iter())
        .filter(|loot| !loot.activities.is_empty())
        .map(|loot| {
            assert_eq!((loot.from, loot.to), (0, 1), "loot {loot:?}");
            loot.activities.len()
        })
        .collect();
    assert_eq!(sizes, [5, 3, 1, 1], "half of 10, of 5, of 2, of 1");
    c.run_for(millis(100))?;
    let finished = c.all_finished();
    assert_eq!(finished.keys().copied().collect::<Vec<_>>(), jobs);
    assert!(
        finished.values().all(|attempts| attempts == &[0]),
        "each ran once, at its first attempt: {finished:?}"
    );
    let mut settled = c.host(0).settles.clone();
    settled.sort();
    assert_eq!(settled, jobs, "the victim settled each end once");
    assert!(c.host(0).reclaims.is_empty());
    assert_eq!(c.node(0).backlog(), (0, 0, 0), "nothing left in custody");
    assert_eq!(
        c.node(1).backlog(),
        (0, 0, 0),
        "no import waits for its end"
    );
    assert_eq!(c.node(0).stats().exported, 10);
    assert_eq!(c.node(1).stats().imported, 10);
    // The origin handed them over itself: nobody needs to hear that they moved.
    assert!(
        !(c.log.notices.iter())
            .any(|(_, _, _, n)| matches!(n, crate::protocol::Notice::Moved { .. })),
        "no Moved notices: {:?}",
        c.log.notices
    );
    Ok(())
}

#[test]
fn a_thief_asks_only_members_of_the_pool_it_steals_from() -> Result<(), String> {
    let mut c = Cluster::with(
        3,
        |_| 1,
        |index, settings| {
            let pool = if index == 0 { "a" } else { "b" };
            settings.steal_pool = pool.to_string();
            settings.steal_from = pool.to_string();
        },
    );
    c.form(secs(10))?;
    for _ in 0..4 {
        c.submit(0, millis(10));
        c.submit(1, millis(10));
    }
    c.executors_on(2, true);
    c.run_until(secs(5), "the thief ran pool b's four", |c| {
        c.host(2).finished.len() == 4
    })?;
    c.run_for(secs(1))?;
    assert!(
        c.log.steals.iter().filter(|s| s.1 == 2).all(|s| s.2 == 1),
        "node 2 asked only node 1: {:?}",
        c.log.steals
    );
    assert_eq!(c.host(0).queue_len(), 4, "pool a's work stays in pool a");
    assert_eq!(c.host(2).finished.len(), 4);
    Ok(())
}

#[test]
fn an_empty_victim_answers_and_the_thief_backs_off_until_work_appears() -> Result<(), String> {
    let mut c = Cluster::new(2);
    c.form(secs(10))?;
    c.executors_on(1, true);
    let start = c.now();
    c.run_for(secs(5))?;
    let asked = (c.log.steals.iter())
        .filter(|s| s.0 >= start && s.1 == 1)
        .count();
    // Backoff grows from 1 ms to 50 ms: about 100 asks in 5 s, not
    // thousands, and not none.
    assert!(
        (60..=200).contains(&asked),
        "an idle thief with an empty victim asked {asked} times in 5 s"
    );
    let empty = (c.log.loots.iter())
        .filter(|l| l.to == 1 && l.activities.is_empty())
        .count();
    assert!(
        empty + 1 >= asked,
        "every request is answered, empty too: {asked} asked, {empty} empty loots"
    );
    // No new idle signal: the thief must come back by itself.
    let id = c.submit(0, millis(10));
    let took = c.run_until(secs(1), "the thief found the new work", |c| {
        c.host(1).finished_count(id) == 1
    })?;
    assert!(
        took <= millis(100),
        "found after {took:?}, more than the longest backoff"
    );
    Ok(())
}

#[test]
fn a_node_idle_before_it_knew_anyone_steals_once_members_join() -> Result<(), String> {
    let mut c = Cluster::new(2);
    c.executors_on(1, true);
    c.submit(0, millis(10));
    c.submit(0, millis(10));
    c.form(secs(10))?;
    c.run_until(secs(5), "the early idle node ran both", |c| {
        c.host(1).finished.len() == 2
    })?;
    Ok(())
}

#[test]
fn an_activity_the_thief_cannot_take_goes_back_and_stays_home() -> Result<(), String> {
    let mut c = Cluster::new(2);
    c.form(secs(10))?;
    let refused = c.submit_job(0, millis(10), |job| job.payload = REFUSED);
    c.executors_on(1, true);
    c.run_until(secs(5), "the victim took it back", |c| {
        !c.host(0).reclaims.is_empty()
    })?;
    c.run_for(secs(2))?;
    assert_eq!(
        c.host(0).reclaims,
        [Reclaim {
            id: refused,
            attempt: 0,
            stealable: false
        }],
        "queued again as it was, and kept home"
    );
    assert_eq!(
        (c.host(1).imports.iter())
            .filter(|(id, _)| *id == refused)
            .count(),
        1,
        "handed over once, not again and again"
    );
    assert_eq!(c.node(0).backlog().0, 0, "its custody is settled");
    Ok(())
}

#[test]
fn loot_that_reaches_a_leaving_thief_is_declined_and_queued_again() -> Result<(), String> {
    let mut c = Cluster::new(2);
    // Messages in the order sent: the goodbye before SWIM's (for the
    // other order, see failures::a_leaver_s_swim_goodbye_may_overtake_its_leaving).
    c.jitter = Duration::ZERO;
    c.form(secs(10))?;
    let jobs: Vec<_> = (0..4).map(|_| c.submit(0, millis(10))).collect();
    c.set_latency(0, 1, millis(300));
    c.executors_on(1, true);
    c.run_until(secs(5), "loot on its way to the thief", |c| {
        c.in_flight(
            0,
            1,
            |m| matches!(m, Message::Loot { activities, .. } if !activities.is_empty()),
        )
    })?;
    c.leave(1);
    c.run_until(secs(2), "the loot came back", |c| {
        c.host(0).reclaims.len() == 2
    })?;
    assert!(
        c.host(1).imports.is_empty(),
        "a leaving node takes nothing in: {:?}",
        c.host(1).imports
    );
    for reclaim in &c.host(0).reclaims {
        assert!(jobs.contains(&reclaim.id));
        assert_eq!(
            (reclaim.attempt, reclaim.stealable),
            (0, true),
            "declined is not a failure: same attempt, still stealable"
        );
    }
    assert_eq!(c.host(0).queue_len(), 4);
    Ok(())
}

#[test]
fn a_node_that_stopped_stealing_asks_nobody() -> Result<(), String> {
    let mut c = Cluster::new(2);
    c.form(secs(10))?;
    for _ in 0..4 {
        c.submit(0, millis(10));
    }
    c.stop_stealing(1);
    assert!(c.node(1).is_draining());
    assert!(!c.node(0).is_draining());
    c.executors_on(1, true);
    c.run_for(secs(2))?;
    assert!(
        !c.log.steals.iter().any(|s| s.1 == 1),
        "node 1 asked for work after it stopped stealing"
    );
    assert_eq!(c.host(0).queue_len(), 4);
    Ok(())
}

/// Four nodes steal, a thief dies: what crossed the network and what each
/// host did, in order, as text.
fn a_busy_run() -> Result<String, String> {
    let mut c = Cluster::with(4, |_| 2, |_, _| {});
    c.form(secs(10))?;
    // Node 2 has no work of its own: what it holds when it dies is stolen.
    for index in [0, 1, 3] {
        for _ in 0..20 {
            c.submit(index, millis(30 + 10 * u64::from(index)));
        }
    }
    for index in 1..4 {
        c.executors_on(index, true);
    }
    c.run_for(millis(100))?;
    c.kill(2);
    c.run_for(secs(12))?;
    let mut text = format!("{:?} {} steps {:?}\n", c.now(), c.steps, c.log.sent);
    text += &format!("{:?}\n{:?}\n", c.log.steals, c.log.send_failures);
    for index in 0..4 {
        let host = c.host(index);
        text += &format!(
            "{index}: {:?} {:?} {:?} {:?} {:?}\n",
            host.imports,
            host.exports,
            host.reclaims,
            host.finished,
            c.node(index).stats()
        );
    }
    Ok(text)
}

#[test]
fn a_run_replays_exactly() -> Result<(), String> {
    let first = a_busy_run()?;
    assert!(
        first.contains("Reclaim"),
        "the run should take work back: {first}"
    );
    assert_eq!(first, a_busy_run()?, "the same seeds gave another run");
    Ok(())
}
