//! Master-worker, random and hierarchical stealing compared in the
//! simulator at 100, 1,000 and 10,000 executors over 10 and 100 sites,
//! 100 activities of 0.5-1.5 s per executor, all submitted at the master.
//! Prints one table; `--executors`/`--sites` pick other sizes.
//!
//! ```text
//! cargo run --release -p constellation --example sim_compare
//! cargo run --release -p constellation --example sim_compare -- --executors 1000 --sites 10,100 --what-if idle-executors,max-steal
//! ```

use std::time::Instant;

use clap::Parser;
use constellation::protocol::strategy::Strategy;
use constellation::sim::{
    compare_one, compare_strategies, compare_wide_steal, AnswerCost, ComparisonRow,
    ComparisonSetup, WideSteal,
};

#[derive(Parser)]
#[command(about = "Compare steal strategies in the simulator")]
struct Args {
    /// Pool sizes in executors, comma separated.
    #[arg(long, value_delimiter = ',', default_values_t = [100, 1_000, 10_000])]
    executors: Vec<usize>,
    /// Site counts, comma separated; pools with fewer nodes than sites are skipped.
    #[arg(long, value_delimiter = ',', default_values_t = [10, 100])]
    sites: Vec<usize>,
    /// Activities per executor.
    #[arg(long, default_value_t = 100)]
    per_executor: usize,
    /// Most activities per steal reply.
    #[arg(long, default_value_t = 256)]
    max_steal: usize,
    /// Also run hierarchical stealing with these other sizes of cross-site
    /// steals (idle-executors, max-steal; the default is doubling), as
    /// rows labelled hier-NAME.
    #[arg(long, value_delimiter = ',')]
    what_if: Vec<WideSteal>,
    /// Seconds a victim spends answering one steal request, whatever it
    /// carries (a master saturates from this and the next).
    #[arg(long, default_value_t = 0.0)]
    answer_per_request: f64,
    /// Seconds a victim spends per activity it hands over.
    #[arg(long, default_value_t = 0.0)]
    answer_per_activity: f64,
    /// Mean seconds per activity (each takes 0.5 to 1.5 times that).
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// Every site starts with an equal share of the bag (submitted there by
    /// a seeding activity only that site runs) instead of all of it at the
    /// master; master-worker is left out, as its workers never steal from
    /// each other.
    #[arg(long)]
    every_site: bool,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut rows = Vec::new();
    for &executors in &args.executors {
        for &sites in &args.sites {
            let mut setup = ComparisonSetup::new(executors, sites);
            if executors.div_ceil(setup.executors_per_node) < sites {
                eprintln!(
                    "skipping {executors} executors over {sites} sites: fewer nodes than sites"
                );
                continue;
            }
            setup.activities = executors * args.per_executor;
            setup.max_steal = args.max_steal;
            setup.seed = args.seed;
            setup.mean_seconds = args.seconds;
            setup.answer_cost = AnswerCost {
                per_request: args.answer_per_request,
                per_activity: args.answer_per_activity,
            };
            setup.every_site = args.every_site;
            let started = Instant::now();
            let mut found = if args.every_site {
                vec![
                    compare_one(&setup, Strategy::Random)?,
                    compare_one(&setup, Strategy::Hierarchical)?,
                ]
            } else {
                compare_strategies(&setup)?
            };
            for &wide_steal in &args.what_if {
                found.push(compare_wide_steal(&setup, wide_steal)?);
            }
            eprintln!(
                "{executors} executors, {sites} sites: {:.1} s wall",
                started.elapsed().as_secs_f64()
            );
            eprint!("{}", ComparisonRow::table(&found));
            rows.extend(found);
        }
    }
    print!("{}", ComparisonRow::table(&rows));
    Ok(())
}
