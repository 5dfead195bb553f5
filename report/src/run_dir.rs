//! Directories for runs, named by the time a run starts and claimed
//! atomically: two runs started in the same second get `NAME` and
//! `NAME-2`, never one directory (and one journal) between them.
//!
//! Beside them, a `latest` link names the newest, so that commands such as
//! `constellation report constellation-runs/latest/journal.db` keep
//! working from the second run on ([`create_latest_run_dir`]).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use thiserror::Error;

/// Numbered names tried after the plain one before giving up: far more runs
/// than start in one second, and a bound, so a directory that cannot be
/// written does not turn into an endless search.
const MAX_NUMBER: usize = 10_000;

/// Why no directory could be made for a run (or a pilot's allocation).
#[derive(Debug, Error)]
pub enum RunDirError {
    /// The file system refused (a missing permission, a full disk, a file
    /// where a directory should be).
    #[error("cannot create the directory {}: {source}", path.display())]
    Create {
        /// The directory that could not be made.
        path: PathBuf,
        /// The file system's error.
        source: io::Error,
    },
    /// The `latest` link could not be pointed at a new run directory (a
    /// file system without symbolic links, or a directory of that name).
    #[error("cannot point {} at {}: {source}", link.display(), dir.display())]
    Latest {
        /// The link.
        link: PathBuf,
        /// The run directory it should name.
        dir: PathBuf,
        /// The file system's error.
        source: io::Error,
    },
    /// `base` and all its numbered forms are taken.
    #[error("no free directory name in {}: `{base}` and `{base}-2` to `{base}-{MAX_NUMBER}` all exist; remove old ones", parent.display())]
    NoFreeName {
        /// Where the directories were looked for.
        parent: PathBuf,
        /// The name before numbering.
        base: String,
    },
}

/// Makes `parent/<prefix>-<UTC time>` for a run starting now, the time as
/// [`timefmt::path_timestamp`] writes it (`pipeline-20261125T141211Z`), or
/// the first free numbered form of it (see [`create_unique_dir`]).
pub fn create_run_dir(parent: &Path, prefix: &str) -> Result<PathBuf, RunDirError> {
    let base = format!("{prefix}-{}", timefmt::path_timestamp(SystemTime::now()));
    create_unique_dir(parent, &base)
}

/// Where `constellation run` makes run directories unless given a journal.
pub const RUNS_DIR: &str = "constellation-runs";

/// The name of the link, in a directory of runs, to the newest of them.
pub const LATEST: &str = "latest";

/// A run directory made by [`create_latest_run_dir`].
#[derive(Debug)]
pub struct LatestRunDir {
    /// The new directory.
    pub dir: PathBuf,
    /// Why the `latest` link could not be pointed at it, if it could not:
    /// a warning, as the run itself can go on.
    pub link_error: Option<RunDirError>,
}

/// [`create_run_dir`], then points `parent/latest` at the new directory.
///
/// The link's target is relative (the directory's name), so the tree can
/// be moved or copied, and it is replaced atomically (a link made under a
/// temporary name, then renamed over `latest`), so a reader never finds it
/// missing or broken. Runs that start at once each make their directory
/// and move the link while they hold a lock on `parent` (`flock`, released
/// when the process ends), so the link names the directory made last.
pub fn create_latest_run_dir(parent: &Path, prefix: &str) -> Result<LatestRunDir, RunDirError> {
    fs::create_dir_all(parent).map_err(|source| RunDirError::Create {
        path: parent.to_path_buf(),
        source,
    })?;
    // Without the lock (a file system that has none), the link is still
    // never broken; it may only name the second newest of two runs that
    // started together.
    let lock = fs::File::open(parent).and_then(|dir| dir.lock().map(|()| dir));
    let dir = create_run_dir(parent, prefix)?;
    let link_error = point_latest(parent, &dir).err();
    drop(lock);
    Ok(LatestRunDir { dir, link_error })
}

