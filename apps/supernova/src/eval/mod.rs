//! The paper's evaluation, reproduced on the simulator (`supernova eval`).
//!
//! [`steps`] is the workload model, [`scenarios`] builds each scenario's
//! platform and application, [`journal`] writes a simulated run as a run
//! journal, and this module runs the scenarios and prints tables shaped
//! like the paper's, next to the paper's figures.

pub mod emulate;
pub mod journal;
pub mod scenarios;
pub mod steps;

use std::fmt::Write as _;
use std::path::Path;

use constellation::sim::{simulate, Model, SimError, SimReport, Workload};

use crate::contexts::Placement;
use crate::manifest::Manifest;
use scenarios::Compare;
use steps::StepModel;

/// Which step profile a scenario runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// Our pipeline's measured step times (7.2 a few per cent of a pair).
    Measured,
    /// The same, with 7.2 weighted to 90 % of a pair, as in the paper.
    Paper,
}

impl Profile {
    /// Both, ours first.
    pub const BOTH: [Profile; 2] = [Profile::Measured, Profile::Paper];

    /// How tables name it.
    pub fn name(self) -> &'static str {
        match self {
            Profile::Measured => "measured",
            Profile::Paper => "paper",
        }
    }

    /// The step model of this profile for `manifest`, calibrated.
    pub fn model(self, base: &StepModel, manifest: &Manifest) -> StepModel {
        let model = match self {
            Profile::Measured => base.clone(),
            Profile::Paper => base.clone().paper_profile(&manifest.pairs),
        };
        model.calibrated(&manifest.pairs)
    }
}

/// One simulated configuration, over several seeds.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The configuration's name.
    pub name: String,
    /// Makespan per seed, seconds.
    pub makespans: Vec<f64>,
    /// The report of the first seed.
    pub first: SimReport,
}

impl Outcome {
    /// The median makespan.
    pub fn median(&self) -> f64 {
        median(&self.makespans)
    }

    /// Busy executor time over executors × makespan, first seed.
    pub fn utilization(&self) -> f64 {
        let busy: f64 = self.first.executors.iter().map(|e| e.busy).sum();
        let capacity = self.first.executors.len() as f64 * self.first.makespan;
        if capacity > 0.0 {
            busy / capacity
        } else {
            0.0
        }
    }
}

/// The median of `values` (0 for none).
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// Simulates `build(seed)` for every seed; writes the first seed's run as
/// a journal `<journals>/<file>.db` when asked.
pub fn run_seeds(
    name: &str,
    seeds: &[u64],
    journals: Option<&Path>,
    file: &str,
    build: impl Fn(u64) -> (Model, Workload),
) -> anyhow::Result<Outcome> {
    let mut makespans = Vec::new();
    let mut first = None;
    for &seed in seeds {
        let began = std::time::Instant::now();
        let (model, workload) = build(seed);
        let report =
            simulate(&model, &workload).map_err(|e: SimError| anyhow::anyhow!("{name}: {e}"))?;
        // Progress: a scenario runs dozens of these.
        eprintln!(
            "  {name}, seed {seed}: makespan {:.0} s ({} attempts, simulated in {:.1} s)",
            report.makespan,
            report.records.len(),
            began.elapsed().as_secs_f64()
        );
        anyhow::ensure!(
            report.lost == 0,
            "{name}: {} activities were lost",
            report.lost
        );
        makespans.push(report.makespan);
        first.get_or_insert(report);
    }
    let first = first.ok_or_else(|| anyhow::anyhow!("no seeds given"))?;
    if let Some(dir) = journals {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("{file}.db"));
        let _ = std::fs::remove_file(&path);
        journal::write(&first, &path, name)?;
        let report = report::Report::from_journal(&::journal::Journal::open(&path)?, None)?;
        report::plot(&report, &dir.join(format!("{file}.png")))?;
    }
    Ok(Outcome {
        name: name.to_string(),
        makespans,
        first,
    })
}

/// Scenario 1's four configurations, with the paper's Table 3.
pub const SCENARIO1: [(Placement, &str, f64); 4] = [
    (Placement::Anywhere, "anywhere", 1942.0),
    (Placement::AnywhereSorted, "anywhere, sorted", 1721.0),
    (Placement::Locations, "location sorted", 1774.0),
    (
        Placement::LocationsAnywhere,
        "location sorted + anywhere",
        1416.0,
    ),
];

