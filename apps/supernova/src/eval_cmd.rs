//! `supernova eval`: the paper's scenarios and the scale studies on the
//! simulator, printed as tables (see `supernova::eval`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Result;
use clap::{Args, ValueEnum};
use constellation::net::Strategy;
use constellation::sim::{
    compare_one, compare_strategies, compare_wide_steal, simulate, AnswerCost, ComparisonRow,
    ComparisonSetup, WideSteal, Workload,
};
use supernova::eval::{self, scenarios, steps::StepModel, Profile};

/// What to evaluate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum What {
    /// Four heterogeneous clusters, four context configurations (Tables 2, 3).
    Scenario1,
    /// One 48-core machine: monolithic configurations against many-task (Figure 9).
    Scenario2,
    /// A GPU cluster: CPU-only against step 7.2 on the GPUs (Figure 11).
    Scenario3,
    /// Master-worker, random and hierarchical stealing at 100 to 10,000
    /// executors, and where a master saturates.
    Strategies,
    /// 10% of the nodes die mid-run: nothing is lost; what it costs.
    Failure,
    /// Scenario 1 at reduced scale on the real runtime against the simulator.
    Emulate,
    /// All of the above.
    All,
}

/// Which step profile to run with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ProfileArg {
    /// Our pipeline's measured step times.
    Measured,
    /// Step 7.2 weighted to 90% of a pair, as in the paper.
    Paper,
    /// Both, one table each.
    Both,
}

/// Arguments of `supernova eval`.
#[derive(Args)]
#[command(after_help = "\
Examples:
  supernova eval scenario1
  supernova eval all --seeds 3 --out eval-out     # what scripts/eval/run.sh runs

Every run is simulated: the real scheduler core on virtual time and a
modelled network (constellation::sim). Step times come from our pipeline
(apps/supernova/eval/step-times.tsv, remeasured with
scripts/eval/measure-steps.sh), scaled once so the 30 largest pairs take
820 s on average as in the paper. With --out, each configuration's first
seed is written as a run journal plus utilization plot, which
`constellation report` reads like a real run's.")]
pub(crate) struct EvalArgs {
    /// What to evaluate.
    #[arg(value_enum, required = true)]
    what: Vec<What>,
    /// Which step profile.
    #[arg(long, value_enum, default_value = "both")]
    profile: ProfileArg,
    /// Seeds per configuration; tables show the median makespan.
    #[arg(long, default_value_t = 3)]
    seeds: u64,
    /// The dataset plan's seed (sizes and layout of the 1052 pairs).
    #[arg(long, default_value_t = 2008)]
    dataset_seed: u64,
    /// Where to write journals and plots of the simulated runs.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Pairs in the emulated run.
    #[arg(long, default_value_t = 40)]
    emulate_pairs: usize,
    /// Real seconds per modelled second in the emulated run.
    #[arg(long, default_value_t = 0.01)]
    emulate_scale: f64,
    /// Emulated runs per configuration; the table shows their median.
    #[arg(long, default_value_t = 1)]
    emulate_runs: usize,
}

/// Arguments of `supernova eval-site`, one site's process of an emulated run.
#[derive(Args)]
pub(crate) struct SiteArgs {
    /// The site this process plays.
    #[arg(long)]
    site: String,
    /// The master's address.
    #[arg(long)]
    join: String,
    /// The context configuration.
    #[arg(long)]
    placement: supernova::contexts::Placement,
}

/// Serves one site of an emulated run until its master leaves.
pub(crate) fn site(args: SiteArgs) -> Result<ExitCode> {
    eval::emulate::serve_site(&args.site, &args.join, args.placement)?;
    Ok(ExitCode::SUCCESS)
}

