//! Streamed output (`Capture::Stream`) of real commands on a real embedded
//! pool: each reads back exactly from a few shared files.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use constellation::collect::MultiEventCollector;
use constellation::Pool;
use executors::shell::stream::{self, Channel};
use executors::shell::{
    Capture, Output, RetryPolicy, ShellActivity, ShellFailure, ShellResult, ShellSpec,
};

/// A fresh directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "constellation-stream-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `specs` on a pool of two executors; their results in submission order.
fn run(specs: Vec<ShellSpec>) -> Vec<ShellResult> {
    let pool = Pool::builder().executors(2).start().unwrap();
    let (collector, results) = MultiEventCollector::new(specs.len());
    let parent = pool.submit(collector).unwrap();
    let ids: Vec<_> = specs
        .into_iter()
        .map(|spec| {
            pool.submit(ShellActivity::new(spec).reply_to(parent))
                .unwrap()
        })
        .collect();
    let events = results
        .wait_timeout(Duration::from_secs(120))
        .expect("every shell activity reports");
    let mut results: Vec<ShellResult> = events.into_iter().map(|e| e.take().unwrap()).collect();
    results.sort_by_key(|r| ids.iter().position(|id| *id == r.activity));
    pool.done().unwrap();
    results
}

fn streamed(script: &str, name: &str, dir: &Path) -> ShellSpec {
    ShellSpec::script(script)
        .name(name)
        .capture(Capture::Stream {
            dir: dir.to_path_buf(),
        })
}

