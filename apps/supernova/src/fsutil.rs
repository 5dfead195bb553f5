//! Small file-system helpers shared by the writers.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
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

/// Copies `input` into `output` (an empty file), both from offset 0, and
/// leaves holes where `input` has them: a sparse file stays sparse, where
/// a plain read-and-write loop would write out every zero of its holes.
/// Calls `after_write` with the data bytes written so far after each write
/// (to throttle the copy), and returns how many that was in all.
pub(crate) fn copy_sparse(
    input: &mut File,
    output: &mut File,
    mut after_write: impl FnMut(u64),
) -> io::Result<u64> {
    let length = input.metadata()?.len();
    let mut buffer = vec![0u8; 256 * 1024];
    let mut written = 0u64;
    let mut offset = 0u64;
    while offset < length {
        let Some((start, end)) = next_data(input, offset, length)? else {
            break;
        };
        input.seek(SeekFrom::Start(start))?;
        output.seek(SeekFrom::Start(start))?;
        let mut at = start;
        while at < end {
            let want = usize::try_from(end - at).map_or(buffer.len(), |n| n.min(buffer.len()));
            let n = input.read(&mut buffer[..want])?;
            if n == 0 {
                // The file shrank under the copy: copy what there is.
                break;
            }
            output.write_all(&buffer[..n])?;
            at += n as u64;
            written += n as u64;
            after_write(written);
        }
        offset = end;
    }
    // A hole at the end has no data to write; the length makes it.
    output.set_len(length)?;
    Ok(written)
}

/// The next run of data in `file` at or after `offset`, as `(start, end)`,
/// by `SEEK_DATA` and `SEEK_HOLE`; `None` if only a hole follows. A file
/// system that cannot tell holes yields the whole rest of the file.
fn next_data(file: &File, offset: u64, length: u64) -> io::Result<Option<(u64, u64)>> {
    let Some(start) = seek_to(file, offset, libc::SEEK_DATA)? else {
        return Ok(None);
    };
    // Every file ends in a hole (its end), so SEEK_HOLE finds one.
    let end = seek_to(file, start, libc::SEEK_HOLE)?.unwrap_or(length);
    Ok(Some((start, end.min(length))))
}

/// `lseek(file, from, whence)` for `SEEK_DATA` or `SEEK_HOLE`: `None` when
/// nothing of the kind follows `from` (ENXIO). A file system without hole
/// support (EINVAL) has data from `from` to the end, which is what the
/// kernel's own fallback reports as well.
fn seek_to(file: &File, from: u64, whence: libc::c_int) -> io::Result<Option<u64>> {
    let from_off = libc::off_t::try_from(from)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset past off_t"))?;
    // SAFETY: lseek on a descriptor `file` keeps open for the call; it only
    // moves the file offset, which the copy sets again before reading.
    let found = unsafe { libc::lseek(file.as_raw_fd(), from_off, whence) };
    if let Ok(found) = u64::try_from(found) {
        return Ok(Some(found));
    }
    let error = io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::ENXIO) => Ok(None),
        Some(libc::EINVAL) if whence == libc::SEEK_DATA => Ok(Some(from)),
        Some(libc::EINVAL) => Ok(None),
        _ => Err(error),
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// Bytes of disk a file takes (`st_blocks` counts 512-byte units).
    fn allocated(path: &Path) -> u64 {
        std::fs::metadata(path).unwrap().blocks() * 512
    }

    #[test]
    fn a_sparse_file_is_copied_sparse_with_its_data_in_place() {
        let dir = test_dir("sparse-copy");
        let from = dir.join("sparse.fits");
        let to = dir.join("copy.fits");
        const LENGTH: u64 = 1 << 30;
        const MIDDLE: u64 = 600 << 20;
        {
            let mut file = File::create(&from).unwrap();
            file.write_all(&[b'H'; 2880]).unwrap();
            file.set_len(LENGTH).unwrap();
            file.seek(SeekFrom::Start(MIDDLE)).unwrap();
            file.write_all(b"data between two holes").unwrap();
        }
        assert!(
            allocated(&from) < 1 << 20,
            "the file system here makes no holes ({} bytes allocated), so this test cannot tell",
            allocated(&from)
        );
        let mut calls = 0;
        let written = copy_sparse(
            &mut File::open(&from).unwrap(),
            &mut File::create(&to).unwrap(),
            |_| calls += 1,
        )
        .unwrap();
        assert_eq!(std::fs::metadata(&to).unwrap().len(), LENGTH);
        assert!(
            allocated(&to) < 1 << 20,
            "the copy of a 1 GiB sparse file takes {} bytes of disk",
            allocated(&to)
        );
        // Only data counts (whole file-system blocks of it), not the holes.
        assert!(
            (2880..1 << 20).contains(&written),
            "{written} bytes written"
        );
        assert!(calls >= 2, "after_write was called {calls} times");
        let read_at = |path: &Path, at: u64, len: usize| {
            let mut file = File::open(path).unwrap();
            file.seek(SeekFrom::Start(at)).unwrap();
            let mut bytes = vec![0; len];
            file.read_exact(&mut bytes).unwrap();
            bytes
        };
        for (at, len) in [(0, 2880), (MIDDLE - 10, 40), (LENGTH - 4096, 4096)] {
            assert_eq!(read_at(&to, at, len), read_at(&from, at, len), "at {at}");
        }
    }

    #[test]
    fn a_file_without_holes_is_copied_whole() {
        let dir = test_dir("dense-copy");
        let from = dir.join("dense");
        let to = dir.join("copy");
        let bytes: Vec<u8> = (0..700_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&from, &bytes).unwrap();
        let written = copy_sparse(
            &mut File::open(&from).unwrap(),
            &mut File::create(&to).unwrap(),
            |_| {},
        )
        .unwrap();
        assert_eq!(written, bytes.len() as u64);
        assert_eq!(std::fs::read(&to).unwrap(), bytes);
    }
}
