//! What the command-line tools (`constellation`, `supernova`) share: where
//! their log goes and how it looks, how they end when the reader of their
//! output goes away, and how they print an error.

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

/// Lets a closed output pipe end the process at once and silently, as it
/// ends `cat` or `grep` (exit by SIGPIPE, status 141 in a shell), instead
/// of `println!` panicking on the broken pipe: `constellation report | head`
/// must not print a panic.
///
/// Rust ignores SIGPIPE so that a write to a closed pipe or socket returns
/// an error instead. Only commands that print and end without talking to
/// other nodes may call this: the network stack may write to its sockets
/// with `writev`, which, unlike std's `send` with MSG_NOSIGNAL, raises
/// SIGPIPE when the peer is gone, and a runner or agent must see that as
/// an error, not die of it. Children are unaffected:
/// `std::process::Command` restores SIGPIPE's default in them anyway.
pub fn exit_quietly_on_broken_pipe() {
    use nix::sys::signal::{signal, SigHandler, Signal};
    // SAFETY: SIG_DFL installs no handler, so no code runs in signal
    // context; it is done before any other thread exists.
    if let Err(error) = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) } {
        tracing::debug!(
            "cannot restore SIGPIPE's default ({error}); a closed pipe is an error instead"
        );
    }
}

/// The error and its causes on one line, joined by `: ` as `{:#}` joins
/// them, but without a cause whose text is already part of the line.
///
/// The libraries' errors say their cause in their own message ("journal
/// run.db: disk I/O error") and also return it as `source()`, so that both
/// `to_string()` and a walk of the chain are complete; printing the whole
/// chain would then say each cause twice ("--nodes must be at least 1:
/// --nodes must be at least 1").
pub fn error_message(error: &anyhow::Error) -> String {
    let mut message = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !message.contains(&cause) {
            message.push_str(": ");
            message.push_str(&cause);
        }
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("invalid request: {0}")]
    struct Outer(#[from] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("--nodes must be at least 1")]
    struct Inner;

    #[test]
    fn a_cause_the_message_already_says_is_not_repeated() {
        let error = anyhow::Error::new(Outer(Inner)).context("glidein slurm");
        assert_eq!(
            format!("{error:#}"),
            "glidein slurm: invalid request: --nodes must be at least 1: --nodes must be at least 1"
        );
        assert_eq!(
            error_message(&error),
            "glidein slurm: invalid request: --nodes must be at least 1"
        );
    }

    #[test]
    fn causes_the_message_does_not_say_are_kept() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let error = anyhow::Error::new(io).context("reading graph.toml");
        assert_eq!(error_message(&error), "reading graph.toml: no such file");
    }
}