/// Runs scenario 1 and renders its table.
pub fn scenario1(
    manifest: &Manifest,
    base: &StepModel,
    profile: Profile,
    seeds: &[u64],
    journals: Option<&Path>,
) -> anyhow::Result<String> {
    let steps = profile.model(base, manifest);
    let mut out = String::new();
    writeln!(
        out,
        "Scenario 1: four clusters (LU 20x2, UvA 20x4, VU3 20x4, VU4 20x8 cores), {} pairs, \
         monolithic, 1 MB/s per inter-site copy; profile {} (7.2 = {:.0}% of a pair), \
         median of {} seeds",
        manifest.pairs.len(),
        profile.name(),
        100.0 * steps.compare_share(&manifest.pairs),
        seeds.len()
    )?;
    let mut rows = vec![row(&[
        "configuration",
        "simulated s",
        "vs first",
        "paper s",
        "vs first",
        "remote copies",
        "executors busy",
    ])];
    let mut first = None;
    for (placement, name, paper) in SCENARIO1 {
        let file = format!("scenario1-{}-{}", profile.name(), placement.name());
        let outcome = run_seeds(name, seeds, journals, &file, |seed| {
            scenarios::scenario1(manifest, &steps, placement, seed)
        })?;
        let (sim0, paper0) = *first.get_or_insert((outcome.median(), paper));
        rows.push(vec![
            name.to_string(),
            format!("{:.0}", outcome.median()),
            percent(outcome.median() / sim0 - 1.0),
            format!("{paper:.0}"),
            percent(paper / paper0 - 1.0),
            outcome.first.messages.wide_area_transfers.to_string(),
            format!("{:.0}%", 100.0 * outcome.utilization()),
        ]);
    }
    out.push_str(&table(&rows));
    Ok(out)
}

/// Runs scenario 2 (the 30 largest pairs on one 48-core machine, then all
/// pairs for 6/8 against many-task) and renders its table.
pub fn scenario2(
    manifest: &Manifest,
    base: &StepModel,
    profile: Profile,
    seeds: &[u64],
    journals: Option<&Path>,
) -> anyhow::Result<String> {
    let steps = profile.model(base, manifest);
    let largest = scenarios::largest(manifest, 30);
    let sequential: Vec<f64> = largest
        .iter()
        .map(|p| steps.sequential_seconds(p))
        .collect();
    let mut out = String::new();
    writeln!(
        out,
        "Scenario 2: one 48-core machine, the 30 largest pairs (sequential {:.0}-{:.0} s, mean {:.0} s; \
         paper 65-1040, mean 820); profile {}, median of {} seeds",
        sequential.iter().copied().fold(f64::INFINITY, f64::min),
        sequential.iter().copied().fold(0.0, f64::max),
        sequential.iter().sum::<f64>() / sequential.len().max(1) as f64,
        profile.name(),
        seeds.len()
    )?;
    let mut rows = vec![row(&["executors/cores", "simulated s", "cores busy"])];
    let mut best: Option<(String, f64)> = None;
    for (executors, cores) in scenarios::SCENARIO2_CONFIGS {
        let name = format!("{executors}/{cores}");
        let file = format!("scenario2-{}-{executors}x{cores}", profile.name());
        let outcome = run_seeds(&name, seeds, journals, &file, |seed| {
            scenarios::scenario2_monolithic(&largest, &steps, executors, cores, seed)
        })?;
        let seconds = outcome.median();
        if best.as_ref().is_none_or(|b| seconds < b.1) {
            best = Some((name.clone(), seconds));
        }
        rows.push(vec![
            name,
            format!("{seconds:.0}"),
            core_share(&outcome, &steps, &largest),
        ]);
    }
    let many = run_seeds(
        "many-task",
        seeds,
        journals,
        &format!("scenario2-{}-many-task", profile.name()),
        |seed| scenarios::scenario2_many_task(&largest, &steps, seed),
    )?;
    rows.push(vec![
        "many-task 48/1".into(),
        format!("{:.0}", many.median()),
        core_share(&many, &steps, &largest),
    ]);
    out.push_str(&table(&rows));
    let (best_name, best_seconds) = best.unwrap_or_default();
    writeln!(
        out,
        "best monolithic: {best_name} (paper: 6/8); many-task is {} than it (paper: 20% better)",
        better(best_seconds, many.median())
    )?;
    // All pairs: the paper's 9043 s (6/8) against 5243 s (many-task).
    let all = &manifest.pairs;
    let mono = run_seeds("6/8, all pairs", &seeds[..1], None, "", |seed| {
        scenarios::scenario2_monolithic(all, &steps, 6, 8, seed)
    })?;
    let many_all = run_seeds("many-task, all pairs", &seeds[..1], None, "", |seed| {
        scenarios::scenario2_many_task(all, &steps, seed)
    })?;
    writeln!(
        out,
        "all {} pairs: 6/8 {:.0} s, many-task {:.0} s: many-task {} (paper: 9043 s against 5243 s, 42% better)",
        all.len(),
        mono.median(),
        many_all.median(),
        better(mono.median(), many_all.median())
    )?;
    Ok(out)
}

