//! Nodes that die or leave: work they held is queued again (at least
//! once, with the attempt counted), work they finished is not, and a thief
//! whose victim died looks elsewhere.

use std::time::Duration;

use super::fake_host::Reclaim;
use super::harness::Cluster;
use super::{millis, secs, FAILURE_TIMEOUT, PROBE_PERIOD};
use crate::protocol::{Message, NodeEvent, Notice};

/// The bound on declaring a dead node down in these tests: a probe period
/// to notice, one to fail indirect probes too, then the failure timeout.
const DETECTION_BOUND: Duration =
    Duration::from_secs(FAILURE_TIMEOUT.as_secs() + 3 * PROBE_PERIOD.as_secs());

#[test]
fn a_dead_thief_s_work_is_queued_again_with_the_next_attempt() -> Result<(), String> {
    // 0 has the work, 1 steals and dies, 2 watches.
    let mut c = Cluster::new(3);
    c.form(secs(10))?;
    let mut jobs: Vec<_> = (0..4).map(|_| c.submit(0, secs(1))).collect();
    jobs.sort();
    c.executors_on(1, true);
    c.run_until(secs(5), "node 1 took two", |c| c.host(1).imports.len() == 2)?;
    c.kill(1);
    // Node 1 is the only thief; a loot still on its way when it died is
    // lost with it, and counts as held there too.
    let taken = c.host(0).exports.clone();
    assert_eq!(taken.len(), 2, "half of four, and no more");
    let took = c.run_until(
        DETECTION_BOUND + secs(1),
        "node 0 took its work back",
        |c| c.host(0).reclaims.len() == taken.len(),
    )?;
    println!("a dead thief's work was queued again {took:?} after it died");
    assert!(
        took <= DETECTION_BOUND,
        "took {took:?}, more than {DETECTION_BOUND:?}"
    );
    for reclaim in &c.host(0).reclaims {
        assert!(taken.contains(&reclaim.id), "{reclaim:?} was not at node 1");
        assert_eq!((reclaim.attempt, reclaim.stealable), (1, true));
    }
    c.run_until(secs(2), "both survivors dropped node 1", |c| {
        c.members_of(0) == [2] && c.members_of(2) == [0]
    })?;
    assert_eq!(c.node(0).stats().requeued, 2);
    assert!(c.node(0).stats().dead_members >= 1);
    assert!(
        c.events_of(0).any(|e| *e == NodeEvent::MembersChanged),
        "the driver heard that the members changed"
    );
    // The work runs again, once, with its attempt.
    c.executors_on(0, true);
    c.run_until(secs(10), "all four ran", |c| c.all_finished().len() == 4)?;
    c.run_for(secs(10))?;
    assert_eq!(c.host(0).reclaims.len(), 2, "taken back once");
    let finished = c.all_finished();
    for id in &jobs {
        let expected: &[u32] = if taken.contains(id) { &[1] } else { &[0] };
        assert_eq!(finished[id], expected, "{id}");
    }
    Ok(())
}

#[test]
fn work_that_may_not_run_again_or_ran_out_of_attempts_is_given_up() -> Result<(), String> {
    let mut c = Cluster::with(
        3,
        |_| 1,
        |index, settings| {
            if index == 2 {
                settings.max_attempts = 1;
            }
        },
    );
    c.form(secs(10))?;
    // Node 1 keeps what it steals queued, so it goes on asking until it
    // has both.
    let once = c.submit_job(0, secs(10), |job| job.restartable = false);
    let no_retries = c.submit(2, secs(10));
    c.hold_queued(1, true);
    c.executors_on(1, true);
    c.run_until(secs(5), "node 1 took both", |c| {
        c.host(1).imports.len() == 2
    })?;
    c.kill(1);
    c.run_until(DETECTION_BOUND, "both given up", |c| {
        c.node(0).stats().lost == 1 && c.node(2).stats().lost == 1
    })?;
    let lost = |index: u32| -> Vec<(crate::id::ActivityId, String)> {
        c.events_of(index)
            .filter_map(|e| match e {
                NodeEvent::Lost { id, reason } => Some((*id, reason.clone())),
                _ => None,
            })
            .collect()
    };
    let at_0 = lost(0);
    assert_eq!(at_0.len(), 1);
    assert_eq!(at_0[0].0, once);
    assert!(
        at_0[0].1.contains("may not be restarted"),
        "{:?}",
        at_0[0].1
    );
    let at_2 = lost(2);
    assert_eq!(at_2.len(), 1);
    assert_eq!(at_2[0].0, no_retries);
    assert!(at_2[0].1.contains("died 1 times"), "{:?}", at_2[0].1);
    assert!(c.host(0).reclaims.is_empty() && c.host(2).reclaims.is_empty());
    assert_eq!(
        c.host(0).settles,
        [once],
        "the host forgets what was given up"
    );
    assert_eq!(c.host(2).settles, [no_retries]);
    Ok(())
}

