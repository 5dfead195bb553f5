//! Writing attempts' output into this executor thread's stream file:
//! each thread keeps a file of its own per directory, so no lock is
//! shared between executors.

use std::cell::RefCell;
use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::format::{push_record, Channel, Kind, StreamPlace, CHUNK, MAGIC};
use crate::shell::spec::output_folder_name;

/// An executor thread's stream file in one directory.
pub(super) struct StreamWriter {
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
    pub(super) static WRITERS: RefCell<Vec<StreamWriter>> = const { RefCell::new(Vec::new()) };
}

/// How many stream files (of different directories) one executor thread
/// keeps open at most; the least recently used is closed first.
pub(super) const OPEN_PER_THREAD: usize = 4;

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
        let host = output_folder_name(crate::probe::host_name());
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

/// One attempt's output on its way into its executor's stream file.
pub(crate) struct StreamSink {
    dir: PathBuf,
    /// The activity's name, which the attempt's record carries.
    pub(super) name: String,
    /// The attempt's number.
    pub(super) attempt: u32,
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
    pub(super) fn write(&mut self, channel: Channel, chunk: &[u8]) {
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

    /// Where the attempt's records went (none if it wrote nothing, or its
    /// output could not be written, with the reason), and how many bytes
    /// each channel carried. The file goes back to this thread for its
    /// next attempt.
    pub(super) fn finish(&mut self) -> Pumped {
        let place = match (&self.writer, self.start) {
            _ if self.failed.is_some() => None,
            (Some(writer), Some(start)) => Some(StreamPlace {
                file: writer.path.clone(),
                offset: start,
                length: writer.length - start,
            }),
            _ => None,
        };
        if let Some(writer) = self.writer.take() {
            writer.keep();
        }
        Pumped {
            place,
            bytes: self.bytes,
            lost: self.failed.take(),
        }
    }
}

/// Where a streamed attempt's output went, as the stream sees it; the
/// shell's `Output::streamed` says from it where each channel ended up.
pub(crate) struct Pumped {
    /// The attempt's records, if it wrote any and they were kept.
    pub(crate) place: Option<StreamPlace>,
    /// Bytes the command wrote, per [`Channel`], whether kept or not.
    pub(crate) bytes: [u64; 2],
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