/// Scenario 3's GPU assumptions: the share of 7.2 that moves to the GPU,
/// and how much faster a GPU runs it than one core.
pub const GPU_SHARE: f64 = 0.8;
/// See [`GPU_SHARE`].
pub const GPU_SPEEDUP: f64 = 10.0;

/// Runs scenario 3 (CPU-only against 7.2 on the GPU) and renders its table.
pub fn scenario3(
    manifest: &Manifest,
    base: &StepModel,
    profile: Profile,
    seeds: &[u64],
    journals: Option<&Path>,
) -> anyhow::Result<String> {
    let steps = profile.model(base, manifest);
    let mut out = String::new();
    writeln!(
        out,
        "Scenario 3: 18 nodes x 8 cores, many-task, all {} pairs; GPU: 7 cpu + 1 gpu executor per node, \
         {:.0}% of 7.2 on the GPU at {GPU_SPEEDUP}x one core; profile {}, median of {} seeds",
        manifest.pairs.len(),
        100.0 * GPU_SHARE,
        profile.name(),
        seeds.len()
    )?;
    let mut rows = vec![row(&[
        "configuration",
        "simulated s",
        "paper s",
        "executors busy",
    ])];
    let configs = [
        ("CPU only", Compare::Cpu, 1740.0, "cpu"),
        (
            "7.2 on the GPU",
            Compare::Gpu {
                gpu_share: GPU_SHARE,
                speedup: GPU_SPEEDUP,
            },
            765.0,
            "gpu",
        ),
    ];
    let mut seconds = Vec::new();
    for (name, compare, paper, file) in configs {
        let file = format!("scenario3-{}-{file}", profile.name());
        let outcome = run_seeds(name, seeds, journals, &file, |seed| {
            scenarios::scenario3(manifest, &steps, compare, seed)
        })?;
        seconds.push(outcome.median());
        rows.push(vec![
            name.to_string(),
            format!("{:.0}", outcome.median()),
            format!("{paper:.0}"),
            format!("{:.0}%", 100.0 * outcome.utilization()),
        ]);
    }
    out.push_str(&table(&rows));
    writeln!(
        out,
        "speedup with the GPUs: {:.2}x (paper: {:.2}x)",
        seconds[0] / seconds[1],
        1740.0 / 765.0
    )?;
    // The GPU's speed is an assumption: show what the result hangs on.
    let mut rows = vec![row(&[
        "GPU vs one core",
        "simulated s",
        "speedup over CPU only",
    ])];
    for speedup in [5.0, 10.0, 20.0, 40.0] {
        let compare = Compare::Gpu {
            gpu_share: GPU_SHARE,
            speedup,
        };
        let outcome = run_seeds(&format!("GPU {speedup}x"), &seeds[..1], None, "", |seed| {
            scenarios::scenario3(manifest, &steps, compare, seed)
        })?;
        rows.push(vec![
            format!("{speedup}x"),
            format!("{:.0}", outcome.median()),
            format!("{:.2}x", seconds[0] / outcome.median()),
        ]);
    }
    writeln!(out, "sensitivity to the GPU's speed (first seed):")?;
    out.push_str(&table(&rows));
    Ok(out)
}