/// Runs the chosen evaluations and prints their tables.
pub(crate) fn main(args: EvalArgs) -> Result<ExitCode> {
    anyhow::ensure!(args.seeds >= 1, "--seeds must be at least 1");
    let seeds: Vec<u64> = (1..=args.seeds).collect();
    let manifest = scenarios::paper_dataset(args.dataset_seed);
    let base = StepModel::measured()?;
    let profiles: &[Profile] = match args.profile {
        ProfileArg::Measured => &Profile::BOTH[..1],
        ProfileArg::Paper => &Profile::BOTH[1..],
        ProfileArg::Both => &Profile::BOTH,
    };
    let all = args.what.contains(&What::All);
    let wants = |what: What| all || args.what.contains(&what);
    let journals = args.out.as_deref();
    let started = Instant::now();
    let scenario_fns: [(What, ScenarioFn); 3] = [
        (What::Scenario1, eval::scenario1),
        (What::Scenario2, eval::scenario2),
        (What::Scenario3, eval::scenario3),
    ];
    for (what, run) in scenario_fns {
        if !wants(what) {
            continue;
        }
        for &profile in profiles {
            let began = Instant::now();
            let table = run(&manifest, &base, profile, &seeds, journals)?;
            println!(
                "{table}({:.1} s to simulate)\n",
                began.elapsed().as_secs_f64()
            );
        }
    }
    if wants(What::Strategies) {
        strategies()?;
        saturation()?;
    }
    if wants(What::Failure) {
        failure()?;
    }
    if wants(What::Emulate) {
        anyhow::ensure!(
            args.emulate_scale.is_finite()
                && args.emulate_scale > 0.0
                && args.emulate_pairs > 0
                && args.emulate_runs > 0,
            "--emulate-scale, --emulate-pairs and --emulate-runs must be positive"
        );
        let exe = std::env::current_exe()?;
        let table = eval::emulation(
            &exe,
            &manifest,
            &base,
            args.emulate_pairs,
            args.emulate_scale,
            args.emulate_runs,
        )?;
        println!("{table}");
    }
    eprintln!("eval done in {:.1} s", started.elapsed().as_secs_f64());
    Ok(ExitCode::SUCCESS)
}

type ScenarioFn = fn(
    &supernova::manifest::Manifest,
    &StepModel,
    Profile,
    &[u64],
    Option<&std::path::Path>,
) -> Result<String>;

/// The three strategies at 100, 1,000 and 10,000 executors over 10 to 100
/// sites, 100 activities of 1 s on average per executor.
fn strategies() -> Result<()> {
    println!("Stealing strategies: a bag of 100 activities (0.5-1.5 s) per executor, nodes of 8 executors,");
    println!("submitted at the master on site 0; 2 ms and 1 MB/s per transfer between sites, 50 us within");
    let mut rows = Vec::new();
    for (executors, sites) in [(100, 10), (1000, 10), (1000, 100), (10_000, 100)] {
        let began = Instant::now();
        let setup = ComparisonSetup::new(executors, sites);
        let mut found = compare_strategies(&setup)?;
        // The other rules for hierarchical steals between sites, beside
        // the net driver's (doubling); at 10,000 executors the
        // idle-executors rule alone takes minutes to simulate.
        if executors <= 1_000 {
            for wide_steal in [WideSteal::IdleExecutors, WideSteal::MaxSteal] {
                found.push(compare_wide_steal(&setup, wide_steal)?);
            }
        }
        eprintln!(
            "  {executors} executors, {sites} sites: {:.1} s to simulate",
            began.elapsed().as_secs_f64()
        );
        rows.extend(found);
    }
    println!("{}", ComparisonRow::table(&rows));
    println!(
        "The same bags, but every site starts with an equal share (a seeding activity per site,"
    );
    println!(
        "which only that site runs, submits it there); master-worker left out: its workers never"
    );
    println!("steal from each other");
    let mut rows = Vec::new();
    for (executors, sites) in [(1000, 10), (1000, 100), (10_000, 100)] {
        let began = Instant::now();
        let mut setup = ComparisonSetup::new(executors, sites);
        setup.every_site = true;
        rows.push(compare_one(&setup, Strategy::Random)?);
        rows.push(compare_one(&setup, Strategy::Hierarchical)?);
        if executors <= 1_000 {
            rows.push(compare_wide_steal(&setup, WideSteal::IdleExecutors)?);
        }
        eprintln!(
            "  {executors} executors, {sites} sites, every site: {:.1} s to simulate",
            began.elapsed().as_secs_f64()
        );
    }
    println!("{}", ComparisonRow::table(&rows));
    Ok(())
}

/// What answering one steal request costs a node, from this machine's
/// benchmarks (README, *Benchmarks*): `net_event_rtt`'s median round trip
/// of 161 µs is two messages each received, handled and sent, so one
/// request costs about half of it; `net_steal` hands over 265,198
/// activities/s, 3.77 µs each. Both include the transport and the thief's
/// side, so they overstate the master's share: a real master saturates no
/// earlier than the table says.
const MEASURED_ANSWER_COST: AnswerCost = AnswerCost {
    per_request: 80.5e-6,
    per_activity: 3.77e-6,
};

