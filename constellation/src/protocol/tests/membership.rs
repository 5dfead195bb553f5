//! Membership by SWIM: meeting through one address, suspicion and its
//! refutation, rejoining after being declared down, partitions that heal,
//! and a thousand nodes that learn each other.

use std::time::{Duration, Instant};

use super::harness::{Cluster, Life};
use super::{millis, secs, FAILURE_TIMEOUT, PROBE_PERIOD};
use crate::protocol::NodeEvent;

#[test]
fn nodes_meet_through_one_address_and_learn_what_each_offers() -> Result<(), String> {
    let mut c = Cluster::with(3, |index| index as usize + 1, |_, _| {});
    let took = c.form(secs(10))?;
    println!("three nodes met in {took:?} of virtual time");
    for index in 0..3 {
        let node = c.node(index);
        assert_eq!(node.members_known(), 2, "node {index}");
        for (id, info) in node.members() {
            assert_eq!(
                info.executors.len(),
                id.peer as usize + 1,
                "node {index} knows what node {} offers",
                id.peer
            );
            assert_eq!(node.peer_of(id.node), Some(&id.peer));
        }
        assert!(
            c.events_of(index).any(|e| *e == NodeEvent::MembersChanged),
            "node {index} told its driver"
        );
    }
    Ok(())
}

#[test]
fn a_node_starved_of_cpu_is_suspected_refutes_and_keeps_its_work() -> Result<(), String> {
    let mut c = Cluster::with(4, |index| if index == 3 { 2 } else { 1 }, |_, _| {});
    c.form(secs(10))?;
    let jobs: Vec<_> = (0..4).map(|_| c.submit(0, secs(100))).collect();
    c.executors_on(3, true);
    c.run_until(secs(5), "node 3 runs two of node 0's", |c| {
        c.host(3).running().len() == 2
    })?;
    let held = c.host(3).running();
    c.watch(3);
    // Longer than a probe period, a few seconds shorter than the failure
    // timeout.
    let pause = FAILURE_TIMEOUT - secs(3);
    assert!(pause > PROBE_PERIOD);
    let paused_at = c.now();
    c.pause(3, pause);
    c.run_for(pause)?;
    let suspected: Vec<_> = (c.log.sightings.iter())
        .filter(|s| s.state == foca::State::Suspect && s.at <= paused_at + pause)
        .cloned()
        .collect();
    assert!(
        !suspected.is_empty(),
        "nobody suspected node 3 while it slept"
    );
    println!(
        "node 3 first suspected {:?} into a pause of {pause:?}",
        suspected[0].at - paused_at
    );
    c.run_for(FAILURE_TIMEOUT * 2)?;
    let refuted = (c.log.sightings.iter())
        .filter(|s| s.at > paused_at + pause)
        .any(|s| s.state == foca::State::Alive && s.incarnation > suspected[0].incarnation);
    assert!(refuted, "node 3 did not refute with a higher incarnation");
    for index in 0..3 {
        assert!(
            c.members_of(index).contains(&3),
            "node {index} lost node 3: {:?}",
            c.members_of(index)
        );
        assert_eq!(c.node(index).stats().dead_members, 0, "node {index}");
    }
    assert_eq!(c.members_of(3), [0, 1, 2]);
    assert!(c.host(0).reclaims.is_empty(), "its work was taken back");
    assert_eq!(c.node(0).stats().requeued, 0);
    assert_eq!(c.host(3).running(), held, "it still runs what it held");
    let finished = c.all_finished();
    assert!(
        jobs.iter().all(|id| !finished.contains_key(id)),
        "nothing of node 0's ran to its end anywhere: {finished:?}"
    );
    Ok(())
}

#[test]
fn a_node_declared_down_rejoins_under_a_new_bump() -> Result<(), String> {
    let mut c = Cluster::with(4, |index| if index == 3 { 2 } else { 1 }, |_, _| {});
    c.form(secs(10))?;
    for _ in 0..4 {
        c.submit(0, secs(100));
    }
    c.executors_on(3, true);
    c.run_until(secs(5), "node 3 runs two of node 0's", |c| {
        c.host(3).running().len() == 2
    })?;
    let pause = FAILURE_TIMEOUT + secs(5);
    c.pause(3, pause);
    c.run_until(pause, "the others declared node 3 down", |c| {
        (0..3).all(|index| !c.members_of(index).contains(&3))
    })?;
    // At least once: what it held runs again elsewhere.
    c.run_until(secs(1), "node 0 took node 3's work back", |c| {
        c.host(0).reclaims.len() == 2
    })?;
    c.run_until(pause, "node 3 woke", |c| c.slots[3].life == Life::Up)?;
    let took = c.run_until(secs(30), "node 3 is a member again", |c| c.converged())?;
    println!("node 3 was a member again {took:?} after it woke");
    let own = c.node(3).id().bump;
    assert!(own >= 1, "node 3 rejoined under its old identity");
    for index in 0..3 {
        let bump = (c.node(index).members())
            .find(|(id, _)| id.peer == 3)
            .map(|(id, _)| id.bump)
            .ok_or("node 3 is not listed")?;
        assert_eq!(bump, own, "node {index} knows node 3 by an old identity");
    }
    assert_eq!(
        c.host(3).running().len(),
        2,
        "node 3 still runs what it held"
    );
    Ok(())
}

