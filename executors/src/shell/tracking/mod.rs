//! Tracking every process a command starts, so that none outlives it.
//!
//! A process group does not hold a command's descendants: one that calls
//! `setsid` leaves it, and killing the group misses it. Two mechanisms
//! catch such processes:
//!
//! - **cgroup v2**, where this process's own cgroup lies on a cgroup2
//!   hierarchy it may create cgroups in (as root, or in a subtree that
//!   systemd or a container delegates). Each command runs in a cgroup of its
//!   own, as Slurm's `proctrack/cgroup` does: the child joins it before its
//!   `exec`, nothing it starts can leave it without privileges, and
//!   `cgroup.kill` ends all of them at once (Linux ≥ 5.14; before, every
//!   process `cgroup.procs` lists is killed until none is left).
//! - **Child subreaper**, elsewhere. The executor's process marks itself a
//!   child subreaper (`PR_SET_CHILD_SUBREAPER`), so a command's orphans are
//!   reparented to it instead of to init. Every command carries a token of
//!   its own in [`TOKEN_VAR`], which its descendants inherit; when the command
//!   ends, the executor kills the reparented processes that carry the token,
//!   or share the command's process group or the session of one it killed,
//!   and reaps them. A descendant that clears its environment and leaves the
//!   session escapes this mechanism, not the cgroup one; and one that leaves
//!   the session and exits while its command still runs stays a zombie of
//!   this process, as a dead process's environment can no longer be read
//!   to tell whose it was (reaping an unknown zombie could take another
//!   thread's child from under its `wait`). The subreaper is process-wide:
//!   orphans of other children this process starts are adopted too.
//!
//! [`TRACKING_VAR`] picks one: `cgroup`, `subreaper` or `auto` (the default:
//! cgroup v2 where it works, else the subreaper).

mod cgroup;
mod subreaper;

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use super::launch::Launch;
use cgroup::{kill_cgroup, own_cgroup_dir, remove_cgroup, remove_stale_cgroups};
use subreaper::{become_subreaper, kill_orphans};

/// The environment variable that picks how commands are tracked:
/// `cgroup`, `subreaper` or `auto` (the default).
pub const TRACKING_VAR: &str = "CONSTELLATION_PROCESS_TRACKING";

/// The environment variable that carries each command's token, so that the
/// subreaper can tell the command's orphans from other processes'.
pub const TOKEN_VAR: &str = "CONSTELLATION_COMMAND_TOKEN";

/// How long ending a command waits for its processes to die. SIGKILL is
/// not refused, but a process in uninterruptible sleep (a hung NFS read)
/// dies only when the sleep ends.
const KILL_PATIENCE: Duration = Duration::from_secs(10);

/// How this process keeps track of the processes its commands start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessTracking {
    /// Every command in a cgroup of its own, created under this directory
    /// (this process's own cgroup).
    Cgroup {
        /// The cgroup2 directory the commands' cgroups are created in.
        parent: PathBuf,
    },
    /// This process is a child subreaper and kills the orphans that carry
    /// a command's token.
    Subreaper,
}

