//! Waiting for a child to exit without reaping it, so that its pid (and
//! with it its process group's id) cannot be reused while what it left
//! behind is sought: through a pidfd where the kernel has them, else by
//! asking `waitid` with `WNOWAIT` at growing intervals.

use std::io;
use std::time::{Duration, Instant};

/// Waits until the unreaped child `pid` has exited, without reaping it.
/// Returns `false` if the deadline passed first.
pub(crate) fn wait_for_exit(pid: libc::pid_t, deadline: Option<Instant>) -> io::Result<bool> {
    match PidFd::open(pid) {
        Some(pidfd) => pidfd.wait(deadline),
        None => poll_exit(pid, deadline),
    }
}

/// A pidfd: a file descriptor that becomes readable when the process
/// exits, so waiting with a deadline needs no polling (Linux ≥ 5.3).
struct PidFd(libc::c_int);

impl PidFd {
    fn open(pid: libc::pid_t) -> Option<PidFd> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        (fd >= 0).then_some(PidFd(fd as libc::c_int))
    }

    fn wait(&self, deadline: Option<Instant>) -> io::Result<bool> {
        loop {
            let timeout_ms = match deadline {
                None => -1,
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    // Round up, so a deadline 0.3 ms away is not a busy loop.
                    left.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int
                }
            };
            let mut poll = libc::pollfd {
                fd: self.0,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd for the duration of the call.
            let ready = unsafe { libc::poll(&mut poll, 1, timeout_ms) };
            match ready {
                1.. => return Ok(true),
                0 if deadline.is_some_and(|d| Instant::now() >= d) => return Ok(false),
                0 => continue,
                _ => {
                    let error = io::Error::last_os_error();
                    if error.kind() != io::ErrorKind::Interrupted {
                        return Err(error);
                    }
                }
            }
        }
    }
}

impl Drop for PidFd {
    fn drop(&mut self) {
        // SAFETY: the fd is owned by this value and closed once.
        unsafe { libc::close(self.0) };
    }
}

/// The fallback for kernels without pidfds: ask whether the process has
/// exited, leaving it unreaped, with waits that grow from 1 ms to 50 ms.
fn poll_exit(pid: libc::pid_t, deadline: Option<Instant>) -> io::Result<bool> {
    let mut pause = Duration::from_millis(1);
    loop {
        // SAFETY: siginfo_t is plain data; waitid fills it in.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: a valid pid and out-pointer; WNOWAIT leaves the child unreaped.
        let result = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        if result < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(error);
        }
        // SAFETY: after a successful waitid the pid field is initialised;
        // it stays 0 while the child runs.
        if unsafe { info.si_pid() } != 0 {
            return Ok(true);
        }
        if let Some(deadline) = deadline {
            if Instant::now() >= deadline {
                return Ok(false);
            }
            pause = pause.min(deadline.saturating_duration_since(Instant::now()));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}
