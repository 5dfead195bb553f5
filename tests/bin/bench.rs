//! The benchmarks behind `scripts/bench.sh`. Each prints one JSON line:
//! `{"bench":NAME,"value":X,"unit":U,"higher_is_better":B}`, where the value
//! is the median of `BENCH_RUNS` runs (default 5); every run's figure goes to
//! stderr.

#![warn(unreachable_pub)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use constellation::collect::{MultiEventCollector, SingleEventCollector};
use constellation::core::{Origin, Scheduler, Submission};
use constellation::IdIssuer;
use constellation::{Activity, ContextList, ExecutorContext, NodeId, Pool};
use constellation_workloads::{fib_activities, Fib, Player, Trivial};
use executors::shell::{ShellActivity, ShellResult, ShellSpec};
use serde_json::Value;

const NAMES: [&str; 9] = [
    "local_spawn",
    "local_fib",
    "local_pingpong",
    "queued_bytes",
    "shell_true",
    "graph_chains",
    "net_steal",
    "net_event_rtt",
    "net_fib",
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
            let count = match std::env::var("SHELL_TRUE_COUNT") {
                Ok(text) => text.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                    anyhow::anyhow!("SHELL_TRUE_COUNT must be a positive number, not {text:?}")
                })?,
                Err(_) => 10_000,
            };
            shell_true(count, runs)?;
            continue;
        }
        if name == "graph_chains" {
            graph_chains(100, 100, runs)?;
            continue;
        }
        match name {
            "net_steal" => {
                net_steal(200_000, runs)?;
                continue;
            }
            "net_event_rtt" => {
                net_event_rtt(20_000, runs)?;
                continue;
            }
            "net_fib" => {
                net_fib(27, runs)?;
                continue;
            }
            _ => {}
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

/// `count` trivial activities submitted on a master with no executors of
/// its own and stolen over loopback by one worker process with 2 executors
/// (master-worker stealing), until the master sees them all finished: the
/// master's activities/s. The steal requests and imported activities shown
/// are the worker's in the median run, so their ratio is the batch size.
fn net_steal(count: u64, runs: usize) -> Result<()> {
    let master = format!(
        "--executors 0 --master --members 2 --strategy master-worker --workload trivial:{count}"
    );
    let mut rates = Vec::with_capacity(runs);
    let mut per_run = Vec::with_capacity(runs);
    for run in 1..=runs {
        let (result, stats) = net_pool(
            "net_steal",
            &master,
            &["--executors 2 --strategy master-worker"],
        )?;
        let rate = number(&result, "per_second")?;
        let finished: u64 = (stats.iter())
            .map(|s| s["finished"].as_u64().unwrap_or(0))
            .sum();
        if finished != count {
            bail!("net_steal run {run}: {finished} of {count} activities finished: {stats:?}");
        }
        let worker = &stats[1];
        let steals = number(worker, "steal_requests")?;
        let imported = number(worker, "imported")?;
        eprintln!(
            "net_steal run {run}: {rate:.1} activities/s, {:.3} s; worker: {steals} steal requests, \
             {imported} imported ({:.1} per request)",
            number(&result, "seconds")?,
            imported / steals.max(1.0)
        );
        rates.push(rate);
        per_run.push((rate, steals, imported));
    }
    let median_rate = median(&mut rates);
    let (_, steals, imported) = (per_run.iter())
        .find(|(rate, _, _)| *rate == median_rate)
        .copied()
        .context("the median run")?;
    println!(
        r#"{{"bench":"net_steal","value":{median_rate:.1},"unit":"activities/s","higher_is_better":true,"steal_requests":{steals},"imported":{imported}}}"#
    );
    Ok(())
}

/// `rounds` events bounced between an activity on the master and one that
/// can only run on the worker (its executor alone offers `remote`), one
/// executor per process: the median of the runs' median round trips in µs,
/// and the median of their 99th percentiles.
fn net_event_rtt(rounds: u64, runs: usize) -> Result<()> {
    let master = format!(
        "--master --members 2 --executors 1 --context local --workload pingpong:{rounds}:remote"
    );
    let mut medians = Vec::with_capacity(runs);
    let mut p99s = Vec::with_capacity(runs);
    for run in 1..=runs {
        let (result, _) = net_pool(
            "net_event_rtt",
            &master,
            &["--executors 1 --context remote"],
        )?;
        let median_us = number(&result, "median_us")?;
        let p99_us = number(&result, "p99_us")?;
        eprintln!("net_event_rtt run {run}: median {median_us:.1} us, p99 {p99_us:.1} us");
        medians.push(median_us);
        p99s.push(p99_us);
    }
    println!(
        r#"{{"bench":"net_event_rtt","value":{:.1},"unit":"us","higher_is_better":false,"p99_us":{:.1}}}"#,
        median(&mut medians),
        median(&mut p99s)
    );
    Ok(())
}

/// fib(n) by divide and conquer across 3 processes of 2 executors each
/// (random stealing), started on the master: the seconds the master waits
/// for the answer, and the activities/s that makes.
fn net_fib(n: u32, runs: usize) -> Result<()> {
    let master = format!("--master --members 3 --executors 2 --strategy random --workload fib:{n}");
    let worker = "--executors 2 --strategy random";
    let activities = fib_activities(n);
    let mut seconds = Vec::with_capacity(runs);
    let mut rates = Vec::with_capacity(runs);
    for run in 1..=runs {
        let (result, _) = net_pool("net_fib", &master, &[worker, worker])?;
        if result["correct"] != Value::Bool(true) {
            bail!("net_fib run {run}: wrong answer: {result}");
        }
        let wall = number(&result, "seconds")?;
        eprintln!(
            "net_fib run {run}: {wall:.3} s, {:.0} activities/s",
            activities as f64 / wall
        );
        seconds.push(wall);
        rates.push(activities as f64 / wall);
    }
    println!(
        r#"{{"bench":"net_fib","value":{:.3},"unit":"s","higher_is_better":false,"activities":{activities},"activities_per_s":{:.1}}}"#,
        median(&mut seconds),
        median(&mut rates)
    );
    Ok(())
}

/// A numeric field of a `net-node` JSON line.
fn number(line: &Value, field: &str) -> Result<f64> {
    line[field]
        .as_f64()
        .with_context(|| format!("no number {field:?} in {line}"))
}

/// How long one network benchmark run may take, all its processes together.
const NET_TIMEOUT: Duration = Duration::from_secs(120);

/// One run of a network benchmark: a `net-node` master (built next to this
/// binary) with the `master` arguments (separated by spaces), then one
/// worker per entry of `workers` joined to it over loopback. Waits for the master's result line, every
/// process's stats line and every exit; returns the result line and the
/// stats lines, master first. On failure every process is killed and the
/// error carries the end of each one's stderr.
fn net_pool(bench: &str, master: &str, workers: &[&str]) -> Result<(Value, Vec<Value>)> {
    let exe = std::env::current_exe()?.with_file_name("net-node");
    if !exe.exists() {
        bail!(
            "{} is missing: build it with `cargo build --release -p constellation-workloads --bin net-node`",
            exe.display()
        );
    }
    let deadline = Instant::now() + NET_TIMEOUT;
    let mut nodes = Vec::with_capacity(workers.len() + 1);
    let outcome = drive_net_pool(&exe, deadline, master, workers, &mut nodes);
    outcome.map_err(|error| {
        let mut message = format!("{bench}: {error:#}");
        for node in &mut nodes {
            node.stop();
            let stdout: Vec<String> = node.stdout().iter().map(Value::to_string).collect();
            message.push_str(&format!(
                "\n--- {}: stdout ---\n{}\n--- {}: last lines of stderr ({}) ---\n{}",
                node.name,
                stdout.join("\n"),
                node.name,
                node.log.display(),
                node.log_tail(12)
            ));
        }
        anyhow::anyhow!(message)
    })
}

/// The steps of [`net_pool`], pushing each process it starts to `nodes`.
fn drive_net_pool(
    exe: &Path,
    deadline: Instant,
    master: &str,
    workers: &[&str],
    nodes: &mut Vec<NetNode>,
) -> Result<(Value, Vec<Value>)> {
    let master: Vec<&str> = master.split_whitespace().collect();
    nodes.push(NetNode::start(exe, "master", &master)?);
    let listening = nodes[0].expect("listening", deadline)?;
    let addr = (listening["addr"].as_str())
        .with_context(|| format!("no addr in the master's {listening}"))?
        .to_string();
    for (i, extra) in workers.iter().enumerate() {
        let mut args = vec!["--bootstrap", addr.as_str()];
        args.extend(extra.split_whitespace());
        nodes.push(NetNode::start(exe, &format!("worker{}", i + 1), &args)?);
    }
    let result = nodes[0].expect("result", deadline)?;
    let mut stats = Vec::with_capacity(nodes.len());
    for node in nodes.iter_mut() {
        stats.push(node.expect("stats", deadline)?);
        node.wait_success(deadline)?;
    }
    Ok((result, stats))
}

/// A running `net-node`: the JSON lines of its stdout arrive through a
/// reader thread (and are kept, for a failure report); its stderr goes to
/// a log file. Dropping it kills the process and removes the log.
struct NetNode {
    name: String,
    child: Child,
    lines: mpsc::Receiver<Value>,
    printed: Vec<Value>,
    log: PathBuf,
}

impl NetNode {
    /// Starts `exe` with `args`. Unless `RUST_LOG` says otherwise it logs
    /// `constellation=debug`: membership changes and a state line every 5 s,
    /// which is what a hung run's report needs, and nothing per activity.
    fn start(exe: &Path, name: &str, args: &[&str]) -> Result<NetNode> {
        let log = std::env::temp_dir().join(format!(
            "constellation-bench-net-{}-{name}.log",
            std::process::id()
        ));
        let stderr =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut command = Command::new(exe);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            // A log file, not a terminal.
            .env("NO_COLOR", "1");
        if std::env::var_os("RUST_LOG").is_none() {
            command.env("RUST_LOG", "constellation=debug");
        }
        let mut child = command
            .spawn()
            .with_context(|| format!("starting {} as {name}", exe.display()))?;
        let stdout = child.stdout.take().context("the child's piped stdout")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // Anything that is not a JSON object reads as a string, so it
                // can still be shown.
                let value = serde_json::from_str(&line).unwrap_or(Value::String(line));
                if tx.send(value).is_err() {
                    break;
                }
            }
        });
        Ok(NetNode {
            name: name.to_string(),
            child,
            lines,
            printed: Vec::new(),
            log,
        })
    }

    /// The next line whose `event` is `kind`, skipping others; fails on an
    /// `error` line, at the end of its stdout or at `deadline`.
    fn expect(&mut self, kind: &str, deadline: Instant) -> Result<Value> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let received = self.lines.recv_timeout(left);
            if let Ok(value) = &received {
                self.printed.push(value.clone());
            }
            match received {
                Ok(value) if value["event"] == kind => return Ok(value),
                Ok(value) if value["event"] == "error" => {
                    bail!(
                        "{} reported an error while {kind:?} was awaited: {value}",
                        self.name
                    )
                }
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    bail!(
                        "{} printed no {kind:?} line within {NET_TIMEOUT:?} of the run's start",
                        self.name
                    )
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = self.child.try_wait().ok().flatten();
                    bail!(
                        "{} closed its stdout without a {kind:?} line ({})",
                        self.name,
                        status.map_or("still running".to_string(), |s| s.to_string())
                    )
                }
            }
        }
    }

    /// Waits for the process to exit, successfully, by `deadline`.
    fn wait_success(&mut self, deadline: Instant) -> Result<()> {
        loop {
            match self.child.try_wait()? {
                Some(status) if status.success() => return Ok(()),
                Some(status) => bail!("{} failed: {status}", self.name),
                None if Instant::now() >= deadline => {
                    bail!(
                        "{} did not exit within {NET_TIMEOUT:?} of the run's start",
                        self.name
                    )
                }
                None => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }

    /// Kills the process if it still runs, and reaps it.
    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Every line it printed on stdout so far.
    fn stdout(&mut self) -> &[Value] {
        self.printed.extend(self.lines.try_iter());
        &self.printed
    }

    /// The last `count` lines of its stderr.
    fn log_tail(&self, count: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(count)..].join("\n")
    }
}

impl Drop for NetNode {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_file(&self.log);
    }
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
/// `BENCH_BALLAST_MIB` makes the process hold that many MiB of touched
/// heap throughout, as a runner holding a big graph does, to show whether
/// the cost of starting a command grows with the memory of its starter.
fn shell_true(count: usize, runs: usize) -> Result<()> {
    let ballast_mib: usize = match std::env::var("BENCH_BALLAST_MIB") {
        Ok(text) => text
            .parse()
            .with_context(|| format!("BENCH_BALLAST_MIB must be a number of MiB, not {text:?}"))?,
        Err(_) => 0,
    };
    // Touched page by page, so it is resident, not merely reserved.
    let ballast = std::hint::black_box(vec![1u8; ballast_mib << 20]);
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
            r#"{{"bench":"{name}","value":{:.1},"unit":"tasks/s","higher_is_better":true,"ceiling":{ceiling:.1},"ratio":{:.3},"ballast_mib":{ballast_mib}}}"#,
            median(&mut rates[k]),
            median(&mut ratios[k])
        );
    }
    drop(ballast);
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
