//! The on-disk format of a stream file: its header, its records' frames,
//! and what a place in it names. The format itself is described in
//! [`super`].

use std::io;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The first bytes of every stream file.
pub const MAGIC: &[u8] = b"constellation output stream 1\n";

/// Bytes of a record's header (kind and length), and of its trailer.
pub(super) const FRAME: u64 = 5;

/// The most bytes one pipe read, and so one record, carries.
pub(super) const CHUNK: usize = 64 * 1024;

/// Where one attempt's output lies in a stream file: its records, from
/// the one that opens the attempt to its last chunk.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StreamPlace {
    /// The stream file.
    pub file: PathBuf,
    /// Where the attempt's first record begins.
    pub offset: u64,
    /// The bytes of all its records, frames included.
    pub length: u64,
}

/// Which of a command's outputs a chunk belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Channel {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// A record's kind, as the format numbers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Attempt = 0,
    Stdout = 1,
    Stderr = 2,
}

impl Kind {
    pub(super) fn from_byte(byte: u8) -> Option<Kind> {
        match byte {
            0 => Some(Kind::Attempt),
            1 => Some(Kind::Stdout),
            2 => Some(Kind::Stderr),
            _ => None,
        }
    }
}

impl From<Channel> for Kind {
    fn from(channel: Channel) -> Kind {
        match channel {
            Channel::Stdout => Kind::Stdout,
            Channel::Stderr => Kind::Stderr,
        }
    }
}

/// Why a stream could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// The file could not be opened or read.
    #[error("cannot read the output stream file {}: {source}", path.display())]
    Io {
        /// The stream file.
        path: PathBuf,
        /// What went wrong.
        source: io::Error,
    },
    /// The file does not begin as a stream file does.
    #[error("{} is not an output stream file (it does not begin with {:?})", path.display(), String::from_utf8_lossy(MAGIC).trim_end())]
    NotAStream {
        /// The file.
        path: PathBuf,
    },
    /// The file ends inside a record: its writer stopped in the middle of
    /// a write, or the file was cut short.
    #[error(
        "{} ends in a torn record at byte {offset} of {file_length}: its writer stopped in the \
         middle of a write (a runner killed mid-write) or the file was cut short; the records \
         before byte {offset} are intact",
        path.display()
    )]
    Torn {
        /// The stream file.
        path: PathBuf,
        /// Where the torn record begins.
        offset: u64,
        /// The file's length.
        file_length: u64,
    },
    /// A record does not read as the format says.
    #[error("{}: damaged record at byte {offset}: {what}", path.display())]
    Damaged {
        /// The stream file.
        path: PathBuf,
        /// Where the record begins.
        offset: u64,
        /// What is wrong with it.
        what: String,
    },
}

/// A frame's header (`kind`, `length`) or trailer (`length`, `kind`).
pub(super) fn frame_bytes(kind: Kind, length: u32, trailer: bool) -> [u8; FRAME as usize] {
    let mut bytes = [0u8; FRAME as usize];
    let (kind_at, length_at) = if trailer { (4, 0) } else { (0, 1) };
    bytes[kind_at] = kind as u8;
    bytes[length_at..length_at + 4].copy_from_slice(&length.to_le_bytes());
    bytes
}

/// Splits an attempt record's payload into the attempt number and name.
pub(super) fn attempt_payload(payload: &[u8]) -> Option<(u32, String)> {
    let number = u32::from_le_bytes(payload.get(..4)?.try_into().ok()?);
    Some((number, String::from_utf8_lossy(&payload[4..]).into_owned()))
}

/// Appends one record to `record`.
pub(super) fn push_record(record: &mut Vec<u8>, kind: Kind, payload: &[&[u8]]) {
    let length: usize = payload.iter().map(|p| p.len()).sum();
    let length = u32::try_from(length).expect("records are at most a chunk long");
    record.extend_from_slice(&frame_bytes(kind, length, false));
    for part in payload {
        record.extend_from_slice(part);
    }
    record.extend_from_slice(&frame_bytes(kind, length, true));
}
