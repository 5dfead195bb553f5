//! The main job until the supernova demo exists: fib(n) by divide and
//! conquer on the embedded local pool.

#![warn(unreachable_pub)]

use std::time::Instant;

use anyhow::{Context as _, Result};
use clap::Parser;
use constellation::collect::SingleEventCollector;
use constellation::Pool;
use constellation_workloads::{fib_activities, fib_sequential, Fib};

/// Computes fib(N) with one activity per call on the embedded pool, and
/// reports the answer and the scheduling rate.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// Which Fibonacci number to compute; fib(N) creates 2·fib(N+1)−1 activities.
    #[arg(default_value_t = 30, env = "FIB_N", value_parser = clap::value_parser!(u32).range(0..=40))]
    n: u32,
    /// Executor threads in the pool (default: one per core).
    #[arg(short, long, env = "CONSTELLATION_EXECUTORS")]
    executors: Option<usize>,
    /// Write one CSV line per activity call (executor, labels, times) to this file.
    #[arg(long)]
    trace: Option<std::path::PathBuf>,
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let args = Args::parse();
    let executors = args
        .executors
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let started = Instant::now();
    let pool = Pool::builder()
        .executors(executors)
        .trace(args.trace.is_some())
        .start()?;
    let (collector, result) = SingleEventCollector::new();
    let root_parent = pool.submit(collector)?;
    pool.submit(Fib::new(args.n, root_parent))?;
    let value = result.wait_one()?.take::<u64>()?;
    let summary = pool.done()?;
    let seconds = started.elapsed().as_secs_f64();
    let activities = fib_activities(args.n);
    anyhow::ensure!(value == fib_sequential(args.n), "wrong answer {value}");
    println!("fib({}) = {value}", args.n);
    println!(
        "{activities} activities on {executors} executors in {seconds:.3} s: {:.0} activities/s, {} stolen",
        activities as f64 / seconds,
        summary.counts.stolen
    );
    if let Some(path) = args.trace {
        let file =
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        let mut out = std::io::BufWriter::new(file);
        constellation::trace::write_csv(&mut out, &summary.trace)
            .with_context(|| format!("writing {}", path.display()))?;
        println!(
            "trace: {} calls written to {}",
            summary.trace.len(),
            path.display()
        );
    }
    Ok(())
}
