//! Output streams: the standard output and error of many commands in a few
//! files, as HyperQueue's `--stream` keeps them, instead of two files per
//! command ([`Capture::Stream`](super::Capture::Stream)).
//!
//! Each executor thread appends the output of the commands it runs to a
//! stream file of its own in the stream directory, created when the first
//! of its commands writes something: no lock is shared between executors,
//! and a million commands leave as many files as there were executors.
//! An executor runs one command at a time, so the records of one attempt
//! are contiguous: the attempt's [`StreamPlace`] (file, offset, length) is
//! all a reader needs, and journals keep it. A command that writes nothing
//! writes no record.
//!
//! # Format
//!
//! A stream file begins with [`MAGIC`], a line of text. Records follow,
//! each `kind: u8, length: u32 LE, payload, length: u32 LE, kind: u8`:
//!
//! - kind 0, an attempt begins: the attempt number (`u32` LE), then the
//!   activity's name (UTF-8). Every attempt's region starts with one.
//! - kind 1, a chunk of standard output; kind 2, of standard error, as the
//!   command wrote them (each chunk what one read of its pipe returned).
//!
//! The length and kind repeated after the payload let [`tail`] walk back
//! from the end of a region, so an error message reads only the last
//! kilobytes of a command that wrote gigabytes. A runner killed in the
//! middle of a write leaves a torn last record: readers stop there with a
//! [`StreamError::Torn`], and every record before it reads as written.

use std::cell::RefCell;
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::output::Output;

/// The first bytes of every stream file.
pub const MAGIC: &[u8] = b"constellation output stream 1\n";

/// Bytes of a record's header (kind and length), and of its trailer.
const FRAME: u64 = 5;

/// The most bytes one pipe read, and so one record, carries.
const CHUNK: usize = 64 * 1024;

/// How many records [`tail`] walks back over at most before it gives up
/// looking for more of one channel among the other's.
const TAIL_RECORDS: usize = 1 << 20;

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
enum Kind {
    Attempt = 0,
    Stdout = 1,
    Stderr = 2,
}