#[test]
fn a_thief_whose_victim_dies_mid_steal_steals_elsewhere_and_loses_nothing() -> Result<(), String> {
    // 0 has work and dies while 2's request is on its way; 1 gets work then.
    let mut c = Cluster::new(3);
    c.form(secs(10))?;
    for _ in 0..4 {
        c.submit(0, millis(100));
    }
    c.set_latency(2, 0, millis(100));
    c.executors_on(2, true);
    c.run_until(secs(5), "a steal on its way from 2 to 0", |c| {
        c.in_flight(2, 0, |m| matches!(m, Message::Steal { .. }))
    })?;
    let request = (c.log.steals.iter())
        .rev()
        .find(|s| (s.1, s.2) == (2, 0))
        .map(|s| s.3)
        .ok_or("no steal logged")?;
    c.kill(0);
    let died = c.now();
    let mut jobs: Vec<_> = (0..3).map(|_| c.submit(1, millis(100))).collect();
    jobs.sort();
    c.run_until(secs(5), "node 2 ran node 1's work", |c| {
        c.host(2).finished.len() == 3
    })?;
    let failed = (c.log.send_failures.iter())
        .find(|f| (f.1, f.2, f.3) == (2, 0, Some(request)))
        .ok_or("node 2 never heard its steal failed")?;
    let first_import = (c.log.loots.iter())
        .find(|l| l.to == 2 && !l.activities.is_empty())
        .ok_or("no loot reached node 2")?;
    assert_eq!(first_import.from, 1);
    assert!(
        first_import.arrived - died < FAILURE_TIMEOUT,
        "node 2 waited {:?} (its steal failed at {:?}): it must not wait for SWIM",
        first_import.arrived - died,
        failed.0 - died
    );
    let mut ran: Vec<_> = c.host(2).finished.iter().map(|(id, _)| *id).collect();
    ran.sort();
    assert_eq!(ran, jobs, "node 1's work ran at node 2, once each");
    c.run_until(DETECTION_BOUND, "node 2 dropped node 0", |c| {
        c.members_of(2) == [1]
    })?;
    let dropped = c.now();
    c.run_for(secs(5))?;
    assert!(
        !(c.log.steals.iter()).any(|s| s.0 > dropped && (s.1, s.2) == (2, 0)),
        "node 2 asked a member it had dropped"
    );
    Ok(())
}

#[test]
fn a_thief_whose_request_waits_on_a_frozen_victim_steals_its_requeued_work() -> Result<(), String> {
    // 0 has the work, 1 takes it and freezes (SIGSTOP: its messages wait,
    // they do not fail), 2 is idle and its request to 1 waits with them.
    // When 1 is declared dead, 0 queues the work again: 2 must take it
    // then, not when 1 wakes up and answers.
    let mut c = Cluster::new(3);
    c.form(secs(10))?;
    let job = c.submit(0, secs(120));
    c.executors_on(1, true);
    c.run_until(secs(5), "node 1 took the work", |c| {
        c.host(1).imports.len() == 1
    })?;
    let frozen = secs(60);
    c.pause(1, frozen);
    let paused = c.now();
    c.executors_on(2, true);
    c.run_until(secs(5), "a steal on its way from 2 to 1", |c| {
        c.in_flight(2, 1, |m| matches!(m, Message::Steal { .. }))
    })?;
    c.run_until(
        DETECTION_BOUND + secs(2),
        "node 0 queued its work again",
        |c| c.host(0).reclaims.len() == 1,
    )?;
    let requeued = c.now();
    c.run_until(
        DETECTION_BOUND,
        "node 2 took the work queued again while node 1 is frozen",
        |c| c.host(2).imports.iter().any(|(id, _)| *id == job),
    )?;
    let took = c.now() - requeued;
    println!("the work queued again was stolen {took:?} after it was queued");
    assert!(
        c.now() - paused < frozen,
        "node 2 waited for the frozen node to wake up"
    );
    Ok(())
}

