//! Where the command-line tools' log goes and how it looks: stderr, at
//! the level `RUST_LOG` asks for, in colour only on a terminal.

use std::io::IsTerminal;

/// The log level when `RUST_LOG` does not say.
const DEFAULT_FILTER: &str = "warn";

/// Sends `tracing` output to stderr at the level `RUST_LOG` asks for,
/// `warn` by default: what the command-line tools print besides their
/// own output. Colours only go to a terminal: escape codes in a log file
/// or a CI log are noise that `grep` trips over.
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_FILTER)),
        )
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}