fn bytes(output: &Output, channel: Channel) -> Vec<u8> {
    match output {
        Output::Stream { place, .. } => stream::read_channel(place, channel).unwrap(),
        Output::Empty => Vec::new(),
        other => panic!("not streamed: {other:?}"),
    }
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[test]
fn commands_read_back_exactly_from_a_file_per_executor() {
    let dir = scratch("mixed");
    let streams = dir.join("streams");
    // Random bytes, all 256 values among them, kept to compare.
    let binary: Vec<u8> = (0..300_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(dir.join("binary.in"), &binary).unwrap();
    let mut specs = vec![
        streamed("echo to out; echo to err >&2; echo more out", "both", &streams),
        streamed(&format!("cat {}", dir.join("binary.in").display()), "binary", &streams),
        // 6 MB through the pipe, in many chunks, interleaved with stderr.
        streamed(
            "i=0; while [ $i -lt 6 ]; do head -c 1000000 /dev/zero | tr '\\0' x; echo \" $i\" >&2; i=$((i+1)); done",
            "large",
            &streams,
        ),
        streamed("exit 3", "quiet-failure", &streams),
        streamed("echo the last words >&2; exit 4", "loud-failure", &streams),
    ];
    for n in 0..20 {
        specs.push(streamed("true", &format!("quiet-{n}"), &streams));
        specs.push(streamed(
            &format!("echo said {n}"),
            &format!("says-{n}"),
            &streams,
        ));
    }
    let results = run(specs);

    let both = &results[0];
    assert_eq!(bytes(&both.stdout, Channel::Stdout), b"to out\nmore out\n");
    assert_eq!(bytes(&both.stderr, Channel::Stderr), b"to err\n");
    assert_eq!(both.history[0].stream.as_ref(), both.stdout.stream_place());
    assert_eq!(
        (both.history[0].stdout_bytes, both.history[0].stderr_bytes),
        (16, 7)
    );
    assert_eq!(
        (
            both.history[0].stdout.as_ref(),
            both.history[0].stderr.as_ref()
        ),
        (None, None),
        "no file of its own"
    );
    assert_eq!(bytes(&results[1].stdout, Channel::Stdout), binary);
    assert_eq!(results[1].stderr, Output::Empty);
    let large = bytes(&results[2].stdout, Channel::Stdout);
    assert_eq!(large.len(), 6_000_000);
    assert!(large.iter().all(|&b| b == b'x'));
    assert_eq!(
        String::from_utf8(bytes(&results[2].stderr, Channel::Stderr)).unwrap(),
        " 0\n 1\n 2\n 3\n 4\n 5\n"
    );
    assert_eq!(results[2].stderr.last_lines(2), [" 4", " 5"]);
    assert_eq!(
        (&results[3].stdout, &results[3].stderr),
        (&Output::Empty, &Output::Empty)
    );
    assert_eq!(results[3].history[0].stream, None);
    let failure = ShellFailure(Box::new(results[4].clone())).to_string();
    assert!(failure.contains("it wrote: the last words"), "{failure}");
    for n in 0..20 {
        let quiet = &results[5 + 2 * n];
        assert_eq!(
            (&quiet.stdout, &quiet.stderr),
            (&Output::Empty, &Output::Empty)
        );
        let says = &results[6 + 2 * n];
        assert_eq!(says.stdout.text().unwrap(), format!("said {n}\n"));
    }

    // At most one file per executor, each indexed by activity and attempt.
    let files = files_in(&streams);
    assert!((1..=2).contains(&files.len()), "{files:?}");
    let mut names: Vec<String> = files
        .iter()
        .flat_map(|f| {
            let scan = stream::scan(&streams.join(f)).unwrap();
            assert!(scan.stopped.is_none(), "{:?}", scan.stopped);
            scan.attempts.into_iter().map(|a| a.name)
        })
        .collect();
    names.sort();
    let mut expected: Vec<String> = ["both", "binary", "large", "loud-failure"]
        .iter()
        .map(|s| s.to_string())
        .chain((0..20).map(|n| format!("says-{n}")))
        .collect();
    expected.sort();
    assert_eq!(names, expected);
}

#[test]
fn each_attempt_has_a_region_of_its_own() {
    let dir = scratch("retries");
    let flaky = "echo attempt $CONSTELLATION_ATTEMPT; echo failed $CONSTELLATION_ATTEMPT >&2; [ \"$CONSTELLATION_ATTEMPT\" -ge 3 ]";
    let policy = RetryPolicy {
        delay: Duration::from_millis(10),
        ..RetryPolicy::attempts(4)
    };
    let results = run(vec![streamed(flaky, "flaky", &dir).retry(policy)]);
    let result = &results[0];
    assert!(result.is_success());
    assert_eq!(result.history.len(), 3);
    for (k, attempt) in result.history.iter().enumerate() {
        let place = attempt.stream.as_ref().expect("each attempt wrote");
        let n = k + 1;
        assert_eq!(
            stream::read_channel(place, Channel::Stdout).unwrap(),
            format!("attempt {n}\n").as_bytes()
        );
        assert_eq!(
            stream::read_channel(place, Channel::Stderr).unwrap(),
            format!("failed {n}\n").as_bytes()
        );
    }
    assert_eq!(result.stdout.text().unwrap(), "attempt 3\n");
}

/// The peak resident memory of this process, in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib * 1024
}

#[test]
fn a_command_that_prints_hundreds_of_megabytes_is_never_held_in_memory() {
    let dir = scratch("huge");
    let before = peak_rss();
    let results = run(vec![streamed(
        "head -c 300000000 /dev/zero; echo done >&2",
        "huge",
        &dir,
    )]);
    let grew = peak_rss().saturating_sub(before);
    let result = &results[0];
    assert!(result.is_success());
    assert_eq!(result.stdout.bytes(), 300_000_000);
    assert!(grew < 100_000_000, "the peak RSS grew by {grew} bytes");
    let place = result.stdout.stream_place().unwrap();
    let mut counted = Counter(0);
    stream::copy_channel(place, Channel::Stdout, &mut counted).unwrap();
    assert_eq!(counted.0, 300_000_000);
    assert_eq!(result.stderr.last_lines(1), ["done"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Counts the bytes written to it, and checks they are all zero.
struct Counter(u64);

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        assert!(buf.iter().all(|&b| b == 0));
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_timeout_ends_a_command_whose_background_child_holds_the_pipe() {
    let dir = scratch("timeout");
    let started = Instant::now();
    let results = run(vec![streamed(
        "sleep 300 & echo started; sleep 300",
        "sleeper",
        &dir,
    )
    .timeout(Duration::from_secs(1))]);
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    assert!(!results[0].is_success());
    assert_eq!(results[0].stdout.text().unwrap(), "started\n");
}

/// A tmpfs of `kib` KiB mounted on `dir`, unmounted when dropped; `None`
/// (the caller skips, saying why) where this process may not mount.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(dir: &Path, kib: u64) -> Option<SmallDisk> {
        std::fs::create_dir_all(dir).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "tmpfs"])
            .arg(dir)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        mounted.then(|| SmallDisk(dir.to_path_buf()))
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// A stream write that fails (the disk is full) fails the attempt, with
/// the reason and the command's own status, even though the command
/// exited 0; the stream file stays readable for the attempts after it.
#[test]
fn a_stream_write_that_fails_fails_the_attempt() {
    let dir = scratch("full");
    let streams = dir.join("streams");
    let Some(_disk) = SmallDisk::mount(&streams, 64) else {
        eprintln!("skipped: cannot mount a small tmpfs here (not root?)");
        return;
    };
    let results = run(vec![streamed(
        "head -c 1048576 /dev/zero",
        "too-much",
        &streams,
    )]);
    let lost = &results[0];
    assert!(!lost.is_success(), "{:?}", lost.outcome);
    let reason = lost.outcome.to_string();
    assert!(
        reason.starts_with("lost its output: cannot write to the output stream file")
            && reason.contains("No space left on device")
            && reason.ends_with("; the command exited with status 0"),
        "{reason}"
    );
    assert_eq!(
        (&lost.stdout, &lost.stderr),
        (&Output::Discarded, &Output::Discarded)
    );
    // After it, once its records are cut away, output fits again.
    let small = &run(vec![streamed("echo fits", "small", &streams)])[0];
    assert!(small.is_success(), "{:?}", small.outcome);
    assert_eq!(small.stdout.text().unwrap(), "fits\n");
    for file in files_in(&streams) {
        let scan = stream::scan(&streams.join(file)).unwrap();
        assert!(
            scan.stopped.is_none(),
            "whole records only: {:?}",
            scan.stopped
        );
    }
}
