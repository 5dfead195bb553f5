//! Tracking by cgroup v2: each command in a cgroup of its own under this
//! process's cgroup, killed whole with `cgroup.kill` when it ends.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::KILL_PATIENCE;

/// The directory of this process's cgroup on the cgroup2 hierarchy, if
/// there is one and this process may create cgroups in it.
pub(super) fn own_cgroup_dir() -> Result<PathBuf, String> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("/proc/self/cgroup cannot be read: {e}"))?;
    let own = cgroups
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .ok_or("this process is in no cgroup v2 hierarchy")?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("/proc/self/mountinfo cannot be read: {e}"))?;
    // mountinfo: ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [TAGS] - TYPE SOURCE OPTIONS
    let dir = mounts
        .lines()
        .filter_map(|line| {
            let (fields, after) = line.split_once(" - ")?;
            if after.split(' ').next()? != "cgroup2" {
                return None;
            }
            let mut fields = fields.split(' ');
            let root = fields.nth(3)?;
            let mount_point = fields.next()?;
            let inside = own.strip_prefix(root.trim_end_matches('/'))?;
            Some(Path::new(mount_point).join(inside.trim_start_matches('/')))
        })
        .find(|dir| dir.join("cgroup.procs").exists())
        .ok_or("no mounted cgroup2 hierarchy holds this process's cgroup")?;
    let c_dir = CString::new(dir.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: a valid C string.
    if unsafe { libc::access(c_dir.as_ptr(), libc::W_OK) } != 0 {
        return Err(format!(
            "cgroup {} is not writable: {}",
            dir.display(),
            io::Error::last_os_error()
        ));
    }
    Ok(dir)
}

/// Kills every process in the cgroup at `dir` and waits until it is empty.
pub(super) fn kill_cgroup(dir: &Path) {
    // The common case: everything the command started has already ended.
    if !populated(dir) {
        return;
    }
    if std::fs::write(dir.join("cgroup.kill"), "1").is_err() {
        // Before Linux 5.14: kill what is listed until nothing is, since a
        // process may fork between the read and the kill.
        let deadline = Instant::now() + KILL_PATIENCE;
        while let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) {
            let pids: Vec<libc::pid_t> = procs.lines().filter_map(|l| l.parse().ok()).collect();
            if pids.is_empty() || Instant::now() > deadline {
                break;
            }
            for pid in pids {
                // SAFETY: kill has no memory effects; a pid that died meanwhile gives ESRCH.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let deadline = Instant::now() + KILL_PATIENCE;
    let mut pause = Duration::from_millis(1);
    while populated(dir) && Instant::now() < deadline {
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Kills and removes the command cgroups under `parent` whose process is
/// gone: one killed outright (SIGKILL, the OOM killer) or ended with
/// commands still running can clean up after neither.
pub(super) fn remove_stale_cgroups(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(owner) = name
            .to_str()
            .and_then(|n| n.strip_prefix("constellation-"))
            .and_then(|n| n.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{owner}")).exists() {
            continue;
        }
        tracing::info!(
            "removing cgroup {} of a process that is gone",
            name.to_string_lossy()
        );
        kill_cgroup(&entry.path());
        remove_cgroup(&entry.path());
    }
}

/// Whether the cgroup at `dir` still holds a live process.
fn populated(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("cgroup.events"))
        .map(|events| events.lines().any(|l| l == "populated 1"))
        .unwrap_or(false)
}

pub(super) fn remove_cgroup(dir: &Path) {
    if let Err(error) = std::fs::remove_dir(dir) {
        if error.kind() != io::ErrorKind::NotFound {
            tracing::warn!("cannot remove cgroup {}: {error}", dir.display());
        }
    }
}