/// Points `parent/latest` at `dir` (a directory in `parent`), replacing
/// what it named before, atomically.
pub fn point_latest(parent: &Path, dir: &Path) -> Result<(), RunDirError> {
    /// Tells apart the temporary links of threads of one process.
    static NEXT_TEMPORARY: AtomicU64 = AtomicU64::new(0);
    let link = parent.join(LATEST);
    let failed = |source| RunDirError::Latest {
        link: link.clone(),
        dir: dir.to_path_buf(),
        source,
    };
    let Some(name) = dir.file_name() else {
        return Err(failed(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a run directory has a name",
        )));
    };
    let temporary = parent.join(format!(
        ".{LATEST}.{}.{}.tmp",
        std::process::id(),
        NEXT_TEMPORARY.fetch_add(1, Ordering::Relaxed)
    ));
    // One left by a process of the same id that died just here.
    let _ = fs::remove_file(&temporary);
    std::os::unix::fs::symlink(name, &temporary).map_err(failed)?;
    fs::rename(&temporary, &link).map_err(|source| {
        let _ = fs::remove_file(&temporary);
        failed(source)
    })
}

/// The run directories in `parent`: its subdirectories, not the
/// [`LATEST`] link nor hidden entries, by name. Missing `parent` is none.
pub fn run_dirs(parent: &Path) -> io::Result<Vec<PathBuf>> {
    let entries = match fs::read_dir(parent) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut dirs = Vec::new();
    for entry in entries {
        let entry = entry?;
        // The entry's own type: a link to a directory is not one.
        let is_dir = entry.file_type()?.is_dir();
        if is_dir && !entry.file_name().to_string_lossy().starts_with('.') {
            dirs.push(entry.path());
        }
    }
    dirs.sort();
    Ok(dirs)
}

/// Makes `parent/base`, or if another process has it, `parent/base-2`,
/// `parent/base-3`, ...: the first that `create_dir` makes, which the file
/// system grants to one caller only. `parent` is made if missing.
pub fn create_unique_dir(parent: &Path, base: &str) -> Result<PathBuf, RunDirError> {
    fs::create_dir_all(parent).map_err(|source| RunDirError::Create {
        path: parent.to_path_buf(),
        source,
    })?;
    for number in 1..=MAX_NUMBER {
        let dir = parent.join(numbered(base, number));
        match fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(source) => return Err(RunDirError::Create { path: dir, source }),
        }
    }
    Err(RunDirError::NoFreeName {
        parent: parent.to_path_buf(),
        base: base.to_string(),
    })
}

/// The directory [`create_unique_dir`] would make now, without making it:
/// for dry runs, and only for display, as another process may take the name
/// before a real run does.
pub fn next_free_dir(parent: &Path, base: &str) -> Result<PathBuf, RunDirError> {
    (1..=MAX_NUMBER)
        .map(|number| parent.join(numbered(base, number)))
        .find(|dir| !dir.exists())
        .ok_or_else(|| RunDirError::NoFreeName {
            parent: parent.to_path_buf(),
            base: base.to_string(),
        })
}

