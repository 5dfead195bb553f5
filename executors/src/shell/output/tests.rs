//! Reading an output back: only its end for an error message.

use super::*;
use crate::shell::stream::tests::bytes_read;

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
