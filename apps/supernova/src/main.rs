//! The `supernova` command: make synthetic data, run the detection
//! pipeline on it in any of its three versions, score it, and run single
//! steps for the step scripts.

#![warn(unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context as _, Result};
mod eval_cmd;

use clap::{Args, Parser, Subcommand};
use report::run_dir::create_run_dir;

use supernova::catalog::{Candidate, Verdict};
use supernova::contexts::{Engine, Placement};
use supernova::generate::{self, GenerateConfig};
use supernova::graphfile::{self, GraphOptions};
use supernova::manifest::Manifest;
use supernova::memory;
use supernova::pipeline::PairOutcome;
use supernova::record::{RunJournal, StepTable};
use supernova::run::{self, RunOptions, RunRecord, Version};
use supernova::score;
use supernova::steps::{self, CopyPolicy, Epoch};
use supernova::truth::Truth;

/// Supernova detection on pairs of sky images, as a many-task application
/// on Constellation.
///
/// Quick start: `supernova demo` makes six pairs of synthetic images with
/// known supernovae, runs the many-task pipeline on all cores, and prints
/// the candidates, precision and recall, and the time per step.
///
/// With your own data layout: `supernova generate --out DATA`, then
/// `supernova run --data DATA --version many-task --placement locations-anywhere`.
/// `supernova graph` writes the same pipeline as a graph file of shell
/// scripts for `constellation run`.
#[derive(Parser)]
#[command(name = "supernova", version)]
struct Cli {
    /// The most memory one image's pixels may take, in MiB (4 bytes a
    /// pixel). An image over it, or over the memory available or the
    /// process's ulimit, fails its pair with a message instead of
    /// aborting the run; a header can claim any size, and a sparse file
    /// of that size takes no disk space.
    #[arg(
        long,
        global = true,
        value_name = "MIB",
        env = "SUPERNOVA_MAX_IMAGE_MIB",
        default_value_t = memory::DEFAULT_MAX_IMAGE_MIB,
        value_parser = clap::value_parser!(u64).range(1..=(u64::MAX >> 20))
    )]
    max_image_mib: u64,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate a small dataset and run the many-task pipeline on it.
    Demo(DemoArgs),
    /// Write a synthetic dataset: FITS pairs, manifest.json, truth.json.
    Generate(GenerateArgs),
    /// Run the pipeline over a dataset.
    Run(RunArgs),
    /// Score candidate lists against a dataset's truth.
    Score(ScoreArgs),
    /// Write the many-task pipeline as a graph file for `constellation run`.
    Graph(GraphArgs),
    /// Run one step on one pair's work directory (what the step scripts call).
    #[command(subcommand)]
    Step(StepCommand),
    /// Reproduce the paper's evaluation on the simulator, and study scale.
    Eval(eval_cmd::EvalArgs),
    /// One site's process of `eval emulate` (started by it).
    #[command(hide = true)]
    EvalSite(eval_cmd::SiteArgs),
}

#[derive(Args)]
struct GenerateArgs {
    /// Directory to write (created; must be empty or absent).
    #[arg(long)]
    out: PathBuf,
    /// Random seed: the same seed gives the same files.
    #[arg(long, default_value_t = GenerateConfig::default().seed)]
    seed: u64,
    /// Number of image pairs.
    #[arg(long, default_value_t = 6)]
    pairs: usize,
    /// Smallest image side, pixels.
    #[arg(long)]
    min_size: Option<usize>,
    /// Largest image side, pixels.
    #[arg(long)]
    max_size: Option<usize>,
}

#[derive(Args, Clone)]
struct PoolArgs {
    /// Which implementation: many-task (one activity per step, per tile
    /// for 7.2), monolithic (one activity per pair) or sequential (no
    /// platform, one thread).
    #[arg(long, default_value = "many-task")]
    version: Version,
    /// Context strategy (the paper's Table 1): anywhere, anywhere-sorted,
    /// location, location-sorted, locations, locations-anywhere. With
    /// location strategies executors are spread over the dataset's sites.
    #[arg(long, default_value = "anywhere-sorted")]
    placement: Placement,
    /// Where step 7.2's numeric work runs: cpu, or gpu (executors for
    /// every CUDA GPU are added; fails clearly where there is none).
    #[arg(long, default_value = "cpu")]
    step72: Engine,
    /// CPU executors (default: one per core; monolithic: cores / threads).
    #[arg(short = 'n', long)]
    executors: Option<usize>,
    /// Threads each monolithic activity may use (the executor tells it).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Emulate a wide-area link: copies from another site's storage run
    /// at this many MB/s (the paper used 1).
    #[arg(long)]
    wan_mbps: Option<f64>,
    /// Keep each pair's work directory (skip step 9).
    #[arg(long)]
    keep_work: bool,
    /// Process only the N largest pairs.
    #[arg(long)]
    largest: Option<usize>,
}

