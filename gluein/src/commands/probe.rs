//! `constellation probe`: what this machine offers, as executors see it.

use std::process::ExitCode;

use clap::Args;
use executors::probe::{Hardware, SITE_VAR};

/// Arguments of `constellation probe`.
#[derive(Args)]
pub(crate) struct ProbeArgs {
    /// The site this machine belongs to; adds a `site:NAME` label.
    #[arg(long, env = SITE_VAR)]
    site: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Probes the hardware and prints it with the labels executors would get.
pub(crate) fn main(args: ProbeArgs) -> anyhow::Result<ExitCode> {
    let hardware = Hardware::probe(args.site.as_deref());
    if args.json {
        let labels: Vec<String> = hardware.labels().iter().map(ToString::to_string).collect();
        let mut value = serde_json::to_value(&hardware)?;
        value["labels"] = serde_json::json!(labels);
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        println!("{hardware}");
        println!(
            "executor context  {}",
            hardware.executor_context(&[], false)
        );
    }
    Ok(ExitCode::SUCCESS)
}
