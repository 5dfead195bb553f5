//! One process of a networked pool, for the multi-process tests and the
//! network benchmarks: joins (or founds) a pool, optionally runs a workload
//! from here, and prints JSON lines on stdout that the tests read.
//!
//! Lines: `{"event":"listening",...}` once it listens, `{"event":"result",...}`
//! per workload, and `{"event":"stats",...}` just before it exits.

#![warn(unreachable_pub)]

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use clap::Parser;
use constellation::collect::{MultiEventCollector, SingleEventCollector};
use constellation::net::{key, Node, NodeConfig, Strategy, WideSteal};
use constellation::{ContextList, ExecutorContext, Pool};
use constellation_workloads::{
    fib_sequential, BagItem, BagReport, Fib, TimedPlayer, Trivial, BAG_RUNS,
};
use serde_json::json;

#[derive(Parser)]
#[command(about = "One process of a networked constellation pool (test and benchmark driver)")]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "/ip4/127.0.0.1/tcp/0")]
    listen: String,
    /// A member to join through; repeatable.
    #[arg(long)]
    bootstrap: Vec<String>,
    /// Executors in this process; 0 keeps work here for others to steal.
    #[arg(long, default_value_t = 2)]
    executors: usize,
    /// What the executors offer (default `anywhere`).
    #[arg(long)]
    context: Option<ExecutorContext>,
    /// This node's site.
    #[arg(long)]
    site: Option<String>,
    /// random, master-worker or hierarchical.
    #[arg(long, default_value = "random")]
    strategy: Strategy,
    /// This node is the master.
    #[arg(long)]
    master: bool,
    /// The pool key file.
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// Declare a silent member dead after this long (e.g. `3s`, `500ms`).
    #[arg(long, default_value = "3s", value_parser = timefmt::parse_duration, value_name = "DURATION")]
    failure_timeout: Duration,
    /// The steal pool this node belongs to.
    #[arg(long, default_value = "default")]
    steal_pool: String,
    /// The steal pool this node takes work from.
    #[arg(long, default_value = "default")]
    steal_from: String,
    /// Times an activity may be handed out before it is given up when the
    /// nodes running it die.
    #[arg(long, default_value_t = 3)]
    max_attempts: u32,
    /// Most activities per steal reply.
    #[arg(long, default_value_t = 256)]
    max_steal: usize,
    /// How much a hierarchical steal from another site asks for: doubling,
    /// idle-executors or max-steal.
    #[arg(long, default_value = "doubling")]
    wide_steal: WideSteal,
    /// Wait for this many members (this one included) before the workload.
    #[arg(long, default_value_t = 1)]
    members: usize,
    /// Workloads to run from here, in order: `fib:N`, `bag:COUNT[:SPIN_US[:CONTEXT]]`,
    /// `trivial:COUNT`, `pingpong:ROUNDS:CONTEXT` (the receiver runs where CONTEXT is offered).
    #[arg(long)]
    workload: Vec<String>,
    /// Leave as soon as the workloads are done instead of serving until
    /// the master is gone.
    #[arg(long)]
    leave_after: bool,
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let key = match &args.key_file {
        Some(path) => Some(key::read_file(path)?),
        None => key::from_env()?,
    };
    let config = NodeConfig {
        listen: args.listen.parse().context("--listen")?,
        bootstrap: (args.bootstrap.iter())
            .map(|a| a.parse().with_context(|| format!("--bootstrap {a}")))
            .collect::<Result<_>>()?,
        key,
        site: args.site.clone(),
        strategy: args.strategy,
        master: args.master,
        failure_timeout: args.failure_timeout,
        max_steal: args.max_steal,
        wide_steal: args.wide_steal,
        steal_pool: args.steal_pool.clone(),
        steal_from: args.steal_from.clone(),
        max_attempts: args.max_attempts,
        ..NodeConfig::default()
    };
    let context = args
        .context
        .clone()
        .unwrap_or_else(ExecutorContext::anywhere);
    let builder = if args.executors == 0 {
        // A node with no executors of its own still needs a place for its
        // work to wait: one executor offering a label nothing asks for.
        Pool::builder().executor("constellation:holds-only".parse().expect("a label"))
    } else {
        Pool::builder().executors_with(args.executors, context)
    };
    let node = Node::start(config, builder)?;
    emit(json!({
        "event": "listening",
        "addr": node.join_address().to_string(),
        "node": node.node_id().to_string(),
        "pid": std::process::id(),
    }));
    node.wait_for_members(args.members, Duration::from_secs(60))?;
    for workload in &args.workload {
        run_workload(&node, workload)?;
    }
    let is_worker = args.workload.is_empty() && !args.master;
    if is_worker && !args.leave_after {
        node.wait_for_master_gone(None);
    }
    let (summary, stats) = match node.done() {
        Ok(done) => done,
        Err(error) => {
            emit(json!({"event": "error", "message": error.to_string()}));
            return Err(error.into());
        }
    };
    emit(json!({
        "event": "stats",
        "bag_runs": BAG_RUNS.load(Ordering::Relaxed),
        "finished": summary.counts.finished,
        "steal_requests": stats.steal_requests,
        "empty_replies": stats.empty_replies,
        "imported": stats.imported,
        "exported": stats.exported,
        "events_sent": stats.events_sent,
        "events_received": stats.events_received,
        "undeliverable": stats.undeliverable,
        "requeued": stats.requeued,
        "lost": stats.lost,
        "dead_members": stats.dead_members,
        "refused": stats.refused,
    }));
    Ok(())
}

