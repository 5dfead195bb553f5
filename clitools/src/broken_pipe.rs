//! How a command-line tool ends when the reader of its output goes away:
//! silently, as `cat` and `grep` do.

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
