//! Allocation directories: one per pilot submission.
//!
//! Each submission gets its own directory under the allocation root
//! (`$CONSTELLATION_HOME/allocations`, else `~/.constellation/allocations`)
//! named `<backend>-<stamp>` (with `-1`, `-2`, ... appended if taken):
//!
//! | file         | what                                                         |
//! |--------------|--------------------------------------------------------------|
//! | `state.json` | [`AllocationRecord`]: job id, state, errors                  |
//! | `pilot.sh`   | the generated pilot script (mode 755)                        |
//! | `cancel.sh`  | ssh/local only: stops the agents                             |
//! | `stdout`     | pilot stdout (batch system output, or the ssh/local pilot's) |
//! | `stderr`     | pilot stderr                                                 |
//! | `pids`       | ssh/local only: `host:pid` per started agent                 |
//!
//! The directory doubles as the record the CLI's `list` and `cancel` work
//! from, so it must live on a file system the login node keeps (and, for
//! Slurm/PBS/ssh, that the compute nodes share, as they write the logs).
//! `state.json` is replaced atomically (temp file + rename) so a crash or a
//! concurrent `glidein list` never sees half a file.

use std::ffi::OsString;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::glidein::runner::CommandLine;
use crate::glidein::spec::Backend;
use crate::glidein::state::JobState;
use report::run_dir::{self, RunDirError};

/// Environment variable naming constellation's home directory.
pub const HOME_ENV: &str = "CONSTELLATION_HOME";
/// Subdirectory of the home directory that holds allocations.
pub const ALLOCATIONS_DIR: &str = "allocations";
/// The state file in each allocation directory.
pub const STATE_FILE: &str = "state.json";
/// The generated pilot script.
pub const PILOT_SCRIPT: &str = "pilot.sh";
/// The generated cancel script (ssh and local backends).
pub const CANCEL_SCRIPT: &str = "cancel.sh";
/// Pilot standard output.
pub const STDOUT_FILE: &str = "stdout";
/// Pilot standard error.
pub const STDERR_FILE: &str = "stderr";
/// `host:pid` lines for agents started by the ssh and local backends.
pub const PIDS_FILE: &str = "pids";
/// Exit status written by the local pilot when all its agents are done.
pub const EXIT_STATUS_FILE: &str = "exit_status";
/// Pid of the local pilot script itself.
pub const PILOT_PID_FILE: &str = "pilot.pid";
/// How many allocation directories `prune` keeps by default.
pub const DEFAULT_KEEP: usize = 20;

