//! The pool key: the pre-shared key of a libp2p private network (pnet).
//!
//! Every connection of a pool is encrypted with this key before anything
//! else is said, so a node without it cannot even start a handshake. The key
//! lives in a file in the go-ipfs `swarm.key` format, readable by its owner
//! only, or in the environment variable [`KEY_ENV`] as 64 hex digits.

use std::fmt;
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use libp2p::pnet::{KeyParseError, PreSharedKey};
use rand::RngCore;

/// The environment variable that may hold the pool key, as 64 hex digits or
/// in the swarm.key format.
pub const KEY_ENV: &str = "CONSTELLATION_KEY";

/// First line of a swarm.key file: the key type (for messages and for
/// framing a bare key; libp2p's parser checks it).
const HEADER: &str = "/key/swarm/psk/1.0.0/";

/// Second line of a swarm.key file: the only encoding libp2p supports.
const ENCODING: &str = "/base16/";

/// A key file is three short lines; anything much longer is not one, and
/// reading it whole (a device, a log file named by mistake) is pointless.
const MAX_FILE_LEN: u64 = 4096;

/// Why a key text is not a valid pool key: libp2p's parse error, put in
/// words that say what a key file must hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyFormatError {
    /// The text is empty.
    #[error("the key is empty")]
    Empty,
    /// The first line is not the swarm.key header.
    #[error("expected the header line `{HEADER}` or a bare line of 64 hex digits")]
    BadHeader,
    /// The second line names an encoding other than base16.
    #[error("unsupported key encoding `{0}`; only `{ENCODING}` is supported")]
    UnsupportedEncoding(String),
    /// The file has the header but not the encoding and key lines.
    #[error("incomplete key file: expected `{HEADER}`, `{ENCODING}` and a line of 64 hex digits")]
    Incomplete,
    /// Lines with content follow the key.
    #[error("unexpected text after the key line")]
    TrailingText,
    /// The key line has the wrong number of characters.
    #[error("the key must be 64 hex digits (32 bytes), found {0} characters")]
    BadLength(usize),
    /// The key line holds something other than hex digits.
    #[error("the key must be hex digits only (0-9, a-f)")]
    NotHex,
}

/// Why a pool key could not be read, parsed or written.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// There is no file at the path.
    #[error(
        "key file {path} does not exist; create one with a fresh key, or copy the pool's key there"
    )]
    NotFound {
        /// The path looked at.
        path: PathBuf,
    },
    /// The file exists but could not be read.
    #[error("cannot read key file {path}: {source}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: io::Error,
    },
    /// Users other than the owner may read or change the file.
    #[error(
        "key file {path} has mode {mode:03o}, so group or others may read or change it; \
         run `chmod 600 {path}`"
    )]
    TooOpen {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The file is much larger than any key file.
    #[error("{path} is larger than {MAX_FILE_LEN} bytes, too large to be a key file")]
    FileTooLarge {
        /// The file.
        path: PathBuf,
    },
    /// The file is not one this user may trust: another user's, a link,
    /// a device, or in a directory others may change.
    #[error("{0}")]
    Untrusted(trust::Refusal),
    /// The file's content is not a key.
    #[error("key file {path} is not a valid key: {reason}")]
    BadFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: KeyFormatError,
    },
    /// The environment variable is set but is not a key.
    #[error("{KEY_ENV} is not a valid key: {0}")]
    BadEnv(KeyFormatError),
    /// The environment variable holds bytes that are not UTF-8.
    #[error("{KEY_ENV} is not valid UTF-8; it must hold 64 hex digits")]
    EnvNotUnicode,
    /// A text given directly is not a key.
    #[error("not a valid key: {0}")]
    Format(#[from] KeyFormatError),
    /// A new key file would replace an existing one.
    #[error(
        "key file {path} already exists; not overwriting it (remove it first to make a new key)"
    )]
    AlreadyExists {
        /// The file.
        path: PathBuf,
    },
    /// A new key file could not be written.
    #[error("cannot write key file {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: io::Error,
    },
}

/// The pool key. Its `Debug` shows only the fingerprint, so logging a
/// configuration never reveals the key.
#[derive(Clone, PartialEq, Eq)]
pub struct PoolKey {
    psk: PreSharedKey,
}

