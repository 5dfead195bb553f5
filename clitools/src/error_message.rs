//! How the command-line tools print an error: its causes on one line,
//! each said once.

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
