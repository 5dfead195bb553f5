//! End-to-end check of `executors::mpi`: run under `mpiexec -n 3 mpi-selftest`.
//!
//! Rank 0 builds a pool with one `anywhere` executor and the MPI executor,
//! runs the shipped M-tasks and some that fail on purpose, and prints one
//! line per check (`ok   name: …` or `FAIL name: …`). The exit status is
//! nonzero if any check failed. The optional argument is the number of ranks
//! to expect (3 by default).
//!
//! With `--lonely-panic` after it, rank 0 instead submits one M-task that
//! panics on the last rank only while the others wait in a reduce: the
//! panicking rank must abort the job after its 2 s grace, so the expected
//! result is a failed `mpiexec`, soon, rather than a hang. With
//! `--main-panics`, rank 0's main program panics after one M-task: every
//! rank must still shut down, and rank 0 exit with an error.

#![warn(unreachable_pub)]

use std::collections::HashMap;
use std::fmt;
use std::process::ExitCode;
use std::sync::OnceLock;
use std::time::Duration;

use constellation::collect::{MultiEventCollector, SingleEventCollector};
use constellation::{ActivityId, ContextList, Pool, SubmitError};
use executors::mpi::rsmpi::collective::SystemOperation;
use executors::mpi::rsmpi::traits::*;
use executors::mpi::{
    DotProduct, DotProductResult, MonteCarloPi, MpiActivity, MpiError, MpiExecutor, MpiOutcome,
    MpiRoot, MpiValue, OnMpi, PiEstimate, SimpleCommunicator,
};
use serde::{Deserialize, Deserializer, Serialize};

/// How long any one wait for results may take before the check fails.
const WAIT: Duration = Duration::from_secs(60);