impl Kind {
    fn from_byte(byte: u8) -> Option<Kind> {
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

/// The frame of one record: where it begins, its kind and payload length.
#[derive(Debug, Clone, Copy)]
struct Frame {
    offset: u64,
    kind: Kind,
    length: u64,
}

impl Frame {
    /// Where the next record begins.
    fn end(&self) -> u64 {
        self.offset + FRAME + self.length + FRAME
    }
}

/// Reads records one after another from a stream file, checking each
/// frame, and stopping at `end`.
struct Records {
    path: PathBuf,
    reader: BufReader<File>,
    /// Where the next record begins.
    position: u64,
    end: u64,
    file_length: u64,
}

impl Records {
    /// Records from `offset` to `end` (the file's end if `None`) of the
    /// stream file at `path`, whose header is checked first.
    fn open(path: &Path, offset: Option<u64>, end: Option<u64>) -> Result<Records, StreamError> {
        let io_error = |source| StreamError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io_error)?;
        let file_length = file.metadata().map_err(io_error)?.len();
        let mut reader = BufReader::with_capacity(CHUNK, file);
        let mut magic = [0u8; MAGIC.len()];
        if file_length < MAGIC.len() as u64 {
            return Err(StreamError::NotAStream {
                path: path.to_path_buf(),
            });
        }
        reader.read_exact(&mut magic).map_err(io_error)?;
        if magic != MAGIC {
            return Err(StreamError::NotAStream {
                path: path.to_path_buf(),
            });
        }
        let position = offset.unwrap_or(MAGIC.len() as u64).max(MAGIC.len() as u64);
        reader.seek(SeekFrom::Start(position)).map_err(io_error)?;
        Ok(Records {
            path: path.to_path_buf(),
            reader,
            position,
            end: end.unwrap_or(file_length),
            file_length,
        })
    }

    fn io_error(&self, source: io::Error) -> StreamError {
        StreamError::Io {
            path: self.path.clone(),
            source,
        }
    }

    fn damaged(&self, offset: u64, what: impl Into<String>) -> StreamError {
        StreamError::Damaged {
            path: self.path.clone(),
            offset,
            what: what.into(),
        }
    }

    /// The next record's frame, with the reader at its payload; `None` at
    /// the end.
    fn next_frame(&mut self) -> Result<Option<Frame>, StreamError> {
        if self.position >= self.end {
            return Ok(None);
        }
        let offset = self.position;
        let torn = StreamError::Torn {
            path: self.path.clone(),
            offset,
            file_length: self.file_length,
        };
        if offset + FRAME > self.file_length {
            return Err(torn);
        }
        let mut header = [0u8; FRAME as usize];
        self.reader
            .read_exact(&mut header)
            .map_err(|e| self.io_error(e))?;
        let kind = Kind::from_byte(header[0])
            .ok_or_else(|| self.damaged(offset, format!("unknown kind {}", header[0])))?;
        let length = u64::from(u32::from_le_bytes(header[1..].try_into().expect("4 bytes")));
        let frame = Frame {
            offset,
            kind,
            length,
        };
        if frame.end() > self.file_length {
            return Err(torn);
        }
        if frame.end() > self.end {
            return Err(self.damaged(
                offset,
                format!(
                    "the record runs to byte {}, past the end of the region, byte {}",
                    frame.end(),
                    self.end
                ),
            ));
        }
        Ok(Some(frame))
    }

    /// Reads the payload of `frame` into `out`, or skips it if `out` is
    /// `None`, then checks the trailer.
    fn finish_record(
        &mut self,
        frame: &Frame,
        out: Option<&mut dyn Write>,
    ) -> Result<(), StreamError> {
        match out {
            Some(out) => {
                let copied = io::copy(&mut (&mut self.reader).take(frame.length), out)
                    .map_err(|e| self.io_error(e))?;
                if copied != frame.length {
                    return Err(self.io_error(io::ErrorKind::UnexpectedEof.into()));
                }
            }
            None => self
                .reader
                .seek_relative(frame.length as i64)
                .map_err(|e| self.io_error(e))?,
        }
        let mut trailer = [0u8; FRAME as usize];
        self.reader
            .read_exact(&mut trailer)
            .map_err(|e| self.io_error(e))?;
        if trailer != frame_bytes(frame.kind, frame.length as u32, true) {
            return Err(self.damaged(
                frame.offset,
                "its trailer does not repeat its header's kind and length",
            ));
        }
        self.position = frame.end();
        Ok(())
    }

    /// Reads the payload of `frame` whole (an attempt record's).
    fn payload(&mut self, frame: &Frame) -> Result<Vec<u8>, StreamError> {
        let mut payload = Vec::with_capacity(frame.length as usize);
        self.finish_record(frame, Some(&mut payload))?;
        Ok(payload)
    }
}

/// A frame's header (`kind`, `length`) or trailer (`length`, `kind`).
fn frame_bytes(kind: Kind, length: u32, trailer: bool) -> [u8; FRAME as usize] {
    let mut bytes = [0u8; FRAME as usize];
    let (kind_at, length_at) = if trailer { (4, 0) } else { (0, 1) };
    bytes[kind_at] = kind as u8;
    bytes[length_at..length_at + 4].copy_from_slice(&length.to_le_bytes());
    bytes
}

/// Splits an attempt record's payload into the attempt number and name.
fn attempt_payload(payload: &[u8]) -> Option<(u32, String)> {
    let number = u32::from_le_bytes(payload.get(..4)?.try_into().ok()?);
    Some((number, String::from_utf8_lossy(&payload[4..]).into_owned()))
}

/// Copies `channel`'s bytes of the attempt at `place` to `out`, in the
/// order the command wrote them; returns how many there were.
///
/// Errors if the place does not begin with an attempt record, a record is
/// damaged, or the file ends before the region does ([`StreamError::Torn`]);
/// what was copied before the error stays copied.
pub fn copy_channel(
    place: &StreamPlace,
    channel: Channel,
    out: &mut dyn Write,
) -> Result<u64, StreamError> {
    let mut records = Records::open(&place.file, Some(place.offset), Some(region_end(place)))?;
    let wanted = Kind::from(channel);
    let mut copied = 0;
    let mut first = true;
    while let Some(frame) = records.next_frame()? {
        if first && frame.kind != Kind::Attempt {
            return Err(records.damaged(
                frame.offset,
                "an attempt's output does not begin here (the journal and the stream file disagree)",
            ));
        }
        first = false;
        if frame.kind == wanted {
            records.finish_record(&frame, Some(&mut *out))?;
            copied += frame.length;
        } else {
            records.finish_record(&frame, None)?;
        }
    }
    Ok(copied)
}

/// `channel`'s bytes of the attempt at `place`, read whole.
pub fn read_channel(place: &StreamPlace, channel: Channel) -> Result<Vec<u8>, StreamError> {
    let mut bytes = Vec::new();
    copy_channel(place, channel, &mut bytes)?;
    Ok(bytes)
}

fn region_end(place: &StreamPlace) -> u64 {
    place.offset.saturating_add(place.length)
}

/// The last `limit` bytes of `channel` in the attempt at `place`, and
/// whether they begin inside a line (more came before them, and the byte
/// before is not a newline). Only the region's end is read: the records
/// are walked back from it through their trailers.
pub fn tail(
    place: &StreamPlace,
    channel: Channel,
    limit: u64,
) -> Result<(Vec<u8>, bool), StreamError> {
    let path = &place.file;
    let io_error = |source| StreamError::Io {
        path: path.clone(),
        source,
    };
    let file = File::open(path).map_err(io_error)?;
    let file_length = file.metadata().map_err(io_error)?.len();
    let end = region_end(place);
    if end > file_length {
        return Err(StreamError::Torn {
            path: path.clone(),
            offset: file_length,
            file_length,
        });
    }
    let damaged = |offset, what: &str| StreamError::Damaged {
        path: path.clone(),
        offset,
        what: what.to_string(),
    };
    let wanted = Kind::from(channel);
    // One byte more than the tail, to learn whether a line ends before it.
    let want = limit + 1;
    let mut pieces: Vec<Vec<u8>> = Vec::new();
    let mut got = 0;
    let mut position = end;
    let mut walked = 0;
    while position > place.offset && got < want && walked < TAIL_RECORDS {
        walked += 1;
        if position < place.offset + 2 * FRAME {
            return Err(damaged(place.offset, "the region ends inside a record"));
        }
        let mut trailer = [0u8; FRAME as usize];
        file.read_exact_at(&mut trailer, position - FRAME)
            .map_err(io_error)?;
        let length = u32::from_le_bytes(trailer[..4].try_into().expect("4 bytes"));
        let kind = Kind::from_byte(trailer[4]);
        let start = position
            .checked_sub(2 * FRAME + u64::from(length))
            .filter(|&start| start >= place.offset)
            .ok_or_else(|| damaged(position, "a record's trailer points before the region"))?;
        let mut header = [0u8; FRAME as usize];
        file.read_exact_at(&mut header, start).map_err(io_error)?;
        let Some(kind) = kind.filter(|&k| header == frame_bytes(k, length, false)) else {
            return Err(damaged(
                start,
                "its header does not match the trailer after it",
            ));
        };
        if kind == wanted {
            let take = u64::from(length).min(want - got);
            let mut piece = vec![0u8; take as usize];
            file.read_exact_at(&mut piece, position - FRAME - take)
                .map_err(io_error)?;
            got += take;
            pieces.push(piece);
        }
        position = start;
    }
    let mut tail: Vec<u8> = pieces.into_iter().rev().flatten().collect();
    if got < want {
        // All of the channel, unless the walk gave up before the start.
        return Ok((tail, position > place.offset));
    }
    let cut = tail[0] != b'\n';
    tail.remove(0);
    Ok((tail, cut))
}

/// One attempt found in a stream file by [`scan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamedAttempt {
    /// The activity's name, as the attempt record gives it.
    pub name: String,
    /// The attempt number, 1 for the first.
    pub attempt: u32,
    /// Where its records are.
    pub place: StreamPlace,
    /// Bytes of standard output.
    pub stdout_bytes: u64,
    /// Bytes of standard error.
    pub stderr_bytes: u64,
}

