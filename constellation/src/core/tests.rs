//! The core driven message by message, with plain strings as activity bodies.

use std::sync::Arc;

use super::*;
use crate::context::{Context, ContextList, ExecutorContext, Preference};
use crate::event::Event;
use crate::id::{ActivityId, IdIssuer, NodeId};

struct Harness {
    core: Scheduler<&'static str>,
    ids: IdIssuer,
}

impl Harness {
    fn new(executors: &[&str]) -> Self {
        let node = NodeId::from_u128(7);
        let contexts = executors.iter().map(|text| text.parse().unwrap()).collect();
        Harness {
            core: Scheduler::new(node, contexts),
            ids: IdIssuer::new(node, 0),
        }
    }

    fn with_contexts(executors: Vec<ExecutorContext>) -> Self {
        let node = NodeId::from_u128(7);
        Harness {
            core: Scheduler::new(node, executors),
            ids: IdIssuer::new(node, 0),
        }
    }

    fn submit_as(
        &mut self,
        origin: Origin,
        body: &'static str,
        contexts: &str,
        stealable: bool,
    ) -> ActivityId {
        let id = self.ids.issue();
        let contexts: ContextList = contexts.parse().unwrap();
        self.core
            .submit(
                origin,
                Submission {
                    id,
                    body,
                    contexts,
                    stealable,
                },
            )
            .unwrap();
        id
    }

    fn submit(&mut self, body: &'static str, contexts: &str) -> ActivityId {
        self.submit_as(Origin::Outside, body, contexts, true)
    }

    fn actions(&mut self) -> Vec<Action<&'static str>> {
        std::iter::from_fn(|| self.core.poll_action()).collect()
    }

    /// The calls the core handed to idle executors since the last look.
    fn handed_out(&mut self) -> Vec<(usize, Work<&'static str>)> {
        self.actions()
            .into_iter()
            .filter_map(|action| match action {
                Action::Run { executor, work } => Some((executor, work)),
                _ => None,
            })
            .collect()
    }

    /// Runs executor `executor` until it is idle, finishing every activity at
    /// once, and returns the bodies in the order it ran them.
    fn drain(&mut self, executor: usize) -> Vec<&'static str> {
        let mut order = Vec::new();
        while let Some(work) = self.core.next_work(executor) {
            order.push(work.body);
            self.core.complete(work.ticket, Outcome::Finish);
        }
        order
    }
}

fn event(from: ActivityId, to: ActivityId, value: u32) -> Event {
    Event::new(from, to, value)
}

#[test]
fn outside_work_runs_oldest_first_and_terminates() {
    let mut h = Harness::new(&["anywhere"]);
    h.submit("a", "anywhere");
    h.submit("b", "anywhere");
    assert_eq!(h.drain(0), ["a", "b"]);
    let counts = h.core.counts();
    assert_eq!((counts.live, counts.finished), (0, 2));
    assert!(matches!(
        h.actions().last(),
        Some(Action::Quiescent { live: 0 })
    ));
}

#[test]
fn unmatchable_work_is_refused_not_queued() {
    let mut h = Harness::new(&["CPU", "CPU"]);
    let id = h.ids.issue();
    let err = h
        .core
        .submit(
            Origin::Outside,
            Submission {
                id,
                body: "x",
                contexts: "GPU".parse().unwrap(),
                stealable: true,
            },
        )
        .unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, SubmitError::NoSuitableExecutor { .. }));
    assert!(
        message.contains("GPU") && message.contains("[CPU]"),
        "{message}"
    );
    assert_eq!(h.core.counts().live, 0);
}

#[test]
fn pinned_work_must_match_its_own_executor() {
    let mut h = Harness::new(&["CPU", "GPU"]);
    let id = h.ids.issue();
    let refused = h.core.submit(
        Origin::Executor(0),
        Submission {
            id,
            body: "gpu-buffer",
            contexts: "GPU".parse().unwrap(),
            stealable: false,
        },
    );
    assert!(refused
        .unwrap_err()
        .to_string()
        .contains("may not leave executor 0"));
}

