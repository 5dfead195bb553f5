//! Events between nodes: at most two hops to an activity that moved, and
//! events that arrive before the activity they are for.

use super::fake_host::Whereabouts;
use super::harness::Cluster;
use super::{millis, node_id, secs};
use crate::protocol::{Message, Notice};

#[test]
fn an_event_reaches_an_activity_that_moved_twice_in_at_most_two_hops() -> Result<(), String> {
    // 0 is the origin of x; 1 steals it and keeps it queued; 2 steals it
    // from 1 and runs it; 3 knows nothing of it.
    let mut c = Cluster::new(4);
    c.form(secs(10))?;
    let x = c.submit(0, secs(60));
    c.hold_queued(1, true);
    c.executors_on(1, true);
    c.run_until(secs(5), "node 1 took x", |c| {
        c.host(1).imports.iter().any(|(id, _)| *id == x)
    })?;
    c.executors_on(1, false);
    c.executors_on(2, true);
    c.run_until(secs(5), "node 2 took x from node 1 and runs it", |c| {
        c.host(2).running() == [x]
    })?;
    c.run_until(secs(1), "the origin heard where x is", |c| {
        (c.log.notices.iter()).any(|(_, from, to, notice)| {
            (*from, *to) == (2, 0)
                && *notice
                    == Notice::Moved {
                        id: x,
                        at: node_id(2),
                    }
        })
    })?;

    assert_eq!(c.host(0).whereabouts(x), Some(Whereabouts::Left));
    assert_eq!(c.host(1).whereabouts(x), Some(Whereabouts::Left));
    let from_stranger = c.send_event(3, x, 30).value;
    let from_origin = c.send_event(0, x, 0).value;
    let from_exporter = c.send_event(1, x, 10).value;
    c.run_until(secs(1), "all three events reached x", |c| {
        c.host(2).delivered.len() == 3
    })?;
    let path = |value: u32| -> Vec<(u32, u32)> {
        (c.log.hops.iter())
            .filter(|hop| hop.event.value == value)
            .map(|hop| (hop.from, hop.to))
            .collect()
    };
    assert_eq!(
        path(from_stranger),
        [(3, 0), (0, 2)],
        "stranger -> origin -> x"
    );
    assert_eq!(path(from_origin), [(0, 2)], "the origin knows where x is");
    assert_eq!(
        path(from_exporter),
        [(1, 2)],
        "the exporter knows whom it gave x"
    );
    let mut values: Vec<u32> = c.host(2).delivered.iter().map(|e| e.value).collect();
    values.sort();
    assert_eq!(values, [0, 10, 30], "each delivered once, at x");
    for index in 0..4 {
        assert_eq!(c.node(index).stats().undeliverable, 0, "node {index}");
    }
    assert_eq!(c.node(2).stats().events_received, 3);
    Ok(())
}

#[test]
fn an_event_that_overtakes_its_activity_waits_for_it() -> Result<(), String> {
    let mut c = Cluster::new(2);
    c.form(secs(10))?;
    let x = c.submit(0, secs(1));
    // The loot travels slowly; what 0 sends after it does not.
    c.set_latency(0, 1, millis(300));
    c.executors_on(1, true);
    c.run_until(secs(5), "x on its way to node 1", |c| {
        c.in_flight(0, 1, |m| {
            matches!(m, Message::Loot { activities, .. } if activities.iter().any(|a| a.id == x))
        })
    })?;
    c.set_latency(0, 1, millis(1));
    let event = c.send_event(0, x, 7);
    c.run_until(secs(2), "the event reached x", |c| {
        c.host(1).delivered.contains(&event)
    })?;
    let hop = (c.log.hops.iter())
        .find(|hop| hop.event == event)
        .ok_or("the event never crossed")?;
    let loot = (c.log.loots.iter())
        .find(|loot| loot.activities.iter().any(|(id, _)| *id == x))
        .ok_or("the loot never arrived")?;
    assert_eq!((hop.from, hop.to), (0, 1), "sent where x went");
    assert!(
        hop.arrived < loot.arrived,
        "the event came first ({:?}), the loot later ({:?})",
        hop.arrived,
        loot.arrived
    );
    c.run_for(secs(3))?;
    assert_eq!(
        c.host(1).delivered.iter().filter(|e| **e == event).count(),
        1,
        "delivered once"
    );
    assert_eq!(c.node(1).stats().undeliverable, 0);
    assert_eq!(c.node(1).backlog().2, 0, "no event left waiting");
    Ok(())
}

#[test]
fn an_event_whose_activity_never_comes_is_dropped_and_counted() -> Result<(), String> {
    let mut c = Cluster::new(2);
    c.form(secs(10))?;
    let x = c.submit(0, secs(1));
    // Slower than early_event_wait (2 s).
    c.set_latency(0, 1, secs(3));
    c.executors_on(1, true);
    c.run_until(secs(5), "x on its way to node 1", |c| {
        c.in_flight(
            0,
            1,
            |m| matches!(m, Message::Loot { activities, .. } if !activities.is_empty()),
        )
    })?;
    c.set_latency(0, 1, millis(1));
    let event = c.send_event(0, x, 7);
    c.run_until(millis(100), "the event waits at node 1", |c| {
        c.node(1).backlog().2 == 1
    })?;
    c.run_until(secs(5), "x ran at node 1", |c| {
        c.host(1).finished_count(x) == 1
    })?;
    assert!(
        !c.host(1).delivered.contains(&event),
        "an event that waited past early_event_wait is not delivered late"
    );
    assert_eq!(c.node(1).stats().undeliverable, 1, "it was counted");
    assert_eq!(c.node(1).backlog().2, 0, "and not kept");
    Ok(())
}
