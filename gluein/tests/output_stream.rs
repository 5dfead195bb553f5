//! `constellation run --output stream` and `constellation output`, as a
//! user runs them: real commands, the real binary, the stream files
//! counted and every activity's output read back.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::text;
use executors::shell::stream;
use journal::Journal;

/// `constellation ARGS` in `dir`, to its end, its stderr echoed for a
/// failing test's log.
fn constellation(dir: &Path, args: &[&str]) -> Output {
    let output = common::constellation(dir)
        .env("RUST_LOG", "error")
        .args(args)
        .output()
        .unwrap();
    eprintln!(
        "--- constellation {args:?}: {} ({} bytes of stdout)\n{}",
        output.status,
        output.stdout.len(),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// The one run directory under `dir/constellation-runs` (not the
/// `latest` link to it).
fn run_dir(dir: &Path) -> PathBuf {
    let runs: Vec<PathBuf> = std::fs::read_dir(dir.join("constellation-runs"))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_dir())
        .map(|e| e.path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    runs[0].clone()
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// What `constellation output ARGS` printed; it must succeed.
fn output_of(dir: &Path, args: &[&str]) -> Vec<u8> {
    let out = constellation(dir, &[&["output"], args].concat());
    assert!(out.status.success(), "output {args:?}: {}", text(&out));
    out.stdout
}

/// The error of `constellation output ARGS`, which must fail.
fn output_error(dir: &Path, args: &[&str]) -> String {
    let out = constellation(dir, &[&["output"], args].concat());
    assert!(!out.status.success(), "output {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Bytes that look like nothing in particular, all 256 values among them.
fn noise(length: usize, seed: u32) -> Vec<u8> {
    (0..length as u32)
        .map(|i| (i.wrapping_add(seed).wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect()
}

#[test]
fn streamed_outputs_read_back_exactly() {
    let dir = common::scratch("output-stream-mixed");
    let binary = noise(200_000, 1);
    std::fs::write(dir.join("binary.in"), &binary).unwrap();
    // A few MB of text lines, each different.
    let large: String = (0..120_000)
        .map(|i| format!("line {i} of the large output\n"))
        .collect();
    assert!(large.len() > 3_000_000);
    std::fs::write(dir.join("large.in"), &large).unwrap();
    std::fs::write(
        dir.join("mixed.toml"),
        r#"
[[activity]]
id = "says-{n}"
for = { n = "1..=5" }
script = "echo said {n}; echo warned {n} >&2"

[[activity]]
id = "binary"
script = "cat binary.in"

[[activity]]
id = "large"
script = "cat large.in; echo large done >&2"

[[activity]]
id = "quiet-{n}"
for = { n = "1..=30" }
command = "true"

[[activity]]
id = "flaky"
retries = 1
script = "echo try $CONSTELLATION_ATTEMPT; echo oops $CONSTELLATION_ATTEMPT >&2; [ $CONSTELLATION_ATTEMPT -ge 2 ]"

[[activity]]
id = "fails-loudly"
script = "echo broken input >&2; exit 4"
"#,
    )
    .unwrap();
    let out = constellation(
        &dir,
        &[
            "run",
            "mixed.toml",
            "-n",
            "2",
            "--output",
            "stream",
            "--progress",
            "none",
        ],
    );
    let said = text(&out);
    assert!(!out.status.success(), "one command fails: {said}");
    // The failure shows its error output's last line, read from the stream.
    assert!(said.contains("| broken input"), "{said}");
    assert!(
        said.contains("stderr: in the stream constellation-runs/"),
        "{said}"
    );

    // Two executors: at most two stream files, and nothing else.
    let run = run_dir(&dir);
    let files = names(&run.join("output"));
    assert!((1..=2).contains(&files.len()), "{files:?}");
    assert!(files.iter().all(|f| f.ends_with(".stream")), "{files:?}");
    let indexed: usize = files
        .iter()
        .map(|f| {
            let scan = stream::scan(&run.join("output").join(f)).unwrap();
            assert!(scan.stopped.is_none(), "{:?}", scan.stopped);
            scan.attempts.len()
        })
        .sum();
    // Every attempt that wrote something, and no quiet one.
    assert_eq!(indexed, 5 + 1 + 1 + 2 + 1);

    let run_arg = run.to_str().unwrap();
    for n in 1..=5 {
        let id = format!("says-{n}");
        assert_eq!(
            output_of(&dir, &[run_arg, &id]),
            format!("said {n}\n").as_bytes()
        );
        assert_eq!(
            output_of(&dir, &[run_arg, &id, "--stderr"]),
            format!("warned {n}\n").as_bytes()
        );
    }
    assert_eq!(output_of(&dir, &[run_arg, "binary"]), binary);
    assert!(output_of(&dir, &[run_arg, "binary", "--stderr"]).is_empty());
    assert_eq!(output_of(&dir, &[run_arg, "large"]), large.as_bytes());
    assert_eq!(
        output_of(&dir, &[run_arg, "large", "--stderr"]),
        b"large done\n"
    );
    assert!(output_of(&dir, &[run_arg, "quiet-17"]).is_empty());
    assert!(output_of(&dir, &[run_arg, "quiet-17", "--stderr"]).is_empty());
    // The last attempt by default; --attempt picks another.
    assert_eq!(output_of(&dir, &[run_arg, "flaky"]), b"try 2\n");
    assert_eq!(
        output_of(&dir, &[run_arg, "flaky", "--attempt", "1"]),
        b"try 1\n"
    );
    assert_eq!(
        output_of(&dir, &[run_arg, "flaky", "--attempt", "1", "--stderr"]),
        b"oops 1\n"
    );
    // The journal file does as well as its directory, from anywhere.
    let journal = run.join("journal.db");
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    assert_eq!(
        output_of(&elsewhere, &[journal.to_str().unwrap(), "says-2"]),
        b"said 2\n"
    );

    // A resume runs the failure again, as run 2 with its own stream files;
    // what it skipped keeps the first run's output.
    let resumed = constellation(
        &dir,
        &[
            "run",
            "mixed.toml",
            "-n",
            "2",
            "--output",
            "stream",
            "--progress",
            "none",
            "--resume",
            journal.to_str().unwrap(),
        ],
    );
    assert!(!resumed.status.success(), "{}", text(&resumed));
    assert!(names(&run.join("output.run2"))
        .iter()
        .all(|f| f.ends_with(".stream")));
    let error_output = |extra: &[&str]| {
        output_of(
            &dir,
            &[&[run_arg, "fails-loudly", "--stderr"], extra].concat(),
        )
    };
    assert_eq!(error_output(&[]), b"broken input\n");
    assert_eq!(error_output(&["--run", "1"]), b"broken input\n");
    let attempts = Journal::open_read_only(&journal)
        .unwrap()
        .attempts_of("fails-loudly")
        .unwrap();
    let files: Vec<_> = attempts
        .iter()
        .map(|a| a.recorded.stream.as_ref().unwrap().file.clone())
        .collect();
    assert_eq!(attempts.len(), 2);
    assert!(
        files[0].contains("/output/") && files[1].contains("/output.run2/"),
        "{files:?}"
    );
    assert_eq!(output_of(&dir, &[run_arg, "says-3"]), b"said 3\n");

    // Clear errors for what is not there.
    let error = output_error(&dir, &[run_arg, "flaky", "--attempt", "5"]);
    assert!(
        error.contains("no attempt 5") && error.contains("1 to 2"),
        "{error}"
    );
    let error = output_error(&dir, &[run_arg, "flaky", "--run", "2"]);
    assert!(error.contains("did not run in run 2"), "{error}");
    assert!(error.contains("it ran in run 1"), "{error}");
    let error = output_error(&dir, &[run_arg, "sayz-3"]);
    assert!(error.contains("no activity sayz-3"), "{error}");
    assert!(error.contains("did you mean says-3?"), "{error}");
    let error = output_error(&dir, &[run_arg, "nothing-like-it"]);
    assert!(error.contains("no activity nothing-like-it"), "{error}");
    assert!(!error.contains("did you mean"), "{error}");
    let error = output_error(&dir, &[dir.join("nowhere").to_str().unwrap(), "says-1"]);
    assert!(error.contains("no run at"), "{error}");

    // A stream file cut short in the middle of its last record, as by a
    // runner killed mid-write: the attempts before it read whole, the cut
    // one says why it cannot.
    let attempts = Journal::open_read_only(&journal)
        .unwrap()
        .attempts(Some(1))
        .unwrap();
    let streamed: Vec<_> = attempts
        .iter()
        .filter(|a| a.recorded.stream.is_some())
        .collect();
    let file = streamed[0].recorded.stream.as_ref().unwrap().file.clone();
    let in_file = |a: &&&journal::AttemptRow| a.recorded.stream.as_ref().unwrap().file == file;
    let last = streamed
        .iter()
        .filter(in_file)
        .max_by_key(|a| a.recorded.stream.as_ref().unwrap().offset)
        .unwrap();
    let first = streamed
        .iter()
        .filter(in_file)
        .filter(|a| a.recorded.stdout_bytes > Some(0))
        .min_by_key(|a| a.recorded.stream.as_ref().unwrap().offset)
        .unwrap();
    assert_ne!(
        first.activity, last.activity,
        "both executors ran something"
    );
    let place = last.recorded.stream.as_ref().unwrap();
    let file = dir.join(&place.file);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len((place.offset + place.length - 3) as u64)
        .unwrap();
    let before = output_of(
        &dir,
        &[
            run_arg,
            &first.activity,
            "--attempt",
            &first.recorded.attempt.to_string(),
            "--run",
            "1",
        ],
    );
    assert_eq!(before.len() as i64, first.recorded.stdout_bytes.unwrap());
    let number = last.recorded.attempt.to_string();
    let mut args = vec![
        "output",
        run_arg,
        &last.activity,
        "--attempt",
        &number,
        "--run",
        "1",
    ];
    if last.recorded.stdout_bytes == Some(0) {
        args.push("--stderr"); // the channel it wrote to
    }
    let cut = constellation(&dir, &args);
    assert!(!cut.status.success());
    let error = String::from_utf8_lossy(&cut.stderr);
    assert!(error.contains("torn record"), "{error}");
    // A stream file that is gone.
    std::fs::remove_file(&file).unwrap();
    let error = output_error(
        &dir,
        &[
            run_arg,
            &first.activity,
            "--attempt",
            &first.recorded.attempt.to_string(),
            "--run",
            "1",
        ],
    );
    assert!(error.contains("which is not there"), "{error}");
}

#[test]
fn output_reads_files_too() {
    let dir = common::scratch("output-stream-files");
    std::fs::write(
        dir.join("files.toml"),
        "[[activity]]\nid = \"a/b\"\nscript = \"printf 'out\\\\000put'; echo err >&2\"\n\n\
         [[activity]]\nid = \"quiet\"\ncommand = \"true\"\n",
    )
    .unwrap();
    let out = constellation(
        &dir,
        &["run", "files.toml", "-n", "1", "--progress", "none"],
    );
    assert!(out.status.success(), "{}", text(&out));
    let run = run_dir(&dir);
    let run_arg = run.to_str().unwrap();
    assert_eq!(output_of(&dir, &[run_arg, "a/b"]), b"out\0put");
    assert_eq!(output_of(&dir, &[run_arg, "a/b", "--stderr"]), b"err\n");
    assert!(output_of(&dir, &[run_arg, "quiet"]).is_empty());
    // From elsewhere, after the run directory moved.
    let moved = dir.join("moved");
    std::fs::rename(&run, &moved).unwrap();
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    assert_eq!(
        output_of(&elsewhere, &[moved.to_str().unwrap(), "a/b"]),
        b"out\0put"
    );
    // A run whose output files are gone.
    std::fs::remove_dir_all(moved.join("output")).unwrap();
    let error = output_error(&dir, &[moved.to_str().unwrap(), "a/b"]);
    assert!(
        error.contains("cannot open the standard output of a/b"),
        "{error}"
    );
}

/// A sweep of 100,000 `echo` commands streamed on two executors: two stream
/// files at most, and each sampled activity's output read back exactly.
/// Not timed. `STREAM_OUTPUTS_COUNT` sets another size.
#[test]
fn a_hundred_thousand_streamed_commands_write_a_few_files() {
    let count: u64 = match std::env::var("STREAM_OUTPUTS_COUNT") {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("STREAM_OUTPUTS_COUNT={text:?} is not a count")),
        Err(_) => 100_000,
    };
    let dir = common::scratch("output-stream-many");
    std::fs::write(
        dir.join("many.toml"),
        format!(
            "[[activity]]\nid = \"e-{{n}}\"\nfor = {{ n = \"1..={count}\" }}\nscript = \"echo {{n}}\"\n"
        ),
    )
    .unwrap();
    let started = std::time::Instant::now();
    let out = constellation(
        &dir,
        &[
            "run",
            "many.toml",
            "-n",
            "2",
            "--output",
            "stream",
            "--progress",
            "none",
        ],
    );
    eprintln!("{count} streamed commands ran in {:?}", started.elapsed());
    assert!(out.status.success(), "{}", text(&out));
    let run = run_dir(&dir);
    let files = names(&run.join("output"));
    assert!((1..=2).contains(&files.len()), "{files:?}");
    let indexed: u64 = files
        .iter()
        .map(|f| {
            let scan = stream::scan(&run.join("output").join(f)).unwrap();
            assert!(scan.stopped.is_none(), "{:?}", scan.stopped);
            scan.attempts.len() as u64
        })
        .sum();
    assert_eq!(indexed, count);
    let run_arg = run.to_str().unwrap();
    let mut sample: Vec<u64> = vec![1, 2, count / 2, count - 1, count];
    sample.extend((1..=20u64).map(|k| 1 + k.wrapping_mul(7_919) % count));
    for n in sample {
        assert_eq!(
            output_of(&dir, &[run_arg, &format!("e-{n}")]),
            format!("{n}\n").as_bytes(),
            "e-{n}"
        );
    }
}