#[test]
fn idle_executor_is_woken_only_by_work_it_can_run() {
    let mut h = Harness::new(&["CPU", "GPU"]);
    assert!(h.core.next_work(0).is_none());
    assert!(h.core.next_work(1).is_none());
    h.actions();
    h.submit("kernel", "GPU");
    let handed = h.handed_out();
    assert_eq!(handed.len(), 1);
    assert_eq!((handed[0].0, handed[0].1.body), (1, "kernel"));
    assert!(
        h.core.next_work(0).is_none(),
        "a CPU executor must not run GPU work"
    );
}

#[test]
fn owners_take_their_newest_own_work_first() {
    let mut h = Harness::new(&["anywhere"]);
    h.submit("root", "anywhere");
    let root = h.core.next_work(0).unwrap();
    for child in ["c1", "c2", "c3"] {
        h.submit_as(Origin::Executor(0), child, "anywhere", true);
    }
    h.core.complete(root.ticket, Outcome::Finish);
    assert_eq!(
        h.core.next_work(0).unwrap().body,
        "c3",
        "owners take their newest"
    );
}

#[test]
fn unstealable_work_stays_with_its_executor() {
    let mut h = Harness::new(&["anywhere", "anywhere"]);
    h.submit("root", "anywhere");
    let root = h.core.next_work(0).unwrap();
    h.submit_as(Origin::Executor(0), "stays", "anywhere", false);
    assert!(h.core.next_work(1).is_none());
    h.core.complete(root.ticket, Outcome::Finish);
    assert_eq!(h.drain(0), ["stays"]);
}

#[test]
fn suspended_activity_resumes_on_its_executor_with_each_event() {
    let mut h = Harness::new(&["anywhere", "anywhere"]);
    let waiter = h.submit("waiter", "anywhere");
    let outside = h.ids.issue();
    let work = h.core.next_work(1).unwrap();
    h.core.complete(work.ticket, Outcome::Suspend(work.body));
    assert!(h.core.next_work(0).is_none());
    assert!(h.core.next_work(1).is_none());
    h.actions();

    h.core.deliver(event(outside, waiter, 1)).unwrap();
    h.core.deliver(event(outside, waiter, 2)).unwrap();
    let mut handed = h.handed_out();
    assert_eq!(handed.len(), 1, "the owner gets the activity once");
    let (owner, first) = handed.remove(0);
    assert_eq!(owner, 1, "a started activity does not move");
    assert!(h.core.next_work(0).is_none());

    let Call::Process(e) = first.call else {
        panic!("expected an event")
    };
    assert_eq!(e.take::<u32>().unwrap(), 1);
    h.core.complete(first.ticket, Outcome::Suspend(first.body));
    let second = h.core.next_work(1).unwrap();
    let Call::Process(e) = second.call else {
        panic!("expected an event")
    };
    assert_eq!(e.take::<u32>().unwrap(), 2);
    h.core.complete(second.ticket, Outcome::Finish);
    assert_eq!(h.core.counts().live, 0);
}

#[test]
fn events_for_unstarted_or_running_activities_are_buffered() {
    let mut h = Harness::new(&["anywhere"]);
    let target = h.submit("target", "anywhere");
    let outside = h.ids.issue();
    h.core.deliver(event(outside, target, 10)).unwrap();
    let init = h.core.next_work(0).unwrap();
    assert!(
        matches!(init.call, Call::Initialize),
        "initialize always comes first"
    );
    h.core.deliver(event(outside, target, 11)).unwrap();
    h.core.complete(init.ticket, Outcome::Suspend(init.body));
    let mut seen = Vec::new();
    while let Some(work) = h.core.next_work(0) {
        let Call::Process(e) = work.call else {
            panic!("expected an event")
        };
        seen.push(e.take::<u32>().unwrap());
        h.core.complete(work.ticket, Outcome::Suspend(work.body));
    }
    assert_eq!(seen, [10, 11]);
}