fn run_workload(node: &Node, workload: &str) -> Result<()> {
    let parts: Vec<&str> = workload.split(':').collect();
    let number = |i: usize, default: u64| -> Result<u64> {
        match parts.get(i) {
            Some(text) => text
                .parse()
                .with_context(|| format!("in workload {workload:?}")),
            None => Ok(default),
        }
    };
    let started = Instant::now();
    match parts[0] {
        "fib" => {
            let n = number(1, 22)? as u32;
            let (collector, result) = SingleEventCollector::new();
            let reply_to = node.submit(collector.on(here(node)?))?;
            node.submit(Fib::new(n, reply_to))?;
            let value = result.wait_one()?.take::<u64>()?;
            emit(json!({
                "event": "result", "workload": workload, "value": value,
                "correct": value == fib_sequential(n),
                "seconds": started.elapsed().as_secs_f64(),
            }));
        }
        "bag" => {
            let count = number(1, 1000)?;
            let spin_us = number(2, 0)?;
            let contexts: ContextList = match parts.get(3) {
                Some(text) => text.parse().map_err(|e| anyhow::anyhow!("{e}"))?,
                None => ContextList::anywhere(),
            };
            let (collector, results) = MultiEventCollector::new(count as usize);
            let reply_to = node.submit(collector.on(here(node)?))?;
            for index in 0..count {
                node.submit(BagItem {
                    index,
                    reply_to,
                    contexts: contexts.clone(),
                    spin_us,
                })?;
            }
            let events = results.wait_timeout(Duration::from_secs(300))?;
            let mut seen = vec![0u32; count as usize];
            let mut per_node: BTreeMap<String, u64> = BTreeMap::new();
            let mut per_labels: BTreeMap<String, u64> = BTreeMap::new();
            for event in events {
                let (index, ran_on, labels): BagReport = event.take()?;
                if index >= count {
                    bail!("bag item index {index} out of range");
                }
                seen[index as usize] += 1;
                *per_node.entry(ran_on.to_string()).or_default() += 1;
                *per_labels.entry(labels).or_default() += 1;
            }
            emit(json!({
                "event": "result", "workload": workload,
                "count": count,
                "missing": seen.iter().filter(|&&n| n == 0).count(),
                "duplicates": seen.iter().map(|&n| n.saturating_sub(1) as u64).sum::<u64>(),
                "per_node": per_node, "per_labels": per_labels,
                "seconds": started.elapsed().as_secs_f64(),
            }));
        }
        "trivial" => {
            let count = number(1, 200_000)?;
            for _ in 0..count {
                node.submit(Trivial)?;
            }
            node.pool().wait_quiescent();
            let seconds = started.elapsed().as_secs_f64();
            emit(json!({
                "event": "result", "workload": workload, "count": count,
                "seconds": seconds, "per_second": count as f64 / seconds,
            }));
        }
        "pingpong" => {
            let rounds = number(1, 1000)?;
            let remote: ContextList = match parts.get(2) {
                Some(text) => text.parse().map_err(|e| anyhow::anyhow!("{e}"))?,
                None => bail!("pingpong needs the receiver's context: pingpong:ROUNDS:CONTEXT"),
            };
            let (collector, result) = SingleEventCollector::new();
            let done = node.submit(collector.on(here(node)?))?;
            let receiver = node.submit(TimedPlayer::receiver(remote, done))?;
            node.submit(TimedPlayer::server(here(node)?, receiver, rounds, done))?;
            let mut times = result.wait_one()?.take::<Vec<u64>>()?;
            times.sort_unstable();
            let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize] as f64 / 1000.0;
            emit(json!({
                "event": "result", "workload": workload, "rounds": times.len(),
                "median_us": at(0.5), "p99_us": at(0.99),
            }));
        }
        other => bail!("unknown workload {other:?}: use fib, bag, trivial or pingpong"),
    }
    Ok(())
}

/// Contexts that this node's first executor runs: collectors, which never
/// leave their node, must be able to run here.
fn here(node: &Node) -> Result<ContextList> {
    let labels = (node.pool().executor_context(0))
        .map(|c| c.label_list())
        .unwrap_or_default();
    labels.parse().map_err(|e| anyhow::anyhow!("{e}"))
}

fn emit(value: serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{value}");
    let _ = out.flush();
}