impl PoolKey {
    /// A fresh random key, from the operating system's generator.
    pub fn generate() -> PoolKey {
        let mut bytes = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        PoolKey {
            psk: PreSharedKey::new(bytes),
        }
    }

    /// The key as libp2p's pnet wants it.
    pub fn psk(&self) -> PreSharedKey {
        self.psk
    }

    /// A short hex digest that identifies the key without revealing it
    /// (the same as go-libp2p's), for logs and for comparing nodes' keys.
    pub fn fingerprint(&self) -> String {
        self.psk.fingerprint().to_string()
    }

    /// The key in the go-ipfs swarm.key format, ready to be written to a
    /// file: header, encoding and 64 lowercase hex digits, one per line.
    pub fn to_file_text(&self) -> String {
        // libp2p's Display writes exactly this format.
        self.psk.to_string()
    }

    /// The key as one line of 64 lowercase hex digits, the form for
    /// [`KEY_ENV`].
    pub fn to_hex(&self) -> String {
        let text = self.to_file_text();
        text.lines().nth(2).unwrap_or_default().to_string()
    }
}

impl fmt::Debug for PoolKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PoolKey(fingerprint {})", self.fingerprint())
    }
}

/// Parses `text` with libp2p's own swarm.key parser. Before it, lines are
/// trimmed and blank ones dropped (accepting CRLF files and stray
/// indentation, which libp2p refuses), and a bare line of hex digits is
/// framed as a key file, the form [`KEY_ENV`] usually holds.
fn parse_text(text: &str) -> Result<PoolKey, KeyFormatError> {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let file_text = match lines.as_slice() {
        [] => return Err(KeyFormatError::Empty),
        [bare] if !bare.starts_with('/') => format!("{HEADER}\n{ENCODING}\n{bare}\n"),
        // libp2p reads three lines and ignores the rest: text after the key
        // is a mistake (two keys pasted?) to point out, not to drop.
        [first, _, ..] if !first.starts_with('/') => return Err(KeyFormatError::TrailingText),
        [_, _, _, _, ..] => return Err(KeyFormatError::TrailingText),
        lines => lines.join("\n") + "\n",
    };
    let framed: Vec<&str> = file_text.lines().collect();
    // libp2p slices the key line two bytes at a time, which panics inside a
    // multi-byte character, and `u8::from_str_radix` takes a `+` sign.
    if framed
        .get(2)
        .is_some_and(|key| key.bytes().any(|b| !b.is_ascii() || b == b'+'))
    {
        return Err(KeyFormatError::NotHex);
    }
    // What libp2p found wrong, named with the line it is about.
    let line = |n: usize| framed.get(n).copied().unwrap_or_default();
    file_text
        .parse::<PreSharedKey>()
        .map(|psk| PoolKey { psk })
        .map_err(|error| match error {
            KeyParseError::InvalidKeyFile if line(0) == HEADER => KeyFormatError::Incomplete,
            KeyParseError::InvalidKeyFile | KeyParseError::InvalidKeyType => {
                KeyFormatError::BadHeader
            }
            KeyParseError::InvalidKeyEncoding => {
                KeyFormatError::UnsupportedEncoding(line(1).to_string())
            }
            KeyParseError::InvalidKeyLength => KeyFormatError::BadLength(line(2).chars().count()),
            KeyParseError::InvalidKeyChar(_) => KeyFormatError::NotHex,
        })
}

/// Parses a key: the swarm.key format, or a bare line of 64 hex digits.
/// Whitespace around lines is ignored.
pub fn parse(text: &str) -> Result<PoolKey, KeyError> {
    Ok(parse_text(text)?)
}

