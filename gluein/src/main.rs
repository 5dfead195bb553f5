//! The `constellation` command.

#![warn(unreachable_pub)]

mod commands;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Constellation: run many-task workflows on the executors you have.
///
/// Start with `constellation run GRAPH.toml`: it runs an activity graph on
/// this machine, journals every attempt in an SQLite file, and prints where
/// that file is. `constellation report` then shows what ran where and when.
#[derive(Parser)]
#[command(name = "constellation", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run an activity graph on an embedded pool on this machine.
    Run(commands::run::RunArgs),
    /// Summarize a journaled run and plot its utilization.
    Report(commands::report::ReportArgs),
    /// List the runs in constellation-runs (or DIR), newest last: graph,
    /// status (running, succeeded, failed, interrupted, or stopped when
    /// the runner died), times and activity counts.
    Runs(commands::runs::RunsArgs),
    /// Print one activity's output (stdout or stderr), from its files or
    /// from the run's stream files.
    Output(commands::output::OutputArgs),
    /// Show what the hardware probe finds and the labels executors get.
    Probe(commands::probe::ProbeArgs),
    /// Start a pool that agents on other machines join (`pool start`).
    Pool(commands::pool::PoolArgs),
    /// Join a pool with executors on this machine, until told or timed to leave.
    Agent(commands::agent::AgentArgs),
    /// Show the pool's members, their executors and labels, queues per
    /// label, running work and the agents' remaining walltime.
    Status(commands::status::StatusArgs),
    /// Give a live agent's executors new labels, without a restart.
    Relabel(commands::relabel::RelabelArgs),
    /// Submit pilot jobs that start agents (Slurm, PBS, ssh, local); list, cancel.
    Glidein(commands::glidein::GlideinArgs),
    /// Hand a graph to the pool as a job, and return at once: the pool
    /// node runs it on the agents, and it survives this shell.
    Submit(commands::submit::SubmitArgs),
    /// List the pool's jobs: state, activity counts and times.
    Jobs(commands::jobs::JobsArgs),
    /// Show one job of the pool, with the state of each of its activities.
    Job(commands::jobs::JobArgs),
    /// Wait until jobs of the pool end: exit 0 if all succeeded, 1 if any
    /// failed or was cancelled.
    Wait(commands::wait::WaitArgs),
    /// Cancel a job of the pool: queued work never starts, running
    /// commands are killed on the agents.
    Cancel(commands::cancel::CancelArgs),
}

fn main() -> ExitCode {
    clitools::init_logging();
    let cli = Cli::parse();
    // A closed stdout (`report | head`) ends a command quietly, except one
    // that talks to other nodes: a socket write to a peer that is gone
    // must stay an error (see exit_quietly_on_broken_pipe).
    let talks_to_peers = match &cli.command {
        Command::Run(args) => args.joins_a_pool(),
        Command::Report(args) => args.asks_a_pool(),
        Command::Pool(_)
        | Command::Agent(_)
        | Command::Status(_)
        | Command::Relabel(_)
        | Command::Submit(_)
        | Command::Jobs(_)
        | Command::Job(_)
        | Command::Wait(_)
        | Command::Cancel(_) => true,
        Command::Runs(_) | Command::Output(_) | Command::Probe(_) | Command::Glidein(_) => false,
    };
    if !talks_to_peers {
        clitools::exit_quietly_on_broken_pipe();
    }
    let outcome = match cli.command {
        Command::Run(args) => commands::run::main(args),
        Command::Report(args) => commands::report::main(args),
        Command::Runs(args) => commands::runs::main(args),
        Command::Output(args) => commands::output::main(args),
        Command::Probe(args) => commands::probe::main(args),
        Command::Pool(args) => commands::pool::main(args),
        Command::Agent(args) => commands::agent::main(args),
        Command::Status(args) => commands::status::main(args),
        Command::Relabel(args) => commands::relabel::main(args),
        Command::Glidein(args) => commands::glidein::main(args),
        Command::Submit(args) => commands::submit::main(args),
        Command::Jobs(args) => commands::jobs::jobs_main(args),
        Command::Job(args) => commands::jobs::job_main(args),
        Command::Wait(args) => commands::wait::main(args),
        Command::Cancel(args) => commands::cancel::main(args),
    };
    match outcome {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {}", clitools::error_message(&error));
            ExitCode::from(2)
        }
    }
}
