//! The pool file: how agents and runners find a pool; and the pool node's
//! own files: the lock that makes it the pool file's one owner, and its
//! state directory.
//!
//! `constellation pool start` writes the pool file: the pool node's
//! addresses (with its peer id) and the path of the pool key. Everything
//! that joins reads it: `--pool FILE`. A bare multiaddr works too
//! (`--pool /ip4/…/p2p/…`), with the key from `--key-file` or
//! `CONSTELLATION_KEY`.
//!
//! Every pool has a key, loopback included: on a shared machine, loopback
//! is open to every local user, and a member of the pool runs whatever
//! work it is given as the user who started it. The pool file and the key
//! are mode 0600, so only their owner can join; whoever cannot read the key
//! cannot join.
//!
//! The pool node holds an exclusive lock on `<pool file>.lock` for its
//! whole life ([`PoolFileLock`]), so a second `pool start` on the same
//! pool file is refused instead of overwriting a live pool's file. A pool
//! file whose lock nobody holds is stale (its node was killed) and is
//! replaced.
//!
//! Its state directory ([`StateDir`], `--state-dir`, by default
//! `<pool file stem>.state/` beside the pool file, mode 0700) keeps what
//! must outlive the process: the node's libp2p identity (`identity`) and
//! the address it listened on (`listen`). A pool node started again on the
//! same state directory, after a `kill -9` say, has the same peer id and,
//! where its port is still free, the same address: the pool file it writes
//! is the same, and the members that knew it recognise it.

use std::io::{self, Read as _, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use constellation::net::key::{self, KeyError};
use constellation::net::{Keypair, Multiaddr, PoolKey, Protocol};
use serde::{Deserialize, Serialize};
use trust::lock::{LockError, LockFile};

/// What a pool file holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolFile {
    /// Addresses to dial, each ending in `/p2p/<peer id>`.
    pub addresses: Vec<String>,
    /// The pool key's file (mode 0600). Every pool `pool start` makes has
    /// one; `None` only in files of older versions, which made keyless
    /// loopback pools, and joining such a pool is refused.
    pub key_file: Option<PathBuf>,
    /// The pool node's process id, for `status` and to spot a stale file.
    pub pid: u32,
    /// When the pool started, Unix seconds.
    pub started: f64,
}

impl PoolFile {
    /// Writes the file, mode 0600, through a temporary name: it names the
    /// key and the pool, so only its owner may read it, and a reader never
    /// sees half of it.
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self)? + "\n";
        write_private(path, text.as_bytes())
    }

    /// Reads a pool file, if this user may trust it (see the `trust`
    /// crate): a pool file another user planted would send this node to
    /// that user's pool, to run that user's work. It must be a regular
    /// file of at most [`MAX_POOL_FILE_BYTES`]: a FIFO or `/dev/zero`
    /// given as `--pool` must neither hang the reader nor fill its memory.
    pub fn load(path: &Path) -> anyhow::Result<PoolFile> {
        let file = trust::open_trusted(path, trust::Access::Read).map_err(|error| match error {
            trust::TrustError::Refused(refusal) => anyhow::Error::new(refusal),
            trust::TrustError::Io { source, .. } => unreadable_pool_file(path, source),
        })?;
        let mut text = String::new();
        (&file)
            .take(MAX_POOL_FILE_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|source| unreadable_pool_file(path, source))?;
        if text.len() as u64 > MAX_POOL_FILE_BYTES {
            let size = file.metadata().map_or(text.len() as u64, |m| m.len());
            bail!(
                "the pool file {} has {size} bytes, over the limit of {MAX_POOL_FILE_BYTES} bytes; \
                 a pool file is a few hundred bytes of JSON written by `pool start`",
                path.display()
            );
        }
        serde_json::from_str(&text)
            .with_context(|| format!("{} is not a pool file", path.display()))
    }
}

