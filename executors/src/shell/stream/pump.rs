//! Moving a running command's output from its pipes into its stream
//! file as it comes, while waiting for the command's exit.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use super::format::{Channel, CHUNK};
use super::writer::{Pumped, StreamSink};
use crate::shell::exit::wait_for_exit;

/// Moves a running command's output from its two pipes into a
/// [`StreamSink`] as it comes, on the executor's own thread: one `poll`
/// waits for output and for the command's exit together.
pub(crate) struct Pump {
    pipes: [Option<File>; 2],
    sink: StreamSink,
    buffer: Vec<u8>,
}

impl Pump {
    /// Pumps `stdout` and `stderr` into `sink`.
    pub(crate) fn new(
        stdout: Option<std::process::ChildStdout>,
        stderr: Option<std::process::ChildStderr>,
        sink: StreamSink,
    ) -> Pump {
        Pump {
            pipes: [
                stdout.map(|p| File::from(OwnedFd::from(p))),
                stderr.map(|p| File::from(OwnedFd::from(p))),
            ],
            sink,
            buffer: vec![0u8; CHUNK],
        }
    }

    /// Pumps until the process `pid` (an unreaped child) exits, or
    /// `deadline` passes; true if it exited. The process is not reaped.
    pub(crate) fn until_exit(
        &mut self,
        pid: libc::pid_t,
        deadline: Option<Instant>,
    ) -> io::Result<bool> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        // SAFETY: a new descriptor that nothing else owns.
        let pidfd = (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) });
        loop {
            // Without a pidfd (Linux < 5.3) the exit is looked for between
            // polls of the pipes, at most 50 ms apart.
            let mut wait = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if pidfd.is_none() {
                wait = Some(wait.map_or(EXIT_POLL, |w| w.min(EXIT_POLL)));
            }
            let (ready, exited) = self.poll_once(pidfd.as_ref(), wait)?;
            if exited || (pidfd.is_none() && !ready && wait_for_exit(pid, Some(Instant::now()))?) {
                return Ok(true);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(false);
            }
        }
    }

    /// After everything the command started is dead: reads what is left
    /// in the pipes, for at most `patience` (a process that escaped being
    /// killed may hold a pipe open), then says where the output went.
    pub(crate) fn finish(mut self, patience: Duration) -> Pumped {
        let deadline = Instant::now() + patience;
        while self.pipes.iter().any(Option::is_some) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                tracing::warn!(
                    "the output pipes of {} (attempt {}) are still open {patience:?} after it ended: \
                     something it started holds them; the rest of its output is not read",
                    self.sink.name,
                    self.sink.attempt
                );
                break;
            }
            if let Err(error) = self.poll_once(None, Some(left)) {
                tracing::warn!("cannot read the output of {}: {error}", self.sink.name);
                break;
            }
        }
        self.sink.finish()
    }

    /// Waits up to `wait` (forever if `None`) for output or, with a pidfd,
    /// the exit, and moves one read of each ready pipe to the sink.
    /// Returns whether anything was ready, and whether the process exited.
    fn poll_once(
        &mut self,
        pidfd: Option<&OwnedFd>,
        wait: Option<Duration>,
    ) -> io::Result<(bool, bool)> {
        let mut fds = [libc::pollfd {
            fd: -1,
            events: libc::POLLIN,
            revents: 0,
        }; 3];
        for (slot, pipe) in fds.iter_mut().zip(&self.pipes) {
            // A negative fd is skipped by poll: the pipe reached its end.
            slot.fd = pipe.as_ref().map_or(-1, |p| p.as_raw_fd());
        }
        fds[2].fd = pidfd.map_or(-1, |p| p.as_raw_fd());
        let timeout = match wait {
            None => -1,
            // Round up, so a deadline 0.3 ms away is not a busy loop.
            Some(wait) => wait.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int,
        };
        // SAFETY: three valid pollfds for the duration of the call.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 3, timeout) };
        if ready < 0 {
            let error = io::Error::last_os_error();
            return match error.kind() {
                io::ErrorKind::Interrupted => Ok((false, false)),
                _ => Err(error),
            };
        }
        for (index, channel) in [(0, Channel::Stdout), (1, Channel::Stderr)] {
            if fds[index].fd >= 0 && fds[index].revents != 0 {
                self.read_once(index, channel);
            }
        }
        Ok((ready > 0, fds[2].fd >= 0 && fds[2].revents != 0))
    }

    /// One read of pipe `index`; its end closes it.
    fn read_once(&mut self, index: usize, channel: Channel) {
        let Some(pipe) = self.pipes[index].as_mut() else {
            return;
        };
        match pipe.read(&mut self.buffer) {
            Ok(0) => self.pipes[index] = None,
            Ok(n) => self.sink.write(channel, &self.buffer[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::warn!(
                    "cannot read the {channel:?} of {}: {e}; the rest of it is not kept",
                    self.sink.name
                );
                self.pipes[index] = None;
            }
        }
    }
}

/// How often the exit is looked for where no pidfd can wait for it.
const EXIT_POLL: Duration = Duration::from_millis(50);
