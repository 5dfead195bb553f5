//! Directories for runs, named by the time a run starts and claimed
//! atomically: two runs started in the same second get `NAME` and
//! `NAME-2`, never one directory (and one journal) between them.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
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
