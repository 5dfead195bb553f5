//! Files a pool trusts: its key, its pool file, its locks and its state
//! directory, checked as OpenSSH's `StrictModes` checks `~/.ssh`.
//!
//! What these files say decides what the pool's members run, and as whom:
//! a key or pool file planted by another local user would make a pool
//! node, an agent or a runner run that user's work as its own user. So a
//! file or directory is refused, with a message naming it and the fix,
//! when
//!
//! - another user owns it (not this user, nor root);
//! - group or others may write it;
//! - it is a symbolic link (never followed: a link planted in a shared
//!   directory would make the pool write its pid into a file of the link's
//!   choosing);
//! - it is not what it should be (a device, a FIFO, a directory for a file);
//! - its directory may be changed by others (another user owns it, or group
//!   or others may write it without the sticky bit), and it was there
//!   before this process: another user may have put it there.
//!
//! Files are opened with `O_NOFOLLOW`, created with `O_EXCL` and mode 0600,
//! and checked on the open file (`fstat`), so what is checked is what is
//! used. Nothing is opened before its path has been looked at (`lstat`), so
//! a device named by mistake is never opened at all.
//!
//! [`lock`] is the one lock-file type of the pool (the pool file's lock,
//! the state directory's locks, a run journal's writer lock): an exclusive
//! `flock` on a file opened as a trusted one.

#![warn(unreachable_pub)]

use std::ffi::CStr;
use std::fmt;
use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt as _, FileTypeExt as _, MetadataExt as _};
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

pub mod lock;

/// What a path should be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
}

/// Why a file or directory is not trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// Another user (not this one, nor root) owns it.
    OwnedByOther {
        /// Its owner.
        uid: u32,
    },
    /// Group or others may write it.
    WritableByOthers {
        /// Its permission bits.
        mode: u32,
    },
    /// It is a symbolic link.
    Symlink {
        /// Where it points, when that could be read.
        target: Option<PathBuf>,
    },
    /// It is not what it should be.
    WrongType {
        /// What it should be.
        expected: Kind,
        /// What it is, in words ("a character device").
        found: &'static str,
    },
    /// Its directory may be changed by others, and it was there before
    /// this process.
    UnsafeDirectory {
        /// The directory.
        directory: PathBuf,
        /// The directory's owner.
        owner: u32,
        /// The directory's permission bits.
        mode: u32,
    },
}

/// A file or directory refused, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// What was refused.
    pub path: PathBuf,
    /// Why.
    pub reason: Reason,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = self.path.display();
        write!(f, "refusing {path}: ")?;
        match &self.reason {
            Reason::OwnedByOther { uid } => write!(
                f,
                "it is owned by {}, not by you; another user may have planted it. Remove it, \
                 or use a directory only you can write",
                user(*uid)
            ),
            Reason::WritableByOthers { mode } => write!(
                f,
                "group or others may write it (mode {mode:04o}), so another user may have \
                 changed it. If it is yours as you left it, run `chmod go-w {path}`; \
                 otherwise remove it"
            ),
            Reason::Symlink { target } => {
                let to = target
                    .as_ref()
                    .map(|t| format!(" to {}", t.display()))
                    .unwrap_or_default();
                write!(
                    f,
                    "it is a symbolic link{to}; a pool never follows links to its own files, \
                     since another user may have pointed one at a file of yours. Remove the \
                     link, or use a directory only you can write"
                )
            }
            Reason::WrongType { expected, found } => {
                let wanted = match expected {
                    Kind::File => "a regular file",
                    Kind::Directory => "a directory",
                };
                write!(f, "it is {found}, not {wanted}; name {wanted} of your own")
            }
            Reason::UnsafeDirectory {
                directory,
                owner,
                mode,
            } => {
                let why = if trusted_owner(*owner) {
                    format!("group or others may write it (mode {mode:04o}) without the sticky bit")
                } else {
                    format!("it is owned by {}", user(*owner))
                };
                write!(
                    f,
                    "it was already there, and its directory {} may be changed by other users \
                     ({why}), so another user may have put it there. Use a directory only you \
                     can write (or one with the sticky bit, as /tmp has)",
                    directory.display()
                )
            }
        }
    }
}

impl std::error::Error for Refusal {}

/// Why a file could not be opened as a trusted one.
#[derive(Debug)]
pub enum TrustError {
    /// It is there, but not to be trusted.
    Refused(Refusal),
    /// It could not be looked at or opened.
    Io {
        /// The path.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
}

impl TrustError {
    /// The system's error kind, for an I/O error (`NotFound` for a file
    /// that is not there); `None` for a refusal.
    pub fn io_kind(&self) -> Option<io::ErrorKind> {
        match self {
            TrustError::Io { source, .. } => Some(source.kind()),
            TrustError::Refused(_) => None,
        }
    }
}

impl fmt::Display for TrustError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrustError::Refused(refusal) => refusal.fmt(f),
            TrustError::Io { path, source } => {
                write!(f, "cannot open {}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for TrustError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TrustError::Refused(_) => None,
            TrustError::Io { source, .. } => Some(source),
        }
    }
}

