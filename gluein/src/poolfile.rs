//! The pool file: how agents and runners find a pool.
//!
//! `constellation pool start` writes it: the pool node's addresses (with
//! its peer id) and the path of the pool key. Everything that joins reads
//! it: `--pool FILE`. A bare multiaddr works too (`--pool /ip4/…/p2p/…`),
//! with the key from `--key-file` or `CONSTELLATION_KEY`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use constellation::net::{key, PoolKey};
use serde::{Deserialize, Serialize};

/// What a pool file holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolFile {
    /// Addresses to dial, each ending in `/p2p/<peer id>`.
    pub addresses: Vec<String>,
    /// The pool key's file (mode 0600); `None` for a loopback-only pool.
    pub key_file: Option<PathBuf>,
    /// The pool node's process id, for `status` and to spot a stale file.
    pub pid: u32,
    /// When the pool started, Unix seconds.
    pub started: f64,
}

impl PoolFile {
    /// Writes the file through a temporary name.
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self)? + "\n";
        let partial = path.with_extension("partial");
        std::fs::write(&partial, text).with_context(|| format!("writing {}", partial.display()))?;
        std::fs::rename(&partial, path).with_context(|| format!("writing {}", path.display()))
    }

    /// Reads a pool file.
    pub fn load(path: &Path) -> anyhow::Result<PoolFile> {
        let text = std::fs::read_to_string(path).with_context(|| {
            format!(
                "reading the pool file {}; start a pool with `constellation pool start`",
                path.display()
            )
        })?;
        serde_json::from_str(&text)
            .with_context(|| format!("{} is not a pool file", path.display()))
    }
}

/// Where and how to join: bootstrap addresses and the key.
pub struct Joining {
    /// Addresses to dial.
    pub bootstrap: Vec<constellation::net::Multiaddr>,
    /// The pool key, if the pool has one.
    pub key: Option<PoolKey>,
}

impl Joining {
    /// Where a joining node listens unless told: every interface when the
    /// pool has a key (members elsewhere must reach it), loopback without
    /// one (a keyless pool only runs on loopback).
    pub fn default_listen(&self) -> &'static str {
        if self.key.is_some() {
            "/ip4/0.0.0.0/tcp/0"
        } else {
            "/ip4/127.0.0.1/tcp/0"
        }
    }
}

/// Resolves `--pool` (a pool file or a multiaddr) and `--key-file` into
/// what a node needs to join. The key comes from `--key-file`, else the
/// pool file, else `CONSTELLATION_KEY`.
pub fn joining(pool: &str, key_file: Option<&Path>) -> anyhow::Result<Joining> {
    // A multiaddr never names a file (`/ip4/…` is not a path anyone has),
    // so whatever parses as one is an address.
    let (addresses, file_key) = if pool.parse::<constellation::net::Multiaddr>().is_ok() {
        (vec![pool.to_string()], None)
    } else {
        let file = PoolFile::load(Path::new(pool))?;
        (file.addresses, file.key_file)
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
        Some(path) => Some(key::read_file(&path)?),
        None => key::from_env()?,
    };
    Ok(Joining { bootstrap, key })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_broken_pool_file_says_what_to_do() {
        let dir = std::env::temp_dir().join(format!("poolfile-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = joining(dir.join("none.json").to_str().unwrap(), None)
            .err()
            .unwrap();
        assert!(format!("{missing:#}").contains("constellation pool start"));
        std::fs::write(dir.join("bad.json"), "{").unwrap();
        let bad = joining(dir.join("bad.json").to_str().unwrap(), None)
            .err()
            .unwrap();
        assert!(format!("{bad:#}").contains("is not a pool file"));
        let file = PoolFile {
            addresses: vec!["/ip4/127.0.0.1/tcp/4001".into()],
            key_file: None,
            pid: 1,
            started: 0.0,
        };
        file.save(&dir.join("ok.json")).unwrap();
        assert_eq!(PoolFile::load(&dir.join("ok.json")).unwrap(), file);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
