//! `constellation pool start`: the node that agents and runners join.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use constellation::net::{key, Node, NodeConfig};
use constellation::{ExecutorContext, Pool};
use gluein::poolfile::PoolFile;
use gluein::signals;

/// Arguments of `constellation pool`.
#[derive(Args)]
pub struct PoolArgs {
    #[command(subcommand)]
    command: PoolCommand,
}

#[derive(Subcommand)]
enum PoolCommand {
    /// Start a pool node and write the pool file agents join with.
    Start(StartArgs),
}

/// Arguments of `constellation pool start`.
#[derive(Args)]
#[command(after_help = "\
Examples:
  constellation pool start                      # all interfaces, a new key next to the pool file
  constellation pool start --listen /ip4/127.0.0.1/tcp/0   # this machine only, no key needed
  constellation agent --pool constellation-pool.json       # then, on any node that can reach it

The pool runs until Ctrl-C or SIGTERM; it then leaves the pool and removes
the pool file. The key file (mode 0600) must be readable wherever agents
run: on a cluster, keep it on the shared home file system.")]
pub struct StartArgs {
    /// Where to listen. The default takes every interface and a free port.
    #[arg(long, default_value = "/ip4/0.0.0.0/tcp/0", value_name = "MULTIADDR")]
    listen: String,
    /// The pool key. Default: the pool file's name with `.key`, created
    /// (mode 0600) if missing. Not needed on loopback.
    #[arg(long, value_name = "FILE")]
    key_file: Option<PathBuf>,
    /// Where to write the pool file.
    #[arg(long, default_value = "constellation-pool.json", value_name = "FILE")]
    pool_file: PathBuf,
    /// This node's site, for hierarchical stealing.
    #[arg(long, env = "CONSTELLATION_SITE")]
    site: Option<String>,
}

/// Starts the pool node and serves until stopped.
pub fn main(args: PoolArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        PoolCommand::Start(start) => serve(start),
    }
}

fn serve(args: StartArgs) -> anyhow::Result<ExitCode> {
    let listen: constellation::net::Multiaddr = args
        .listen
        .parse()
        .with_context(|| format!("--listen {:?} is not a multiaddr", args.listen))?;
    let loopback = constellation::net::transport::is_loopback(&listen);
    let key_file = match (&args.key_file, loopback) {
        (Some(path), _) => Some(path.clone()),
        (None, true) => None,
        (None, false) => Some(args.pool_file.with_extension("key")),
    };
    let key = match &key_file {
        Some(path) if path.exists() => Some(key::read_file(path)?),
        Some(path) => {
            let created = key::write_new_file(path)?;
            eprintln!("created the pool key {} (mode 0600)", path.display());
            Some(created)
        }
        None => None,
    };
    let config = NodeConfig {
        listen,
        key,
        site: args.site.clone(),
        master: true,
        role: "pool".into(),
        host: executors::probe::hostname(),
        ..NodeConfig::default()
    };
    // The pool node runs no work itself: one executor offering a label
    // nothing asks for gives work stolen back to it a place to wait.
    let holds_only: ExecutorContext = "constellation:pool".parse().expect("a label");
    let node = Node::start(config, Pool::builder().executor(holds_only))?;
    let file = PoolFile {
        addresses: node
            .listen_addrs()
            .iter()
            .map(ToString::to_string)
            .collect(),
        key_file: key_file
            .map(|p| std::fs::canonicalize(&p).unwrap_or(p))
            .clone(),
        pid: std::process::id(),
        started: journal::unix_seconds(std::time::SystemTime::now()),
    };
    file.save(&args.pool_file)?;
    signals::catch_stop_signals().context("cannot catch SIGINT and SIGTERM")?;
    println!("pool listening on:");
    for address in &file.addresses {
        println!("  {address}");
    }
    println!(
        "pool file {}; agents join with\n  constellation agent --pool {}",
        args.pool_file.display(),
        args.pool_file.display()
    );
    let mut members = 0;
    while !signals::stop_requested() {
        std::thread::sleep(Duration::from_millis(200));
        let now = node.members().len();
        if now != members {
            eprintln!("{now} member(s) in the pool");
            members = now;
        }
    }
    eprintln!(
        "stopping: leaving the pool and removing {}",
        args.pool_file.display()
    );
    let _ = std::fs::remove_file(&args.pool_file);
    node.leave();
    Ok(ExitCode::SUCCESS)
}
