//! Reading a stream file back: one attempt's channel whole or only its
//! end, or the index of every attempt in the file.

use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::format::{
    attempt_payload, frame_bytes, Channel, Kind, StreamError, StreamPlace, CHUNK, FRAME, MAGIC,
};

/// How many records [`tail`] walks back over at most before it gives up
/// looking for more of one channel among the other's.
const TAIL_RECORDS: usize = 1 << 20;

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
