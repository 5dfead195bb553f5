//! Deployment and the `constellation` command.
//!
//! - [`clock`]: Unix seconds as UTC dates.
//! - [`report`]: what a journaled run did — tables and utilization plots.
//! - [`glidein`]: pilot jobs for Slurm, PBS, SSH and local agents.
//! - [`poolfile`]: how agents and runners find a pool.
//! - [`signals`]: SIGINT and SIGTERM as a flag, to leave a pool cleanly.

pub mod clock;
pub mod glidein;
pub mod poolfile;
pub mod report;
pub mod signals;
pub mod table;

/// Sends `tracing` output to stderr at the level `RUST_LOG` asks for,
/// `warn` by default: what the command-line tools print besides their
/// own output.
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
}