impl ProcessTracking {
    /// The mechanism for this process, decided once from [`TRACKING_VAR`]
    /// and what the machine allows.
    pub fn current() -> &'static ProcessTracking {
        static CURRENT: OnceLock<ProcessTracking> = OnceLock::new();
        CURRENT.get_or_init(|| {
            let wanted = std::env::var(TRACKING_VAR).unwrap_or_default();
            let tracking = match wanted.as_str() {
                "subreaper" => ProcessTracking::Subreaper,
                "cgroup" | "auto" | "" => match ProcessTracking::cgroup() {
                    Ok(tracking) => tracking,
                    Err(why) => {
                        if wanted == "cgroup" {
                            tracing::warn!("{TRACKING_VAR}=cgroup, but {why}; commands are tracked as a child subreaper instead");
                        } else {
                            tracing::debug!("commands are tracked as a child subreaper: {why}");
                        }
                        ProcessTracking::Subreaper
                    }
                },
                other => {
                    tracing::warn!("{TRACKING_VAR}={other:?} is none of cgroup, subreaper, auto; using auto");
                    ProcessTracking::cgroup().unwrap_or(ProcessTracking::Subreaper)
                }
            };
            if let ProcessTracking::Cgroup { parent } = &tracking {
                remove_stale_cgroups(parent);
            }
            tracing::debug!(?tracking, "how commands are tracked");
            tracking
        })
    }

    /// Cgroup v2 tracking under this process's own cgroup, if a command can
    /// really be started in a cgroup created there; or why not.
    pub fn cgroup() -> Result<ProcessTracking, String> {
        let parent = own_cgroup_dir()?;
        let tracking = ProcessTracking::Cgroup { parent };
        // Creating a cgroup is not enough: moving a process needs write
        // access to the common ancestor's `cgroup.procs` as well.
        let mut probe = Launch::new(&["/bin/sh", "-c", ":"]);
        let tracked = tracking
            .track(&mut probe)
            .map_err(|e| format!("no cgroup can be created: {e}"))?;
        let started = probe
            .start()
            .map_err(|e| format!("a process cannot join a new cgroup: {e}"))?;
        let mut status = 0;
        // SAFETY: `started.pid` is our unreaped child; a valid out-pointer.
        let reaped = unsafe { libc::waitpid(started.pid, &mut status, 0) };
        tracked.finish(0);
        if reaped != started.pid || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
            return Err(format!(
                "a probe in a new cgroup ended with wait status {status:#x}"
            ));
        }
        Ok(tracking)
    }

    /// Prepares `command` (which runs `program`) to be tracked, as a
    /// child subreaper where its cgroup cannot be created; an error if
    /// neither can track it.
    pub(crate) fn track_or_subreaper(
        &self,
        command: &mut Launch,
        program: &str,
    ) -> io::Result<Tracked> {
        match self.track(command) {
            Ok(tracked) => Ok(tracked),
            Err(error) => {
                tracing::warn!(
                    "cannot create a cgroup for {program}: {error}; tracking it as a child subreaper instead"
                );
                ProcessTracking::Subreaper.track(command)
            }
        }
    }

    /// Prepares `command` to be tracked: gives it a token and, with
    /// cgroups, a cgroup to join before its `exec`.
    fn track(&self, command: &mut Launch) -> io::Result<Tracked> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let token = format!(
            "{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        command.env(TOKEN_VAR, &token);
        let cgroup = match self {
            ProcessTracking::Cgroup { parent } => {
                let dir = parent.join(format!("constellation-{token}"));
                // One call in the common case, no check before it.
                if let Err(error) = std::fs::create_dir(&dir) {
                    if error.kind() != io::ErrorKind::AlreadyExists {
                        return Err(error);
                    }
                    // Left by a process that died with our pid before us.
                    kill_cgroup(&dir);
                    let _ = std::fs::remove_dir(&dir);
                    std::fs::create_dir(&dir)?;
                }
                // The child writes itself into it before its exec, without
                // a fork (see `launch`), so before it can start anything.
                command.cgroup_procs = Some(dir.join("cgroup.procs"));
                Some(dir)
            }
            ProcessTracking::Subreaper => {
                become_subreaper();
                None
            }
        };
        Ok(Tracked { token, cgroup })
    }
}

/// One command's tracking: its token, and its cgroup when it has one.
pub(crate) struct Tracked {
    token: String,
    cgroup: Option<PathBuf>,
}

impl Tracked {
    /// Kills everything the command started. Call it after the leader
    /// (whose pid is `leader`, also its process group) has died but before
    /// it is reaped, so its pid, and with it the group's id, cannot be
    /// reused while the orphans are sought. Returns once they are dead and
    /// reaped, or after [`KILL_PATIENCE`].
    pub(crate) fn finish(mut self, leader: libc::pid_t) {
        match self.cgroup.take() {
            Some(dir) => {
                kill_cgroup(&dir);
                remove_cgroup(&dir);
            }
            None => kill_orphans(&self.token, leader),
        }
    }
}

impl Drop for Tracked {
    /// A command that never started leaves an empty cgroup to remove.
    fn drop(&mut self) {
        if let Some(dir) = self.cgroup.take() {
            remove_cgroup(&dir);
        }
    }
}

#[cfg(test)]
mod tests;