/// Why the pool file at `path` could not be read, and what to do.
fn unreadable_pool_file(path: &Path, error: io::Error) -> anyhow::Error {
    let hint = match error.kind() {
        io::ErrorKind::PermissionDenied => {
            "the pool file (mode 0600) and the pool key are readable only by the user \
             who started the pool, and whoever joins the pool must be able to read both"
        }
        _ => "start a pool with `constellation pool start`",
    };
    anyhow::anyhow!(
        "cannot read the pool file {}: {error}; {hint}",
        path.display()
    )
}

/// Writes `bytes` to `path` through `<path>.partial`, created mode 0600
/// (so the content is never readable by others, not even for a moment),
/// then renamed over `path`.
fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let partial = with_suffix(path, ".partial");
    // A partial file left by a killed writer may have another mode; the
    // mode below applies only to a file this call creates.
    match std::fs::remove_file(&partial) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => {
            return Err(error).with_context(|| format!("removing {}", partial.display()));
        }
        _ => {}
    }
    let mut file = trust::create_new(&partial, false)
        .with_context(|| format!("creating {}", partial.display()))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .with_context(|| format!("writing {}", partial.display()))?;
    std::fs::rename(&partial, path).with_context(|| format!("writing {}", path.display()))
}

/// `path` with `suffix` appended to its file name (`pool.json` →
/// `pool.json.lock`), keeping the extension that names what it is for.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Where and how to join: bootstrap addresses and the key.
pub struct Joining {
    /// Addresses to dial.
    pub bootstrap: Vec<Multiaddr>,
    /// The pool key. Always `Some`: [`joining`] refuses a pool without
    /// one. An `Option` because `NodeConfig::key` takes one.
    pub key: Option<PoolKey>,
}

impl Joining {
    /// Where a joining node listens unless told: loopback when the pool
    /// itself listens only on loopback (nothing off this machine can reach
    /// it, nor needs to reach us), every interface otherwise, so that
    /// members elsewhere can reach this node.
    pub fn default_listen(&self) -> &'static str {
        let loopback_only = self
            .bootstrap
            .iter()
            .all(constellation::net::transport::is_loopback);
        if loopback_only {
            "/ip4/127.0.0.1/tcp/0"
        } else {
            "/ip4/0.0.0.0/tcp/0"
        }
    }
}

/// Resolves `--pool` (a pool file or a multiaddr) and `--key-file` into
/// what a node needs to join. The key comes from `--key-file`, else the
/// pool file, else `CONSTELLATION_KEY`; a pool with none of them is
/// refused, as is a key file this user cannot read.
pub fn joining(pool: &str, key_file: Option<&Path>) -> anyhow::Result<Joining> {
    // A multiaddr never names a file (`/ip4/…` is not a path anyone has),
    // so whatever parses as one is an address.
    let from_file = pool.parse::<Multiaddr>().is_err();
    let (addresses, file_key) = if from_file {
        let file = PoolFile::load(Path::new(pool))?;
        (file.addresses, file.key_file)
    } else {
        (vec![pool.to_string()], None)
    };
    if addresses.is_empty() {
        bail!("the pool {pool} lists no addresses");
    }
    let bootstrap = addresses
        .iter()
        .map(|a| {
            a.parse()
                .with_context(|| format!("the pool address {a:?} is not a multiaddr"))
        })
        .collect::<anyhow::Result<_>>()?;
    let key = match key_file.map(Path::to_path_buf).or(file_key) {
        Some(path) => read_key(&path)?,
        None => match key::from_env()? {
            Some(key) => key,
            None if from_file => bail!(
                "the pool {pool} has no key: its pool file names no key file, and neither \
                 --key-file nor {} gives one. Every pool has a key; a pool file without one \
                 comes from an older `constellation pool start`: start the pool again",
                key::KEY_ENV
            ),
            None => bail!(
                "the pool {pool} has no key: give the pool's key with --key-file FILE or {}",
                key::KEY_ENV
            ),
        },
    };
    Ok(Joining {
        bootstrap,
        key: Some(key),
    })
}