#[test]
fn events_to_missing_or_finished_activities_are_reported() {
    let mut h = Harness::new(&["anywhere"]);
    let outside = h.ids.issue();
    let nobody = h.ids.issue();
    let Err(DeliveryError::Undeliverable(err)) = h.core.deliver(event(outside, nobody, 1)) else {
        panic!("an event for nobody must be refused");
    };
    assert_eq!(err.reason, UndeliverableReason::NoSuchActivity);
    assert_eq!(
        err.event.target, nobody,
        "the event comes back, not dropped"
    );

    let target = h.submit("short-lived", "anywhere");
    let work = h.core.next_work(0).unwrap();
    h.core.deliver(event(outside, target, 2)).unwrap();
    h.core.complete(work.ticket, Outcome::Finish);
    let reported: Vec<_> = h
        .actions()
        .into_iter()
        .filter_map(|a| match a {
            Action::Undeliverable(u) => Some(u.reason),
            _ => None,
        })
        .collect();
    assert_eq!(reported, [UndeliverableReason::FinishedFirst]);
    assert_eq!(h.core.counts().undeliverable, 2);
}

#[test]
fn quiescence_with_suspended_work_reports_them_live() {
    let mut h = Harness::new(&["anywhere"]);
    let id = h.submit("forever", "anywhere");
    let work = h.core.next_work(0).unwrap();
    h.core.complete(work.ticket, Outcome::Suspend(work.body));
    assert!(h.core.next_work(0).is_none());
    assert!(h
        .actions()
        .iter()
        .any(|a| matches!(a, Action::Quiescent { live: 1 })));
    assert_eq!(h.core.suspended_ids(10), [id]);
}

#[test]
fn executor_priority_runs_local_work_before_the_fallback() {
    let mut h = Harness::new(&["site:vu,anywhere"]);
    h.submit("any-1", "anywhere");
    h.submit("vu-1", "site:vu");
    h.submit("any-2", "anywhere");
    h.submit("vu-2", "site:vu");
    assert_eq!(h.drain(0), ["vu-1", "vu-2", "any-1", "any-2"]);
}

#[test]
fn location_lists_run_only_at_listed_sites() {
    let mut h = Harness::new(&["site:lu", "site:vu", "site:uva"]);
    h.submit("pair-1", "site:vu|site:uva");
    h.submit("pair-2", "site:vu|site:uva");
    assert!(h.drain(0).is_empty(), "site:lu holds no copy");
    let vu = h.core.next_work(1).unwrap();
    assert_eq!(h.drain(2), ["pair-2"]);
    assert_eq!(vu.body, "pair-1");
}

#[test]
fn any_of_entries_go_stale_once_taken_elsewhere() {
    let mut h = Harness::new(&["a", "b"]);
    h.submit("both", "a|b");
    assert_eq!(h.drain(0), ["both"]);
    assert!(h.drain(1).is_empty(), "the copy under label b is stale");
}

#[test]
fn rank_preferences_decide_execution_order() {
    let cases = [
        (Preference::Biggest, ["r9", "r7", "r5", "r3", "r1"]),
        (Preference::Smallest, ["r1", "r3", "r5", "r7", "r9"]),
        (Preference::Range(4, 8), ["r5", "r7", "r1", "r3", "r9"]),
    ];
    for (preference, expected) in cases {
        let exec = ExecutorContext::new([Context::new("size")]).with_preference(preference);
        let mut h = Harness::with_contexts(vec![exec]);
        for (body, rank) in [("r5", 5), ("r1", 1), ("r9", 9), ("r3", 3), ("r7", 7)] {
            h.submit(body, &format!("size={rank}"));
        }
        assert_eq!(h.drain(0), expected, "{preference:?}");
    }
}

#[test]
fn priority_lists_wake_the_best_matching_idle_executor() {
    let mut h = Harness::new(&["CPU", "GPU"]);
    h.core.next_work(0);
    h.core.next_work(1);
    h.actions();
    h.submit("step-7.2", "GPU>CPU");
    let handed = h.handed_out();
    assert_eq!(handed.len(), 1);
    assert_eq!((handed[0].0, handed[0].1.body), (1, "step-7.2"));
}