/// Reads a key file.
///
/// The file must be one this user may trust (see the `trust` crate): a
/// regular file, not a link, of this user's (or root's), in a directory
/// no other user may change unless this process made it. A key another
/// user planted would make this node run that user's work as its own
/// user. And it must not be readable or writable by group or others: a
/// key others can read is no longer secret, and one they can write lets
/// them move the node to another pool.
pub fn read_file(path: &Path) -> Result<PoolKey, KeyError> {
    let file = trust::open_trusted(path, trust::Access::Read).map_err(|error| {
        let path = path.to_path_buf();
        match error {
            // Writable by others but this user's: making it 0600 fixes
            // both that and its being readable.
            trust::TrustError::Refused(trust::Refusal {
                reason: trust::Reason::WritableByOthers { mode },
                ..
            }) => KeyError::TooOpen {
                path,
                mode: mode & 0o777,
            },
            trust::TrustError::Refused(refusal) => KeyError::Untrusted(refusal),
            trust::TrustError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound => {
                KeyError::NotFound { path }
            }
            trust::TrustError::Io { source, .. } => KeyError::Unreadable { path, source },
        }
    })?;
    let unreadable = |source: io::Error| KeyError::Unreadable {
        path: path.to_path_buf(),
        source,
    };
    // The open file's metadata, not the path's, so what is checked is what
    // is read even if the path is swapped in between.
    let meta = file.metadata().map_err(unreadable)?;
    let mut text = String::new();
    file.take(MAX_FILE_LEN + 1)
        .read_to_string(&mut text)
        .map_err(unreadable)?;
    if text.len() as u64 > MAX_FILE_LEN {
        return Err(KeyError::FileTooLarge {
            path: path.to_path_buf(),
        });
    }
    // The content first: a file that is no key at all (`/etc/shadow`
    // named by mistake) is better told so than told to change its mode.
    let key = parse_text(&text).map_err(|reason| KeyError::BadFile {
        path: path.to_path_buf(),
        reason,
    })?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(KeyError::TooOpen {
                path: path.to_path_buf(),
                mode,
            });
        }
    }
    Ok(key)
}