/// Reads the pool key at `path`, saying who must be able to read it when
/// this user cannot.
fn read_key(path: &Path) -> anyhow::Result<PoolKey> {
    key::read_file(path).map_err(|error| match &error {
        KeyError::Unreadable { source, .. } if source.kind() == io::ErrorKind::PermissionDenied => {
            anyhow::anyhow!(
                "cannot read the pool key {}: {source}; whoever joins the pool must be able \
                 to read its key file (mode 0600, so only the user who started the pool can); \
                 run as that user, or give a copy of the key with --key-file",
                path.display()
            )
        }
        _ => error.into(),
    })
}

/// An exclusive lock ([`trust::lock::LockFile`]) with this process's id
/// in it, held for the life of the process that took it: a lock nobody
/// holds means its owner is gone.
struct HeldLock {
    /// Holds the lock: dropping it releases it.
    _lock: LockFile,
}

/// Why [`HeldLock::take`] could not take a lock.
enum LockRefused {
    /// Another process holds it; the pid it wrote, if readable.
    Held(Option<u32>),
    /// The lock file could not be opened or locked.
    Failed(anyhow::Error),
}

impl HeldLock {
    /// Takes the lock on `path` (created mode 0600 if missing) without
    /// waiting, and writes this process's id into it for whoever is
    /// refused. A lock file this user may not trust (a link, another
    /// user's, one found in a directory others may change) is refused: the
    /// pid would go where another user wants it.
    fn take(path: &Path) -> Result<HeldLock, LockRefused> {
        match LockFile::claim(path) {
            Ok(lock) => Ok(HeldLock { _lock: lock }),
            Err(LockError::Held(text)) => Err(LockRefused::Held(text.trim().parse().ok())),
            Err(error) => Err(LockRefused::Failed(lock_failure(
                path,
                error,
                "cannot open the lock file",
            ))),
        }
    }
}

/// Why the lock file at `path` could not be claimed, in this crate's
/// words, `opening` saying what could not be opened. (A lock held by
/// another process is each caller's to word: it names its holder.)
pub fn lock_failure(path: &Path, error: LockError, opening: &str) -> anyhow::Error {
    match error {
        LockError::Open(error) => {
            trusted_error(error).context(format!("{opening} {}", path.display()))
        }
        LockError::Lock(error) => {
            anyhow::Error::new(error).context(format!("cannot lock {}", path.display()))
        }
        LockError::Write(error) => {
            anyhow::Error::new(error).context(format!("cannot write {}", path.display()))
        }
        LockError::Held(holder) => anyhow::anyhow!(
            "{} is held by another process ({})",
            path.display(),
            holder.trim()
        ),
    }
}

/// A trust error as an error of this crate: a refusal says all itself.
pub fn trusted_error(error: trust::TrustError) -> anyhow::Error {
    match error {
        trust::TrustError::Refused(refusal) => anyhow::Error::new(refusal),
        io => anyhow::Error::new(io),
    }
}

/// A pool node's claim on its pool file: an exclusive lock on
/// `<pool file>.lock`, held until the process ends.
pub struct PoolFileLock {
    _lock: HeldLock,
    /// The pool file a dead pool left behind, replaced by this one.
    stale: Option<StalePoolFile>,
}

/// A pool file found in place when its lock was free: its pool's node is
/// gone (killed, or its machine rebooted), and the new pool replaces it.
#[derive(Debug)]
pub struct StalePoolFile {
    /// The dead pool's process id, when its file could be read.
    pub pid: Option<u32>,
}