/// Problems with allocation directories.
#[derive(Debug, Error)]
pub enum AllocError {
    /// Neither `$CONSTELLATION_HOME` nor `$HOME` is set.
    #[error("cannot tell where to keep allocations: neither CONSTELLATION_HOME nor HOME is set; set CONSTELLATION_HOME to a directory on a shared file system")]
    NoHome,
    /// A file system operation failed.
    #[error("could not {action} {}: {source}", path.display())]
    Io {
        /// What we were doing (`create directory`, `read`, ...).
        action: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// `state.json` exists but is not a valid record.
    #[error("state file {} is corrupt ({source}); repair it, or delete the directory {} if that allocation is no longer needed", path.display(), path.parent().unwrap_or(Path::new(".")).display())]
    Corrupt {
        /// The state file.
        path: PathBuf,
        /// What the JSON parser found.
        source: serde_json::Error,
    },
    /// The directory has no `state.json`.
    #[error("{} is not an allocation directory (it has no {STATE_FILE})", .0.display())]
    NotAllocation(PathBuf),
    /// The stamp would make an unsafe directory name.
    #[error("invalid allocation stamp `{0}`: use only letters, digits, `-`, `_` and `.`")]
    BadStamp(String),
    /// No directory could be made for a new allocation: the file system
    /// refused, or every `<backend>-<stamp>-<n>` name is taken.
    #[error(transparent)]
    Dir(#[from] RunDirError),
}

/// Shorthand for building [`AllocError::Io`] in `map_err`.
fn io_err(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> AllocError {
    let path = path.to_path_buf();
    move |source| AllocError::Io {
        action,
        path,
        source,
    }
}

/// The contents of `state.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllocationRecord {
    /// The directory name, e.g. `slurm-20240612T091401Z`.
    pub id: String,
    /// Which backend started it.
    pub backend: Backend,
    /// Batch job id (`12345`, `12345;cluster`, `123.server`), or the local
    /// pilot's pid; `None` for ssh (see the pids file) or before submission.
    pub job_id: Option<String>,
    /// When it was submitted, in UNIX seconds.
    pub submitted_at: f64,
    /// Last known state.
    pub state: JobState,
    /// Nodes requested.
    pub nodes: usize,
    /// Job walltime in seconds.
    pub walltime_secs: u64,
    /// Hosts (ssh backend).
    #[serde(default)]
    pub hosts: Vec<String>,
    /// The user's `ssh -o` options (ssh backend), kept for the state
    /// queries that `glidein list` makes later.
    #[serde(default)]
    pub ssh_options: Vec<String>,
    /// The most recent error (submission, query or cancel), if any.
    #[serde(default)]
    pub last_error: Option<String>,
    /// How many times submission was attempted for this directory.
    #[serde(default)]
    pub attempts: u32,
    /// The exact submit command, so it can be shown and retried.
    #[serde(default)]
    pub submit_command: Option<CommandLine>,
}

/// An allocation directory and its loaded record.
#[derive(Debug, Clone, PartialEq)]
pub struct Allocation {
    dir: PathBuf,
    /// The state record; call [`Allocation::save`] after changing it.
    pub record: AllocationRecord,
}

impl Allocation {
    /// The allocation directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The allocation id (directory name).
    pub fn id(&self) -> &str {
        &self.record.id
    }

    /// Path of a file inside the allocation directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Writes `state.json` atomically.
    pub fn save(&self) -> Result<(), AllocError> {
        let path = self.path(STATE_FILE);
        let mut json = serde_json::to_vec_pretty(&self.record).expect("record serializes");
        json.push(b'\n');
        write_atomic(&path, &json)
    }

    /// Writes an executable script (mode 755) into the directory and
    /// returns its path.
    pub fn write_script(&self, name: &str, text: &str) -> Result<PathBuf, AllocError> {
        let path = self.path(name);
        write_atomic(&path, text.as_bytes())?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755))
            .map_err(io_err("make executable", &path))?;
        Ok(path)
    }

    /// Overwrites a plain file (e.g. the pilot's stdout) in the directory.
    pub fn write_file(&self, name: &str, bytes: &[u8]) -> Result<(), AllocError> {
        let path = self.path(name);
        fs::write(&path, bytes).map_err(io_err("write", &path))
    }

    /// Reads an optional file in the directory: `Ok(None)` if absent.
    pub fn read_file(&self, name: &str) -> Result<Option<String>, AllocError> {
        let path = self.path(name);
        match fs::read(&path) {
            Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err("read", &path)(e)),
        }
    }
}

/// The allocation root from the environment: `$CONSTELLATION_HOME/allocations`
/// or `$HOME/.constellation/allocations`.
pub fn default_root() -> Result<PathBuf, AllocError> {
    root_from(std::env::var_os(HOME_ENV), std::env::var_os("HOME"))
}

/// [`default_root`] with the variables passed in (empty counts as unset).
pub fn root_from(
    constellation_home: Option<OsString>,
    home: Option<OsString>,
) -> Result<PathBuf, AllocError> {
    let set = |v: Option<OsString>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = set(constellation_home) {
        return Ok(dir.join(ALLOCATIONS_DIR));
    }
    set(home)
        .map(|h| h.join(".constellation").join(ALLOCATIONS_DIR))
        .ok_or(AllocError::NoHome)
}

