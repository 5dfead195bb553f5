//! The benchmarks behind `scripts/bench.sh`. Each prints one JSON line:
//! `{"bench":NAME,"value":X,"unit":U,"higher_is_better":B}`, where the value
//! is the median of `BENCH_RUNS` runs (default 5); every run's figure goes to
//! stderr.

use std::time::Instant;

use anyhow::{bail, Result};
use constellation::collect::{MultiEventCollector, SingleEventCollector};
use constellation::core::{Origin, Scheduler, Submission};
use constellation::id::IdIssuer;
use constellation::{Activity, ContextList, ExecutorContext, NodeId, Pool};
use constellation_workloads::{fib_activities, Fib, Player, Trivial};
use executors::shell::{ShellActivity, ShellResult, ShellSpec};

const NAMES: [&str; 6] = [
    "local_spawn",
    "local_fib",
    "local_pingpong",
    "queued_bytes",
    "shell_true",
    "graph_chains",
];

fn main() -> Result<()> {
    let requested: Vec<String> = std::env::args().skip(1).collect();
    let selected: Vec<&str> = if requested.is_empty() {
        NAMES.to_vec()
    } else {
        for name in &requested {
            if !NAMES.contains(&name.as_str()) {
                bail!("unknown benchmark {name:?}; known: {}", NAMES.join(", "));
            }
        }
        requested.iter().map(String::as_str).collect()
    };
    let runs: usize =
        match std::env::var("BENCH_RUNS") {
            Ok(text) => text.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                anyhow::anyhow!("BENCH_RUNS must be a positive number, not {text:?}")
            })?,
            Err(_) => 5,
        };
    for name in selected {
        if name == "shell_true" {
            shell_true(10_000, runs)?;
            continue;
        }
        if name == "graph_chains" {
            graph_chains(100, 100, runs)?;
            continue;
        }
        let mut values = Vec::with_capacity(runs);
        let mut unit_and_direction = ("", true);
        for run in 1..=runs {
            let (value, unit, higher_is_better) = match name {
                "local_spawn" => (local_spawn(1_000_000)?, "activities/s", true),
                "local_fib" => (local_fib(30)?, "activities/s", true),
                "local_pingpong" => (local_pingpong(1_000_000)?, "events/s", true),
                // Memory is only meaningful in a fresh heap: one run per process.
                "queued_bytes" if run == 1 => (queued_bytes(1_000_000)?, "bytes/activity", false),
                "queued_bytes" => break,
                _ => unreachable!("checked above"),
            };
            eprintln!("{name} run {run}: {value:.1} {unit}");
            values.push(value);
            unit_and_direction = (unit, higher_is_better);
        }
        let median = median(&mut values);
        let (unit, higher_is_better) = unit_and_direction;
        println!(
            r#"{{"bench":"{name}","value":{median:.1},"unit":"{unit}","higher_is_better":{higher_is_better}}}"#
        );
    }
    Ok(())
}