impl PoolFileLock {
    /// Claims `pool_file`, or refuses, naming the live pool that owns it;
    /// a refusal leaves the pool file untouched.
    pub fn acquire(pool_file: &Path) -> anyhow::Result<PoolFileLock> {
        let lock_path = with_suffix(pool_file, ".lock");
        let lock = match HeldLock::take(&lock_path) {
            Ok(lock) => lock,
            Err(LockRefused::Failed(error)) => return Err(error),
            Err(LockRefused::Held(lock_pid)) => {
                let live = PoolFile::load(pool_file).ok();
                let pid = live.as_ref().map(|f| f.pid).or(lock_pid);
                let owner = match pid {
                    Some(pid) => format!("a live pool (pid {pid})"),
                    None => "a live pool".to_string(),
                };
                let stop = match pid {
                    Some(pid) => format!("stop it first (`kill {pid}`)"),
                    None => "stop it first".to_string(),
                };
                bail!(
                    "the pool file {} belongs to {owner}, which holds {}; {stop}, or give this \
                     pool another --pool-file",
                    pool_file.display(),
                    lock_path.display()
                );
            }
        };
        let stale = pool_file.exists().then(|| StalePoolFile {
            pid: PoolFile::load(pool_file).ok().map(|file| file.pid),
        });
        Ok(PoolFileLock { _lock: lock, stale })
    }

    /// The pool file found in place when the lock was taken, if any: a
    /// pool whose node is gone left it.
    pub fn stale(&self) -> Option<&StalePoolFile> {
        self.stale.as_ref()
    }
}

/// The pool node's state directory: its libp2p identity and the address
/// it listened on, kept across restarts; locked while a node uses it.
pub struct StateDir {
    path: PathBuf,
    _lock: HeldLock,
}

/// The file of the node's libp2p identity, in the state directory.
const IDENTITY_FILE: &str = "identity";
/// The file of the address the node last listened on.
const LISTEN_FILE: &str = "listen";
/// The lock file that makes one node at a time use a state directory.
const LOCK_FILE: &str = "lock";
/// No identity file is anywhere near this long; a longer one is a mistake.
const MAX_IDENTITY_LEN: u64 = 4096;

/// The most bytes a pool file may have: one is a few hundred bytes of
/// JSON (addresses, a key path, an id), so this leaves room to spare.
pub const MAX_POOL_FILE_BYTES: u64 = 64 * 1024;

impl StateDir {
    /// The default state directory of `pool_file`: `<stem>.state` beside it
    /// (`pool.json` → `pool.state`).
    pub fn default_for(pool_file: &Path) -> PathBuf {
        let stem = pool_file
            .file_stem()
            .map_or_else(|| "constellation-pool".into(), |s| s.to_os_string());
        let mut name = stem;
        name.push(".state");
        pool_file.with_file_name(name)
    }