#[derive(Args)]
struct RunArgs {
    /// The dataset directory (from `supernova generate`).
    #[arg(long)]
    data: PathBuf,
    /// Where to put results, journal and plot (default
    /// supernova-runs/<version>-<UTC time>).
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    pool: PoolArgs,
}

#[derive(Args)]
struct DemoArgs {
    /// Directory for the data and the run (reused if it holds the same data).
    #[arg(long, default_value = "supernova-demo")]
    dir: PathBuf,
    /// Random seed of the data.
    #[arg(long, default_value_t = GenerateConfig::default().seed)]
    seed: u64,
    /// Number of pairs.
    #[arg(long, default_value_t = 6)]
    pairs: usize,
    #[command(flatten)]
    pool: PoolArgs,
}

#[derive(Args)]
struct ScoreArgs {
    /// The dataset directory (its truth.json).
    #[arg(long)]
    data: PathBuf,
    /// The directory of `<pair>.json` candidate lists.
    #[arg(long)]
    results: PathBuf,
    /// Supernovae below this S/N do not count against recall.
    #[arg(long, default_value_t = 5.0)]
    min_snr: f64,
}

#[derive(Args)]
struct GraphArgs {
    /// The dataset directory.
    #[arg(long)]
    data: PathBuf,
    /// The graph file to write.
    #[arg(long)]
    out: PathBuf,
    /// Where the work directories go.
    #[arg(long, default_value = "supernova-work")]
    work: PathBuf,
    /// Where candidate lists go.
    #[arg(long, default_value = "supernova-results")]
    results: PathBuf,
    /// The step scripts' directory (default: scripts/supernova beside the
    /// source tree this binary was built from).
    #[arg(long)]
    scripts: Option<PathBuf>,
    /// Context strategy for the nodes.
    #[arg(long, default_value = "anywhere")]
    placement: Placement,
}

#[derive(Subcommand)]
enum StepCommand {
    /// 1: copy a pair's images into its work directory.
    Prepare {
        #[arg(long)]
        data: PathBuf,
        #[arg(long)]
        pair: String,
        #[arg(long)]
        work: PathBuf,
        /// The site this runs at (default: $CONSTELLATION_SITE).
        #[arg(long, env = "CONSTELLATION_SITE")]
        site: Option<String>,
        /// MB/s for copies from another site.
        #[arg(long)]
        wan_mbps: Option<f64>,
    },
    /// 2, 3: detect objects in image a or b.
    Detect {
        #[arg(long)]
        work: PathBuf,
        #[arg(long)]
        epoch: Epoch,
    },
    /// 4: match the object lists and fit the transform.
    Align {
        #[arg(long)]
        work: PathBuf,
    },
    /// 5, 6: equalize image a or b.
    Equalize {
        #[arg(long)]
        work: PathBuf,
        #[arg(long)]
        epoch: Epoch,
    },
    /// 7.1: cut into tiles.
    Split {
        #[arg(long)]
        work: PathBuf,
    },
    /// 7.2: compare one tile pair (a tile 7.1 did not keep is skipped).
    Compare {
        #[arg(long)]
        work: PathBuf,
        #[arg(long)]
        tile: usize,
    },
    /// 7.3: merge the tiles' residuals.
    Recombine {
        #[arg(long)]
        work: PathBuf,
    },
    /// 8: extract the candidates.
    Extract {
        #[arg(long)]
        work: PathBuf,
        #[arg(long)]
        pair: String,
        #[arg(long)]
        results: PathBuf,
    },
    /// 9: remove the work directory.
    Cleanup {
        #[arg(long)]
        work: PathBuf,
    },
}

fn main() -> ExitCode {
    clitools::init_logging();
    let cli = Cli::parse();
    // A closed stdout (`score | head`) ends a command quietly instead of a
    // panic, except the evaluation's, whose emulated sites talk over
    // sockets (see exit_quietly_on_broken_pipe).
    if !matches!(cli.command, Command::Eval(_) | Command::EvalSite(_)) {
        clitools::exit_quietly_on_broken_pipe();
    }
    memory::set_max_image_bytes(cli.max_image_mib << 20);
    let outcome = match cli.command {
        Command::Demo(args) => demo(args),
        Command::Generate(args) => generate_cmd(args).map(|_| ExitCode::SUCCESS),
        Command::Run(args) => run_cmd(args),
        Command::Score(args) => score_cmd(args),
        Command::Graph(args) => graph_cmd(args).map(|_| ExitCode::SUCCESS),
        Command::Step(step) => step_cmd(step).map(|_| ExitCode::SUCCESS),
        Command::Eval(args) => eval_cmd::main(args),
        Command::EvalSite(args) => eval_cmd::site(args),
    };
    outcome.unwrap_or_else(|error| {
        eprintln!("error: {}", clitools::error_message(&error));
        ExitCode::from(2)
    })
}