/// This process's rank, for [`DecodeFailsOnRank`].
static MY_RANK: OnceLock<usize> = OnceLock::new();

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (expected, mode) = match args.as_slice() {
        [] => (Ok(3), ""),
        [ranks] => (ranks.parse::<usize>(), ""),
        [ranks, mode] => (ranks.parse(), mode.as_str()),
        _ => (Ok(0), ""),
    };
    let (Ok(expected @ 1..), "" | "--lonely-panic" | "--main-panics") = (expected, mode) else {
        eprintln!("usage: mpiexec -n N mpi-selftest [N [--lonely-panic | --main-panics]]");
        return ExitCode::from(2);
    };
    let grace = Duration::from_secs(if mode == "--lonely-panic" { 2 } else { 20 });
    let executor = match MpiExecutor::init() {
        Ok(executor) => executor.with_panic_grace(grace),
        Err(error) => {
            eprintln!("mpi-selftest: {error}");
            return ExitCode::FAILURE;
        }
    };
    let rank = executor.rank();
    let _ = MY_RANK.set(rank);
    // One line per panic instead of a backtrace: the self-test panics on
    // purpose.
    std::panic::set_hook(Box::new(move |info| {
        eprintln!("mpi-selftest: rank {rank}: {info}");
    }));
    let outcome = match mode {
        "--lonely-panic" => executor.run(move |mpi| lonely(&mpi, expected)),
        "--main-panics" => executor.run(move |mpi| main_panics(&mpi)),
        _ => executor.run(move |mpi| selftest(&mpi, expected)),
    };
    match outcome {
        Ok(None) => ExitCode::SUCCESS,
        Ok(Some(0)) => ExitCode::SUCCESS,
        Ok(Some(_)) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("mpi-selftest: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Counts and prints checks.
#[derive(Default)]
struct Checks {
    passed: usize,
    failed: usize,
}

impl Checks {
    fn check(&mut self, name: &str, ok: bool, detail: impl fmt::Display) {
        if ok {
            self.passed += 1;
            println!("ok   {name}: {detail}");
        } else {
            self.failed += 1;
            println!("FAIL {name}: {detail}");
        }
    }

    /// Prints how many checks passed, or failed.
    fn summary(&self) {
        if self.failed == 0 {
            println!("mpi-selftest: all {} checks passed", self.passed);
        } else {
            println!(
                "mpi-selftest: {} of {} checks FAILED",
                self.failed,
                self.failed + self.passed
            );
        }
    }
}

/// Rank 0's main program; returns the number of failed checks.
fn selftest(mpi: &MpiRoot, expected: usize) -> usize {
    let mut checks = Checks::default();
    let ranks = mpi.ranks();
    checks.check(
        "ranks",
        ranks == expected,
        format!(
            "{ranks} ranks (expected {expected}), executor context `{}`",
            mpi.context()
        ),
    );
    let pool = match mpi.add_executor(Pool::builder().executors(1)).start() {
        Ok(pool) => pool,
        Err(error) => {
            checks.check("pool", false, error);
            return checks.failed;
        }
    };
    check_examples(&mut checks, &pool, expected);
    check_rank_context(&mut checks, &pool, expected);
    check_failures(&mut checks, &pool, expected, ranks);
    check_done(&mut checks, pool);
    checks.summary();
    checks.failed
}

/// The two example M-tasks, submitted together; one collector tells
/// their outcomes apart by sender.
fn check_examples(checks: &mut Checks, pool: &Pool, expected: usize) {
    let n = 10_000_000;
    let (samples_per_rank, seed) = (1_000_000, 2011);
    match run_pair(pool, n, samples_per_rank, seed) {
        Err(error) => checks.check("examples", false, error),
        Ok((dot, pi)) => {
            let exact = DotProduct::exact(n);
            checks.check(
                "dot-product",
                dot.as_ref()
                    .is_ok_and(|(r, d)| *r == expected && Some(d.dot) == exact),
                match &dot {
                    Ok((r, d)) => format!(
                        "n={} ranks={r} dot={} closed-form={}",
                        d.n,
                        d.dot,
                        exact.unwrap_or_default()
                    ),
                    Err(error) => error.clone(),
                },
            );
            let total = samples_per_rank * expected as u64;
            checks.check(
                "monte-carlo-pi",
                pi.as_ref().is_ok_and(|(r, p)| {
                    *r == expected
                        && p.samples == total
                        && (p.pi - std::f64::consts::PI).abs() < 0.01
                }),
                match &pi {
                    Ok((r, p)) => format!(
                        "ranks={r} samples={} hits={} pi={:.6} error={:.6} (tolerance 0.01)",
                        p.samples,
                        p.hits,
                        p.pi,
                        (p.pi - std::f64::consts::PI).abs()
                    ),
                    Err(error) => error.clone(),
                },
            );
        }
    }
}

/// The executor's ranked label lets work ask for a partition size, and
/// work that asks for more ranks than there are is refused at submit.
fn check_rank_context(checks: &mut Checks, pool: &Pool, expected: usize) {
    let context: ContextList = format!("mpi:ranks={expected}").parse().unwrap_or_default();
    let outcome = run_one(pool, |parent| {
        OnMpi::new(parent, DotProduct { n: 1000 }).with_context(context.clone())
    });
    checks.check(
        "rank-context",
        matches!(&outcome, Ok(Ok(report)) if report.ranks == expected),
        format!("context `{context}`: {}", describe(&outcome)),
    );
    let too_big: ContextList = format!("mpi:ranks={}..=1024", expected + 1)
        .parse()
        .unwrap_or_default();
    let refused =
        pool.submit(OnMpi::new(pool.address(), DotProduct { n: 10 }).with_context(too_big.clone()));
    checks.check(
        "too-many-ranks",
        matches!(refused, Err(SubmitError::NoSuitableExecutor { .. })),
        format!("context `{too_big}` refused at submit: {refused:?}"),
    );
}

/// Work that lands on an executor without MPI says so; failures on some
/// ranks are reported, and the partition keeps serving.
fn check_failures(checks: &mut Checks, pool: &Pool, expected: usize, ranks: usize) {
    let outcome = run_one(pool, |parent| {
        OnMpi::new(parent, DotProduct { n: 10 }).with_context(ContextList::anywhere())
    });
    checks.check(
        "no-mpi-link",
        matches!(&outcome, Ok(Err(MpiError::NoMpiLink { .. }))),
        describe(&outcome),
    );
    let last = expected.saturating_sub(1);
    let outcome = run_one(pool, |parent| OnMpi::new(parent, FailOnRank { rank: last }));
    checks.check(
        "rank-error",
        matches!(&outcome, Ok(Err(MpiError::Failed(f)))
            if f.len() == 1 && f[0].rank == last && !f[0].panicked && f[0].message.contains("on purpose")),
        describe(&outcome),
    );
    let outcome = run_one(pool, |parent| {
        OnMpi::new(parent, DecodeFailsOnRank { rank: last })
    });
    checks.check(
        "decode-error",
        matches!(&outcome, Ok(Err(MpiError::Decode(f))) if f.len() == 1 && f[0].rank == last),
        describe(&outcome),
    );
    let outcome = run_one(pool, |parent| OnMpi::new(parent, PanicEverywhere));
    checks.check(
        "panic",
        matches!(&outcome, Ok(Err(MpiError::Failed(f)))
            if f.len() == ranks && f.iter().all(|f| f.panicked)),
        describe(&outcome),
    );
    let outcome = run_one(pool, |parent| OnMpi::new(parent, DotProduct { n: 1000 }));
    let recovered = outcome
        .as_ref()
        .ok()
        .and_then(|o| o.as_ref().ok())
        .and_then(|r| r.value.decode::<DotProductResult>().ok());
    checks.check(
        "recovered",
        recovered.is_some_and(|d| Some(d.dot) == DotProduct::exact(1000)),
        format!("after the failures: {recovered:?}"),
    );
}

/// The pool shuts down with no failed call.
fn check_done(checks: &mut Checks, pool: Pool) {
    match pool.done() {
        Ok(summary) => checks.check(
            "pool-done",
            summary.failed_calls == 0,
            format!(
                "{} failed calls, {:.3} s",
                summary.failed_calls,
                summary.elapsed.as_secs_f64()
            ),
        ),
        Err(error) => checks.check("pool-done", false, error),
    }
}

/// Runs one M-task that panics on the last rank only; never returns if the
/// executor keeps its promise to abort the job.
fn lonely(mpi: &MpiRoot, expected: usize) -> usize {
    let pool = match mpi.add_executor(Pool::builder().executors(1)).start() {
        Ok(pool) => pool,
        Err(error) => {
            println!("FAIL pool: {error}");
            return 1;
        }
    };
    println!("lonely-panic: submitting; the job should abort in about 2 s");
    let rank = expected.saturating_sub(1);
    let outcome = run_one(&pool, |parent| OnMpi::new(parent, PanicOnRank { rank }));
    println!("FAIL lonely-panic: the job went on: {}", describe(&outcome));
    1
}

/// Runs one M-task, then panics with the pool still up.
fn main_panics(mpi: &MpiRoot) -> usize {
    let outcome = mpi.link().run(Box::new(DotProduct { n: 100 }));
    println!("main-panics: one M-task first: {}", describe(&Ok(outcome)));
    panic!("the main program panics on purpose");
}

/// One rank's result or an error text.
type Got<T> = Result<(usize, T), String>;

/// Runs [`DotProduct`] and [`MonteCarloPi`] side by side.
fn run_pair(
    pool: &Pool,
    n: u64,
    samples_per_rank: u64,
    seed: u64,
) -> Result<(Got<DotProductResult>, Got<PiEstimate>), String> {
    let (collector, results) = MultiEventCollector::new(2);
    let parent = pool.submit(collector).map_err(|e| e.to_string())?;
    let dot = pool
        .submit(OnMpi::new(parent, DotProduct { n }))
        .map_err(|e| e.to_string())?;
    let pi = pool
        .submit(OnMpi::new(
            parent,
            MonteCarloPi {
                samples_per_rank,
                seed,
            },
        ))
        .map_err(|e| e.to_string())?;
    let mut by_source: HashMap<ActivityId, MpiOutcome> = HashMap::new();
    for event in results.wait_timeout(WAIT).map_err(|e| e.to_string())? {
        let source = event.source;
        by_source.insert(source, event.take().map_err(|e| e.to_string())?);
    }
    Ok((
        decoded(by_source.remove(&dot)),
        decoded(by_source.remove(&pi)),
    ))
}

fn decoded<T: Serialize + serde::de::DeserializeOwned + Send + 'static>(
    outcome: Option<MpiOutcome>,
) -> Got<T> {
    let report = outcome.ok_or("no outcome")?.map_err(|e| e.to_string())?;
    let value = report.value.decode::<T>().map_err(|e| e.to_string())?;
    Ok((report.ranks, value))
}

/// Submits one OnMpi with a fresh collector and waits for its outcome.
fn run_one(pool: &Pool, make: impl FnOnce(ActivityId) -> OnMpi) -> Result<MpiOutcome, String> {
    let (collector, result) = SingleEventCollector::new();
    let parent = pool.submit(collector).map_err(|e| e.to_string())?;
    pool.submit(make(parent)).map_err(|e| e.to_string())?;
    let mut events = result.wait_timeout(WAIT).map_err(|e| e.to_string())?;
    let event = events.pop().ok_or("no event")?;
    event.take::<MpiOutcome>().map_err(|e| e.to_string())
}

fn describe(outcome: &Result<MpiOutcome, String>) -> String {
    match outcome {
        Ok(Ok(report)) => format!("ok on {} ranks in {:?}", report.ranks, report.elapsed),
        Ok(Err(error)) => format!("reported error: {error}"),
        Err(error) => format!("no outcome: {error}"),
    }
}

/// Takes part in a reduce on every rank, then fails on one.
#[derive(Serialize, Deserialize)]
struct FailOnRank {
    rank: usize,
}

#[typetag::serde]
impl MpiActivity for FailOnRank {
    fn run(&mut self, world: &SimpleCommunicator) -> Result<MpiValue, String> {
        world.barrier();
        if usize::try_from(world.rank()) == Ok(self.rank) {
            return Err(format!("rank {} fails on purpose", self.rank));
        }
        Ok(MpiValue::default())
    }
}

/// Decodes everywhere except on one rank, as if that rank ran another build.
#[derive(Serialize)]
struct DecodeFailsOnRank {
    rank: usize,
}

impl<'de> Deserialize<'de> for DecodeFailsOnRank {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Plain {
            rank: usize,
        }
        let plain = Plain::deserialize(deserializer)?;
        if MY_RANK.get() == Some(&plain.rank) {
            return Err(serde::de::Error::custom(format!(
                "rank {} refuses to decode this on purpose",
                plain.rank
            )));
        }
        Ok(DecodeFailsOnRank { rank: plain.rank })
    }
}

