//! What a shell activity reports to its parent.

use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use constellation::{ActivityId, NodeId};
use serde::{Deserialize, Serialize};

use super::stream::{self, Channel, StreamPlace};

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ShellOutcome {
    /// The command exited by itself with this status.
    Exited {
        /// The exit status; 0 is success.
        code: i32,
    },
    /// The command was killed by a signal it did not send itself through a timeout.
    Signalled {
        /// The signal number, e.g. 9 for `SIGKILL`.
        signal: i32,
    },
    /// The attempt ran past its timeout; its process group was killed.
    TimedOut {
        /// The timeout.
        after: Duration,
    },
    /// The command never ran: missing program, working directory or input file.
    StartFailed {
        /// Why, in words.
        reason: String,
    },
    /// The command ran, but its output could not be kept: a write to its
    /// output stream failed (a full disk, a file size limit). The attempt
    /// fails whatever the command's own status, as HyperQueue fails a task
    /// whose stream write fails: a result whose output is gone is not a
    /// success.
    OutputLost {
        /// Why the output could not be written, and how the command ended.
        reason: String,
    },
}

impl ShellOutcome {
    /// Whether the command exited with status 0.
    pub fn is_success(&self) -> bool {
        matches!(self, ShellOutcome::Exited { code: 0 })
    }
}

impl fmt::Display for ShellOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShellOutcome::Exited { code } => write!(f, "exited with status {code}"),
            ShellOutcome::Signalled { signal } => write!(f, "was killed by signal {signal}"),
            ShellOutcome::TimedOut { after } => {
                write!(f, "timed out after {after:?} and was killed")
            }
            ShellOutcome::StartFailed { reason } => write!(f, "did not start: {reason}"),
            ShellOutcome::OutputLost { reason } => write!(f, "lost its output: {reason}"),
        }
    }
}

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

/// The event a shell activity sends its parent when it is done, whether
/// the command succeeded or not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShellResult {
    /// The shell activity.
    pub activity: ActivityId,
    /// The spec's name, if it had one.
    pub name: Option<String>,
    /// What was run, for messages.
    pub command: String,
    /// How the last attempt ended.
    pub outcome: ShellOutcome,
    /// Attempts made, at least 1.
    pub attempts: u32,
    /// The wall-clock time of the last attempt.
    pub duration: Duration,
    /// The last attempt's standard output.
    pub stdout: Output,
    /// The last attempt's standard error.
    pub stderr: Output,
    /// The labels of the executor that ran it, as `CONSTELLATION_LABELS` shows them.
    pub executor_labels: String,
    /// The node that ran it.
    pub node: NodeId,
    /// That node's host name.
    pub host: String,
    /// The executor's index on that node.
    pub executor: usize,
    /// Every attempt, first to last, for journals.
    pub history: Vec<AttemptRecord>,
    /// Set when the work of the node that created this activity (its
    /// runner) was cancelled here while it ran ([`cancel_origin`]): why,
    /// in words. Its command was killed, or its retry dropped, for that,
    /// not for a fault of its own; it made no further attempt.
    ///
    /// [`cancel_origin`]: super::cancel_origin
    #[serde(default)]
    pub cancelled: Option<String>,
}

/// What a shell activity that reports its starts
/// ([`ShellActivity::report_starts`]) sends its parent just before each
/// attempt's command starts, so that the parent knows of every execution,
/// also of one whose node dies before it reports: its result never comes.
///
/// [`ShellActivity::report_starts`]: super::ShellActivity::report_starts
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShellStarted {
    /// The shell activity. A copy queued again after its node died runs
    /// under the same id, on another node.
    pub activity: ActivityId,
    /// The spec's name, if it had one.
    pub name: Option<String>,
    /// The attempt about to start: 1, 2, ... within this execution of the
    /// activity, as its [`AttemptRecord::attempt`] will say.
    pub attempt: u32,
    /// The node that runs it.
    pub node: NodeId,
    /// That node's host name.
    pub host: String,
    /// The executor's index on that node.
    pub executor: usize,
    /// The executor's labels, as `CONSTELLATION_LABELS` shows them.
    pub labels: String,
    /// When the attempt was announced, by that node's wall clock: just
    /// before its command starts, never after.
    pub started: SystemTime,
}

/// What a shell activity that reports its starts sends its parent: one
/// type for both kinds of event, so the parent reads each with one
/// [`Event::take`](constellation::Event::take). A shell activity that does
/// not report its starts sends a bare [`ShellResult`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ShellReport {
    /// An attempt is starting.
    Started(ShellStarted),
    /// The activity is done: its last attempt ended.
    Ended(Box<ShellResult>),
}

impl ShellReport {
    /// The shell activity the report is about.
    pub fn activity(&self) -> ActivityId {
        match self {
            ShellReport::Started(started) => started.activity,
            ShellReport::Ended(result) => result.activity,
        }
    }

    /// The spec's name of that activity, if it had one.
    pub fn name(&self) -> Option<&str> {
        match self {
            ShellReport::Started(started) => started.name.as_deref(),
            ShellReport::Ended(result) => result.name.as_deref(),
        }
    }
}

