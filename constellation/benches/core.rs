//! Micro-benchmarks for the sans-IO scheduler core, [`constellation::core::Scheduler`].
//!
//! The core has no threads and no I/O, so these measure scheduling logic
//! only: queueing, taking work (own, shared, stolen between shards,
//! ranked), event delivery and the match table. Run with `cargo bench -p constellation --bench core`.

use std::hint::black_box;
use std::sync::Arc;

use constellation::core::{
    shards, Action, Call, MatchTable, Origin, Outcome, Scheduler, Submission,
};
use constellation::Event;
use constellation::{ActivityId, IdIssuer, NodeId};
use constellation::{Context, ContextList, ExecutorContext, Preference};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};

/// Activities per iteration in the queue benchmarks.
const N: u64 = 10_000;

/// The node every benchmark schedules for.
fn node() -> NodeId {
    NodeId::from_u128(7)
}

/// `count` fresh activity ids from the node's own issuer.
fn ids(count: u64) -> Vec<ActivityId> {
    let mut issuer = IdIssuer::new(node(), 0);
    (0..count).map(|_| issuer.issue()).collect()
}

/// A scheduler whose executors offer `executors`, indexed as given.
fn scheduler(executors: Vec<ExecutorContext>) -> Scheduler<u64> {
    Scheduler::new(node(), executors)
}

/// A stealable submission of body `body` that may run where `contexts` says.
fn submission(id: ActivityId, body: u64, contexts: ContextList) -> Submission<u64> {
    Submission {
        id,
        body,
        contexts,
        stealable: true,
    }
}

/// Runs `executor` until it has no work, finishing every activity at once;
/// returns the sum of the bodies it ran, so the work is not optimised away.
fn drain(core: &mut Scheduler<u64>, executor: usize) -> u64 {
    let mut sum = 0u64;
    while let Some(work) = core.next_work(executor) {
        sum = sum.wrapping_add(work.body);
        core.complete(work.ticket, Outcome::Finish);
    }
    sum
}

/// Discards the driver actions the core has queued (wakes, quiescence).
fn drain_actions(core: &mut Scheduler<u64>) {
    while let Some(action) = core.poll_action() {
        black_box(action);
    }
}

/// Submits `N` unranked activities from outside into a fresh two-executor
/// scheduler, then lets executor 0 run them all from the shared queue
/// (oldest first). Measures the full submit → take → finish life of an
/// activity; creating the scheduler and its ids is not measured.
fn submit_then_run(c: &mut Criterion) {
    let ids = ids(N);
    let mut group = c.benchmark_group("core");
    group.throughput(Throughput::Elements(N));
    group.bench_function("submit_then_run", |b| {
        b.iter_batched(
            || {
                scheduler(vec![
                    ExecutorContext::anywhere(),
                    ExecutorContext::anywhere(),
                ])
            },
            |mut core| {
                for (body, &id) in (0u64..).zip(&ids) {
                    core.submit(
                        Origin::Outside,
                        submission(id, body, ContextList::anywhere()),
                    )
                    .expect("an anywhere executor exists");
                }
                black_box(drain(&mut core, 0));
                drain_actions(&mut core);
                // Returned so the scheduler is dropped outside the timing.
                core
            },
            BatchSize::SmallInput,
        );
    });
    group.finish();
}

/// Executor 0 submits `N` stealable activities to its own queue in its own
/// shard; then executor 1, idle in the other shard, steals every one of them
/// (oldest first) with [`shards::steal_for`], finishes it, and has the victim
/// drop its forwarding pointer. This is how the local pool and the simulator
/// move work between a node's executors, one single-executor scheduler each.
/// Measures submission to an executor's own queue plus the steal path between
/// shards, which first finds the thief's own shard empty.
fn steal(c: &mut Criterion) {
    let ids = ids(N);
    let anywhere = ExecutorContext::anywhere();
    let pool = Arc::new(MatchTable::new(&[anywhere.clone(), anywhere.clone()]));
    let mut group = c.benchmark_group("core");
    group.throughput(Throughput::Elements(N));
    group.bench_function("steal", |b| {
        b.iter_batched(
            || {
                let mut shards: Vec<Scheduler<u64>> = (0..2)
                    .map(|_| Scheduler::in_pool(node(), vec![anywhere.clone()], pool.clone()))
                    .collect();
                // Executor 1 starts idle, as a thief would be.
                assert!(shards[1].next_work(0).is_none());
                drain_actions(&mut shards[1]);
                shards
            },
            |mut shards| {
                for (body, &id) in (0u64..).zip(&ids) {
                    shards[0]
                        .submit(
                            Origin::Executor(0),
                            submission(id, body, ContextList::anywhere()),
                        )
                        .expect("an anywhere executor exists");
                }
                let mut sum = 0u64;
                while let Some(work) = shards::steal_for(&mut shards[..], 1, &anywhere) {
                    sum = sum.wrapping_add(work.body);
                    shards[1].complete(work.ticket, Outcome::Finish);
                    while let Some(action) = shards[1].poll_action() {
                        if let Action::ForgetForwards { id, .. } = action {
                            shards[0].forget_forward(id);
                        }
                    }
                }
                black_box(sum);
                drain_actions(&mut shards[0]);
                debug_assert_eq!(shards[0].counts().stolen, N);
                shards
            },
            BatchSize::SmallInput,
        );
    });
    group.finish();
}