/// Master-worker handing out one activity per request (as the paper's
/// master does, and the scenarios here) with the measured answer cost,
/// over pool sizes and activity lengths: where the master saturates.
/// Beside it the same runs with answering free, which leaves only the
/// round trip per activity: the difference is the saturation.
fn saturation() -> Result<()> {
    let cost = MEASURED_ANSWER_COST;
    println!(
        "Master saturation: master-worker, one activity per request, answering costs {:.1} us \
         per request + {:.2} us per activity (measured); 20 activities per executor \
         (0.5-1.5 x the mean), nodes of 8, 10 sites",
        cost.per_request * 1e6,
        cost.per_activity * 1e6
    );
    let mut rows = vec![vec![
        "executors".to_string(),
        "mean activity s".into(),
        "requests/s offered".into(),
        "master busy".into(),
        "efficiency".into(),
        "efficiency, answering free".into(),
    ]];
    for executors in [100, 1_000, 10_000] {
        for mean in [1.0, 0.1, 0.01] {
            let began = Instant::now();
            let mut setup = ComparisonSetup::new(executors, 10);
            setup.activities = executors * 20;
            setup.mean_seconds = mean;
            setup.max_steal = 1;
            let free = compare_one(&setup, Strategy::MasterWorker)?;
            setup.answer_cost = cost;
            let master = compare_one(&setup, Strategy::MasterWorker)?;
            eprintln!(
                "  saturation, {executors} executors, {mean} s activities: {:.1} s to simulate",
                began.elapsed().as_secs_f64()
            );
            // Every executor asks once per activity it finishes.
            let offered = executors as f64 / mean;
            rows.push(vec![
                executors.to_string(),
                mean.to_string(),
                format!("{offered:.0}"),
                format!("{:.0} %", 100.0 * master.master_busy),
                format!("{:.2}", master.efficiency),
                format!("{:.2}", free.efficiency),
            ]);
        }
    }
    print!("{}", eval::table(&rows));
    let capacity = 1.0 / cost.seconds(1);
    println!(
        "one master answers at most {capacity:.0} one-activity requests/s: it saturates where \
         executors / mean activity seconds approaches that\n"
    );
    Ok(())
}

/// A bag on 100 nodes of 8 executors; 10 of the nodes die at the middle of
/// the failure-free makespan.
fn failure() -> Result<()> {
    let setup = ComparisonSetup::new(800, 10);
    let workload: Workload = setup.workload();
    let healthy = setup.model(Strategy::Random);
    let calm = simulate(&healthy, &workload)?;
    let mut failing = healthy.clone();
    let middle = calm.makespan / 2.0;
    // Every tenth node, never the master (node 0) that holds the roots.
    for node in failing.nodes.iter_mut().skip(5).step_by(10) {
        node.dies_at = Some(middle);
    }
    let died = failing.nodes.iter().filter(|n| n.dies_at.is_some()).count();
    let stormy = simulate(&failing, &workload)?;
    let expected = workload.roots.len() as u64;
    println!(
        "Node failures: {} activities on {} nodes x 8 executors, random stealing; {died} nodes die at {middle:.1} s",
        expected,
        healthy.nodes.len()
    );
    let rows = vec![
        vec![
            "run".to_string(),
            "makespan s".into(),
            "completed".into(),
            "requeued".into(),
            "duplicates".into(),
            "lost".into(),
        ],
        vec![
            "no failures".into(),
            format!("{:.2}", calm.makespan),
            calm.completed.to_string(),
            calm.requeued.to_string(),
            calm.duplicates.to_string(),
            calm.lost.to_string(),
        ],
        vec![
            format!("{died} nodes die"),
            format!("{:.2}", stormy.makespan),
            stormy.completed.to_string(),
            stormy.requeued.to_string(),
            stormy.duplicates.to_string(),
            stormy.lost.to_string(),
        ],
    ];
    print!("{}", eval::table(&rows));
    let unique: std::collections::HashSet<_> = (stormy.records.iter())
        .filter(|r| r.outcome == constellation::sim::AttemptEnd::Completed)
        .map(|r| r.activity)
        .collect();
    anyhow::ensure!(
        unique.len() as u64 == expected && stormy.lost == 0,
        "work was lost: {} of {expected} activities completed",
        unique.len()
    );
    println!(
        "every one of the {expected} activities completed; the failures cost {:+.1}% of makespan\n",
        100.0 * (stormy.makespan / calm.makespan - 1.0)
    );
    Ok(())
}
