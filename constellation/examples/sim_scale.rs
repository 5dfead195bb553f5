//! The simulator at scale: by default 10,000 executors (1,250 nodes of 8
//! over 100 sites) and 1,000,000 short activities. Prints the simulated
//! figures, then the simulator's own wall time and events per second, and
//! a JSON line in `scripts/bench.sh` form.
//!
//! ```text
//! cargo run --release -p constellation --example sim_scale -- --strategy hierarchical
//! ```

use std::time::Instant;

use anyhow::Context as _;
use clap::Parser;
use constellation::protocol::strategy::Strategy;
use constellation::sim::{simulate, ComparisonSetup, WideSteal};

#[derive(Parser)]
#[command(about = "Time the simulator on a large pool and bag of work")]
struct Args {
    /// Executors in all.
    #[arg(long, default_value_t = 10_000)]
    executors: usize,
    /// Executors per node.
    #[arg(long, default_value_t = 8)]
    per_node: usize,
    /// Sites the nodes are dealt over.
    #[arg(long, default_value_t = 100)]
    sites: usize,
    /// Activities in the bag.
    #[arg(long, default_value_t = 1_000_000)]
    activities: usize,
    /// Mean seconds per activity (each takes 0.5 to 1.5 times that).
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// master-worker, random or hierarchical.
    #[arg(long, default_value = "random")]
    strategy: Strategy,
    /// Most activities per steal reply.
    #[arg(long, default_value_t = 256)]
    max_steal: usize,
    /// How much a hierarchical steal from another site asks for: doubling
    /// (the net driver's rule: the idle executors' worth, doubled after
    /// each full reply while the site stays dry), idle-executors or
    /// max-steal.
    #[arg(long, default_value = "doubling")]
    wide_steal: WideSteal,
    /// Percent of the nodes (never the master) that die halfway through
    /// the ideal makespan.
    #[arg(long, default_value_t = 0.0)]
    kill_percent: f64,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Runs; the wall time printed last is their median.
    #[arg(long, default_value_t = 1)]
    runs: usize,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut setup = ComparisonSetup::new(args.executors, args.sites);
    setup.executors_per_node = args.per_node;
    setup.activities = args.activities;
    setup.mean_seconds = args.seconds;
    setup.max_steal = args.max_steal;
    setup.wide_steal = args.wide_steal;
    setup.seed = args.seed;
    let started = Instant::now();
    let workload = setup.workload();
    let mut model = setup.model(args.strategy);
    let ideal = workload.activities.iter().map(|a| a.seconds).sum::<f64>() / args.executors as f64;
    let nodes = model.nodes.len();
    let victims = ((nodes as f64) * args.kill_percent / 100.0).round() as usize;
    // Every k-th node after the master, spread over the sites.
    for index in 0..victims {
        let node = 1 + index * (nodes - 1) / victims.max(1);
        model.nodes[node].dies_at = Some(ideal / 2.0);
    }
    eprintln!(
        "built {} nodes, {} executors, {} sites, {} activities ({} nodes die at {:.1} s) in {:.2} s",
        nodes,
        model.executor_count(),
        model.sites.len(),
        workload.roots.len(),
        victims,
        ideal / 2.0,
        started.elapsed().as_secs_f64()
    );
    let mut walls = Vec::new();
    let mut last = None;
    for run in 0..args.runs.max(1) {
        let started = Instant::now();
        let report = simulate(&model, &workload).context("simulation failed")?;
        let wall = started.elapsed().as_secs_f64();
        eprintln!(
            "run {run}: wall {wall:.2} s, {} events, {:.0} events/s",
            report.events,
            report.events as f64 / wall
        );
        walls.push(wall);
        last = Some(report);
    }
    let report = last.expect("at least one run");
    walls.sort_by(f64::total_cmp);
    let median = walls[walls.len() / 2];
    let m = &report.messages;
    println!("strategy            {}", report.strategy);
    println!(
        "makespan            {:.3} s (ideal {:.3} s)",
        report.makespan, ideal
    );
    println!("efficiency          {:.4}", report.efficiency);
    println!("completed           {}", report.completed);
    println!(
        "requeued/lost/dup   {} / {} / {}",
        report.requeued, report.lost, report.duplicates
    );
    println!(
        "steal requests      {} ({:.4} per activity, {} across sites, {} empty)",
        m.steal_requests,
        report.steals_per_activity(),
        m.wide_area_steals,
        m.empty_replies
    );
    println!(
        "moved               {} ({} across sites)",
        m.moved, m.wide_area_moved
    );
    println!(
        "membership          {} messages ({:.2} per node per simulated second), all know all at {}",
        m.membership,
        m.membership as f64 / nodes as f64 / report.makespan.max(1e-9),
        report
            .membership_converged
            .map_or("never".to_string(), |at| format!("{at:.3} s"))
    );
    println!(
        "master load         {} requests (busiest victim {})",
        report.master_load, report.busiest_victim
    );
    println!("events              {}", report.events);
    println!(
        "wall                {median:.2} s median of {} (events/s {:.0})",
        walls.len(),
        report.events as f64 / median
    );
    println!(
        "{{\"bench\":\"sim_scale_{}\",\"value\":{median:.3},\"unit\":\"s\",\"higher_is_better\":false}}",
        report.strategy
    );
    Ok(())
}