/// `base` for the first, `base-2` for the second, and so on.
fn numbered(base: &str, number: usize) -> String {
    if number <= 1 {
        base.to_string()
    } else {
        format!("{base}-{number}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("run-dir-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn taken_names_get_the_next_number() {
        let parent = scratch("numbers");
        let made: Vec<PathBuf> = (0..3)
            .map(|_| create_unique_dir(&parent, "pipeline-20261125T141211Z").unwrap())
            .collect();
        let names: Vec<_> = made
            .iter()
            .map(|d| d.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "pipeline-20261125T141211Z",
                "pipeline-20261125T141211Z-2",
                "pipeline-20261125T141211Z-3"
            ]
        );
        assert!(made.iter().all(|d| d.is_dir()));
        assert_eq!(
            next_free_dir(&parent, "pipeline-20261125T141211Z").unwrap(),
            parent.join("pipeline-20261125T141211Z-4")
        );
        fs::remove_dir_all(&parent).unwrap();
    }

    #[test]
    fn threads_racing_for_one_name_each_get_their_own() {
        let parent = scratch("race");
        let barrier = std::sync::Barrier::new(8);
        let made: Vec<PathBuf> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        create_unique_dir(&parent, "run").unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let distinct: std::collections::BTreeSet<_> = made.iter().collect();
        assert_eq!(distinct.len(), 8, "{made:?}");
        fs::remove_dir_all(&parent).unwrap();
    }

    #[test]
    fn run_dirs_are_named_by_the_utc_time_in_basic_iso_8601() {
        let parent = scratch("stamp");
        let dir = create_run_dir(&parent, "pipeline").unwrap();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let stamp = name.strip_prefix("pipeline-").unwrap();
        // 20261125T141211Z: eight digits, T, six digits, Z.
        assert_eq!(stamp.len(), 16, "{name}");
        assert!(stamp[..8].bytes().all(|b| b.is_ascii_digit()), "{name}");
        assert_eq!(&stamp[8..9], "T");
        assert!(stamp[9..15].bytes().all(|b| b.is_ascii_digit()), "{name}");
        assert!(stamp.ends_with('Z'), "{name}");
        fs::remove_dir_all(&parent).unwrap();
    }

    #[test]
    fn latest_names_the_newest_run_directory_by_a_relative_link() {
        let parent = scratch("latest");
        let first = create_latest_run_dir(&parent, "g").unwrap();
        assert!(first.link_error.is_none(), "{:?}", first.link_error);
        let second = create_latest_run_dir(&parent, "g").unwrap();
        assert!(second.link_error.is_none(), "{:?}", second.link_error);
        let link = parent.join(LATEST);
        assert_eq!(
            fs::read_link(&link).unwrap(),
            PathBuf::from(second.dir.file_name().unwrap())
        );
        assert_eq!(
            fs::canonicalize(&link).unwrap(),
            fs::canonicalize(&second.dir).unwrap()
        );
        // The link and no temporary one is left beside the runs.
        assert_eq!(run_dirs(&parent).unwrap(), [first.dir, second.dir]);
        assert_eq!(fs::read_dir(&parent).unwrap().count(), 3);
        fs::remove_dir_all(&parent).unwrap();
    }

    #[test]
    fn runs_started_at_once_leave_latest_at_the_directory_made_last() {
        let parent = scratch("latest-race");
        let barrier = std::sync::Barrier::new(8);
        let watching = std::sync::atomic::AtomicBool::new(true);
        std::thread::scope(|s| {
            // A reader that must never find the link missing or broken
            // once it is there.
            let reader = s.spawn(|| {
                let link = parent.join(LATEST);
                loop {
                    // Read before the check, so that the last check comes
                    // after every maker is done.
                    let makers_done = !watching.load(Ordering::Acquire);
                    if fs::symlink_metadata(&link).is_ok() {
                        assert!(link.is_dir(), "{link:?} is broken");
                    }
                    if makers_done {
                        break;
                    }
                }
            });
            let makers: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        create_latest_run_dir(&parent, "g")
                    })
                })
                .collect();
            let made: Vec<_> = makers.into_iter().map(|m| m.join()).collect();
            // Before any assertion, or a failure would leave the reader
            // spinning and the scope waiting for it.
            watching.store(false, Ordering::Release);
            reader.join().unwrap();
            for made in made {
                let made = made.unwrap().unwrap();
                assert!(made.link_error.is_none(), "{:?}", made.link_error);
            }
        });
        // Made last: the directory with the highest number, as the lock
        // serialises making and linking.
        let dirs = run_dirs(&parent).unwrap();
        assert_eq!(dirs.len(), 8);
        let newest = dirs
            .iter()
            .max_by_key(|d| {
                // `g-<stamp>` or `g-<stamp>-<number>`: by time, then number.
                let name = d.file_name().unwrap().to_string_lossy().into_owned();
                let rest = name.strip_prefix("g-").unwrap().to_string();
                let (stamp, number) = rest.split_at(16);
                let number: usize = number.strip_prefix('-').map_or(1, |n| n.parse().unwrap());
                (stamp.to_string(), number)
            })
            .unwrap();
        assert_eq!(
            fs::read_link(parent.join(LATEST)).unwrap(),
            PathBuf::from(newest.file_name().unwrap())
        );
        fs::remove_dir_all(&parent).unwrap();
    }

    #[test]
    fn a_directory_named_latest_is_a_warning_not_a_failure() {
        let parent = scratch("latest-blocked");
        fs::create_dir_all(parent.join(LATEST).join("mine")).unwrap();
        let made = create_latest_run_dir(&parent, "g").unwrap();
        assert!(made.dir.is_dir());
        let error = made
            .link_error
            .expect("the link cannot replace a directory");
        assert!(error.to_string().contains("latest"), "{error}");
        // No temporary link is left behind.
        let names: Vec<_> = fs::read_dir(&parent)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
        fs::remove_dir_all(&parent).unwrap();
    }

    #[test]
    fn a_file_in_the_way_is_an_error_naming_it() {
        let parent = scratch("blocked");
        fs::create_dir_all(&parent).unwrap();
        let file = parent.join("file");
        fs::write(&file, "").unwrap();
        let err = create_unique_dir(&file, "run").unwrap_err();
        assert!(err.to_string().contains("file"), "{err}");
        fs::remove_dir_all(&parent).unwrap();
    }
}