#[test]
fn duplicate_ids_are_refused() {
    let mut h = Harness::new(&["anywhere"]);
    let id = h.submit("once", "anywhere");
    let again = h.core.submit(
        Origin::Outside,
        Submission {
            id,
            body: "twice",
            contexts: ContextList::anywhere(),
            stealable: true,
        },
    );
    assert_eq!(again.unwrap_err(), SubmitError::DuplicateId(id));
}

#[test]
fn slots_are_reused_without_confusing_old_queue_entries() {
    let mut h = Harness::new(&["a", "b"]);
    h.submit("first", "a|b");
    assert_eq!(h.drain(0), ["first"]);
    // The freed slot is reused; the stale `b` entry of `first` must not
    // hand out the new occupant through the wrong label.
    h.submit("second", "a");
    assert!(h.drain(1).is_empty());
    let handed = h.handed_out();
    assert_eq!(handed.len(), 1);
    assert_eq!((handed[0].0, handed[0].1.body), (0, "second"));
}

/// Two single-executor schedulers of one node, as the local driver runs them.
fn shards(first: &str, second: &str) -> (Scheduler<&'static str>, Scheduler<&'static str>) {
    let node = NodeId::from_u128(7);
    let first: ExecutorContext = first.parse().unwrap();
    let second: ExecutorContext = second.parse().unwrap();
    let pool = Arc::new(MatchTable::new(&[first.clone(), second.clone()]));
    (
        Scheduler::in_pool(node, vec![first], pool.clone()),
        Scheduler::in_pool(node, vec![second], pool),
    )
}

fn submit_to(
    core: &mut Scheduler<&'static str>,
    ids: &mut IdIssuer,
    body: &'static str,
    contexts: &str,
) -> ActivityId {
    let id = ids.issue();
    let submission = Submission {
        id,
        body,
        contexts: contexts.parse().unwrap(),
        stealable: true,
    };
    core.submit(Origin::Executor(0), submission).unwrap();
    id
}

#[test]
fn a_scheduler_accepts_work_only_the_rest_of_its_pool_can_run() {
    let (mut cpu, _) = shards("CPU", "GPU");
    let mut ids = IdIssuer::new(cpu.node(), 1);
    submit_to(&mut cpu, &mut ids, "kernel", "GPU");
    assert!(
        cpu.next_work(0).is_none(),
        "the CPU executor must not run it"
    );
    let id = ids.issue();
    let nowhere = Submission {
        id,
        body: "fpga",
        contexts: "FPGA".parse().unwrap(),
        stealable: true,
    };
    assert!(
        cpu.submit(Origin::Executor(0), nowhere).is_err(),
        "nobody in the pool can"
    );
}

#[test]
fn steal_takes_the_oldest_matching_work_and_leaves_a_forwarding_pointer() {
    let (mut victim, mut thief) = shards("anywhere", "GPU,anywhere");
    let mut ids = IdIssuer::new(victim.node(), 1);
    let old = submit_to(&mut victim, &mut ids, "old", "anywhere");
    submit_to(&mut victim, &mut ids, "new", "anywhere");
    let gpu = submit_to(&mut victim, &mut ids, "kernel", "GPU");

    let thief_context: ExecutorContext = "GPU,anywhere".parse().unwrap();
    let stolen = victim.steal(&thief_context, 2, Place(1));
    let taken: Vec<_> = stolen.iter().map(|s| s.id).collect();
    assert_eq!(
        taken,
        [gpu, old],
        "the thief's first context first, then the oldest"
    );
    assert_eq!(victim.counts().queued, 1);
    assert_eq!(victim.forwarding_pointers(), 2);

    for activity in stolen {
        thief.accept(0, activity).unwrap();
    }
    assert_eq!(thief.counts().queued, 2);
    // Events sent to the victim follow the activity.
    let outside = ids.issue();
    let Err(DeliveryError::Moved { event, to }) = victim.deliver(event(outside, old, 5)) else {
        panic!("the victim must forward");
    };
    assert_eq!(to, Place(1));
    thief.deliver(event).unwrap();
}