/// What [`scan`] found in a stream file.
#[derive(Debug)]
pub struct Scan {
    /// Every attempt, in file order.
    pub attempts: Vec<StreamedAttempt>,
    /// Why the scan stopped before the file's end, if it did: a torn last
    /// record ([`StreamError::Torn`]) or a damaged one. The attempts
    /// before it are whole; the last one may lack the records after the
    /// damage.
    pub stopped: Option<StreamError>,
}

/// Reads the index of a whole stream file: each attempt's name, number,
/// place and byte counts, without the data. A torn or damaged record ends
/// the scan with a note in [`Scan::stopped`]; the file not being a stream
/// file, or not being readable, is an error.
pub fn scan(path: &Path) -> Result<Scan, StreamError> {
    let mut records = Records::open(path, None, None)?;
    let mut attempts: Vec<StreamedAttempt> = Vec::new();
    let stopped = loop {
        let frame = match records.next_frame() {
            Ok(Some(frame)) => frame,
            Ok(None) => break None,
            Err(error) => break Some(error),
        };
        let result = match frame.kind {
            Kind::Attempt => records.payload(&frame).and_then(|payload| {
                let (attempt, name) = attempt_payload(&payload)
                    .ok_or_else(|| records.damaged(frame.offset, "an attempt record too short"))?;
                attempts.push(StreamedAttempt {
                    name,
                    attempt,
                    place: StreamPlace {
                        file: path.to_path_buf(),
                        offset: frame.offset,
                        length: 0,
                    },
                    stdout_bytes: 0,
                    stderr_bytes: 0,
                });
                Ok(())
            }),
            Kind::Stdout | Kind::Stderr => match attempts.last_mut() {
                None => Err(records.damaged(frame.offset, "output before any attempt record")),
                Some(last) => {
                    match frame.kind {
                        Kind::Stdout => last.stdout_bytes += frame.length,
                        _ => last.stderr_bytes += frame.length,
                    }
                    records.finish_record(&frame, None)
                }
            },
        };
        if let Err(error) = result {
            break Some(error);
        }
        if let Some(last) = attempts.last_mut() {
            last.place.length = frame.end() - last.place.offset;
        }
    };
    Ok(Scan { attempts, stopped })
}

