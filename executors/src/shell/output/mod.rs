//! Where a command's standard output and error ended up ([`Output`]), and
//! reading them back: whole, or only their last lines for an error
//! message. [`files`] creates the files an attempt's output goes to.

mod files;

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::stream::{self, Channel, Pumped, StreamPlace};

pub(crate) use files::{FileIdentity, OutputFiles};

/// Where one output stream ended up.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Output {
    /// In this file.
    File(PathBuf),
    /// In memory, cut at the capture limit.
    Memory {
        /// The first bytes of the stream.
        // Bytes, not an array of integers, in MessagePack.
        #[serde(with = "serde_bytes")]
        bytes: Vec<u8>,
        /// Bytes beyond the limit that were read and dropped.
        truncated: u64,
    },
    /// In a stream file shared with the other commands of its executor
    /// ([`Capture::Stream`](super::Capture::Stream)): this channel's
    /// records in the attempt's region.
    Stream {
        /// The attempt's region of the stream file.
        place: StreamPlace,
        /// Which channel this is.
        channel: Channel,
        /// The bytes the command wrote to it.
        bytes: u64,
    },
    /// Nothing: the command wrote no byte to this stream, so its empty
    /// file was removed (a million quiet commands leave no files). Reads
    /// as empty text.
    Empty,
    /// Not kept.
    Discarded,
}

impl Output {
    /// Where each channel of a streamed attempt ended up:
    /// [`Output::Stream`] for one the command wrote to, [`Output::Empty`]
    /// for one it did not, and [`Output::Discarded`] for both if they
    /// could not be written.
    pub(crate) fn streamed(pumped: &Pumped) -> (Output, Output) {
        if pumped.lost.is_some() {
            return (Output::Discarded, Output::Discarded);
        }
        let Some(place) = &pumped.place else {
            return (Output::Empty, Output::Empty);
        };
        let output = |channel: Channel| match pumped.bytes[channel as usize] {
            0 => Output::Empty,
            bytes => Output::Stream {
                place: place.clone(),
                channel,
                bytes,
            },
        };
        (output(Channel::Stdout), output(Channel::Stderr))
    }

    /// The stream as text, read from its file if it went to one; invalid
    /// UTF-8 is replaced; empty for [`Output::Empty`]. `None` if it was
    /// discarded or the file is gone or cannot be read.
    /// This reads all of it: for an error message, take
    /// [`last_lines`](Self::last_lines).
    pub fn text(&self) -> Option<String> {
        match self {
            Output::File(path) => std::fs::read(path)
                .ok()
                .map(|b| String::from_utf8_lossy(&b).into_owned()),
            Output::Memory { bytes, .. } => Some(String::from_utf8_lossy(bytes).into_owned()),
            Output::Stream { place, channel, .. } => stream::read_channel(place, *channel)
                .ok()
                .map(|b| String::from_utf8_lossy(&b).into_owned()),
            Output::Empty => Some(String::new()),
            Output::Discarded => None,
        }
    }

    /// The last `count` lines of the stream, for an error message, each cut
    /// to 300 characters; none if the stream was empty or discarded, or its
    /// file is gone. Only the last 64 KiB are read, however large the stream
    /// (of a stream file, only the end of the attempt's region): a
    /// line that begins before them is shown with a leading `…`.
    pub fn last_lines(&self, count: usize) -> Vec<String> {
        let (tail, cut) = match self {
            Output::File(path) => match read_tail(path, TAIL_BYTES) {
                Ok(tail) => tail,
                Err(_) => return Vec::new(),
            },
            Output::Memory { bytes, .. } => {
                let start = bytes.len().saturating_sub(TAIL_BYTES as usize);
                let cut = start > 0 && bytes[start - 1] != b'\n';
                (bytes[start..].to_vec(), cut)
            }
            Output::Stream { place, channel, .. } => {
                match stream::tail(place, *channel, TAIL_BYTES) {
                    Ok(tail) => tail,
                    Err(_) => return Vec::new(),
                }
            }
            Output::Empty | Output::Discarded => return Vec::new(),
        };
        let text = String::from_utf8_lossy(&tail);
        let lines: Vec<&str> = text.lines().collect();
        let first = lines.len().saturating_sub(count);
        lines[first..]
            .iter()
            .enumerate()
            .map(|(i, line)| {
                let begins_before = cut && first == 0 && i == 0;
                shorten(line, begins_before)
            })
            .collect()
    }