/// Creates a fresh, uniquely named allocation directory
/// `<root>/<backend>-<stamp>[-n]` with an initial `state.json` (state
/// `Pending`, so a concurrent `prune` leaves it alone) and empty `stdout`
/// and `stderr`. The name is claimed atomically
/// ([`run_dir::create_unique_dir`]), so two submissions in the same second
/// get `-2` and `-3` rather than one directory.
pub fn create(root: &Path, backend: Backend, stamp: &str) -> Result<Allocation, AllocError> {
    validate_stamp(stamp)?;
    let base = format!("{}-{stamp}", backend.name());
    let dir = run_dir::create_unique_dir(root, &base)?;
    let id = dir
        .file_name()
        .map_or(base, |name| name.to_string_lossy().into_owned());
    let alloc = Allocation {
        dir,
        record: AllocationRecord {
            id,
            backend,
            job_id: None,
            submitted_at: unix_now(),
            state: JobState::Pending,
            nodes: 0,
            walltime_secs: 0,
            hosts: Vec::new(),
            ssh_options: Vec::new(),
            last_error: None,
            attempts: 0,
            submit_command: None,
        },
    };
    alloc.save()?;
    alloc.write_file(STDOUT_FILE, b"")?;
    alloc.write_file(STDERR_FILE, b"")?;
    Ok(alloc)
}

/// The directory name that `create` would pick now (for dry runs); racy by
/// nature, so only for display.
pub fn next_dir(root: &Path, backend: Backend, stamp: &str) -> Result<PathBuf, AllocError> {
    validate_stamp(stamp)?;
    let base = format!("{}-{stamp}", backend.name());
    Ok(run_dir::next_free_dir(root, &base)?)
}

fn validate_stamp(stamp: &str) -> Result<(), AllocError> {
    let ok = !stamp.is_empty()
        && !stamp.starts_with('.')
        && stamp
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(AllocError::BadStamp(stamp.to_string()))
    }
}

/// Loads the allocation in `dir`.
pub fn load(dir: &Path) -> Result<Allocation, AllocError> {
    let path = dir.join(STATE_FILE);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(AllocError::NotAllocation(dir.to_path_buf()))
        }
        Err(e) => return Err(io_err("read", &path)(e)),
    };
    let mut record: AllocationRecord =
        serde_json::from_slice(&bytes).map_err(|source| AllocError::Corrupt { path, source })?;
    // The directory name is the id; trust it over a copied or edited file.
    if let Some(name) = dir.file_name().and_then(|n| n.to_str()) {
        record.id = name.to_string();
    }
    Ok(Allocation {
        dir: dir.to_path_buf(),
        record,
    })
}

/// Everything found under an allocation root.
#[derive(Debug, Default)]
pub struct Scan {
    /// Readable allocations, newest first.
    pub allocations: Vec<Allocation>,
    /// Directories with a `state.json` that could not be read or parsed.
    pub unreadable: Vec<AllocError>,
}

/// Reads every allocation under `root`, newest first, and reports the
/// unreadable ones separately so one corrupt file does not hide the rest.
/// A missing root is an empty scan.
pub fn scan(root: &Path) -> Result<Scan, AllocError> {
    let entries = match fs::read_dir(root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Scan::default()),
        Err(e) => return Err(io_err("list", root)(e)),
    };
    let mut found = Scan::default();
    for entry in entries {
        let dir = entry.map_err(io_err("list", root))?.path();
        // Other files (backoff state, temp files) and foreign directories
        // without a state file are not allocations.
        if !dir.join(STATE_FILE).is_file() {
            continue;
        }
        match load(&dir) {
            Ok(alloc) => found.allocations.push(alloc),
            Err(e) => found.unreadable.push(e),
        }
    }
    found.allocations.sort_by(|a, b| {
        b.record
            .submitted_at
            .total_cmp(&a.record.submitted_at)
            .then_with(|| b.record.id.cmp(&a.record.id))
    });
    Ok(found)
}

/// The readable allocations under `root`, newest first (see [`scan`] for
/// the unreadable ones).
pub fn list(root: &Path) -> Result<Vec<Allocation>, AllocError> {
    Ok(scan(root)?.allocations)
}

/// Deletes the oldest allocation directories beyond the newest `keep`,
/// except active ones (pending, running, finishing: the batch system may
/// still write into them) and unreadable ones (we cannot tell). Returns the
/// deleted directories.
pub fn prune(root: &Path, keep: usize) -> Result<Vec<PathBuf>, AllocError> {
    let mut removed = Vec::new();
    for alloc in scan(root)?.allocations.into_iter().skip(keep) {
        if alloc.record.state.is_active() {
            continue;
        }
        fs::remove_dir_all(alloc.dir()).map_err(io_err("delete", alloc.dir()))?;
        removed.push(alloc.dir);
    }
    Ok(removed)
}