/// An executor thread's stream file in one directory.
struct StreamWriter {
    dir: PathBuf,
    path: PathBuf,
    file: File,
    /// The file's length: where the next record goes.
    length: u64,
    /// One record being put together, kept between records.
    record: Vec<u8>,
}

thread_local! {
    /// This thread's stream files, by directory. Taken out while an
    /// attempt writes to one, and put back when it ends.
    static WRITERS: RefCell<Vec<StreamWriter>> = const { RefCell::new(Vec::new()) };
}

/// How many stream files (of different directories) one executor thread
/// keeps open at most; the least recently used is closed first.
const OPEN_PER_THREAD: usize = 4;

/// Numbers this process's stream files apart.
static NEXT_FILE: AtomicU64 = AtomicU64::new(1);

impl StreamWriter {
    /// This thread's writer for `dir`, or a new file there.
    fn for_dir(dir: &Path) -> io::Result<StreamWriter> {
        let kept = WRITERS.with_borrow_mut(|writers| {
            let found = writers.iter().position(|w| w.dir == dir);
            found.map(|at| writers.remove(at))
        });
        match kept {
            Some(writer) => Ok(writer),
            None => StreamWriter::create(dir),
        }
    }

    /// A new stream file in `dir`, named after the host, the process and
    /// a number, so that agents on other machines sharing the directory
    /// never write to one file.
    fn create(dir: &Path) -> io::Result<StreamWriter> {
        std::fs::create_dir_all(dir)?;
        let host = super::spec::output_folder_name(crate::probe::host_name());
        loop {
            let number = NEXT_FILE.fetch_add(1, Ordering::Relaxed);
            let path = dir.join(format!("{host}.{}.{number}.stream", std::process::id()));
            match File::options().write(true).create_new(true).open(&path) {
                Ok(mut file) => {
                    file.write_all(MAGIC)?;
                    return Ok(StreamWriter {
                        dir: dir.to_path_buf(),
                        path,
                        file,
                        length: MAGIC.len() as u64,
                        record: Vec::with_capacity(CHUNK + 64),
                    });
                }
                // A file of an earlier process with the same pid.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Gives the writer back to this thread, for its next attempt. An
    /// agent that serves run after run keeps only the files of the last
    /// few directories open.
    fn keep(self) {
        WRITERS.with_borrow_mut(|writers| {
            writers.push(self);
            if writers.len() > OPEN_PER_THREAD {
                writers.remove(0);
            }
        });
    }
}

/// Appends one record to `record`.
fn push_record(record: &mut Vec<u8>, kind: Kind, payload: &[&[u8]]) {
    let length: usize = payload.iter().map(|p| p.len()).sum();
    let length = u32::try_from(length).expect("records are at most a chunk long");
    record.extend_from_slice(&frame_bytes(kind, length, false));
    for part in payload {
        record.extend_from_slice(part);
    }
    record.extend_from_slice(&frame_bytes(kind, length, true));
}

/// One attempt's output on its way into its executor's stream file.
pub(crate) struct StreamSink {
    dir: PathBuf,
    name: String,
    attempt: u32,
    writer: Option<StreamWriter>,
    /// Where this attempt's first record went, once one has.
    start: Option<u64>,
    /// Bytes the command wrote, per channel, whether kept or not.
    bytes: [u64; 2],
    /// Why the output could not be written, if it could not.
    failed: Option<String>,
}

impl StreamSink {
    /// The output of attempt `attempt` of the activity `name`, into this
    /// thread's stream file in `dir`.
    pub(crate) fn new(dir: &Path, name: &str, attempt: u32) -> StreamSink {
        StreamSink {
            dir: dir.to_path_buf(),
            name: name.to_string(),
            attempt,
            writer: None,
            start: None,
            bytes: [0, 0],
            failed: None,
        }
    }

    /// Appends a chunk of `channel` (and first the attempt's record).
    fn write(&mut self, channel: Channel, chunk: &[u8]) {
        self.bytes[channel as usize] += chunk.len() as u64;
        if self.failed.is_some() || chunk.is_empty() {
            return;
        }
        if let Err(error) = self.try_write(channel, chunk) {
            self.fail(error);
        }
    }

    fn try_write(&mut self, channel: Channel, chunk: &[u8]) -> io::Result<()> {
        if self.writer.is_none() {
            self.writer = Some(StreamWriter::for_dir(&self.dir)?);
        }
        let writer = self.writer.as_mut().expect("a writer was just made");
        writer.record.clear();
        if self.start.is_none() {
            let number = self.attempt.to_le_bytes();
            push_record(
                &mut writer.record,
                Kind::Attempt,
                &[&number, self.name.as_bytes()],
            );
        }
        push_record(&mut writer.record, channel.into(), &[chunk]);
        let at = writer.length;
        // One write per chunk: a record is never split between calls
        // unless the disk fills, which `fail` cleans up after.
        writer.file.write_all(&writer.record)?;
        writer.length += writer.record.len() as u64;
        self.start.get_or_insert(at);
        Ok(())
    }

    /// Gives up on this attempt's output after a write failed: the file is
    /// cut back to where the attempt began, so that it stays a sequence of
    /// whole records for the attempts after it (or, if it cannot be cut,
    /// is left for a new file). The command's pipes are still read, so it
    /// never blocks; the attempt fails with the reason ([`Self::finish`]).
    fn fail(&mut self, error: io::Error) {
        let Some(mut writer) = self.writer.take() else {
            let reason = format!(
                "cannot create an output stream file in {}: {error}",
                self.dir.display()
            );
            tracing::error!(
                "{reason}; the output of {} (attempt {}) is lost",
                self.name,
                self.attempt
            );
            self.failed = Some(reason);
            return;
        };
        let reason = format!(
            "cannot write to the output stream file {}: {error}",
            writer.path.display()
        );
        tracing::error!(
            "{reason}; the output of {} (attempt {}) is lost",
            self.name,
            self.attempt
        );
        self.failed = Some(reason);
        let begin = self.start.take().unwrap_or(writer.length);
        match writer
            .file
            .set_len(begin)
            .and_then(|()| writer.file.seek(SeekFrom::Start(begin)).map(drop))
        {
            Ok(()) => {
                writer.length = begin;
                self.writer = Some(writer);
            }
            Err(e) => tracing::error!(
                "cannot cut the output stream file {} back to byte {begin}: {e}; later output goes to a new file",
                writer.path.display()
            ),
        }
    }

    /// Where each channel ended up: [`Output::Stream`] for one the command
    /// wrote to, [`Output::Empty`] for one it did not, and
    /// [`Output::Discarded`] for both if they could not be written, with
    /// the reason.
    fn finish(&mut self) -> Pumped {
        let outputs = match (&self.writer, self.start) {
            _ if self.failed.is_some() => (Output::Discarded, Output::Discarded),
            (Some(writer), Some(start)) => {
                let place = StreamPlace {
                    file: writer.path.clone(),
                    offset: start,
                    length: writer.length - start,
                };
                let output = |channel: Channel| match self.bytes[channel as usize] {
                    0 => Output::Empty,
                    bytes => Output::Stream {
                        place: place.clone(),
                        channel,
                        bytes,
                    },
                };
                (output(Channel::Stdout), output(Channel::Stderr))
            }
            _ => (Output::Empty, Output::Empty),
        };
        if let Some(writer) = self.writer.take() {
            writer.keep();
        }
        Pumped {
            stdout: outputs.0,
            stderr: outputs.1,
            lost: self.failed.take(),
        }
    }
}

/// Where a streamed attempt's output went.
pub(crate) struct Pumped {
    /// Its standard output.
    pub(crate) stdout: Output,
    /// Its standard error.
    pub(crate) stderr: Output,
    /// Why its output could not be written, if it could not: the attempt
    /// fails with this reason.
    pub(crate) lost: Option<String>,
}

impl Drop for StreamSink {
    fn drop(&mut self) {
        if let Some(writer) = self.writer.take() {
            writer.keep();
        }
    }
}

/// Moves a running command's output from its two pipes into a
/// [`StreamSink`] as it comes, on the executor's own thread: one `poll`
/// waits for output and for the command's exit together.
pub(crate) struct Pump {
    pipes: [Option<File>; 2],
    sink: StreamSink,
    buffer: Vec<u8>,
}

impl Pump {
    /// Pumps `stdout` and `stderr` into `sink`.
    pub(crate) fn new(
        stdout: Option<std::process::ChildStdout>,
        stderr: Option<std::process::ChildStderr>,
        sink: StreamSink,
    ) -> Pump {
        Pump {
            pipes: [
                stdout.map(|p| File::from(OwnedFd::from(p))),
                stderr.map(|p| File::from(OwnedFd::from(p))),
            ],
            sink,
            buffer: vec![0u8; CHUNK],
        }
    }

    /// Pumps until the process `pid` (an unreaped child) exits, or
    /// `deadline` passes; true if it exited. The process is not reaped.
    pub(crate) fn until_exit(
        &mut self,
        pid: libc::pid_t,
        deadline: Option<Instant>,
    ) -> io::Result<bool> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        // SAFETY: a new descriptor that nothing else owns.
        let pidfd = (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) });
        loop {
            // Without a pidfd (Linux < 5.3) the exit is looked for between
            // polls of the pipes, at most 50 ms apart.
            let mut wait = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if pidfd.is_none() {
                wait = Some(wait.map_or(EXIT_POLL, |w| w.min(EXIT_POLL)));
            }
            let (ready, exited) = self.poll_once(pidfd.as_ref(), wait)?;
            if exited
                || (pidfd.is_none()
                    && !ready
                    && super::exit::wait_for_exit(pid, Some(Instant::now()))?)
            {
                return Ok(true);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(false);
            }
        }
    }

