//! `constellation report`: what a journaled run did.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use clap::Args;
use gluein::service::{ServiceRequest, ServiceResponse};
use journal::Journal;
use report::{plot, Report};

/// Arguments of `constellation report`.
#[derive(Args)]
#[command(after_help = "\
Examples:
  constellation report constellation-runs/pipeline-20261121T101500Z/journal.db
  constellation report run.db --plot util.png      # or util.svg
  constellation report run.db --run 1 --json
  constellation report --job 3 --plot job3.svg          # a job submitted to the pool
  constellation report --pool ~/pools/vu.json --job 3

With --job, the job's journal is asked of the pool's job service and read
where the pool node keeps it (a file system this machine shares).")]
pub(crate) struct ReportArgs {
    /// The run's journal, as `constellation run` printed it.
    #[arg(required_unless_present = "job", conflicts_with = "job")]
    journal: Option<PathBuf>,
    /// Report on this job of the pool (`constellation submit`) instead of
    /// a journal named here.
    #[arg(long, value_name = "ID")]
    job: Option<u64>,
    /// With --job: the pool, and its key.
    #[command(flatten)]
    address: super::PoolAddress,
    /// With --job: how long to wait for the pool, and for its answer.
    #[arg(long, default_value = "10s", value_parser = timefmt::parse_duration, value_name = "DURATION")]
    timeout: std::time::Duration,
    /// Which run of the journal (1 is the first, each resume adds one).
    /// Default: the latest.
    #[arg(long)]
    run: Option<i64>,
    /// Also draw executor and core utilization, per-label lanes and a Gantt
    /// chart of every attempt into this file (.svg or .png).
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
    /// Print the report as JSON instead of text.
    #[arg(long)]
    json: bool,
}

impl ReportArgs {
    /// Whether the report asks the pool for a job's journal (`--job`), and
    /// so talks to other nodes over the network.
    pub(crate) fn asks_a_pool(&self) -> bool {
        self.job.is_some()
    }
}

/// Prints the report, and draws the plot if asked.
pub(crate) fn main(args: ReportArgs) -> anyhow::Result<ExitCode> {
    let path = match (&args.journal, args.job) {
        (Some(path), _) => path.clone(),
        (None, Some(id)) => job_journal(&args, id)?,
        (None, None) => bail!("give a journal, or --job ID for a job of the pool"),
    };
    let journal = Journal::open_read_only(&path)?;
    let report = Report::from_journal(&journal, args.run)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{}", report.to_string().trim_end());
    }
    if let Some(path) = &args.plot {
        plot(&report, path)?;
        eprintln!("plot: {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// The journal of job `id`, as the pool's job service names it. A queued
/// job has none yet.
fn job_journal(args: &ReportArgs, id: u64) -> anyhow::Result<PathBuf> {
    let job = match super::ask_pool(&args.address, &ServiceRequest::Job { id }, args.timeout)? {
        ServiceResponse::Job { job } => job,
        other => return Err(super::unexpected_answer("a job", &other)),
    };
    if !job.journal.exists() && job.state == gluein::service::JobState::Queued {
        bail!("job {id} ({}) is queued: nothing has run yet", job.name);
    }
    Ok(job.journal)
}