impl From<Refusal> for TrustError {
    fn from(refusal: Refusal) -> TrustError {
        TrustError::Refused(refusal)
    }
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> TrustError + '_ {
    move |source| TrustError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// This process's effective user id.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether files of `uid` are trusted: this user's, or root's (as
/// OpenSSH trusts root's directories above `~/.ssh`).
fn trusted_owner(uid: u32) -> bool {
    uid == euid() || uid == 0
}

/// `uid 65534 (nobody)`, or `uid 65534` when it has no name.
pub fn user(uid: u32) -> String {
    match user_name(uid) {
        Some(name) => format!("uid {uid} ({name})"),
        None => format!("uid {uid}"),
    }
}

/// The name of user `uid` in the password database.
fn user_name(uid: u32) -> Option<String> {
    let mut buffer = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: passwd is plain data; getpwuid_r fills it in.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call, and the buffer's length
    // is its own.
    let status = unsafe {
        libc::getpwuid_r(
            uid,
            &mut entry,
            buffer.as_mut_ptr(),
            buffer.len(),
            &mut found,
        )
    };
    if status != 0 || found.is_null() || entry.pw_name.is_null() {
        return None;
    }
    // SAFETY: on success pw_name points to a NUL-terminated string inside
    // `buffer`, which lives until the end of this function.
    let name = unsafe { CStr::from_ptr(entry.pw_name) };
    name.to_str().ok().map(str::to_string)
}

/// What a file type is, in words ("a character device", "a FIFO (named
/// pipe)"), for messages that refuse a path for what it is.
pub fn describe(meta: &Metadata) -> &'static str {
    let kind = meta.file_type();
    if kind.is_file() {
        "a regular file"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_symlink() {
        "a symbolic link"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_fifo() {
        "a FIFO (named pipe)"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "of an unknown type"
    }
}

/// Checks what `meta` (of `path`, from `lstat` or `fstat`) says: the
/// type, the owner and who may write it.
fn check_metadata(path: &Path, meta: &Metadata, expected: Kind) -> Result<(), Refusal> {
    let refuse = |reason| Refusal {
        path: path.to_path_buf(),
        reason,
    };
    if meta.file_type().is_symlink() {
        return Err(refuse(Reason::Symlink {
            target: std::fs::read_link(path).ok(),
        }));
    }
    let right_type = match expected {
        Kind::File => meta.is_file(),
        Kind::Directory => meta.is_dir(),
    };
    if !right_type {
        return Err(refuse(Reason::WrongType {
            expected,
            found: describe(meta),
        }));
    }
    if !trusted_owner(meta.uid()) {
        return Err(refuse(Reason::OwnedByOther { uid: meta.uid() }));
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(refuse(Reason::WritableByOthers { mode }));
    }
    Ok(())
}

/// Checks that `path`, which was there before this process looked, lies
/// in a directory no other user may change: owned by this user or root,
/// and not writable by group or others unless it has the sticky bit (in
/// which only a file's owner may remove or rename it).
pub fn check_directory_of(path: &Path) -> Result<(), TrustError> {
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    // The directory reached, links included: a link to a safe directory
    // is as safe as it.
    let meta = std::fs::metadata(directory).map_err(io_error(directory))?;
    let mode = meta.permissions().mode() & 0o7777;
    let open_to_others = mode & 0o022 != 0 && mode & 0o1000 == 0;
    if trusted_owner(meta.uid()) && !open_to_others {
        return Ok(());
    }
    // Named in full: "its directory ." would tell nobody where it is.
    let named = match std::env::current_dir() {
        Ok(here) if directory == Path::new(".") => here,
        Ok(here) => here.join(directory),
        Err(_) => directory.to_path_buf(),
    };
    Err(TrustError::Refused(Refusal {
        path: path.to_path_buf(),
        reason: Reason::UnsafeDirectory {
            directory: named,
            owner: meta.uid(),
            mode,
        },
    }))
}

/// How a trusted file is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// To read; it must exist.
    Read,
    /// To read and write, created (mode 0600) if missing: a lock file.
    Lock,
}

/// A trusted file, open.
#[derive(Debug)]
pub struct Opened {
    /// The file.
    pub file: File,
    /// Whether this call created it.
    pub created: bool,
}

/// Opens the file at `path` as `access` says, refusing it when it is not
/// to be trusted (see the crate's documentation), its directory aside:
/// [`open_trusted`] checks that too. `Io` with `NotFound` when `Read`
/// finds nothing.
pub fn open(path: &Path, access: Access) -> Result<Opened, TrustError> {
    // Bounded: only a file removed between the two opens below, again and
    // again, makes it loop.
    for _ in 0..3 {
        if access == Access::Lock {
            match create_new(path, true) {
                Ok(file) => return checked(path, file, true),
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
                Err(source) => return Err(refusal_or(path, source)),
            }
        }
        // Looked at before it is opened: a device or FIFO is never opened.
        match std::fs::symlink_metadata(path) {
            Ok(meta) => check_metadata(path, &meta, Kind::File)?,
            Err(error) if error.kind() == io::ErrorKind::NotFound && access == Access::Lock => {
                continue
            }
            Err(source) => {
                return Err(TrustError::Io {
                    path: path.to_path_buf(),
                    source,
                })
            }
        }
        let opened = OpenOptions::new()
            .read(true)
            .write(access == Access::Lock)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path);
        match opened {
            Ok(file) => return checked(path, file, false),
            Err(error) if error.kind() == io::ErrorKind::NotFound && access == Access::Lock => {}
            Err(source) => return Err(refusal_or(path, source)),
        }
    }
    Err(TrustError::Io {
        path: path.to_path_buf(),
        source: io::Error::other("it was removed and created again while being opened"),
    })
}