    /// Opens (creating, mode 0700) the state directory at `path` and locks
    /// it, refusing when another pool node uses it, and refusing one this
    /// user may not trust (another user's, a link, one others may write,
    /// one found in a directory others may change): its job journal
    /// decides what the pool runs as this user.
    pub fn open(path: &Path) -> anyhow::Result<StateDir> {
        trust::create_dir(path, 0o700)
            .map_err(trusted_error)
            .with_context(|| format!("cannot use the state directory {}", path.display()))?;

        let lock = match HeldLock::take(&path.join(LOCK_FILE)) {
            Ok(lock) => lock,
            Err(LockRefused::Failed(error)) => return Err(error),
            Err(LockRefused::Held(pid)) => bail!(
                "the state directory {} is in use by another pool node{}; give this pool \
                 another --state-dir",
                path.display(),
                pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
            ),
        };
        Ok(StateDir {
            path: path.to_path_buf(),
            _lock: lock,
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The node's identity: the one kept here, else a new one, saved (mode
    /// 0600). The flag says whether it is new.
    pub fn identity(&self) -> anyhow::Result<(Keypair, bool)> {
        let path = self.path.join(IDENTITY_FILE);
        let mut file = match trust::open(&path, trust::Access::Read) {
            Ok(opened) => opened.file,
            Err(error) if error.io_kind() == Some(io::ErrorKind::NotFound) => {
                let keypair = Keypair::generate_ed25519();
                let bytes = keypair
                    .to_protobuf_encoding()
                    .context("cannot encode a new node identity")?;
                write_private(&path, &bytes)?;
                return Ok((keypair, true));
            }
            Err(error) => {
                return Err(trusted_error(error))
                    .with_context(|| format!("cannot read the node identity {}", path.display()))
            }
        };
        let mode = file
            .metadata()
            .with_context(|| format!("cannot read the node identity {}", path.display()))?
            .permissions()
            .mode()
            & 0o777;
        if mode & 0o077 != 0 {
            bail!(
                "the node identity {} has mode {mode:03o}, so group or others may read or \
                 change it; run `chmod 600 {}`",
                path.display(),
                path.display()
            );
        }
        let mut bytes = Vec::new();
        (&mut file)
            .take(MAX_IDENTITY_LEN + 1)
            .read_to_end(&mut bytes)
            .with_context(|| format!("cannot read the node identity {}", path.display()))?;
        let decoded = if bytes.len() as u64 <= MAX_IDENTITY_LEN {
            Keypair::from_protobuf_encoding(&bytes).ok()
        } else {
            None
        };
        match decoded {
            Some(keypair) => Ok((keypair, false)),
            None => bail!(
                "{} is not a node identity; remove it to make a new one (the pool's peer id \
                 then changes, and members must join with the new pool file)",
                path.display()
            ),
        }
    }

    /// The address the node last listened on, if it is recorded and
    /// readable.
    pub fn last_listen(&self) -> Option<Multiaddr> {
        std::fs::read_to_string(self.path.join(LISTEN_FILE))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Records the address the node listens on, for the next start.
    pub fn save_listen(&self, address: &Multiaddr) -> anyhow::Result<()> {
        write_private(
            &self.path.join(LISTEN_FILE),
            format!("{address}\n").as_bytes(),
        )
    }
}

/// The TCP port of `address`, if it has one.
pub fn tcp_port(address: &Multiaddr) -> Option<u16> {
    address.iter().find_map(|part| match part {
        Protocol::Tcp(port) => Some(port),
        _ => None,
    })
}

/// `address` with its TCP port set to `port`; `None` without a TCP part.
pub fn with_tcp_port(address: &Multiaddr, port: u16) -> Option<Multiaddr> {
    let mut found = false;
    let changed = address
        .iter()
        .map(|part| match part {
            Protocol::Tcp(_) if !found => {
                found = true;
                Protocol::Tcp(port)
            }
            other => other,
        })
        .collect();
    found.then_some(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory for one test, removed when it ends.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            let dir = std::env::temp_dir().join(format!("poolfile-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    fn error_of(result: anyhow::Result<Joining>) -> String {
        match result {
            Ok(_) => panic!("expected an error"),
            Err(error) => format!("{error:#}"),
        }
    }

    /// A pool file naming `key_file`, in `dir`.
    fn pool_file(dir: &Path, key_file: Option<PathBuf>) -> PathBuf {
        let path = dir.join("pool.json");
        PoolFile {
            addresses: vec!["/ip4/127.0.0.1/tcp/4001".into()],
            key_file,
            pid: 1,
            started: 0.0,
        }
        .save(&path)
        .unwrap();
        path
    }

    #[test]
    fn a_missing_or_broken_pool_file_says_what_to_do() {
        let dir = TempDir::new("broken");
        let missing = error_of(joining(dir.0.join("none.json").to_str().unwrap(), None));
        assert!(missing.contains("constellation pool start"), "{missing}");
        std::fs::write(dir.0.join("bad.json"), "{").unwrap();
        let bad = error_of(joining(dir.0.join("bad.json").to_str().unwrap(), None));
        assert!(bad.contains("is not a pool file"), "{bad}");
    }

    #[test]
    fn the_pool_file_is_written_for_its_owner_only_and_reads_back() {
        let dir = TempDir::new("save");
        let path = dir.0.join("ok.json");
        // Even over a partial file left world-readable by a killed writer.
        std::fs::write(with_suffix(&path, ".partial"), "junk").unwrap();
        std::fs::set_permissions(
            with_suffix(&path, ".partial"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        let file = PoolFile {
            addresses: vec!["/ip4/127.0.0.1/tcp/4001".into()],
            key_file: Some(dir.0.join("ok.key")),
            pid: 1,
            started: 0.0,
        };
        file.save(&path).unwrap();
        assert_eq!(mode(&path), 0o600);
        assert!(!with_suffix(&path, ".partial").exists());
        assert_eq!(PoolFile::load(&path).unwrap(), file);
    }

    #[test]
    fn a_pool_without_a_key_is_refused() {
        // The variable would give the key these tests say is missing.
        if std::env::var_os(key::KEY_ENV).is_some() {
            eprintln!("skipped: {} is set", key::KEY_ENV);
            return;
        }
        let dir = TempDir::new("keyless");
        let path = pool_file(&dir.0, None);
        let why = error_of(joining(path.to_str().unwrap(), None));
        assert!(
            why.contains("has no key")
                && why.contains("--key-file")
                && why.contains(key::KEY_ENV)
                && why.contains("start the pool again"),
            "{why}"
        );
        let why = error_of(joining("/ip4/127.0.0.1/tcp/4001", None));
        assert!(
            why.contains("the pool /ip4/127.0.0.1/tcp/4001 has no key")
                && why.contains("--key-file"),
            "{why}"
        );
    }

    #[test]
    fn a_pool_with_a_readable_key_is_joined_with_it() {
        let dir = TempDir::new("keyed");
        let key_path = dir.0.join("pool.key");
        let made = key::write_new_file(&key_path).unwrap();
        assert_eq!(mode(&key_path), 0o600);
        let path = pool_file(&dir.0, Some(key_path.clone()));
        let joined = joining(path.to_str().unwrap(), None).unwrap();
        assert_eq!(joined.key, Some(made.clone()));
        assert_eq!(joined.default_listen(), "/ip4/127.0.0.1/tcp/0");
        // --key-file gives the key of a bare address.
        let bare = joining("/ip4/10.0.0.1/tcp/4001", Some(&key_path)).unwrap();
        assert_eq!(bare.key, Some(made));
        assert_eq!(bare.default_listen(), "/ip4/0.0.0.0/tcp/0");
    }

    #[test]
    fn a_key_file_this_user_cannot_read_says_who_must_read_it() {
        let dir = TempDir::new("unreadable");
        let key_path = dir.0.join("pool.key");
        key::write_new_file(&key_path).unwrap();
        // No read permission for anyone: root reads it anyway, so the
        // check only means something for other users.
        std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o000)).unwrap();
        if std::fs::read(&key_path).is_ok() {
            eprintln!("skipped: this user reads files whatever their mode (root)");
            return;
        }
        let path = pool_file(&dir.0, Some(key_path.clone()));
        let why = error_of(joining(path.to_str().unwrap(), None));
        assert!(
            why.contains(&key_path.display().to_string())
                && why.contains("ermission denied")
                && why.contains("whoever joins the pool must be able to read its key file"),
            "{why}"
        );
    }

    #[test]
    fn a_pool_file_this_user_cannot_read_says_who_may() {
        let dir = TempDir::new("unreadable-pool");
        let path = pool_file(&dir.0, None);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();
        if std::fs::read(&path).is_ok() {
            eprintln!("skipped: this user reads files whatever their mode (root)");
            return;
        }
        let why = error_of(joining(path.to_str().unwrap(), None));
        assert!(
            why.contains("ermission denied")
                && why.contains("whoever joins the pool must be able to read both"),
            "{why}"
        );
    }

    #[test]
    fn one_process_at_a_time_owns_a_pool_file() {
        let dir = TempDir::new("lock");
        let path = pool_file(&dir.0, None);
        let first = PoolFileLock::acquire(&path).unwrap();
        // The file was in place with nobody holding the lock: stale.
        assert_eq!(first.stale().map(|f| f.pid), Some(Some(1)));
        // A second claim (another open file description, as another
        // process has) is refused, naming the pool file and its pid.
        let refused = match PoolFileLock::acquire(&path) {
            Ok(_) => panic!("a second lock on a held pool file"),
            Err(error) => format!("{error:#}"),
        };
        assert!(
            refused.contains(&path.display().to_string())
                && refused.contains("a live pool (pid 1)")
                && refused.contains("--pool-file"),
            "{refused}"
        );
        assert_eq!(mode(&with_suffix(&path, ".lock")), 0o600);
        drop(first);
        let again = PoolFileLock::acquire(&path).unwrap();
        assert!(again.stale().is_some());
        std::fs::remove_file(&path).unwrap();
        drop(again);
        assert!(PoolFileLock::acquire(&path).unwrap().stale().is_none());
    }

    #[test]
    fn the_state_directory_keeps_the_identity_and_the_address() {
        let dir = TempDir::new("state");
        let pool = dir.0.join("pool.json");
        let state_path = StateDir::default_for(&pool);
        assert_eq!(state_path, dir.0.join("pool.state"));
        let state = StateDir::open(&state_path).unwrap();
        assert_eq!(mode(&state_path), 0o700);
        let refused = match StateDir::open(&state_path) {
            Ok(_) => panic!("a second node on one state directory"),
            Err(error) => format!("{error:#}"),
        };
        assert!(
            refused.contains("in use by another pool node") && refused.contains("--state-dir"),
            "{refused}"
        );
        let (first, new) = state.identity().unwrap();
        assert!(new);
        assert_eq!(mode(&state_path.join(IDENTITY_FILE)), 0o600);
        assert!(state.last_listen().is_none());
        let address: Multiaddr = "/ip4/127.0.0.1/tcp/40123".parse().unwrap();
        state.save_listen(&address).unwrap();
        drop(state);

        let state = StateDir::open(&state_path).unwrap();
        let (second, new) = state.identity().unwrap();
        assert!(!new);
        assert_eq!(first.public(), second.public());
        assert_eq!(state.last_listen(), Some(address));

        std::fs::set_permissions(
            state_path.join(IDENTITY_FILE),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        let why = format!("{:#}", state.identity().err().unwrap());
        assert!(why.contains("chmod 600"), "{why}");
        std::fs::remove_file(state_path.join(IDENTITY_FILE)).unwrap();
        write_private(&state_path.join(IDENTITY_FILE), b"not an identity").unwrap();
        let why = format!("{:#}", state.identity().err().unwrap());
        assert!(
            why.contains("is not a node identity") && why.contains("remove it"),
            "{why}"
        );
    }

    #[test]
    fn tcp_ports_are_read_and_replaced() {
        let any: Multiaddr = "/ip4/0.0.0.0/tcp/0".parse().unwrap();
        assert_eq!(tcp_port(&any), Some(0));
        let fixed = with_tcp_port(&any, 40123).unwrap();
        assert_eq!(fixed.to_string(), "/ip4/0.0.0.0/tcp/40123");
        assert_eq!(tcp_port(&fixed), Some(40123));
        let v6: Multiaddr =
            "/ip6/::1/tcp/7/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"
                .parse()
                .unwrap();
        assert_eq!(
            with_tcp_port(&v6, 9).unwrap().to_string(),
            "/ip6/::1/tcp/9/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"
        );
        let udp: Multiaddr = "/ip4/127.0.0.1/udp/5".parse().unwrap();
        assert_eq!(tcp_port(&udp), None);
        assert_eq!(with_tcp_port(&udp, 9), None);
    }
}
