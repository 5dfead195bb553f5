//! `constellation report`: what a journaled run did.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use gluein::report::{plot, Report};
use journal::Journal;

/// Arguments of `constellation report`.
#[derive(Args)]
#[command(after_help = "\
Examples:
  constellation report constellation-runs/pipeline-20261121T101500Z/journal.db
  constellation report run.db --plot util.png      # or util.svg
  constellation report run.db --run 1 --json")]
pub struct ReportArgs {
    /// The run's journal, as `constellation run` printed it.
    journal: PathBuf,
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

/// Prints the report, and draws the plot if asked.
pub fn main(args: ReportArgs) -> anyhow::Result<ExitCode> {
    let journal = Journal::open_read_only(&args.journal)?;
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