#[test]
fn events_buffered_before_a_steal_travel_with_the_activity() {
    let (mut victim, mut thief) = shards("anywhere", "anywhere");
    let mut ids = IdIssuer::new(victim.node(), 1);
    let id = submit_to(&mut victim, &mut ids, "waiter", "anywhere");
    let outside = ids.issue();
    victim.deliver(event(outside, id, 42)).unwrap();
    let mut stolen = victim.steal(&ExecutorContext::anywhere(), 1, Place(1));
    stolen[0].trail.push(Place(0));
    thief.accept(0, stolen.pop().unwrap()).unwrap();

    let init = thief.next_work(0).unwrap();
    assert!(matches!(init.call, Call::Initialize));
    thief.complete(init.ticket, Outcome::Suspend(init.body));
    let work = thief.next_work(0).unwrap();
    let Call::Process(e) = work.call else {
        panic!("the buffered event must follow")
    };
    assert_eq!(e.take::<u32>().unwrap(), 42);
    thief.complete(work.ticket, Outcome::Finish);
    // The finished thief tells the places on the trail to forget the pointer.
    let forget: Vec<_> = std::iter::from_fn(|| thief.poll_action())
        .filter_map(|a| match a {
            Action::ForgetForwards { id, places } => Some((id, places)),
            _ => None,
        })
        .collect();
    assert_eq!(forget, [(id, vec![Place(0)])]);
    victim.forget_forward(id);
    assert_eq!(victim.forwarding_pointers(), 0);
}

#[test]
fn pinned_work_is_never_stolen() {
    let (mut victim, _) = shards("anywhere", "anywhere");
    let mut ids = IdIssuer::new(victim.node(), 1);
    let id = ids.issue();
    let submission = Submission {
        id,
        body: "gpu-buffer",
        contexts: ContextList::anywhere(),
        stealable: false,
    };
    victim.submit(Origin::Executor(0), submission).unwrap();
    assert!(victim
        .steal(&ExecutorContext::anywhere(), 8, Place(1))
        .is_empty());
}

#[test]
fn stolen_work_can_come_back_home() {
    let (mut home, mut away) = shards("anywhere", "anywhere");
    let mut ids = IdIssuer::new(home.node(), 1);
    let id = submit_to(&mut home, &mut ids, "wanderer", "anywhere");
    let out = home
        .steal(&ExecutorContext::anywhere(), 1, Place(1))
        .pop()
        .unwrap();
    away.accept(0, out).unwrap();
    let back = away
        .steal(&ExecutorContext::anywhere(), 1, Place(0))
        .pop()
        .unwrap();
    home.accept(0, back).unwrap();
    assert_eq!(home.forwarding_pointers(), 0, "it is home again");
    assert_eq!(home.next_work(0).unwrap().ticket.id(), id);
}

#[test]
fn asking_for_work_takes_back_a_call_not_yet_handed_over() {
    let mut h = Harness::new(&["anywhere"]);
    assert!(h.core.next_work(0).is_none(), "idle");
    // Work arrives for the idle executor, and the same driver step then asks
    // for the executor's next call before polling the actions.
    h.submit("arrived", "anywhere");
    let work = h.core.next_work(0).expect("the call meant for it");
    assert_eq!(work.body, "arrived");
    assert!(h.handed_out().is_empty(), "handed over once, not twice");
    // The executor is busy, so new work waits for it instead of being
    // handed over a second time.
    h.submit("next", "anywhere");
    assert!(h.handed_out().is_empty());
}