fn generate_into(out: &Path, config: &GenerateConfig) -> Result<Manifest> {
    eprintln!(
        "generating {} pairs (seed {}) in {}",
        config.pairs,
        config.seed,
        out.display()
    );
    let mut last = std::time::Instant::now();
    let mut progress = |done: usize, total: usize| {
        if done == total || last.elapsed().as_secs_f64() > 2.0 {
            eprintln!("  {done}/{total} pairs written");
            last = std::time::Instant::now();
        }
    };
    let (manifest, _truth) = generate::generate(config, out, &mut progress)
        .with_context(|| format!("generating data in {}", out.display()))?;
    Ok(manifest)
}

fn generate_cmd(args: GenerateArgs) -> Result<Manifest> {
    if args.out.exists() && args.out.read_dir()?.next().is_some() {
        bail!(
            "{} exists and is not empty; choose a new directory, so no data is overwritten",
            args.out.display()
        );
    }
    let mut config = GenerateConfig {
        seed: args.seed,
        pairs: args.pairs,
        ..GenerateConfig::default()
    };
    if let Some(min) = args.min_size {
        config.min_size = min;
    }
    if let Some(max) = args.max_size {
        config.max_size = max;
    }
    if config.pairs == 0 || config.min_size > config.max_size || config.min_size < 64 {
        bail!(
            "want at least one pair and 64 <= --min-size <= --max-size (got {} pairs, sizes {}..={})",
            config.pairs,
            config.min_size,
            config.max_size
        );
    }
    generate_into(&args.out, &config)
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Runs `pool` options over `data`, writing into `out`; prints everything.
fn run_and_report(data: &Path, out: &Path, pool: &PoolArgs) -> Result<bool> {
    let manifest = Manifest::load(data).with_context(|| {
        format!(
            "reading the dataset in {}; make one with `supernova generate --out {}`",
            data.display(),
            data.display()
        )
    })?;
    let pairs = match pool.largest {
        Some(n) => manifest.largest(n).into_iter().cloned().collect(),
        None => manifest.pairs.clone(),
    };
    if pairs.is_empty() {
        bail!("the dataset in {} lists no pairs", data.display());
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let executors = pool.executors.unwrap_or(match pool.version {
        Version::Monolithic => (cores() / pool.threads.max(1)).max(1),
        _ => cores(),
    });
    let options = RunOptions {
        dataset: data.to_path_buf(),
        work_root: out.join("work"),
        results: out.join("results"),
        version: pool.version,
        placement: pool.placement,
        engine: pool.step72,
        executors,
        threads: pool.threads,
        wan_bytes_per_second: pool.wan_mbps.map(|m| m * 1e6),
        keep_work: pool.keep_work,
    };
    eprintln!(
        "running the {} version on {} pairs: placement {}, step 7.2 on {:?}, {} executor(s){}",
        pool.version,
        pairs.len(),
        pool.placement,
        pool.step72,
        if pool.version == Version::Sequential {
            1
        } else {
            executors
        },
        if pool.version == Version::Monolithic {
            format!(" x {} threads", pool.threads)
        } else {
            String::new()
        }
    );
    let mut progress = |o: &PairOutcome, done: usize, total: usize| match &o.result {
        Ok(c) => {
            let supernovae = c.iter().filter(|c| c.verdict == Verdict::Supernova).count();
            let seconds = o.steps.last().map_or(0.0, |l| l.ended)
                - o.steps.first().map_or(0.0, |f| f.started);
            eprintln!(
                "  [{done}/{total}] {}: {supernovae} supernova candidates, {} variables ({seconds:.1} s)",
                o.pair,
                c.len() - supernovae
            );
        }
        Err(e) => eprintln!("  [{done}/{total}] {}: FAILED: {e}", o.pair),
    };
    let journal = out.join("journal.db");
    let description = format!("supernova {} {}", pool.version, data.display());
    let run_journal = RunJournal::begin(&journal, &description)
        .with_context(|| format!("creating {}", journal.display()))?;
    let record = run::run(&manifest, &pairs, &options, &mut progress)?;
    print_candidates(&record);
    let ok = print_score(data, &record)?;
    println!("\ntime per step ({} version):", pool.version);
    println!("{}", StepTable::of(&record));
    run_journal
        .finish(&record, pool.version)
        .with_context(|| format!("writing {}", journal.display()))?;
    let plot = out.join("utilization.png");
    let report = report::Report::from_journal(&journal::Journal::open(&journal)?, None)?;
    report::plot(&report, &plot)?;
    println!(
        "\njournal {}\nplot    {}",
        journal.display(),
        plot.display()
    );
    println!("results {}", options.results.display());
    let failed = print_failures(&record);
    Ok(ok && failed == 0)
}

/// Ends the summary with each failed pair and why it failed, so the reason
/// is on the terminal beside the counts and not only in the progress lines
/// above (long gone on a big run) or the journal. Returns how many failed.
fn print_failures(record: &RunRecord) -> usize {
    let failed: Vec<(&str, &str)> = (record.outcomes.iter())
        .filter_map(|o| {
            o.result
                .as_ref()
                .err()
                .map(|e| (o.pair.as_str(), e.as_str()))
        })
        .collect();
    if !failed.is_empty() {
        let names: Vec<&str> = failed.iter().map(|(pair, _)| *pair).collect();
        eprintln!(
            "{} of {} pairs failed ({}):",
            failed.len(),
            record.outcomes.len(),
            names.join(", ")
        );
        for (pair, reason) in &failed {
            eprintln!("  {pair}: {reason}");
        }
    }
    failed.len()
}

fn print_candidates(record: &RunRecord) {
    let all: Vec<&Candidate> = record
        .outcomes
        .iter()
        .filter_map(|o| o.result.as_ref().ok())
        .flatten()
        .filter(|c| c.verdict == Verdict::Supernova)
        .collect();
    println!("\nsupernova candidates: {}", all.len());
    println!(
        "{:<10} {:>8} {:>8} {:>10} {:>7}",
        "pair", "x", "y", "flux", "S/N"
    );
    const SHOWN: usize = 30;
    for c in all.iter().take(SHOWN) {
        println!(
            "{:<10} {:>8.2} {:>8.2} {:>10.0} {:>7.1}",
            c.pair, c.x, c.y, c.flux, c.snr
        );
    }
    if all.len() > SHOWN {
        println!(
            "... and {} more in the results directory",
            all.len() - SHOWN
        );
    }
}

/// Prints precision and recall if the dataset has a truth catalogue;
/// whether the targets (0.9 each) were met.
fn print_score(data: &Path, record: &RunRecord) -> Result<bool> {
    let truth_path = data.join("truth.json");
    if !truth_path.exists() {
        println!("\nno truth.json in {}: not scored", data.display());
        return Ok(true);
    }
    let truth = Truth::load(data)?;
    let candidates: Vec<Candidate> = record
        .outcomes
        .iter()
        .filter_map(|o| o.result.as_ref().ok())
        .flatten()
        .cloned()
        .collect();
    let pairs: Vec<String> = record.outcomes.iter().map(|o| o.pair.clone()).collect();
    let scored = score::score(&candidates, &truth, &pairs, 2.5, 5.0);
    println!("\nagainst the injected truth:\n{scored}");
    Ok(true)
}

fn run_cmd(args: RunArgs) -> Result<ExitCode> {
    // A directory made for this run alone: two runs started in the same
    // second must not share a journal.
    let out = match args.out {
        Some(out) => out,
        None => create_run_dir(Path::new("supernova-runs"), &args.pool.version.to_string())?,
    };
    let ok = run_and_report(&args.data, &out, &args.pool)?;
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn demo(args: DemoArgs) -> Result<ExitCode> {
    let data = args.dir.join("data");
    let config = GenerateConfig {
        seed: args.seed,
        pairs: args.pairs,
        ..GenerateConfig::default()
    };
    let reusable = Manifest::load(&data)
        .map(|m| m == Manifest::plan(&config))
        .unwrap_or(false);
    if reusable {
        eprintln!("reusing the data in {}", data.display());
    } else {
        if data.exists() {
            std::fs::remove_dir_all(&data)
                .with_context(|| format!("replacing the old demo data in {}", data.display()))?;
        }
        generate_into(&data, &config)?;
    }
    let out = create_run_dir(&args.dir, "run")?;
    let ok = run_and_report(&data, &out, &args.pool)?;
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn score_cmd(args: ScoreArgs) -> Result<ExitCode> {
    let truth = Truth::load(&args.data)?;
    let manifest = Manifest::load(&args.data)?;
    let mut candidates = Vec::new();
    let mut pairs = Vec::new();
    for pair in &manifest.pairs {
        let path = args.results.join(format!("{}.json", pair.id));
        if !path.exists() {
            continue;
        }
        let text = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let list: Vec<Candidate> = serde_json::from_slice(&text)
            .with_context(|| format!("{} is not a candidate list", path.display()))?;
        candidates.extend(list);
        pairs.push(pair.id.clone());
    }
    if pairs.is_empty() {
        bail!(
            "no <pair>.json candidate lists in {} for the pairs of {}",
            args.results.display(),
            args.data.display()
        );
    }
    let scored = score::score(&candidates, &truth, &pairs, 2.5, args.min_snr);
    println!("{} pairs scored\n{scored}", pairs.len());
    Ok(ExitCode::SUCCESS)
}

fn graph_cmd(args: GraphArgs) -> Result<()> {
    let manifest = Manifest::load(&args.data)?;
    let absolute = |p: &Path| -> Result<PathBuf> {
        Ok(if p.is_absolute() {
            p.to_path_buf()
        } else {
            std::env::current_dir()?.join(p)
        })
    };
    let scripts = match args.scripts {
        Some(s) => s,
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/supernova"),
    };
    if !scripts.join("detect.sh").exists() {
        bail!(
            "no step scripts in {}; point --scripts at the repository's scripts/supernova",
            scripts.display()
        );
    }
    let options = GraphOptions {
        dataset: absolute(&args.data)?,
        work_root: absolute(&args.work)?,
        results: absolute(&args.results)?,
        scripts: absolute(&scripts)?.canonicalize()?,
        binary: std::env::current_exe()?,
        placement: args.placement,
    };
    std::fs::write(&args.out, graphfile::graph(&manifest, &options))
        .with_context(|| format!("writing {}", args.out.display()))?;
    eprintln!(
        "wrote {} ({} pairs); run it with `constellation run {}`",
        args.out.display(),
        manifest.pairs.len(),
        args.out.display()
    );
    Ok(())
}

fn step_cmd(step: StepCommand) -> Result<()> {
    match step {
        StepCommand::Prepare {
            data,
            pair,
            work,
            site,
            wan_mbps,
        } => {
            let manifest = Manifest::load(&data)?;
            let Some(entry) = manifest.pairs.iter().find(|p| p.id == pair) else {
                bail!(
                    "{} lists no pair `{pair}`",
                    data.join("manifest.json").display()
                );
            };
            let policy = CopyPolicy {
                executor_site: site,
                wan_bytes_per_second: wan_mbps.map(|m| m * 1e6),
            };
            let prepared = steps::prepare(&data, entry, &policy, &work)?;
            eprintln!(
                "copied {} bytes from site {}{}",
                prepared.bytes,
                prepared.site,
                if prepared.remote { " (remote)" } else { "" }
            );
        }
        StepCommand::Detect { work, epoch } => {
            let found = steps::detect(&work, epoch)?;
            eprintln!(
                "{} objects, seeing {:.2} px",
                found.sources.len(),
                found.seeing_fwhm
            );
        }
        StepCommand::Align { work } => {
            let a = steps::align(&work)?;
            eprintln!("{} stars matched, rms {:.3} px", a.matched, a.rms);
        }
        StepCommand::Equalize { work, epoch } => steps::equalize(&work, epoch)?,
        StepCommand::Split { work } => {
            let plan = steps::split(&work)?;
            eprintln!("kept {} of {} tiles", plan.tiles.len(), plan.total_tiles);
        }
        StepCommand::Compare { work, tile } => {
            let plan = steps::tile_plan(&work)?;
            if plan.tiles.iter().any(|t| t.index == tile) {
                let residuals = steps::compare(&work, tile)?;
                eprintln!("{} residuals", residuals.len());
            } else if tile < plan.total_tiles {
                eprintln!(
                    "tile {tile} was not kept by step 7.1 (too few candidates): nothing to do"
                );
            } else {
                bail!(
                    "tile {tile} does not exist: the image has {} tiles",
                    plan.total_tiles
                );
            }
        }
        StepCommand::Recombine { work } => {
            let merged = steps::recombine(&work)?;
            eprintln!("{} residuals", merged.len());
        }
        StepCommand::Extract {
            work,
            pair,
            results,
        } => {
            let found = steps::extract(&work, &pair, &results)?;
            eprintln!("{} candidates", found.len());
        }
        StepCommand::Cleanup { work } => steps::cleanup(&work)?,
    }
    Ok(())
}