#[test]
fn two_halves_declare_each_other_down_and_converge_again_after_healing() -> Result<(), String> {
    let mut c = Cluster::new(6);
    c.form(secs(10))?;
    let (left, right) = ([0, 1, 2], [3, 4, 5]);
    c.partition(&left, &right);
    let alone = |c: &Cluster, half: &[u32]| {
        half.iter().all(|&i| {
            c.members_of(i).iter().all(|m| half.contains(m)) && c.node(i).stats().dead_members >= 3
        })
    };
    // SWIM probes members round robin in a shuffled order, so the first
    // probe across may come up to five periods late (each node has five
    // members); then the failure timeout, then a period of grace.
    let bound = FAILURE_TIMEOUT + 7 * PROBE_PERIOD;
    let split = c.run_until(bound, "each half declared the other down", |c| {
        alone(c, &left) && alone(c, &right)
    })?;
    for index in 0..6 {
        assert_eq!(c.members_of(index).len(), 2, "node {index}");
    }
    c.heal();
    // Nodes announce themselves to members they count down every ten
    // probe periods; a few rounds of that.
    let healed = c.run_until(30 * PROBE_PERIOD, "all six list each other again", |c| {
        c.converged()
    })?;
    println!("partition: split after {split:?}, whole again {healed:?} after healing");
    Ok(())
}

/// How long a cluster may take to learn itself after the last node
/// contacted node 0 (nodes start 1 ms apart, each contacts node 0 only).
const LEARN_BOUND: Duration = Duration::from_secs(5);

/// `count` nodes start 1 ms apart and each contacts node 0; every node
/// must list every other as a usable member (SWIM has it up and its hello
/// was heard) within [`LEARN_BOUND`] of the last start, and still list
/// them all, none counted dead, after five more probe periods.
fn learn_each_other(count: u32) -> Result<(), String> {
    let wall = Instant::now();
    let mut c = Cluster::with(count, |_| 0, |_, _| {});
    for index in 1..count {
        c.contact(index, 0);
        c.run_for(millis(1))?;
    }
    let last_started = c.now();
    let everyone = count as usize - 1;
    let took = c.run_until_every(
        LEARN_BOUND,
        millis(10),
        "every node lists every other",
        |c| (0..count).all(|index| c.node(index).members_known() == everyone) && c.converged(),
    )?;
    println!(
        "{count} nodes: all list all at most {took:?} of virtual time after the last started \
         ({:?} after the first; looked every 10 ms); {} steps, {:?} wall time; messages sent {:?}",
        last_started + took,
        c.steps,
        wall.elapsed(),
        c.log.sent
    );
    c.run_for(5 * PROBE_PERIOD)?;
    assert!(c.converged(), "{count} nodes fell apart after converging");
    for index in 0..count {
        assert_eq!(c.node(index).stats().dead_members, 0, "node {index}");
    }
    println!(
        "{count} nodes: still whole 5 s later; {:?} wall time in all",
        wall.elapsed()
    );
    Ok(())
}

#[test]
fn two_hundred_nodes_learn_each_other() -> Result<(), String> {
    learn_each_other(200)
}

/// About two minutes of CPU in a debug build (foca finds a member by a
/// linear scan, and a thousand nodes exchange a million hellos), under ten
/// seconds in release, where it is not ignored:
/// `cargo test -p constellation --lib --release thousand`.
#[test]
#[cfg_attr(debug_assertions, ignore = "slow in debug builds: run with --release")]
fn a_thousand_nodes_learn_each_other() -> Result<(), String> {
    learn_each_other(1000)
}

#[test]
fn a_lost_hello_is_asked_for_again() -> Result<(), String> {
    let mut c = Cluster::with(3, |_| 1, |_, _| {});
    // Nodes 1 and 2 hear of each other through SWIM, but their hellos
    // (what each offers) are lost, as on a connection that failed.
    c.lose_kind(1, 2, "hello");
    c.contact(1, 0);
    c.contact(2, 0);
    c.run_until(secs(10), "nodes 1 and 2 list the pool node", |c| {
        c.members_of(1) == [0] && c.members_of(2) == [0]
    })?;
    c.run_for(PROBE_PERIOD * 3)?;
    assert_eq!(
        c.members_of(1),
        [0],
        "node 1 lists node 2 without its hello"
    );
    c.heal();
    let took = c.run_until(PROBE_PERIOD * 3, "nodes 1 and 2 list each other", |c| {
        c.converged()
    })?;
    println!("the hellos were asked for again; nodes 1 and 2 met {took:?} after the link healed");
    Ok(())
}