#[typetag::serde]
impl MpiActivity for DecodeFailsOnRank {
    fn run(&mut self, world: &SimpleCommunicator) -> Result<MpiValue, String> {
        // Would hang if only some ranks got here.
        world.barrier();
        Ok(MpiValue::default())
    }
}

/// Panics on every rank before any collective.
#[derive(Serialize, Deserialize)]
struct PanicEverywhere;

#[typetag::serde]
impl MpiActivity for PanicEverywhere {
    fn run(&mut self, _world: &SimpleCommunicator) -> Result<MpiValue, String> {
        panic!("PanicEverywhere panics on purpose (expected in the self-test)");
    }
}

/// Panics on one rank while the others wait for it in a reduce.
#[derive(Serialize, Deserialize)]
struct PanicOnRank {
    rank: usize,
}

#[typetag::serde]
impl MpiActivity for PanicOnRank {
    fn run(&mut self, world: &SimpleCommunicator) -> Result<MpiValue, String> {
        if usize::try_from(world.rank()) == Ok(self.rank) {
            panic!("PanicOnRank panics on rank {} alone", self.rank);
        }
        let root = world.process_at_rank(0);
        if world.rank() == 0 {
            let mut sum = 0_u64;
            root.reduce_into_root(&1_u64, &mut sum, SystemOperation::sum());
        } else {
            root.reduce_into(&1_u64, SystemOperation::sum());
        }
        Ok(MpiValue::default())
    }
}