#[test]
fn relabelled_executor_takes_the_new_work_and_leaves_the_old() {
    let pool = Arc::new(MatchTable::open(&["cpu".parse().unwrap()]));
    let node = NodeId::from_u128(7);
    let mut core: Scheduler<&'static str> =
        Scheduler::in_pool(node, vec!["cpu".parse().unwrap()], pool);
    let mut ids = IdIssuer::new(node, 0);
    for (body, contexts) in [("c1", "cpu"), ("g1", "gpu"), ("c2", "cpu"), ("g2", "gpu")] {
        let submission = Submission {
            id: ids.issue(),
            body,
            contexts: contexts.parse().unwrap(),
            stealable: true,
        };
        core.submit(Origin::Outside, submission).unwrap();
    }
    let queued: Vec<(String, usize)> = (core.queued_by_label().into_iter())
        .map(|(label, count)| (label.to_string(), count))
        .collect();
    assert_eq!(queued, [("cpu".to_string(), 2), ("gpu".to_string(), 2)]);

    core.relabel(0, "gpu".parse().unwrap()).unwrap();
    assert_eq!(core.executor_context(0).unwrap().label_list(), "gpu");
    let mut ran = Vec::new();
    while let Some(work) = core.next_work(0) {
        ran.push(work.body);
        core.complete(work.ticket, Outcome::Finish);
    }
    assert_eq!(ran, ["g1", "g2"], "only gpu work after the relabel");
    // The cpu work is still queued for a thief that offers cpu.
    let stolen = core.steal_off_node(&"cpu".parse().unwrap(), 10, Place(1));
    assert_eq!(
        stolen.iter().map(|s| s.body).collect::<Vec<_>>(),
        ["c1", "c2"]
    );
}

#[test]
fn relabel_is_refused_when_pinned_work_would_be_stranded() {
    let mut harness = Harness::new(&["cpu"]);
    let parent = harness.submit("parent", "cpu");
    let work = harness.core.next_work(0).expect("the parent runs");
    assert_eq!(work.ticket.id(), parent);
    harness.submit_as(Origin::Executor(0), "pinned", "cpu", false);
    let error = harness.core.relabel(0, "gpu".parse().unwrap()).unwrap_err();
    assert!(
        matches!(error, RelabelError::PinnedWork { count: 1, .. }),
        "{error}"
    );
    assert!(error.to_string().contains("may run only there"), "{error}");
    // Labels that still match the pinned work are fine.
    harness
        .core
        .relabel(0, "cpu, gpu".parse().unwrap())
        .unwrap();
    let error = harness.core.relabel(3, "gpu".parse().unwrap()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "there is no executor 3: this node has 1 (numbered from 0)"
    );
}

#[test]
fn thieves_from_other_nodes_find_nothing_without_searching_node_bound_work() {
    let mut harness = Harness::new(&["cpu"]);
    let bound: Vec<ActivityId> = (0..3)
        .map(|_| harness.submit_as(Origin::Outside, "bound", "cpu", false))
        .collect();
    let free = harness.submit("free", "cpu");
    let thief: ExecutorContext = "cpu".parse().unwrap();
    let stolen = harness.core.steal_off_node(&thief, 10, Place(9));
    assert_eq!(stolen.iter().map(|s| s.id).collect::<Vec<_>>(), [free]);
    assert!(harness.core.steal_off_node(&thief, 10, Place(9)).is_empty());
    // The node-bound work kept its order: oldest first for the node's executor.
    let mut ran = Vec::new();
    while let Some(work) = harness.core.next_work(0) {
        ran.push(work.ticket.id());
        harness.core.complete(work.ticket, Outcome::Finish);
    }
    assert_eq!(ran, bound);
}

/// A node of single-executor schedulers, one per context, as
/// [`shards::Shards`] sees a slice of them.
fn node(executors: &[&str]) -> Vec<Scheduler<&'static str>> {
    let node = NodeId::from_u128(7);
    let contexts: Vec<ExecutorContext> = executors.iter().map(|c| c.parse().unwrap()).collect();
    let pool = Arc::new(MatchTable::new(&contexts));
    (contexts.into_iter())
        .map(|context| Scheduler::in_pool(node, vec![context], pool.clone()))
        .collect()
}

#[test]
fn an_idle_executor_steals_from_the_next_shard_round_from_its_own() {
    let mut shards = node(&["anywhere", "anywhere", "anywhere"]);
    let mut ids = IdIssuer::new(NodeId::from_u128(7), 1);
    let first = submit_to(&mut shards[1], &mut ids, "first", "anywhere");
    let second = submit_to(&mut shards[1], &mut ids, "second", "anywhere");
    submit_to(&mut shards[2], &mut ids, "third", "anywhere");
    let anywhere = ExecutorContext::anywhere();

    let work = shards::steal_for(&mut shards[..], 0, &anywhere).expect("shard 1 has work");
    assert_eq!(work.ticket.id(), first, "the next shard, oldest first");
    assert_eq!(
        shards[0].counts().running,
        1,
        "it runs in the thief's shard"
    );
    assert_eq!(shards[1].counts().queued, 1);
    // Shard 2's executor looks at shard 0 (nothing queued) before shard 1.
    shards[0].complete(work.ticket, Outcome::Finish);
    let work = shards::steal_for(&mut shards[..], 2, &anywhere).expect("shard 1 has work");
    assert_eq!(work.ticket.id(), second);
    // The finished activity's trail names the shard it came from.
    assert!(matches!(
        shards[0].poll_action(),
        Some(Action::ForgetForwards { id, places }) if id == first && places == [Place(1)]
    ));
}