/// The middle value of a non-empty set of runs.
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// `chains` independent chains of `length` activities running `true`, as a
/// graph file run by the `constellation` command (built next to this
/// binary) on its embedded pool with 2 executors: parsing, the journal and
/// the coordinator included, as a user would run it. The run's directory,
/// journal and output files are on tmpfs (`/dev/shm` or `BENCH_SCRATCH`).
fn graph_chains(chains: usize, length: usize, runs: usize) -> Result<()> {
    let exe = std::env::current_exe()?.with_file_name("constellation");
    if !exe.exists() {
        bail!(
            "{} is missing: build it with `cargo build --release -p gluein --bin constellation`",
            exe.display()
        );
    }
    let scratch = std::env::var_os("BENCH_SCRATCH")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("/dev/shm"))
        .join(format!("constellation-bench-graph-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let mut graph = String::new();
    for chain in 0..chains {
        for step in 0..length {
            graph.push_str(&format!(
                "[[activity]]\nid = \"c{chain}-{step}\"\ncommand = \"true\"\n"
            ));
            if step > 0 {
                graph.push_str(&format!("after = [\"c{chain}-{}\"]\n", step - 1));
            }
        }
    }
    std::fs::write(scratch.join("chains.toml"), graph)?;
    let activities = (chains * length) as f64;
    let mut seconds = Vec::with_capacity(runs);
    let mut rates = Vec::with_capacity(runs);
    for run in 1..=runs {
        let journal = format!("run-{run}/journal.db");
        let started = Instant::now();
        let output = std::process::Command::new(&exe)
            .args(["run", "chains.toml", "-n", "2", "--progress", "none"])
            .args(["--journal", &journal])
            .current_dir(&scratch)
            .output()?;
        let wall = started.elapsed().as_secs_f64();
        if !output.status.success() {
            bail!(
                "constellation run failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::fs::remove_dir_all(scratch.join(format!("run-{run}")))?;
        eprintln!(
            "graph_chains run {run}: {wall:.2} s, {:.0} activities/s",
            activities / wall
        );
        seconds.push(wall);
        rates.push(activities / wall);
    }
    std::fs::remove_dir_all(&scratch)?;
    println!(
        r#"{{"bench":"graph_chains","value":{:.3},"unit":"s","higher_is_better":false,"activities":{activities},"activities_per_s":{:.1}}}"#,
        median(&mut seconds),
        median(&mut rates)
    );
    Ok(())
}

/// `count` shell activities running `true` on 2 executors, against the
/// fork/exec ceiling: a plain loop spawning `true` `count` times, 2 at a
/// time. Output goes to files, the default: once on node-local tmpfs
/// (`/dev/shm`, or `BENCH_SCRATCH`), as a compute node's scratch, and once
/// on the disk under `target/`, where every file creation costs what this
/// machine's disk charges. The three alternate within each run, so a noisy
/// moment hurts all of them; ratios are medians of the per-run ratios.
fn shell_true(count: usize, runs: usize) -> Result<()> {
    let scratch = std::env::var_os("BENCH_SCRATCH")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("/dev/shm"));
    let tag = format!("constellation-bench-{}", std::process::id());
    let places = [
        ("shell_true", scratch.join(&tag)),
        (
            "shell_true_disk",
            std::path::PathBuf::from("target").join(&tag),
        ),
    ];
    let mut ceilings = Vec::with_capacity(runs);
    let mut rates = vec![Vec::with_capacity(runs); places.len()];
    let mut ratios = vec![Vec::with_capacity(runs); places.len()];
    for run in 1..=runs {
        let ceiling = spawn_true_two_at_a_time(count)?;
        eprintln!("shell_true run {run}: ceiling {ceiling:.0} tasks/s");
        ceilings.push(ceiling);
        for (k, (name, output)) in places.iter().enumerate() {
            let rate = shell_true_on_pool(count, output)?;
            if output.exists() {
                std::fs::remove_dir_all(output)?;
            }
            eprintln!(
                "{name} run {run}: {rate:.0} tasks/s, ratio {:.3} (output in {})",
                rate / ceiling,
                output.display()
            );
            rates[k].push(rate);
            ratios[k].push(rate / ceiling);
        }
    }
    let ceiling = median(&mut ceilings);
    for (k, (name, _)) in places.iter().enumerate() {
        println!(
            r#"{{"bench":"{name}","value":{:.1},"unit":"tasks/s","higher_is_better":true,"ceiling":{ceiling:.1},"ratio":{:.3}}}"#,
            median(&mut rates[k]),
            median(&mut ratios[k])
        );
    }
    Ok(())
}

fn shell_true_on_pool(count: usize, output: &std::path::Path) -> Result<f64> {
    let pool = Pool::builder().executors(2).start()?;
    let started = Instant::now();
    let (collector, results) = MultiEventCollector::new(count);
    let parent = pool.submit(collector)?;
    // The default capture: stdout and stderr files in a directory per activity.
    let spec = ShellSpec::command("true").output_dir(output);
    for _ in 0..count {
        pool.submit(ShellActivity::new(spec.clone()).reply_to(parent))?;
    }
    let events = results.wait()?;
    let seconds = started.elapsed().as_secs_f64();
    pool.done()?;
    for event in events {
        let result: ShellResult = event.take()?;
        if let Err(failure) = result.check() {
            bail!("a `true` activity failed: {failure}");
        }
    }
    Ok(count as f64 / seconds)
}

fn spawn_true_two_at_a_time(count: usize) -> Result<f64> {
    let started = Instant::now();
    let spawners: Vec<_> = (0..2)
        .map(|k| {
            let mine = count / 2 + (k < count % 2) as usize;
            std::thread::spawn(move || -> std::io::Result<()> {
                for _ in 0..mine {
                    let status = std::process::Command::new("true").status()?;
                    if !status.success() {
                        return Err(std::io::Error::other("`true` failed"));
                    }
                }
                Ok(())
            })
        })
        .collect();
    for spawner in spawners {
        spawner
            .join()
            .map_err(|_| anyhow::anyhow!("a spawner panicked"))??;
    }
    Ok(count as f64 / started.elapsed().as_secs_f64())
}

/// `count` trivial activities submitted one by one from outside, 2 executors, until `done()`.
fn local_spawn(count: u64) -> Result<f64> {
    let pool = Pool::builder().executors(2).start()?;
    let started = Instant::now();
    for _ in 0..count {
        pool.submit(Trivial)?;
    }
    let summary = pool.done()?;
    let seconds = started.elapsed().as_secs_f64();
    if summary.counts.finished != count {
        bail!(
            "only {} of {count} activities finished",
            summary.counts.finished
        );
    }
    Ok(count as f64 / seconds)
}

/// fib(n) by divide and conquer on 2 executors.
fn local_fib(n: u32) -> Result<f64> {
    let pool = Pool::builder().executors(2).start()?;
    let started = Instant::now();
    let (collector, result) = SingleEventCollector::new();
    let parent = pool.submit(collector)?;
    pool.submit(Fib::new(n, parent))?;
    result.wait_one()?;
    pool.done()?;
    Ok(fib_activities(n) as f64 / started.elapsed().as_secs_f64())
}

/// `rounds` events bounced between two activities pinned to different executors.
fn local_pingpong(rounds: u64) -> Result<f64> {
    // The collector runs `anywhere`; only the ping executor offers that.
    let ping: ExecutorContext = "ping,anywhere".parse()?;
    let pong: ExecutorContext = "pong".parse()?;
    let pool = Pool::builder().executor(ping).executor(pong).start()?;
    let (collector, results) = MultiEventCollector::new(2);
    let done = pool.submit(collector)?;
    let receiver = pool.submit(Player::receiver("ping".parse()?, done))?;
    let started = Instant::now();
    pool.submit(Player::server("pong".parse()?, receiver, rounds, done))?;
    let executors: Vec<u64> = results
        .wait()?
        .into_iter()
        .map(|e| e.take::<u64>())
        .collect::<Result<_, _>>()?;
    let seconds = started.elapsed().as_secs_f64();
    pool.done()?;
    if executors.len() != 2 || executors[0] == executors[1] {
        bail!("the players did not run on two executors: {executors:?}");
    }
    // The serve plus one reply per count down to zero.
    Ok((rounds + 1) as f64 / seconds)
}

/// Resident bytes per queued trivial activity, with `count` queued in a
/// scheduler whose executors are not taking work.
fn queued_bytes(count: usize) -> Result<f64> {
    let node = NodeId::random();
    let mut ids = IdIssuer::new(node, 0);
    let mut core: Scheduler<Box<dyn Activity>> =
        Scheduler::new(node, vec![ExecutorContext::anywhere(); 2]);
    let before = resident_bytes()?;
    for _ in 0..count {
        let submission = Submission {
            id: ids.issue(),
            body: Box::new(Trivial) as Box<dyn Activity>,
            contexts: ContextList::anywhere(),
            stealable: true,
        };
        core.submit(Origin::Outside, submission)?;
    }
    let after = resident_bytes()?;
    if core.counts().queued != count {
        bail!("expected {count} queued, found {}", core.counts().queued);
    }
    Ok((after - before) as f64 / count as f64)
}

fn resident_bytes() -> Result<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm")?;
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("unexpected /proc/self/statm: {statm}"))?
        .parse()?;
    Ok(pages * 4096)
}