/// Counter making temp file names unique within this process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to `path` via a temp file in the same directory and a
/// rename, so readers see either the old or the new content, never a mix.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), AllocError> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = path.with_file_name(format!(
        ".{name}.tmp.{}.{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = write_and_sync(&tmp, bytes).and_then(|()| fs::rename(&tmp, path));
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp); // best effort; the real error matters
        return Err(io_err("write", path)(e));
    }
    Ok(())
}

fn write_and_sync(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = fs::File::create(path)?;
    file.write_all(bytes)?;
    // Without the sync a crash can leave the renamed file empty.
    file.sync_all()
}

/// The current time in UNIX seconds.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
pub(crate) mod testing {
    //! Temporary directories and executable scripts for tests, without the
    //! tempfile crate.

    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Writes `text` to `path` as an executable script that can be run at
    /// once, even by a shell that does not retry.
    ///
    /// Written in place, any sibling test thread that forks between our open
    /// and close inherits the write descriptor until its exec, and running
    /// the script in that moment fails with "Text file busy". So the text is
    /// staged under another name and `cp`, a process that starts nothing,
    /// writes the script itself.
    pub(crate) fn write_executable(path: &Path, text: &str) {
        let mut staged = path.as_os_str().to_owned();
        staged.push(".staged");
        std::fs::write(&staged, text).unwrap();
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o755)).unwrap();
        let copied = std::process::Command::new("cp")
            .arg(&staged)
            .arg(path)
            .status()
            .unwrap();
        assert!(copied.success(), "cp {staged:?} {path:?}: {copied}");
        std::fs::remove_file(&staged).unwrap();
    }

    static COUNTER: AtomicU64 = AtomicU64::new(0);

    /// A fresh directory under the system temp dir, removed on drop.
    pub(crate) struct TempDir(PathBuf);

    impl TempDir {
        pub(crate) fn new(label: &str) -> Self {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let dir = std::env::temp_dir()
                .join(format!("glidein-test-{}-{label}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }

        pub(crate) fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::TempDir;
    use super::*;

    fn finished(alloc: &mut Allocation, at: f64) {
        alloc.record.submitted_at = at;
        alloc.record.state = JobState::Finished { exit: Some(0) };
        alloc.save().unwrap();
    }

    #[test]
    fn create_makes_unique_dirs_with_files() {
        let tmp = TempDir::new("create");
        let root = tmp.path().join("allocations");
        let a = create(&root, Backend::Slurm, "20240612T091401Z").unwrap();
        let b = create(&root, Backend::Slurm, "20240612T091401Z").unwrap();
        let c = create(&root, Backend::Slurm, "20240612T091401Z").unwrap();
        assert_eq!(a.id(), "slurm-20240612T091401Z");
        assert_eq!(b.id(), "slurm-20240612T091401Z-2");
        assert_eq!(c.id(), "slurm-20240612T091401Z-3");
        for name in [STATE_FILE, STDOUT_FILE, STDERR_FILE] {
            assert!(a.path(name).is_file(), "{name}");
        }
        let loaded = load(a.dir()).unwrap();
        assert_eq!(loaded, a);
        assert_eq!(loaded.record.state, JobState::Pending);
    }

    #[test]
    fn scripts_are_executable() {
        let tmp = TempDir::new("script");
        let a = create(tmp.path(), Backend::Local, "s").unwrap();
        let path = a.write_script(PILOT_SCRIPT, "#!/bin/bash\n").unwrap();
        let mode = fs::metadata(path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755);
    }

    #[test]
    fn bad_stamps_are_rejected() {
        let tmp = TempDir::new("stamp");
        for bad in ["", "../x", "a/b", ".hidden", "a b"] {
            let err = create(tmp.path(), Backend::Ssh, bad).unwrap_err();
            assert!(matches!(err, AllocError::BadStamp(_)), "{bad}: {err}");
        }
    }

    #[test]
    fn list_is_newest_first_and_skips_foreign_entries() {
        let tmp = TempDir::new("list");
        let root = tmp.path();
        assert!(list(&root.join("missing")).unwrap().is_empty());
        for (i, stamp) in ["a", "b", "c"].iter().enumerate() {
            let mut a = create(root, Backend::Pbs, stamp).unwrap();
            finished(&mut a, 1_000.0 + i as f64);
        }
        fs::create_dir(root.join("not-an-allocation")).unwrap();
        fs::write(root.join("backoff-pbs.json"), "{}").unwrap();
        let ids: Vec<_> = list(root)
            .unwrap()
            .iter()
            .map(|a| a.id().to_string())
            .collect();
        assert_eq!(ids, ["pbs-c", "pbs-b", "pbs-a"]);
    }

    #[test]
    fn corrupt_state_is_reported_with_its_path() {
        let tmp = TempDir::new("corrupt");
        let root = tmp.path();
        let good = create(root, Backend::Slurm, "good").unwrap();
        let bad = create(root, Backend::Slurm, "bad").unwrap();
        fs::write(
            bad.path(STATE_FILE),
            "{\"id\": \"slurm-bad\", \"backend\": ",
        )
        .unwrap();
        let err = load(bad.dir()).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("slurm-bad/state.json") && msg.contains("corrupt"),
            "{msg}"
        );
        assert!(msg.contains("delete the directory"), "{msg}");
        let scanned = scan(root).unwrap();
        assert_eq!(scanned.allocations.len(), 1);
        assert_eq!(scanned.allocations[0].id(), good.id());
        assert_eq!(scanned.unreadable.len(), 1);
        // Wrong type, not just truncated JSON.
        fs::write(bad.path(STATE_FILE), "[1, 2]").unwrap();
        assert!(matches!(load(bad.dir()), Err(AllocError::Corrupt { .. })));
        // Prune never deletes what it cannot read.
        prune(root, 0).unwrap();
        assert!(bad.dir().exists());
    }

    #[test]
    fn load_of_a_plain_directory_says_so() {
        let tmp = TempDir::new("plain");
        let msg = load(tmp.path()).unwrap_err().to_string();
        assert!(msg.contains("not an allocation directory"), "{msg}");
    }

    #[test]
    fn prune_keeps_newest_and_active() {
        let tmp = TempDir::new("prune");
        let root = tmp.path();
        let mut dirs = Vec::new();
        for i in 0..6 {
            let mut a = create(root, Backend::Slurm, &format!("t{i}")).unwrap();
            finished(&mut a, 100.0 + f64::from(i));
            dirs.push(a);
        }
        // The two oldest are still active and must survive.
        dirs[0].record.state = JobState::Running;
        dirs[0].save().unwrap();
        dirs[1].record.state = JobState::Pending;
        dirs[1].save().unwrap();
        let removed = prune(root, 2).unwrap();
        assert_eq!(
            removed,
            vec![dirs[3].dir().to_path_buf(), dirs[2].dir().to_path_buf()]
        );
        let ids: Vec<_> = list(root)
            .unwrap()
            .iter()
            .map(|a| a.id().to_string())
            .collect();
        assert_eq!(ids, ["slurm-t5", "slurm-t4", "slurm-t1", "slurm-t0"]);
        assert!(prune(root, DEFAULT_KEEP).unwrap().is_empty());
    }

    #[test]
    fn save_is_atomic_and_leaves_no_temp_files() {
        let tmp = TempDir::new("atomic");
        let mut a = create(tmp.path(), Backend::Local, "x").unwrap();
        for i in 0..5 {
            a.record.attempts = i;
            a.save().unwrap();
        }
        assert_eq!(load(a.dir()).unwrap().record.attempts, 4);
        let names: Vec<_> = fs::read_dir(a.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| !n.contains(".tmp.")), "{names:?}");
    }

    #[test]
    fn root_prefers_constellation_home() {
        let r = root_from(Some("/c".into()), Some("/h".into())).unwrap();
        assert_eq!(r, Path::new("/c/allocations"));
        let r = root_from(Some("".into()), Some("/h".into())).unwrap();
        assert_eq!(r, Path::new("/h/.constellation/allocations"));
        assert!(matches!(root_from(None, None), Err(AllocError::NoHome)));
    }
}
