//! Reading the files a graph comes from (the graph file, its sweep
//! files, a context file) with a bound: each must be a regular file of at
//! most a given size. A FIFO, a device such as `/dev/zero` or a file that
//! grows while it is read would otherwise hang the reader or fill its
//! memory, on a login node that others share.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The default limit on a graph, sweep or context file: 64 MiB.
pub const DEFAULT_MAX_INPUT_BYTES: u64 = 64 * 1024 * 1024;

/// What a message about a file over the limit says to raise it.
pub const RAISE_LIMIT: &str =
    "; raise the limit with --max-graph-size if the file is meant to be that large";

/// How a graph is read: the size limit on each file, and where sweep
/// files come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadOptions {
    /// No graph, sweep or context file may have more bytes than this.
    pub max_bytes: u64,
    /// Sweep files are read from this folder, each under
    /// [`kept_sweep_name`] of the name the graph gives it, instead of
    /// beside the graph file: a job's copy of what was submitted.
    pub kept_sweeps: Option<PathBuf>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            max_bytes: DEFAULT_MAX_INPUT_BYTES,
            kept_sweeps: None,
        }
    }
}

/// The file name under which a job keeps the sweep file a graph names
/// `name` (any text: `pairs.txt`, `../data/pairs.txt`, `/data/x`): a hex
/// digest, so that every name maps to one plain file name.
pub fn kept_sweep_name(name: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(name.as_bytes());
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// The text of the `what` (e.g. "graph file") at `path`, if it is a
/// regular file of at most `max_bytes` bytes in UTF-8. The error names
/// the file, its size and the limit; `raise` says how to raise the limit
/// (e.g. "; raise it with --max-graph-size"), or is empty.
///
/// The file's kind is checked before it is opened, and it is opened
/// non-blocking and checked again, so a FIFO never blocks the reader;
/// it is read through `take(max_bytes + 1)`, so a file that grows while
/// it is read cannot take more than the bound.
pub fn read_bounded(
    path: &Path,
    what: &str,
    max_bytes: u64,
    raise: &str,
) -> Result<String, String> {
    let shown = path.display();
    let metadata =
        std::fs::metadata(path).map_err(|e| format!("cannot read the {what} {shown}: {e}"))?;
    check_kind(&metadata, path, what)?;
    let too_big = |size: u64| {
        format!(
            "the {what} {shown} has {} ({size} bytes), over the limit of {} ({max_bytes} bytes){raise}",
            in_units(size),
            in_units(max_bytes)
        )
    };
    if metadata.len() > max_bytes {
        return Err(too_big(metadata.len()));
    }
    let file =
        open_non_blocking(path).map_err(|e| format!("cannot read the {what} {shown}: {e}"))?;
    // Checked again on what was opened: the path may name another file now.
    let opened = file
        .metadata()
        .map_err(|e| format!("cannot read the {what} {shown}: {e}"))?;
    check_kind(&opened, path, what)?;
    let mut bytes = Vec::with_capacity(opened.len().min(max_bytes) as usize);
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read the {what} {shown}: {e}"))?;
    if bytes.len() as u64 > max_bytes {
        return Err(format!(
            "{} (it grew while it was read)",
            too_big(bytes.len() as u64)
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "the {what} {shown} is not UTF-8 text (byte {} is not)",
            e.utf8_error().valid_up_to()
        )
    })
}

/// Opens `path` to read without blocking on a FIFO with no writer.
fn open_non_blocking(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}

/// Refuses anything but a regular file, naming what it is instead.
fn check_kind(metadata: &std::fs::Metadata, path: &Path, what: &str) -> Result<(), String> {
    let kind = metadata.file_type();
    if kind.is_file() {
        return Ok(());
    }
    let is = trust::describe(metadata);
    Err(format!(
        "the {what} {} is {is}; give a regular file (one that a pipe or device cannot stand in for)",
        path.display()
    ))
}

/// A byte count in the largest unit that keeps it above 1.
fn in_units(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("graph-input-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_file_over_the_limit_is_refused_with_its_size_and_the_limit() {
        let dir = scratch("limit");
        let path = dir.join("g.toml");
        std::fs::write(&path, "x".repeat(2000)).unwrap();
        let error = read_bounded(
            &path,
            "graph file",
            1024,
            "; raise it with --max-graph-size",
        )
        .unwrap_err();
        assert!(error.contains(&path.display().to_string()), "{error}");
        assert!(
            error.contains("2000 bytes") && error.contains("1024 bytes"),
            "{error}"
        );
        assert!(error.ends_with("raise it with --max-graph-size"), "{error}");
        assert_eq!(
            read_bounded(&path, "graph file", 2000, "").unwrap().len(),
            2000
        );
    }

    #[test]
    fn devices_and_directories_are_refused_before_a_byte_is_read() {
        let error = read_bounded(Path::new("/dev/zero"), "graph file", 1024, "").unwrap_err();
        assert!(error.contains("/dev/zero is a character device"), "{error}");
        let error = read_bounded(Path::new("/"), "sweep file", 1024, "").unwrap_err();
        assert!(error.contains("/ is a directory"), "{error}");
    }

    #[test]
    fn kept_names_are_plain_and_distinct() {
        let a = kept_sweep_name("../data/pairs.txt");
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, kept_sweep_name("pairs.txt"));
    }
}