/// One started, suspended activity; each element delivers one event to it
/// and runs the resulting `process` call, which suspends again. Measures
/// `deliver` (including boxing the `u64` payload) plus the ready-queue path
/// of `next_work` and `complete` with `Suspend`.
fn event_resume(c: &mut Criterion) {
    let mut ids = IdIssuer::new(node(), 0);
    let target = ids.issue();
    let source = ids.issue();
    let mut core = scheduler(vec![ExecutorContext::anywhere()]);
    core.submit(
        Origin::Outside,
        submission(target, 0, ContextList::anywhere()),
    )
    .expect("an anywhere executor exists");
    let init = core.next_work(0).expect("the activity was just submitted");
    assert!(matches!(init.call, Call::Initialize));
    core.complete(init.ticket, Outcome::Suspend(init.body));
    drain_actions(&mut core);

    let mut group = c.benchmark_group("core");
    group.throughput(Throughput::Elements(1));
    group.bench_function("event_resume", |b| {
        b.iter(|| {
            core.deliver(Event::new(source, target, 1u64))
                .expect("the target is suspended, not finished");
            let work = core
                .next_work(0)
                .expect("the event made the activity ready");
            black_box(work.call);
            core.complete(work.ticket, Outcome::Suspend(work.body));
            // Each completion that leaves the core idle reports quiescence.
            drain_actions(&mut core);
        });
    });
    group.finish();
    assert_eq!(core.counts().live, 1);
}

/// Submits `N` activities ranked `size=<rank>` (ranks from an LCG, so they
/// arrive unordered and repeat) and lets an executor that prefers the biggest
/// rank run them all. Measures the rank-ordered (B-tree) queue path of
/// submission and `next_work`; the context lists are parsed beforehand.
fn ranked_biggest(c: &mut Criterion) {
    let ids = ids(N);
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let contexts: Vec<ContextList> = (0..N)
        .map(|_| {
            // Knuth's MMIX LCG; the high bits are the well-mixed ones.
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let rank = (state >> 33) % 100_000;
            format!("size={rank}")
                .parse()
                .expect("a valid ranked context")
        })
        .collect();
    let executor =
        ExecutorContext::new([Context::new("size")]).with_preference(Preference::Biggest);

    let mut group = c.benchmark_group("core");
    group.throughput(Throughput::Elements(N));
    group.bench_function("ranked_biggest", |b| {
        b.iter_batched(
            || scheduler(vec![executor.clone()]),
            |mut core| {
                for ((body, &id), list) in (0u64..).zip(&ids).zip(&contexts) {
                    core.submit(Origin::Outside, submission(id, body, list.clone()))
                        .expect("the size executor takes any rank");
                }
                black_box(drain(&mut core, 0));
                drain_actions(&mut core);
                core
            },
            BatchSize::SmallInput,
        );
    });
    group.finish();
}

/// `MatchTable::check` on 64 executors, each at one of `site:a`..`site:h`
/// and every fourth also offering `GPU`, for the any-of list
/// `site:c | site:f | GPU`:
/// - `any`: unpinned work, accepted by the first executor at `site:c`;
/// - `pinned`: work pinned to executor 60, which matches only through `GPU`,
///   so every `site:c` and `site:f` entry and most `GPU` entries are scanned;
/// - `refused`: work pinned to executor 63, which matches nothing, so the
///   table is scanned and the error (with its message) is built.
fn match_check(c: &mut Criterion) {
    let executors: Vec<ExecutorContext> = (0..64u8)
        .map(|index| {
            let site = Context::new(&format!("site:{}", char::from(b'a' + index % 8)));
            let mut contexts = vec![site];
            if index % 4 == 0 {
                contexts.push(Context::new("GPU"));
            }
            ExecutorContext::new(contexts)
        })
        .collect();
    let table = MatchTable::new(&executors);
    let list: ContextList = "site:c|site:f|GPU".parse().expect("a valid any-of list");
    let id = ids(1)[0];

    let mut group = c.benchmark_group("core/match_check");
    group.throughput(Throughput::Elements(1));
    group.bench_function("any", |b| {
        b.iter(|| black_box(&table).check(id, black_box(&list), None).is_ok());
    });
    group.bench_function("pinned", |b| {
        b.iter(|| {
            black_box(&table)
                .check(id, black_box(&list), black_box(Some(60)))
                .is_ok()
        });
    });
    group.bench_function("refused", |b| {
        b.iter(|| {
            black_box(&table)
                .check(id, black_box(&list), black_box(Some(63)))
                .is_err()
        });
    });
    group.finish();
}

criterion_group!(
    benches,
    submit_then_run,
    steal,
    event_resume,
    ranked_biggest,
    match_check
);
criterion_main!(benches);
