//! Writing attempts into stream files and reading them back.

use std::path::{Path, PathBuf};

use super::format::{CHUNK, FRAME};
use super::writer::{OPEN_PER_THREAD, WRITERS};
use super::*;
use crate::shell::Output;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("output-stream-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Writes one attempt's chunks through a sink, as a pump would, and
/// returns its outputs.
fn attempt(dir: &Path, name: &str, number: u32, chunks: &[(Channel, &[u8])]) -> (Output, Output) {
    let mut sink = StreamSink::new(dir, name, number);
    for (channel, chunk) in chunks {
        sink.write(*channel, chunk);
    }
    let pumped = sink.finish();
    assert_eq!(pumped.lost, None, "the output was written");
    Output::streamed(&pumped)
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

/// Bytes this process has read through read(2) and its kin, all threads
/// (also for the output tests, which read streams back).
pub(in crate::shell) fn bytes_read() -> u64 {
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