#[test]
fn an_idle_executor_steals_only_what_it_can_run() {
    let mut shards = node(&["CPU", "GPU", "anywhere"]);
    let mut ids = IdIssuer::new(NodeId::from_u128(7), 1);
    submit_to(&mut shards[1], &mut ids, "kernel", "GPU");
    let cpu: ExecutorContext = "CPU".parse().unwrap();
    assert!(shards::steal_for(&mut shards[..], 0, &cpu).is_none());
    assert_eq!(shards[1].counts().queued, 1, "the kernel stays");
    let job = submit_to(&mut shards[2], &mut ids, "job", "CPU");
    let work = shards::steal_for(&mut shards[..], 0, &cpu).expect("shard 2 has CPU work");
    assert_eq!(work.ticket.id(), job);
    // Events for it go to its old shard, which points to the thief's.
    let outside = ids.issue();
    let Err(DeliveryError::Moved { to, .. }) = shards[2].deliver(event(outside, job, 1)) else {
        panic!("shard 2 must forward");
    };
    assert_eq!(to, Place(0));
}

#[test]
fn an_export_takes_the_thiefs_first_context_from_every_shard_before_its_next() {
    let mut shards = node(&["anywhere", "GPU,anywhere", "anywhere"]);
    let mut ids = IdIssuer::new(NodeId::from_u128(7), 1);
    let old = submit_to(&mut shards[0], &mut ids, "old", "anywhere");
    let kernel = submit_to(&mut shards[2], &mut ids, "kernel", "GPU");
    let newer = submit_to(&mut shards[2], &mut ids, "newer", "anywhere");
    let thief: ExecutorContext = "GPU,anywhere".parse().unwrap();
    let off_node = Place(u64::MAX);

    let loot = shards::export(&mut shards[..], &thief, 2, 0, off_node);
    let taken: Vec<(ActivityId, Vec<Place>)> =
        loot.iter().map(|s| (s.id, s.trail.clone())).collect();
    assert_eq!(
        taken,
        [(kernel, vec![Place(2)]), (old, vec![Place(0)])],
        "the GPU work from shard 2 before shard 0's, each trail ending at its shard"
    );
    let outside = ids.issue();
    let Err(DeliveryError::Moved { to, .. }) = shards[0].deliver(event(outside, old, 1)) else {
        panic!("shard 0 must forward");
    };
    assert_eq!(to, off_node);
    // Starting at shard 2 this time; at most `max`.
    let loot = shards::export(&mut shards[..], &thief, 5, 2, off_node);
    assert_eq!(loot.iter().map(|s| s.id).collect::<Vec<_>>(), [newer]);
}

#[test]
fn an_export_leaves_work_that_may_not_leave_the_node() {
    let mut shards = node(&["anywhere", "anywhere"]);
    let mut ids = IdIssuer::new(NodeId::from_u128(7), 1);
    let bound = ids.issue();
    let submission = Submission {
        id: bound,
        body: "bound",
        contexts: ContextList::anywhere(),
        stealable: false,
    };
    shards[1].submit(Origin::Outside, submission).unwrap();
    let anywhere = ExecutorContext::anywhere();
    assert!(shards::export(&mut shards[..], &anywhere, 4, 0, Place(u64::MAX)).is_empty());
    // Another executor of the node may still take it.
    let work =
        shards::steal_for(&mut shards[..], 0, &anywhere).expect("it may move within the node");
    assert_eq!(work.ticket.id(), bound);
}