/// Generates a key and writes it to a new file that only its owner may
/// read and write (mode 0600). Never replaces an existing file, nor
/// follows a link.
pub fn write_new_file(path: &Path) -> Result<PoolKey, KeyError> {
    let key = PoolKey::generate();
    // Mode 0600 at creation, so the key is never readable by others, not
    // even between creating and restricting the file; never through a
    // link another user planted.
    let mut file = match trust::create_new(path, false) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            return Err(KeyError::AlreadyExists {
                path: path.to_path_buf(),
            })
        }
        Err(source) => {
            return Err(KeyError::Write {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let written = file
        .write_all(key.to_file_text().as_bytes())
        .and_then(|()| file.sync_all());
    if let Err(source) = written {
        drop(file);
        // A half-written key file would later fail to parse, or worse, be
        // mistaken for a key; removal is best effort, the write error is
        // what matters.
        let _ = fs::remove_file(path);
        return Err(KeyError::Write {
            path: path.to_path_buf(),
            source,
        });
    }
    Ok(key)
}

/// The key from [`KEY_ENV`], or `None` when the variable is unset or empty.
pub fn from_env() -> Result<Option<PoolKey>, KeyError> {
    from_env_value(std::env::var_os(KEY_ENV))
}

fn from_env_value(value: Option<std::ffi::OsString>) -> Result<Option<PoolKey>, KeyError> {
    let Some(value) = value else {
        return Ok(None);
    };
    let text = value.into_string().map_err(|_| KeyError::EnvNotUnicode)?;
    if text.trim().is_empty() {
        return Ok(None);
    }
    parse_text(&text).map(Some).map_err(KeyError::BadEnv)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    const HEX: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

    /// A fresh directory under the system temp dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> Self {
            static COUNTER: AtomicU32 = AtomicU32::new(0);
            let name = format!(
                "constellation-key-test-{}-{}",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::Relaxed)
            );
            let path = std::env::temp_dir().join(name);
            fs::create_dir_all(&path).unwrap();
            TempDir(path)
        }

        fn file(&self, name: &str) -> PathBuf {
            self.0.join(name)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[cfg(unix)]
    fn write_with_mode(path: &Path, text: &str, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        fs::write(path, text).unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn file_text_is_swarm_key_format() {
        let key = parse(HEX).unwrap();
        assert_eq!(
            key.to_file_text(),
            format!("/key/swarm/psk/1.0.0/\n/base16/\n{HEX}\n")
        );
        assert_eq!(key.to_hex(), HEX);
    }

    #[test]
    fn file_text_agrees_with_libp2p() {
        let key = PoolKey::generate();
        let theirs: PreSharedKey = key.to_file_text().parse().unwrap();
        assert_eq!(theirs, key.psk());
        assert_eq!(theirs.to_string(), key.to_file_text());
    }

    #[test]
    fn generated_keys_round_trip_and_differ() {
        let a = PoolKey::generate();
        let b = PoolKey::generate();
        assert_ne!(a, b);
        assert_eq!(parse(&a.to_file_text()).unwrap(), a);
        assert_eq!(parse(&a.to_hex()).unwrap(), a);
    }

    #[test]
    fn fingerprint_is_stable_and_hides_the_key() {
        let key = parse(HEX).unwrap();
        let print = key.fingerprint();
        assert_eq!(print.len(), 32);
        assert!(print.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(print, parse(HEX).unwrap().fingerprint());
        assert_ne!(print, PoolKey::generate().fingerprint());
        let debug = format!("{key:?}");
        assert!(debug.contains(&print));
        assert!(!debug.contains(HEX));
    }

    #[test]
    fn parse_accepts_both_forms_and_whitespace() {
        let expected = parse(HEX).unwrap();
        for text in [
            format!("  {HEX}\n"),
            HEX.to_uppercase(),
            format!("/key/swarm/psk/1.0.0/\n/base16/\n{HEX}"),
            format!("/key/swarm/psk/1.0.0/\r\n/base16/\r\n{HEX}\r\n\r\n"),
        ] {
            assert_eq!(parse(&text).unwrap(), expected, "{text:?}");
        }
    }

    #[test]
    fn parse_refuses_bad_text() {
        let cases = [
            (String::new(), KeyFormatError::Empty),
            ("  \n ".to_string(), KeyFormatError::Empty),
            (HEX[..62].to_string(), KeyFormatError::BadLength(62)),
            (format!("{HEX}00"), KeyFormatError::BadLength(66)),
            (format!("+1{}", &HEX[2..]), KeyFormatError::NotHex),
            (format!("zz{}", &HEX[2..]), KeyFormatError::NotHex),
            (format!("é{}", &HEX[2..]), KeyFormatError::NotHex),
            // Bytes 2..4 cut the `é`: libp2p's parser alone would panic.
            (format!("aé{}", &HEX[3..]), KeyFormatError::NotHex),
            (
                "/key/swarm/psk/2.0.0/\n/base16/\n".to_string(),
                KeyFormatError::BadHeader,
            ),
            (
                "/key/swarm/psk/1.0.0/\n".to_string(),
                KeyFormatError::Incomplete,
            ),
            (
                "/key/swarm/psk/1.0.0/\n/base16/\n".to_string(),
                KeyFormatError::Incomplete,
            ),
            (
                format!("/key/swarm/psk/1.0.0/\n/base64/\n{HEX}\n"),
                KeyFormatError::UnsupportedEncoding("/base64/".to_string()),
            ),
            (format!("{HEX}\n{HEX}\n"), KeyFormatError::TrailingText),
        ];
        for (text, expected) in cases {
            match parse(&text) {
                Err(KeyError::Format(reason)) => assert_eq!(reason, expected, "{text:?}"),
                other => panic!("{text:?}: expected {expected:?}, got {other:?}"),
            }
        }
    }

    #[test]
    fn write_then_read_a_key_file() {
        let dir = TempDir::new();
        let path = dir.file("swarm.key");
        let key = write_new_file(&path).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), key.to_file_text());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        assert_eq!(read_file(&path).unwrap(), key);
    }

    #[test]
    fn write_new_file_never_overwrites() {
        let dir = TempDir::new();
        let path = dir.file("swarm.key");
        fs::write(&path, "precious").unwrap();
        assert!(matches!(
            write_new_file(&path),
            Err(KeyError::AlreadyExists { .. })
        ));
        assert_eq!(fs::read_to_string(&path).unwrap(), "precious");
    }

    #[test]
    fn write_new_file_in_missing_directory_fails() {
        let dir = TempDir::new();
        let path = dir.file("no/such/dir/swarm.key");
        match write_new_file(&path) {
            Err(KeyError::Write { path: p, .. }) => assert_eq!(p, path),
            other => panic!("expected Write, got {other:?}"),
        }
    }

    #[test]
    fn missing_file_is_not_found() {
        let dir = TempDir::new();
        let path = dir.file("absent.key");
        let err = read_file(&path).unwrap_err();
        assert!(matches!(err, KeyError::NotFound { .. }));
        assert!(err.to_string().contains(&path.display().to_string()));
    }

    #[cfg(unix)]
    #[test]
    fn open_permissions_are_refused() {
        let dir = TempDir::new();
        let path = dir.file("swarm.key");
        for mode in [0o644, 0o640, 0o604, 0o620, 0o602, 0o666] {
            write_with_mode(&path, HEX, mode);
            let err = read_file(&path).unwrap_err();
            match &err {
                KeyError::TooOpen { mode: m, .. } => assert_eq!(*m, mode),
                other => panic!("mode {mode:o}: expected TooOpen, got {other:?}"),
            }
            let text = err.to_string();
            assert!(text.contains(&format!("{mode:o}")), "{text}");
            assert!(
                text.contains(&format!("chmod 600 {}", path.display())),
                "{text}"
            );
        }
        for mode in [0o600, 0o400] {
            write_with_mode(&path, HEX, mode);
            assert!(read_file(&path).is_ok(), "mode {mode:o}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn bad_content_names_the_file() {
        let dir = TempDir::new();
        let path = dir.file("swarm.key");
        write_with_mode(&path, "not a key", 0o600);
        let err = read_file(&path).unwrap_err();
        assert!(matches!(
            err,
            KeyError::BadFile {
                reason: KeyFormatError::BadLength(9),
                ..
            }
        ));
        assert!(err.to_string().contains(&path.display().to_string()));
    }

    #[cfg(unix)]
    #[test]
    fn oversized_file_is_refused() {
        let dir = TempDir::new();
        let path = dir.file("swarm.key");
        write_with_mode(&path, &"0".repeat(5000), 0o600);
        assert!(matches!(
            read_file(&path),
            Err(KeyError::FileTooLarge { .. })
        ));
    }

    #[test]
    fn directory_is_unreadable() {
        let dir = TempDir::new();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&dir.0, fs::Permissions::from_mode(0o700)).unwrap();
        }
        assert!(matches!(read_file(&dir.0), Err(KeyError::Untrusted(_))));
    }

    /// A device or another system file named as the key is refused for
    /// what it is, not with advice to change its mode.
    #[cfg(unix)]
    #[test]
    fn a_device_or_a_system_file_is_not_told_to_chmod() {
        let zero = read_file(Path::new("/dev/zero")).unwrap_err().to_string();
        assert!(
            zero.contains("refusing /dev/zero: it is a character device, not a regular file")
                && !zero.contains("chmod"),
            "{zero}"
        );
        // Root may read /etc/shadow; others are told they cannot.
        if let Err(error) = read_file(Path::new("/etc/shadow")) {
            let text = error.to_string();
            assert!(!text.contains("chmod 600"), "{text}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_linked_key_is_refused() {
        let dir = TempDir::new();
        let real = dir.file("real.key");
        let key = write_new_file(&real).unwrap();
        assert_eq!(read_file(&real).unwrap(), key);
        let link = dir.file("link.key");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let error = read_file(&link).unwrap_err();
        assert!(matches!(error, KeyError::Untrusted(_)), "{error:?}");
        assert!(error.to_string().contains("symbolic link"), "{error}");
        // Nor is a new key written through a link.
        std::fs::remove_file(&real).unwrap();
        assert!(write_new_file(&link).is_err());
        assert!(!real.exists(), "a key was written through a link");
    }

    /// Through `from_env_value`: setting the real variable would race other
    /// tests of the crate that read the environment.
    #[test]
    fn env_value_forms() {
        use std::ffi::OsString;
        assert!(from_env_value(None).unwrap().is_none());
        assert!(from_env_value(Some(OsString::new())).unwrap().is_none());
        assert!(from_env_value(Some(" \n".into())).unwrap().is_none());
        let key = from_env_value(Some(format!(" {HEX} ").into())).unwrap();
        assert_eq!(key, Some(parse(HEX).unwrap()));
        assert!(matches!(
            from_env_value(Some("nope".into())),
            Err(KeyError::BadEnv(KeyFormatError::BadLength(4)))
        ));
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStringExt;
            assert!(matches!(
                from_env_value(Some(OsString::from_vec(vec![0xff, 0xfe]))),
                Err(KeyError::EnvNotUnicode)
            ));
        }
    }
}