/// [`open`], and the directory rule for a file this call did not create:
/// a file found in a directory others may change is refused.
pub fn open_trusted(path: &Path, access: Access) -> Result<File, TrustError> {
    let opened = open(path, access)?;
    if !opened.created {
        check_directory_of(path)?;
    }
    Ok(opened.file)
}

/// Creates a new file at `path`, mode 0600, never following a link and
/// never replacing anything (`O_CREAT | O_EXCL | O_NOFOLLOW`); readable
/// too with `read`.
pub fn create_new(path: &Path, read: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(read)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// The open file `file` (of `path`), checked on what it is, not on what
/// its path names now.
fn checked(path: &Path, file: File, created: bool) -> Result<Opened, TrustError> {
    let meta = file.metadata().map_err(io_error(path))?;
    check_metadata(path, &meta, Kind::File)?;
    Ok(Opened { file, created })
}

/// An open that failed: a link met by `O_NOFOLLOW` (`ELOOP`) is a
/// refusal; anything else is the system's error.
fn refusal_or(path: &Path, source: io::Error) -> TrustError {
    if source.raw_os_error() == Some(libc::ELOOP) {
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            if let Err(refusal) = check_metadata(path, &meta, Kind::File) {
                return TrustError::Refused(refusal);
            }
        }
    }
    TrustError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Creates the directory `path` (mode `mode`; missing parents too), or
/// checks the one there: it must be a directory (not a link to one) of
/// this user's, that no other user may write, in a directory no other
/// user may change. Says whether it was created now.
pub fn create_dir(path: &Path, mode: u32) -> Result<bool, TrustError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        if !parent.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(io_error(parent))?;
        }
    }
    let created = match std::fs::DirBuilder::new().mode(mode).create(path) {
        Ok(()) => true,
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => false,
        Err(source) => {
            return Err(TrustError::Io {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    check_dir(path, created)?;
    Ok(created)
}

/// Checks the directory at `path`, as [`create_dir`] does; `created`
/// says whether this process made it (then its own directory may be
/// open to others: what is in it is this process's).
pub fn check_dir(path: &Path, created: bool) -> Result<(), TrustError> {
    let meta = std::fs::symlink_metadata(path).map_err(io_error(path))?;
    check_metadata(path, &meta, Kind::Directory)?;
    if !created {
        check_directory_of(path)?;
    }
    Ok(())
}

/// Checks a file this process will open by other means (SQLite opens its
/// own database): it must be there, and be trusted.
pub fn check_file(path: &Path) -> Result<(), TrustError> {
    let meta = std::fs::symlink_metadata(path).map_err(io_error(path))?;
    check_metadata(path, &meta, Kind::File)?;
    check_directory_of(path)
}

/// Which file or directory a path named when it was looked at (device
/// and inode): whether the same one is still there tells a directory
/// removed, or replaced, under a running process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    device: u64,
    inode: u64,
}

impl Identity {
    /// What `path` names now (not following a link).
    pub fn of(path: &Path) -> io::Result<Identity> {
        let meta = std::fs::symlink_metadata(path)?;
        Ok(Identity {
            device: meta.dev(),
            inode: meta.ino(),
        })
    }

    /// Whether `path` still names it.
    pub fn still_at(&self, path: &Path) -> bool {
        Identity::of(path).is_ok_and(|now| now == *self)
    }
}

#[cfg(test)]
mod tests;