    /// After everything the command started is dead: reads what is left
    /// in the pipes, for at most `patience` (a process that escaped being
    /// killed may hold a pipe open), then says where the output went.
    pub(crate) fn finish(mut self, patience: Duration) -> Pumped {
        let deadline = Instant::now() + patience;
        while self.pipes.iter().any(Option::is_some) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                tracing::warn!(
                    "the output pipes of {} (attempt {}) are still open {patience:?} after it ended: \
                     something it started holds them; the rest of its output is not read",
                    self.sink.name,
                    self.sink.attempt
                );
                break;
            }
            if let Err(error) = self.poll_once(None, Some(left)) {
                tracing::warn!("cannot read the output of {}: {error}", self.sink.name);
                break;
            }
        }
        self.sink.finish()
    }

    /// Waits up to `wait` (forever if `None`) for output or, with a pidfd,
    /// the exit, and moves one read of each ready pipe to the sink.
    /// Returns whether anything was ready, and whether the process exited.
    fn poll_once(
        &mut self,
        pidfd: Option<&OwnedFd>,
        wait: Option<Duration>,
    ) -> io::Result<(bool, bool)> {
        let mut fds = [libc::pollfd {
            fd: -1,
            events: libc::POLLIN,
            revents: 0,
        }; 3];
        for (slot, pipe) in fds.iter_mut().zip(&self.pipes) {
            // A negative fd is skipped by poll: the pipe reached its end.
            slot.fd = pipe.as_ref().map_or(-1, |p| p.as_raw_fd());
        }
        fds[2].fd = pidfd.map_or(-1, |p| p.as_raw_fd());
        let timeout = match wait {
            None => -1,
            // Round up, so a deadline 0.3 ms away is not a busy loop.
            Some(wait) => wait.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int,
        };
        // SAFETY: three valid pollfds for the duration of the call.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 3, timeout) };
        if ready < 0 {
            let error = io::Error::last_os_error();
            return match error.kind() {
                io::ErrorKind::Interrupted => Ok((false, false)),
                _ => Err(error),
            };
        }
        for (index, channel) in [(0, Channel::Stdout), (1, Channel::Stderr)] {
            if fds[index].fd >= 0 && fds[index].revents != 0 {
                self.read_once(index, channel);
            }
        }
        Ok((ready > 0, fds[2].fd >= 0 && fds[2].revents != 0))
    }

    /// One read of pipe `index`; its end closes it.
    fn read_once(&mut self, index: usize, channel: Channel) {
        let Some(pipe) = self.pipes[index].as_mut() else {
            return;
        };
        match pipe.read(&mut self.buffer) {
            Ok(0) => self.pipes[index] = None,
            Ok(n) => self.sink.write(channel, &self.buffer[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::warn!(
                    "cannot read the {channel:?} of {}: {e}; the rest of it is not kept",
                    self.sink.name
                );
                self.pipes[index] = None;
            }
        }
    }
}