#[test]
fn a_leaving_thief_s_finished_work_is_not_run_again_and_the_rest_is() -> Result<(), String> {
    // 0 has the work, 1 takes four, finishes three and leaves; 2 watches.
    let mut c = Cluster::with(3, |index| if index == 1 { 4 } else { 1 }, |_, _| {});
    // Messages in the order sent: the Leaving before SWIM's goodbye (for
    // the other order, see a_leaver_s_swim_goodbye_may_overtake_its_leaving).
    c.jitter = Duration::ZERO;
    c.form(secs(10))?;
    let durations = [secs(1), secs(1), secs(3), secs(100)];
    let first: Vec<_> = durations.iter().map(|d| c.submit(0, *d)).collect();
    let rest: Vec<_> = (0..4).map(|_| c.submit(0, secs(1))).collect();
    c.executors_on(1, true);
    c.run_until(secs(5), "node 1 took four", |c| {
        c.host(1).imports.len() == 4
    })?;
    let imported_at = c.now();
    c.executors_on(1, false);
    assert_eq!(c.host(1).running().len(), 4, "all four run");
    c.run_until(secs(2), "two finished", |c| c.host(1).finished.len() == 2)?;
    // The third's Finished notice travels slowly: the Leaving overtakes it.
    c.run_for(imported_at + secs(3) - millis(5) - c.now())?;
    c.set_latency(1, 0, millis(500));
    c.run_until(millis(10), "the third finished", |c| {
        c.host(1).finished.len() == 3
    })?;
    c.set_latency(1, 0, millis(1));
    c.leave(1);
    let left = c.now();
    c.run_for(millis(100))?;
    assert_eq!(c.members_of(0), [2], "a leaving node is not a steal target");
    assert_eq!(c.members_of(2), [0]);
    c.kill(1);
    c.run_until(
        FAILURE_TIMEOUT + secs(5),
        "node 0 took the unfinished one back",
        |c| !c.host(0).reclaims.is_empty(),
    )?;
    let after = c.now() - left;
    println!("a leaver's unfinished work was queued again {after:?} after it left");
    assert!(
        after >= FAILURE_TIMEOUT && after <= DETECTION_BOUND,
        "queued again {after:?} after the Leaving: not within the failure timeout and the detection bound"
    );
    c.run_for(secs(10))?;
    let leaving_at = (c.log.leaving.iter())
        .find(|l| (l.1, l.2) == (1, 0))
        .map(|l| l.0)
        .ok_or("no Leaving reached node 0")?;
    let third_finished_at = (c.log.notices.iter())
        .find(|(_, from, to, n)| (*from, *to) == (1, 0) && *n == Notice::Finished(first[2]))
        .map(|n| n.0)
        .ok_or("the third's Finished never reached node 0")?;
    assert!(leaving_at < third_finished_at, "the Leaving came first");
    assert_eq!(
        c.host(0).reclaims,
        [Reclaim {
            id: first[3],
            attempt: 1,
            stealable: true
        }],
        "only the unfinished one is queued again"
    );
    for id in &first[..3] {
        assert!(c.host(0).settles.contains(id), "{id} settled");
    }
    assert!(!c.events_of(0).any(|e| matches!(e, NodeEvent::Lost { .. })));
    assert!(
        !(c.log.steals.iter()).any(|s| s.0 >= left && s.1 == 1),
        "a leaving node steals no more"
    );
    c.executors_on(0, true);
    // The unfinished one runs 100 s.
    c.run_until(secs(120), "the rest ran at node 0", |c| {
        c.host(0).finished.len() == 5
    })?;
    let finished = c.all_finished();
    for id in &first[..3] {
        assert_eq!(finished[id], [0], "{id} ran once");
    }
    assert_eq!(finished[&first[3]], [1], "the unfinished one ran again");
    for id in &rest {
        assert_eq!(finished[id], [0]);
    }
    Ok(())
}

