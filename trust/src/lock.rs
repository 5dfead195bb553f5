//! Lock files: an exclusive lock on a trusted file, held for as long as
//! its owner lives, with a few words in the file saying who holds it.
//!
//! The pool file's lock, the pool's state directory locks and a run
//! journal's writer lock are all this one thing; only what they write
//! into the file, and what they say when refused, differ.
//!
//! The lock is the operating system's (`flock` on Linux), taken on an
//! open file: it goes when the process does, however it ends, `kill -9`
//! included, so a lock nobody holds means its owner is gone, and the next
//! one simply takes it. The file is never removed: a process that opened
//! it just before a removal would lock a file no one else can see, and
//! two owners would each hold "the" lock.
//!
//! The file is opened as a trusted one ([`crate::open`], never through a
//! link nor another user's file): the holder writes its pid into it, which
//! must not land where another user wants it.

use std::fs::{File, TryLockError};
use std::io::{self, Read as _, Seek as _, SeekFrom, Write as _};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::{Access, TrustError};

/// How long a lock taken with patience waits between tries.
const RETRY: Duration = Duration::from_millis(20);

/// Which trust checks a lock file gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checks {
    /// The file's own checks and its directory's ([`crate::open_trusted`]):
    /// a pool's own files, in directories the pool made or its user chose.
    FileAndDirectory,
    /// The file's own checks only ([`crate::open`]): a file that lives where
    /// its user chose, often a directory shared with a group.
    FileOnly,
}

/// An exclusive lock on a lock file, held until dropped or until the
/// process ends.
#[derive(Debug)]
pub struct LockFile {
    file: File,
}

/// Why [`LockFile::take`] did not take a lock.
#[derive(Debug)]
pub enum LockError {
    /// Another process holds it; the text its holder wrote into the file
    /// (empty if it wrote none, or the file could not be read).
    Held(String),
    /// The lock file may not be trusted, or could not be opened.
    Open(TrustError),
    /// The file opened, but the lock could not be tried at all (a file
    /// system without locks, say).
    Lock(io::Error),
    /// The lock was taken, but the holder's words could not be written
    /// into the file ([`LockFile::claim`]); the lock is let go.
    Write(io::Error),
}

impl LockFile {
    /// Opens the lock file at `path` (created mode 0600 if missing) with
    /// `checks`, and takes its exclusive lock, trying again for up to
    /// `patience` while another holds it. The file is not truncated on
    /// open: until the lock is ours, its text is the holder's, and a
    /// refusal reads it.
    pub fn take(path: &Path, checks: Checks, patience: Duration) -> Result<LockFile, LockError> {
        let file = match checks {
            Checks::FileAndDirectory => crate::open_trusted(path, Access::Lock),
            Checks::FileOnly => crate::open(path, Access::Lock).map(|opened| opened.file),
        }
        .map_err(LockError::Open)?;
        let mut lock = LockFile { file };
        let give_up = Instant::now() + patience;
        loop {
            match lock.file.try_lock() {
                Ok(()) => return Ok(lock),
                Err(TryLockError::WouldBlock) if Instant::now() < give_up => {
                    std::thread::sleep(RETRY)
                }
                Err(TryLockError::WouldBlock) => {
                    return Err(LockError::Held(read_text(&mut lock.file)))
                }
                Err(TryLockError::Error(error)) => return Err(LockError::Lock(error)),
            }
        }
    }

    /// Takes the lock on `path` at once, with every check
    /// ([`Checks::FileAndDirectory`]), and writes this process's id into
    /// it: the lock of one of a pool's own files, whose refusal names the
    /// process that holds it.
    pub fn claim(path: &Path) -> Result<LockFile, LockError> {
        let mut lock = LockFile::take(path, Checks::FileAndDirectory, Duration::ZERO)?;
        (lock.write_holder(&std::process::id().to_string())).map_err(LockError::Write)?;
        Ok(lock)
    }

    /// Replaces the file's text with `holder`: who holds the lock, for
    /// whoever is refused.
    pub fn write_holder(&mut self, holder: &str) -> io::Result<()> {
        self.file.set_len(0)?;
        self.file.seek(SeekFrom::Start(0))?;
        self.file.write_all(holder.as_bytes())
    }

    /// Empties the file, so that it names no holder once the lock is let
    /// go. (A holder that is killed leaves its name there; the lock, which
    /// the next holder gets, tells.)
    pub fn clear_holder(&self) {
        let _ = self.file.set_len(0);
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

/// What the holder of the lock file at `path` wrote, if a live process
/// holds it; `None` when none does: no file, or one nobody holds. It
/// looks with a shared lock held for an instant, and takes no lock to
/// keep: for listings, which must not take the lock themselves. The file
/// is read as it is (no trust checks): only its words are used, for
/// people to read.
pub fn holder(path: &Path) -> io::Result<Option<String>> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    match file.try_lock_shared() {
        Ok(()) => {
            let _ = file.unlock();
            Ok(None)
        }
        Err(TryLockError::WouldBlock) => Ok(Some(read_text(&mut file))),
        Err(TryLockError::Error(error)) => Err(error),
    }
}

/// The text of the lock file open as `file`, from its start; empty when
/// it cannot be read.
fn read_text(file: &mut File) -> String {
    let mut text = String::new();
    match file
        .seek(SeekFrom::Start(0))
        .and_then(|_| file.read_to_string(&mut text))
    {
        Ok(_) => text,
        Err(_) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        use std::os::unix::fs::DirBuilderExt as _;
        let dir = std::env::temp_dir().join(format!("trust-lock-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
        dir
    }

    #[test]
    fn one_holder_at_a_time_and_the_refused_read_who() {
        let dir = scratch("one");
        let path = dir.join("x.lock");
        assert_eq!(holder(&path).unwrap(), None);
        let first = LockFile::claim(&path).unwrap();
        let pid = std::process::id().to_string();
        match LockFile::take(&path, Checks::FileOnly, Duration::from_millis(50)) {
            Err(LockError::Held(text)) => assert_eq!(text, pid),
            other => panic!("not refused as held: {other:?}"),
        }
        assert_eq!(holder(&path).unwrap(), Some(pid));
        first.clear_holder();
        drop(first);
        assert_eq!(holder(&path).unwrap(), None);
        let again = LockFile::take(&path, Checks::FileOnly, Duration::ZERO).unwrap();
        assert_eq!(holder(&path).unwrap().as_deref(), Some(""));
        drop(again);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_lock_file_through_a_link_is_refused() {
        let dir = scratch("link");
        std::fs::write(dir.join("target"), "").unwrap();
        std::os::unix::fs::symlink(dir.join("target"), dir.join("x.lock")).unwrap();
        let taken = LockFile::take(&dir.join("x.lock"), Checks::FileOnly, Duration::ZERO);
        assert!(matches!(
            taken,
            Err(LockError::Open(TrustError::Refused(_)))
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
