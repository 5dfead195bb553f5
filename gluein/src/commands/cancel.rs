//! `constellation cancel ID`: asks the pool node's job service to cancel a
//! job, and prints where the job stands after the request.

use clap::Args;
use gluein::service::{JobState, JobSummary, ServiceRequest, ServiceResponse};
use serde::Serialize;
use std::process::ExitCode;

use super::{unexpected_answer, ServiceAddress};

/// Arguments of `constellation cancel`.
#[derive(Args)]
#[command(after_help = "\
Examples:
  constellation cancel 3
  constellation cancel 3 && constellation wait 3     # exits 1: cancelled

A queued job is cancelled at once. A running job's runner is stopped: it
kills the commands it started, on the agents too (each command's whole
process group), and records them as interrupted attempts; then every
activity that had not finished is recorded as cancelled in the job's
journal, and the job becomes `cancelled`. That takes a few seconds: the
state printed here may still be `running`; `constellation wait ID` waits
for the end. Cancelling a job that has ended changes nothing.")]
pub(crate) struct CancelArgs {
    /// The job's id, as `submit` printed it.
    id: u64,
    #[command(flatten)]
    service: ServiceAddress,
    /// Print `{"job": {...}}` instead of a sentence, for scripts.
    #[arg(long)]
    json: bool,
}

/// What `--json` prints.
#[derive(Serialize)]
struct CancelJson<'a> {
    job: &'a JobSummary,
}

/// Cancels the job.
pub(crate) fn main(args: CancelArgs) -> anyhow::Result<ExitCode> {
    let request = ServiceRequest::Cancel { id: args.id };
    let job = match args.service.ask(&request)? {
        ServiceResponse::Job { job } => job,
        other => return Err(unexpected_answer("the job", &other)),
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&CancelJson { job: &job })?
        );
    } else {
        println!("{}", state_line(&job));
    }
    Ok(ExitCode::SUCCESS)
}

/// What became of the job, in words.
fn state_line(job: &JobSummary) -> String {
    let name = format!("job {} ({})", job.id, job.name);
    match job.state {
        JobState::Cancelled => format!("{name} cancelled"),
        JobState::Running | JobState::Queued => format!(
            "{name} is being cancelled ({} now); `constellation wait {}` waits for the end",
            job.state, job.id
        ),
        JobState::Succeeded | JobState::Failed => {
            format!("{name} had ended ({}); nothing to cancel", job.state)
        }
    }
}