#[test]
fn a_leaver_s_swim_goodbye_may_overtake_its_leaving() -> Result<(), String> {
    // As `a_leaving_thief_s_finished_work_...`, but SWIM's goodbye (the
    // leaver declares itself down) arrives before the Leaving message, as
    // it may on separate streams: the leaver still gets the failure
    // timeout for its last notices.
    let mut c = Cluster::new(3);
    c.form(secs(10))?;
    for _ in 0..4 {
        c.submit(0, secs(100));
    }
    c.executors_on(1, true);
    c.run_until(secs(5), "node 1 took two", |c| c.host(1).imports.len() == 2)?;
    c.watch(1);
    for member in [0, 2] {
        c.set_kind_latency(1, member, "leaving", millis(100));
    }
    c.leave(1);
    let left = c.now();
    c.run_for(millis(200))?;
    c.kill(1);
    let leaving_at = (c.log.leaving.iter())
        .find(|l| (l.1, l.2) == (1, 0))
        .map(|l| l.0)
        .ok_or("no Leaving reached node 0")?;
    let goodbye_at = (c.log.sightings.iter())
        .find(|s| s.state == foca::State::Down)
        .map(|s| s.at)
        .ok_or("SWIM never said node 1 is down")?;
    assert!(goodbye_at < leaving_at, "SWIM's goodbye came first");
    c.run_until(
        FAILURE_TIMEOUT + secs(5),
        "node 0 took node 1's work back",
        |c| c.host(0).reclaims.len() == 2,
    )?;
    let after = c.now() - left;
    assert!(
        after >= FAILURE_TIMEOUT,
        "node 0 ran a leaver's work again {after:?} after it left, before the failure timeout"
    );
    assert!(c.host(0).reclaims.iter().all(|r| r.attempt == 1));
    Ok(())
}

/// How long an exporter waits for a thief to say it took a loot, in these
/// tests: as long as SWIM takes to declare a silent member down.
const LOOT_ACK_WAIT: Duration =
    Duration::from_secs(FAILURE_TIMEOUT.as_secs() + 2 * PROBE_PERIOD.as_secs());

#[test]
fn a_lost_loot_is_queued_again_while_its_thief_lives() -> Result<(), String> {
    // 0 has the work, 1 steals it, and the loot is lost on the way (a
    // reply on a connection that failed); 1 lives on, so SWIM never
    // declares it dead, and before, 0 kept the work in custody for good.
    let mut c = Cluster::new(3);
    c.form(secs(10))?;
    let job = c.submit(0, millis(100));
    c.lose_kind(0, 1, "loot");
    c.executors_on(1, true);
    c.run_until(secs(5), "node 0 handed its work to node 1", |c| {
        c.host(0).exports == [job] && c.log.dropped > 0
    })?;
    let lost_at = c.now();
    c.heal();
    c.executors_on(0, true);
    let took = c.run_until(
        LOOT_ACK_WAIT + secs(2),
        "node 0 queued the lost loot's work again",
        |c| !c.host(0).reclaims.is_empty(),
    )?;
    println!("a lost loot's work was queued again {took:?} after it was lost");
    assert_eq!(
        c.host(0).reclaims,
        [Reclaim {
            id: job,
            attempt: 1,
            stealable: true
        }]
    );
    c.run_until(secs(5), "the work ran", |c| {
        c.all_finished().contains_key(&job)
    })?;
    c.run_for(LOOT_ACK_WAIT * 2)?;
    assert_eq!(
        c.all_finished()[&job],
        [1],
        "it ran once, at its second attempt"
    );
    assert_eq!(c.host(0).reclaims.len(), 1, "queued again once");
    assert_eq!(c.live(), [0, 1, 2], "no node died");
    assert_eq!(c.node(0).stats().dead_members, 0);
    assert!(c.now() - lost_at < LOOT_ACK_WAIT * 4);
    assert!(!c.events_of(0).any(|e| matches!(e, NodeEvent::Lost { .. })));
    Ok(())
}

#[test]
fn a_loot_that_arrives_is_acknowledged_and_never_queued_again() -> Result<(), String> {
    let mut c = Cluster::new(2);
    c.form(secs(10))?;
    let job = c.submit(0, LOOT_ACK_WAIT * 2);
    c.executors_on(1, true);
    c.run_until(secs(5), "node 1 runs the work", |c| {
        c.host(1).running().contains(&job)
    })?;
    c.run_for(LOOT_ACK_WAIT + secs(1))?;
    assert!(
        (c.log.notices.iter()).any(|(_, from, to, n)| (*from, *to) == (1, 0)
            && matches!(n, Notice::LootTaken { .. })),
        "node 1 acknowledged the loot: {:?}",
        c.log.notices
    );
    assert!(
        c.host(0).reclaims.is_empty(),
        "an acknowledged loot waits for its end"
    );
    c.run_until(LOOT_ACK_WAIT * 2, "the work ended", |c| {
        c.host(0).settles == [job]
    })?;
    assert_eq!(c.all_finished()[&job], [0]);
    Ok(())
}