/// One attempt of a shell activity, as a journal records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// 1 for the first attempt.
    pub attempt: u32,
    /// When it began, by the wall clock.
    pub started: SystemTime,
    /// How long it ran.
    pub duration: Duration,
    /// How it ended.
    pub outcome: ShellOutcome,
    /// User + system CPU time of the command, where the kernel reported it.
    pub cpu: Option<Duration>,
    /// Where its standard output went, if to a file.
    pub stdout: Option<PathBuf>,
    /// Where its standard error went, if to a file.
    pub stderr: Option<PathBuf>,
    /// Bytes it wrote to standard output (all of them, kept or not).
    pub stdout_bytes: u64,
    /// Bytes it wrote to standard error.
    pub stderr_bytes: u64,
    /// Where both went, if to a stream file and it wrote anything.
    #[serde(default)]
    pub stream: Option<StreamPlace>,
}

impl ShellResult {
    /// Whether the command exited with status 0.
    pub fn is_success(&self) -> bool {
        self.outcome.is_success()
    }

    /// This result if the command succeeded, or an error that says what failed.
    pub fn check(self) -> Result<ShellResult, ShellFailure> {
        if self.is_success() {
            Ok(self)
        } else {
            Err(ShellFailure(Box::new(self)))
        }
    }
}

/// A command that did not succeed; its message names the command, the
/// outcome, the attempts and where its error output is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellFailure(pub Box<ShellResult>);

impl fmt::Display for ShellFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.0;
        write!(f, "{}", r.name.as_deref().unwrap_or(&r.command))?;
        write!(f, " ({}) {}", r.activity, r.outcome)?;
        if r.attempts > 1 {
            write!(f, " on the last of {} attempts", r.attempts)?;
        }
        if let Some(why) = &r.cancelled {
            write!(f, " ({why})")?;
        }
        match &r.stderr {
            Output::File(path) => write!(f, "; its error output is in {}", path.display()),
            Output::Empty => f.write_str("; it wrote no error output"),
            Output::Memory { bytes, .. } if !bytes.is_empty() => {
                write!(f, "; it wrote: {}", r.stderr.last_lines(3).join(" / "))
            }
            Output::Stream { place, .. } => {
                write!(f, "; it wrote: {}", r.stderr.last_lines(3).join(" / "))?;
                write!(f, " (in the stream file {})", place.file.display())
            }
            _ => Ok(()),
        }
    }
}

impl std::error::Error for ShellFailure {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes this process has read through read(2) and its kin, all threads.
    fn bytes_read() -> u64 {
        let io = std::fs::read_to_string("/proc/self/io").unwrap();
        io.lines()
            .find_map(|l| l.strip_prefix("rchar: "))
            .unwrap()
            .parse()
            .unwrap()
    }

    fn scratch_file(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("result-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    #[test]
    fn the_last_lines_of_a_huge_stream_read_only_its_end() {
        use std::io::Write;
        // 200 MB on one line with no newline, as in the issue (there 1 GB),
        // then a last line. Sparse, so the test writes almost nothing.
        let path = scratch_file("huge");
        std::fs::File::create(&path)
            .unwrap()
            .set_len(200_000_000)
            .unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"the end of the long line\nSegmentation fault\n")
            .unwrap();
        let before = bytes_read();
        let lines = Output::File(path.clone()).last_lines(5);
        let read = bytes_read() - before;
        std::fs::remove_file(&path).unwrap();
        assert!(read < 4 << 20, "read {read} bytes of a 200 MB stream");
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].starts_with('…'), "{:?}", &lines[0][..20]);
        assert!(lines[0].ends_with("the end of the long line"));
        assert_eq!(lines[0].chars().count(), 1 + SHOWN_LINE_CHARS);
        assert_eq!(lines[1], "Segmentation fault");
    }

    #[test]
    fn a_long_complete_line_shows_its_start_and_what_was_left_out() {
        let long = format!("error: {}", "x".repeat(1000));
        let output = Output::Memory {
            bytes: format!("first\n{long}\n").into_bytes(),
            truncated: 0,
        };
        let lines = output.last_lines(5);
        assert_eq!(lines[0], "first");
        assert!(lines[1].starts_with("error: xxx"), "{}", lines[1]);
        assert!(lines[1].ends_with("… (707 more bytes)"), "{}", lines[1]);
    }

    #[test]
    fn short_streams_show_their_last_lines_whole() {
        let path = scratch_file("short");
        let text: String = (1..=9).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&path, &text).unwrap();
        let lines = Output::File(path.clone()).last_lines(5);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(lines, ["line 5", "line 6", "line 7", "line 8", "line 9"]);
        assert!(Output::Discarded.last_lines(5).is_empty());
        assert!(Output::File(path).last_lines(5).is_empty());
    }

    #[test]
    fn a_tail_that_begins_at_a_line_start_is_not_marked_cut() {
        let path = scratch_file("boundary");
        // One full line exactly before the tail: the tail begins a line.
        let mut text = "a".repeat(99);
        text.push('\n');
        text.push_str(&"b\n".repeat(TAIL_BYTES as usize / 2));
        std::fs::write(&path, &text).unwrap();
        let lines = Output::File(path.clone()).last_lines(usize::MAX);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(lines.len(), TAIL_BYTES as usize / 2);
        assert!(lines.iter().all(|l| l == "b"), "{:?}", &lines[..3]);
    }
}
