use std::os::unix::fs::{chown, symlink, PermissionsExt as _};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::*;

/// The user `nobody`: another local user.
const NOBODY: u32 = 65534;

/// A fresh directory (mode 0700) under the system temp dir, removed on
/// drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "trust-test-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir(&path).unwrap();
        chmod(&path, 0o700);
        TempDir(path)
    }

    fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn file(path: &Path, mode: u32) -> PathBuf {
    std::fs::write(path, "content").unwrap();
    chmod(path, mode);
    path.to_path_buf()
}

/// Whether this process may give files away (root): the tests of other
/// owners need it.
fn is_root() -> bool {
    if euid() == 0 {
        return true;
    }
    println!("skipped: not root (making a file another user's needs root)");
    false
}

fn refusal(result: Result<impl fmt::Debug, TrustError>) -> Refusal {
    match result {
        Err(TrustError::Refused(refusal)) => refusal,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn an_own_private_file_is_opened_both_ways() {
    let dir = TempDir::new();
    let path = file(&dir.join("key"), 0o600);
    let read = open_trusted(&path, Access::Read).unwrap();
    assert!(read.metadata().unwrap().is_file());
    let lock = open(&path, Access::Lock).unwrap();
    assert!(!lock.created);
    // Read-only but this user's: not writable by others, so trusted.
    chmod(&path, 0o400);
    open_trusted(&path, Access::Read).unwrap();
}

#[test]
fn a_lock_is_created_private_and_exclusive() {
    let dir = TempDir::new();
    let path = dir.join("lock");
    let opened = open(&path, Access::Lock).unwrap();
    assert!(opened.created);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(!open(&path, Access::Lock).unwrap().created);
    assert_eq!(
        create_new(&path, false).unwrap_err().kind(),
        io::ErrorKind::AlreadyExists
    );
}

#[test]
fn a_missing_file_to_read_is_not_found() {
    let dir = TempDir::new();
    let error = open(&dir.join("absent"), Access::Read).unwrap_err();
    assert_eq!(error.io_kind(), Some(io::ErrorKind::NotFound));
}

#[test]
fn a_symlink_is_refused_and_its_target_left_alone() {
    let dir = TempDir::new();
    let target = file(&dir.join("precious"), 0o600);
    let link = dir.join("lock");
    symlink(&target, &link).unwrap();
    for access in [Access::Read, Access::Lock] {
        let refused = refusal(open(&link, access));
        assert_eq!(
            refused.reason,
            Reason::Symlink {
                target: Some(target.clone())
            }
        );
        let text = refused.to_string();
        assert!(
            text.contains(&format!("refusing {}", link.display()))
                && text.contains("symbolic link")
                && text.contains(&target.display().to_string()),
            "{text}"
        );
    }
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "content");
    // A dangling link: the lock is not created where it points.
    let nowhere = dir.join("nowhere");
    let dangling = dir.join("dangling.lock");
    symlink(&nowhere, &dangling).unwrap();
    refusal(open(&dangling, Access::Lock));
    assert!(!nowhere.exists(), "a lock was created through a link");
    assert!(create_new(&dangling, false).is_err());
    assert!(!nowhere.exists());
}

#[test]
fn devices_and_fifos_are_refused_without_waiting() {
    let dir = TempDir::new();
    let fifo = dir.join("fifo");
    let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    let started = Instant::now();
    let refused = refusal(open(&fifo, Access::Read));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(refused.to_string().contains("a FIFO"), "{refused}");
    let zero = refusal(open(Path::new("/dev/zero"), Access::Read));
    assert_eq!(
        zero.reason,
        Reason::WrongType {
            expected: Kind::File,
            found: "a character device"
        }
    );
    assert!(
        zero.to_string()
            .contains("/dev/zero: it is a character device, not a regular file"),
        "{zero}"
    );
    let directory = refusal(open(&dir.0, Access::Read));
    assert!(directory.to_string().contains("it is a directory"));
}

#[test]
fn a_file_others_may_write_is_refused() {
    let dir = TempDir::new();
    for mode in [0o620, 0o602, 0o666] {
        let path = file(&dir.join(&format!("f{mode:o}")), mode);
        let refused = refusal(open(&path, Access::Read));
        assert_eq!(refused.reason, Reason::WritableByOthers { mode });
        assert!(refused.to_string().contains("chmod go-w"), "{refused}");
    }
}

#[test]
fn a_file_of_another_user_is_refused() {
    if !is_root() {
        return;
    }
    let dir = TempDir::new();
    let path = file(&dir.join("key"), 0o600);
    chown(&path, Some(NOBODY), Some(NOBODY)).unwrap();
    for access in [Access::Read, Access::Lock] {
        let refused = refusal(open(&path, access));
        assert_eq!(refused.reason, Reason::OwnedByOther { uid: NOBODY });
        let text = refused.to_string();
        assert!(
            text.contains("owned by uid 65534") && text.contains("not by you"),
            "{text}"
        );
    }
    // Root's files are trusted, as OpenSSH trusts them.
    chown(&path, Some(0), Some(0)).unwrap();
    open_trusted(&path, Access::Read).unwrap();
}

#[test]
fn a_file_found_in_a_directory_others_may_change_is_refused() {
    let dir = TempDir::new();
    let shared = dir.join("shared");
    std::fs::create_dir(&shared).unwrap();
    chmod(&shared, 0o777);
    let planted = file(&shared.join("pool.key"), 0o600);
    let refused = refusal(open_trusted(&planted, Access::Read));
    assert_eq!(
        refused.reason,
        Reason::UnsafeDirectory {
            directory: shared.clone(),
            owner: euid(),
            mode: 0o777
        }
    );
    assert!(
        refused.to_string().contains("without the sticky bit"),
        "{refused}"
    );
    // A lock this call creates there is its own.
    open_trusted(&shared.join("new.lock"), Access::Lock).unwrap();
    refusal(open_trusted(&shared.join("new.lock"), Access::Lock));
    // With the sticky bit, only a file's owner may replace it.
    chmod(&shared, 0o1777);
    open_trusted(&planted, Access::Read).unwrap();
    chmod(&shared, 0o775);
    refusal(open_trusted(&planted, Access::Read));
    chmod(&shared, 0o755);
    open_trusted(&planted, Access::Read).unwrap();
    if is_root() {
        chown(&shared, Some(NOBODY), Some(NOBODY)).unwrap();
        let refused = refusal(open_trusted(&planted, Access::Read));
        assert!(
            refused.to_string().contains("it is owned by uid 65534"),
            "{refused}"
        );
    }
}

#[test]
fn directories_are_created_private_or_checked() {
    let dir = TempDir::new();
    let state = dir.join("deep/er/pool.state");
    assert!(create_dir(&state, 0o700).unwrap());
    let mode = std::fs::metadata(&state).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    assert!(!create_dir(&state, 0o700).unwrap());
    chmod(&state, 0o777);
    let refused = refusal(create_dir(&state, 0o700));
    assert_eq!(refused.reason, Reason::WritableByOthers { mode: 0o777 });
    chmod(&state, 0o700);
    let link = dir.join("link.state");
    symlink(&state, &link).unwrap();
    assert!(matches!(
        refusal(create_dir(&link, 0o700)).reason,
        Reason::Symlink { .. }
    ));
    let plain = file(&dir.join("plain"), 0o600);
    assert!(matches!(
        refusal(create_dir(&plain, 0o700)).reason,
        Reason::WrongType {
            expected: Kind::Directory,
            ..
        }
    ));
    if is_root() {
        chown(&state, Some(NOBODY), Some(NOBODY)).unwrap();
        assert_eq!(
            refusal(create_dir(&state, 0o700)).reason,
            Reason::OwnedByOther { uid: NOBODY }
        );
    }
}

#[test]
fn an_identity_tells_a_directory_replaced() {
    let dir = TempDir::new();
    let state = dir.join("state");
    std::fs::create_dir(&state).unwrap();
    let identity = Identity::of(&state).unwrap();
    assert!(identity.still_at(&state));
    std::fs::remove_dir(&state).unwrap();
    assert!(!identity.still_at(&state));
}

#[test]
fn users_are_named_when_they_have_a_name() {
    assert_eq!(user(0), "uid 0 (root)");
    assert_eq!(user(4_000_000_000), "uid 4000000000");
}
