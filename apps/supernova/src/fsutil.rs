//! Small file-system helpers shared by the writers.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Distinguishes temporary files made by concurrent writers in one process;
/// the process id distinguishes them between processes.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh hidden name next to `path`. It sits in the same directory so that
/// the final rename stays on one file system and is atomic.
pub(crate) fn temp_sibling(path: &Path) -> PathBuf {
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = format!(".{name}.{}-{n}.tmp", std::process::id());
    path.with_file_name(tmp)
}

/// Writes `bytes` to `path` through a temporary sibling and a rename, so a
/// crash leaves either the old file or the new one, never half of one.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = temp_sibling(path);
    let result = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    if result.is_err() {
        // Best effort: the original error is the one worth reporting.
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Copies `from` to `to` atomically (see [`write_atomic`]).
pub(crate) fn copy_atomic(from: &Path, to: &Path) -> io::Result<()> {
    let tmp = temp_sibling(to);
    let result = std::fs::copy(from, &tmp).and_then(|_| std::fs::rename(&tmp, to));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// A fresh empty directory under the system temp directory, for tests;
/// removed again when dropped.
#[cfg(test)]
pub(crate) struct TestDir(PathBuf);

#[cfg(test)]
impl std::ops::Deref for TestDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

#[cfg(test)]
impl AsRef<Path> for TestDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

#[cfg(test)]
impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Makes a [`TestDir`]; `label` and the process id keep runs apart.
#[cfg(test)]
pub(crate) fn test_dir(label: &str) -> TestDir {
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("sna-{label}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("creating a test directory");
    TestDir(dir)
}