    /// How many bytes the stream carried: the file's size, or what memory
    /// kept plus what it dropped; 0 when empty or discarded.
    pub fn bytes(&self) -> u64 {
        match self {
            Output::File(path) => std::fs::metadata(path).map_or(0, |m| m.len()),
            Output::Memory { bytes, truncated } => bytes.len() as u64 + truncated,
            Output::Stream { bytes, .. } => *bytes,
            Output::Empty | Output::Discarded => 0,
        }
    }

    /// Where the attempt's output lies in a stream file, if it went to one.
    pub fn stream_place(&self) -> Option<&StreamPlace> {
        match self {
            Output::Stream { place, .. } => Some(place),
            _ => None,
        }
    }

    /// The file the stream went to, if any: none for an [`Output::Empty`]
    /// stream, whose file was removed.
    pub fn path(&self) -> Option<&PathBuf> {
        match self {
            Output::File(path) => Some(path),
            _ => None,
        }
    }
}

/// How much of a stream's end [`Output::last_lines`] reads.
const TAIL_BYTES: u64 = 64 * 1024;

/// How many characters of one line [`Output::last_lines`] shows.
const SHOWN_LINE_CHARS: usize = 300;

/// The last `limit` bytes of the file at `path`, and whether they begin
/// within a line.
fn read_tail(path: &std::path::Path, limit: u64) -> std::io::Result<(Vec<u8>, bool)> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path)?;
    let size = file.metadata()?.len();
    // One byte more than the tail, to learn whether a line ends before it.
    let start = size.saturating_sub(limit + 1);
    file.seek(SeekFrom::Start(start))?;
    let mut tail = Vec::with_capacity((size - start) as usize);
    // `take`: the file may still grow, if something still writes to it.
    file.take(limit + 1).read_to_end(&mut tail)?;
    if tail.len() as u64 <= limit {
        return Ok((tail, false));
    }
    let cut = tail[0] != b'\n';
    tail.remove(0);
    Ok((tail, cut))
}

/// `line` cut to [`SHOWN_LINE_CHARS`] characters, with a `…` where text was
/// left out. A line that `begins_before` what was read shows its end, as
/// its start is unknown; any other its start, which says what it is.
fn shorten(line: &str, begins_before: bool) -> String {
    if begins_before {
        let skip = line.chars().count().saturating_sub(SHOWN_LINE_CHARS);
        return format!("…{}", line.chars().skip(skip).collect::<String>());
    }
    let mut chars = line.chars();
    let mut shown: String = chars.by_ref().take(SHOWN_LINE_CHARS).collect();
    let rest = chars.as_str().len();
    if rest > 0 {
        shown.push_str(&format!("… ({rest} more bytes)"));
    }
    shown
}

impl fmt::Debug for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Output::File(path) => write!(f, "File({})", path.display()),
            Output::Memory { bytes, truncated } => write!(
                f,
                "Memory({:?}{})",
                String::from_utf8_lossy(&bytes[..bytes.len().min(80)]),
                if *truncated > 0 {
                    format!(", {truncated} bytes dropped")
                } else {
                    String::new()
                }
            ),
            Output::Stream {
                place,
                channel,
                bytes,
            } => write!(
                f,
                "Stream({channel:?}, {bytes} bytes in {} at {}+{})",
                place.file.display(),
                place.offset,
                place.length
            ),
            Output::Empty => f.write_str("Empty"),
            Output::Discarded => f.write_str("Discarded"),
        }
    }
}

#[cfg(test)]
mod tests;