/// Core utilization of a run on the 48-core machine: work done over
/// 48 cores × makespan.
fn core_share(
    outcome: &Outcome,
    steps: &StepModel,
    pairs: &[crate::manifest::PairEntry],
) -> String {
    let work: f64 = pairs.iter().map(|p| steps.sequential_seconds(p)).sum();
    format!("{:.0}%", 100.0 * work / (48.0 * outcome.median()))
}

fn better(baseline: f64, seconds: f64) -> String {
    let gain = 1.0 - seconds / baseline;
    if gain >= 0.0 {
        format!("{:.0}% better", 100.0 * gain)
    } else {
        format!("{:.0}% worse", -100.0 * gain)
    }
}

fn percent(change: f64) -> String {
    format!("{:+.0}%", 100.0 * change)
}

fn row(cells: &[&str]) -> Vec<String> {
    cells.iter().map(|c| c.to_string()).collect()
}

/// Columns padded to their widest cell, two spaces apart.
pub fn table(rows: &[Vec<String>]) -> String {
    clitools::columns(rows)
}

/// Seeds the simulator runs each emulated configuration with: they draw
/// the order in which the sites' first requests reach the master, which
/// the real run leaves to chance.
pub const EMULATION_SEEDS: u64 = 20;

/// Scenario 1 at reduced scale on the real runtime (one process per site
/// on loopback, activities sleeping their modelled time, scaled), `runs`
/// times per configuration, against the simulator on the same platform
/// over [`EMULATION_SEEDS`] seeds; renders the comparison.
///
/// With a few dozen pairs, which executor happens to take the last large
/// pair sets the makespan, so single runs of either side differ by tens of
/// per cent; the table shows both sides' spread and compares medians.
pub fn emulation(
    exe: &Path,
    manifest: &Manifest,
    base: &StepModel,
    pairs: usize,
    scale: f64,
    runs: usize,
) -> anyhow::Result<String> {
    let steps = Profile::Paper.model(base, manifest);
    let chosen = emulate::pairs(manifest, pairs);
    let mut out = String::new();
    writeln!(
        out,
        "Emulation: scenario 1 with 2 nodes per cluster ({} executors), {} pairs, profile paper, \
         real runtime on loopback (one process per site), time scaled by {scale}; \
         simulated over {EMULATION_SEEDS} seeds, emulated {runs} time(s)",
        emulate::SITES.iter().map(|s| s.1).sum::<usize>(),
        chosen.len()
    )?;
    let mut rows = vec![row(&[
        "configuration",
        "simulated s",
        "simulated range",
        "emulated s",
        "emulated runs",
        "difference",
    ])];
    for (placement, name, _) in SCENARIO1 {
        let mut simulated = Vec::new();
        for seed in 1..=EMULATION_SEEDS {
            let (model, workload) = emulate::simulated(&chosen, &steps, placement, seed, scale);
            simulated.push(simulate(&model, &workload)?.makespan);
        }
        let mut emulated = Vec::new();
        for run in 1..=runs {
            let began = std::time::Instant::now();
            let makespan = emulate::emulate(exe, &chosen, &steps, placement, scale)?;
            eprintln!(
                "  {name}, run {run}: emulated {makespan:.0} s (ran {:.1} s)",
                began.elapsed().as_secs_f64()
            );
            emulated.push(makespan);
        }
        let (low, high) = range(&simulated);
        let (sim_median, emu_median) = (median(&simulated), median(&emulated));
        let (emu_low, emu_high) = range(&emulated);
        rows.push(vec![
            name.to_string(),
            format!("{sim_median:.0}"),
            format!("{low:.0}-{high:.0}"),
            format!("{emu_median:.0}"),
            if runs > 1 {
                format!("{emu_low:.0}-{emu_high:.0}")
            } else {
                format!("{emu_low:.0}")
            },
            percent(emu_median / sim_median - 1.0),
        ]);
    }
    out.push_str(&table(&rows));
    Ok(out)
}

/// The smallest and largest of `values`.
fn range(values: &[f64]) -> (f64, f64) {
    (values.iter().copied()).fold((f64::INFINITY, f64::NEG_INFINITY), |(low, high), v| {
        (low.min(v), high.max(v))
    })
}