/// How often the exit is looked for where no pidfd can wait for it.
const EXIT_POLL: Duration = Duration::from_millis(50);

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("output-stream-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// Writes one attempt's chunks through a sink, as a pump would, and
    /// returns its outputs.
    fn attempt(
        dir: &Path,
        name: &str,
        number: u32,
        chunks: &[(Channel, &[u8])],
    ) -> (Output, Output) {
        let mut sink = StreamSink::new(dir, name, number);
        for (channel, chunk) in chunks {
            sink.write(*channel, chunk);
        }
        let pumped = sink.finish();
        assert_eq!(pumped.lost, None, "the output was written");
        (pumped.stdout, pumped.stderr)
    }

    fn place(output: &Output) -> StreamPlace {
        output.stream_place().cloned().expect("a streamed output")
    }

    fn stream_files(dir: &Path) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|d| d.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default();
        files.sort();
        files
    }

    #[test]
    fn each_attempt_reads_back_exactly_among_others() {
        let dir = scratch("attempts");
        let binary: Vec<u8> = (0..=255u8).cycle().take(3 * CHUNK + 17).collect();
        let (a_out, a_err) = attempt(
            &dir,
            "a",
            1,
            &[
                (Channel::Stdout, b"one\n"),
                (Channel::Stderr, b"warning\n"),
                (Channel::Stdout, b"two\n"),
            ],
        );
        let (quiet_out, quiet_err) = attempt(&dir, "quiet", 1, &[]);
        let (b_out, b_err) = attempt(
            &dir,
            "b/\u{e9}",
            2,
            &[
                (Channel::Stdout, &binary[..CHUNK]),
                (Channel::Stdout, &binary[CHUNK..]),
            ],
        );
        let (c_out, c_err) = attempt(&dir, "c", 1, &[(Channel::Stderr, b"only errors\0\xff")]);

        assert_eq!((quiet_out, quiet_err), (Output::Empty, Output::Empty));
        assert_eq!((&b_err, &c_out), (&Output::Empty, &Output::Empty));
        assert_eq!(
            read_channel(&place(&a_out), Channel::Stdout).unwrap(),
            b"one\ntwo\n"
        );
        assert_eq!(
            read_channel(&place(&a_err), Channel::Stderr).unwrap(),
            b"warning\n"
        );
        assert_eq!(
            read_channel(&place(&b_out), Channel::Stdout).unwrap(),
            binary
        );
        // The channel an attempt never wrote reads as empty from its place.
        assert!(read_channel(&place(&b_out), Channel::Stderr)
            .unwrap()
            .is_empty());
        assert_eq!(
            read_channel(&place(&c_err), Channel::Stderr).unwrap(),
            b"only errors\0\xff"
        );
        assert_eq!(b_out.bytes(), binary.len() as u64);
        assert_eq!(a_out.text().unwrap(), "one\ntwo\n");
        assert_eq!(c_err.last_lines(3), ["only errors\0\u{fffd}"]);

        // One thread wrote them all: one file, whose index names each.
        let files = stream_files(&dir);
        assert_eq!(files.len(), 1, "{files:?}");
        let scan = scan(&files[0]).unwrap();
        assert!(scan.stopped.is_none(), "{:?}", scan.stopped);
        let found: Vec<_> = scan
            .attempts
            .iter()
            .map(|a| (a.name.as_str(), a.attempt, a.stdout_bytes, a.stderr_bytes))
            .collect();
        assert_eq!(
            found,
            [
                ("a", 1, 8, 8),
                ("b/\u{e9}", 2, binary.len() as u64, 0),
                ("c", 1, 0, 13)
            ]
        );
        assert_eq!(scan.attempts[1].place, place(&b_out));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_command_that_writes_nothing_makes_no_file() {
        let dir = scratch("nothing");
        assert_eq!(
            attempt(&dir, "quiet", 1, &[]),
            (Output::Empty, Output::Empty)
        );
        assert!(!dir.exists(), "{:?}", stream_files(&dir));
    }

    #[test]
    fn executor_threads_write_files_of_their_own() {
        let dir = scratch("threads");
        let threads: Vec<_> = (0..3)
            .map(|t| {
                let dir = dir.clone();
                std::thread::spawn(move || {
                    (0..50)
                        .map(|n| {
                            let text = format!("thread {t} line {n}\n");
                            attempt(
                                &dir,
                                &format!("{t}-{n}"),
                                1,
                                &[(Channel::Stdout, text.as_bytes())],
                            )
                            .0
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for (t, thread) in threads.into_iter().enumerate() {
            for (n, output) in thread.join().unwrap().iter().enumerate() {
                assert_eq!(output.text().unwrap(), format!("thread {t} line {n}\n"));
            }
        }
        assert_eq!(stream_files(&dir).len(), 3);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_thread_keeps_the_files_of_its_last_few_directories_open() {
        let root = scratch("directories");
        let dirs = root.clone();
        // A thread of its own: the test thread's files stay out of it.
        std::thread::spawn(move || {
            let write = |d: usize| {
                let dir = dirs.join(d.to_string());
                let (out, _) = attempt(&dir, "a", 1, &[(Channel::Stdout, b"x")]);
                place(&out).file
            };
            let first = write(0);
            assert_eq!(write(0), first, "the same file while it is open");
            for d in 1..=OPEN_PER_THREAD {
                write(d);
            }
            // Directory 0 was the least recently used: its file was closed.
            assert_ne!(write(0), first);
            assert_eq!(WRITERS.with_borrow(Vec::len), OPEN_PER_THREAD);
        })
        .join()
        .unwrap();
        assert_eq!(stream_files(&root.join("0")).len(), 2);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_tail_of_a_large_stream_reads_only_its_end() {
        let dir = scratch("tail");
        let noise = vec![b'x'; CHUNK];
        let mut chunks: Vec<(Channel, &[u8])> = Vec::new();
        for _ in 0..64 {
            chunks.push((Channel::Stdout, &noise));
            chunks.push((Channel::Stderr, b"progress\n"));
        }
        chunks.push((Channel::Stderr, b"the end of a long line"));
        chunks.push((Channel::Stdout, &noise));
        chunks.push((Channel::Stderr, b"\nSegmentation fault\n"));
        let (out, err) = attempt(&dir, "loud", 1, &chunks);
        let (tail_bytes, cut) = tail(&place(&err), Channel::Stderr, 16).unwrap();
        assert_eq!(tail_bytes, b"mentation fault\n");
        assert!(cut);
        let lines = err.last_lines(3);
        assert_eq!(
            lines,
            ["progress", "the end of a long line", "Segmentation fault"]
        );
        // A whole short channel is not cut.
        let (whole, cut) = tail(&place(&err), Channel::Stderr, 1 << 20).unwrap();
        assert_eq!(whole.len() as u64, err.bytes());
        assert!(!cut);
        assert_eq!(out.last_lines(1).len(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Bytes this process has read through read(2) and its kin, all threads.
    fn bytes_read() -> u64 {
        let io = std::fs::read_to_string("/proc/self/io").unwrap();
        io.lines()
            .find_map(|l| l.strip_prefix("rchar: "))
            .unwrap()
            .parse()
            .unwrap()
    }

    #[test]
    fn the_last_lines_of_40_megabytes_read_kilobytes() {
        let dir = scratch("tail-bytes");
        let noise = vec![b'y'; CHUNK];
        let mut chunks: Vec<(Channel, &[u8])> = vec![(Channel::Stderr, b"early\n")];
        chunks.extend(std::iter::repeat_n((Channel::Stdout, &noise[..]), 640));
        chunks.push((Channel::Stderr, b"killed\n"));
        let (out, err) = attempt(&dir, "loud", 1, &chunks);
        assert_eq!(out.bytes(), 640 * CHUNK as u64);
        let before = bytes_read();
        let lines = err.last_lines(5);
        let read = bytes_read() - before;
        assert_eq!(lines, ["early", "killed"]);
        // The walk reads 10 bytes of frame per record it passes, no data.
        // (Other tests read in parallel: a bound well below the region.)
        assert!(read < 4 << 20, "read {read} bytes of a 40 MB region");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_torn_last_record_stops_the_reader_with_a_note() {
        let dir = scratch("torn");
        let (first, _) = attempt(&dir, "first", 1, &[(Channel::Stdout, b"whole\n")]);
        let (second, _) = attempt(
            &dir,
            "second",
            1,
            &[(Channel::Stdout, b"cut in the middle\n")],
        );
        let file = place(&first).file;
        // The runner was killed in the middle of the second attempt's chunk.
        let full = std::fs::metadata(&file).unwrap().len();
        let torn_at = place(&second).offset;
        for cut in [full - 3, torn_at + 2] {
            std::fs::OpenOptions::new()
                .write(true)
                .open(&file)
                .unwrap()
                .set_len(cut)
                .unwrap();
            let scan = scan(&file).unwrap();
            let names: Vec<_> = scan.attempts.iter().map(|a| a.name.as_str()).collect();
            match &scan.stopped {
                Some(StreamError::Torn {
                    offset,
                    file_length,
                    ..
                }) => {
                    assert!(*offset >= torn_at, "{offset}");
                    assert_eq!(*file_length, cut);
                }
                other => panic!("cut at {cut}: {other:?}"),
            }
            let note = scan.stopped.unwrap().to_string();
            assert!(note.contains("torn record"), "{note}");
            assert!(note.contains("intact"), "{note}");
            // The first attempt reads whole; the second says why it cannot.
            assert_eq!(first.text().unwrap(), "whole\n");
            assert_eq!(names[0], "first");
            let error = read_channel(&place(&second), Channel::Stdout).unwrap_err();
            assert!(matches!(error, StreamError::Torn { .. }), "{error}");
            assert!(tail(&place(&second), Channel::Stdout, 100).is_err());
            assert!(second.last_lines(3).is_empty());
        }
        // Not a stream file at all.
        std::fs::write(dir.join("other"), "hello").unwrap();
        let error = scan(&dir.join("other")).unwrap_err();
        assert!(
            error.to_string().contains("not an output stream file"),
            "{error}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_place_that_is_not_an_attempts_start_is_refused() {
        let dir = scratch("misplaced");
        let (out, _) = attempt(
            &dir,
            "a",
            1,
            &[(Channel::Stdout, b"x"), (Channel::Stdout, b"y")],
        );
        let mut wrong = place(&out);
        // Past the attempt record: the first record is a chunk.
        let attempt_record = 2 * FRAME + 4 + 1;
        wrong.offset += attempt_record;
        wrong.length -= attempt_record;
        let error = read_channel(&wrong, Channel::Stdout).unwrap_err();
        assert!(error.to_string().contains("does not begin here"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
