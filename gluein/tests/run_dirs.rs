//! Runs started in the same second each get a run directory and a journal
//! of their own (issue 22: two runs started in the same second clashed on
//! one journal, as the directory was named by the second and claimed by a
//! check-then-create); `constellation-runs/latest` names the newest, and
//! `constellation runs` lists them (issue 20: globs over run directories
//! broke from the second run on). Runs the real `constellation` binary.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{constellation, scratch, text};

/// Runs started together; more than two, so that even when a second
/// boundary falls between the starts, some of them share a second.
const RUNS: usize = 4;

#[test]
fn runs_started_at_the_same_instant_get_a_directory_and_journal_each() {
    let dir = scratch("run-dirs-same-instant");
    std::fs::write(
        dir.join("g.toml"),
        "[[activity]]\nid = \"a-{i}\"\nfor = { i = \"1..=3\" }\nscript = \"echo {i}\"\n",
    )
    .expect("graph file");
    // Start just after a second begins, so the runs name their directories
    // within the same second unless the machine stalls for most of it.
    let into_second = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .subsec_nanos();
    std::thread::sleep(Duration::from_nanos(u64::from(1_000_000_000 - into_second)));
    let children: Vec<_> = (0..RUNS)
        .map(|_| {
            constellation(&dir)
                .args(["run", "g.toml", "-n", "1", "--progress", "none"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start constellation run")
        })
        .collect();
    let mut journals = BTreeSet::new();
    for child in children {
        let out = child.wait_with_output().expect("run ends");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{:?}\n{stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let journal = stdout
            .lines()
            .find_map(|line| line.strip_prefix("journal: "))
            .unwrap_or_else(|| panic!("no journal line in {stdout}"));
        journals.insert(PathBuf::from(journal));
    }
    assert_eq!(journals.len(), RUNS, "runs shared a journal: {journals:?}");
    // Run directories, not the `latest` link beside them.
    let run_dirs: BTreeSet<PathBuf> = std::fs::read_dir(dir.join("constellation-runs"))
        .expect("runs directory")
        .map(|entry| entry.expect("run directory"))
        .filter(|entry| entry.file_type().expect("file type").is_dir())
        .map(|entry| entry.path())
        .collect();
    assert_eq!(run_dirs.len(), RUNS, "{run_dirs:?}");
    for journal in &journals {
        let run_dir = dir.join(journal.parent().expect("journal in a run directory"));
        assert!(
            run_dirs.contains(&run_dir),
            "{journal:?} not in {run_dirs:?}"
        );
        // Each journal holds its own run, and only that one.
        let db = journal::Journal::open_read_only(&dir.join(journal)).expect("journal opens");
        assert_eq!(db.runs().expect("runs").len(), 1, "{journal:?}");
    }
    // The names: `g-<UTC time>` and, for later runs in a second, `-2`, `-3`.
    for run_dir in &run_dirs {
        let name = run_dir.file_name().unwrap().to_string_lossy().into_owned();
        let stamp = name.strip_prefix("g-").expect("named after the graph");
        assert!(
            stamp.len() >= 16 && stamp.as_bytes()[8] == b'T' && stamp.as_bytes()[15] == b'Z',
            "{name}"
        );
    }
}

/// Runs `constellation run GRAPH` in `dir` to its end and returns the
/// journal it printed.
fn run_graph(dir: &std::path::Path, graph: &str, succeeds: bool) -> PathBuf {
    let out = common::run(dir, &["run", graph, "-n", "1", "--progress", "none"]);
    assert_eq!(out.status.success(), succeeds, "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let journal = stdout
        .lines()
        .find_map(|line| line.strip_prefix("journal: "))
        .unwrap_or_else(|| panic!("no journal line in {}", text(&out)));
    PathBuf::from(journal)
}

#[test]
fn latest_names_the_second_run_and_runs_lists_both_with_their_states() {
    let dir = scratch("run-dirs-latest");
    std::fs::write(
        dir.join("good.toml"),
        "[[activity]]\nid = \"a-{i}\"\nfor = { i = \"1..=3\" }\nscript = \"echo {i}\"\n",
    )
    .expect("graph file");
    std::fs::write(
        dir.join("bad.toml"),
        "[[activity]]\nid = \"ok\"\nscript = \"true\"\n\n\
         [[activity]]\nid = \"broken\"\nscript = \"exit 3\"\n",
    )
    .expect("graph file");
    let first = run_graph(&dir, "good.toml", true);
    let latest = dir.join("constellation-runs/latest");
    assert_eq!(
        std::fs::read_link(&latest).expect("latest is a link after one run"),
        PathBuf::from(first.parent().unwrap().file_name().unwrap())
    );
    let second = run_graph(&dir, "bad.toml", false);
    let second_dir = second.parent().expect("journal in a run directory");
    // A relative link, to the second run's directory.
    assert_eq!(
        std::fs::read_link(&latest).expect("latest is a link"),
        PathBuf::from(second_dir.file_name().unwrap())
    );
    let report = common::run(&dir, &["report", "constellation-runs/latest/journal.db"]);
    assert!(report.status.success(), "{}", text(&report));
    assert!(
        String::from_utf8_lossy(&report.stdout).contains("bad.toml"),
        "the report of latest is not the second run's: {}",
        text(&report)
    );

    let out = common::run(&dir, &["runs", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let runs: Vec<serde_json::Value> =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    assert_eq!(runs.len(), 2, "{runs:#?}");
    // Oldest first, newest last.
    let (good, bad) = (&runs[0], &runs[1]);
    assert_eq!(good["run_dir"], first.parent().unwrap().to_str().unwrap());
    assert_eq!(good["journal"], first.to_str().unwrap());
    assert_eq!(good["graph"], "good.toml");
    assert_eq!(good["status"], "succeeded");
    assert_eq!(good["runs"], 1);
    assert_eq!(
        (&good["done"], &good["failed"], &good["total"]),
        (&3.into(), &0.into(), &3.into())
    );
    assert!(
        good["duration_s"].as_f64().is_some_and(|s| s >= 0.0),
        "{good}"
    );
    assert!(
        good["started"].as_str().is_some_and(|s| s.ends_with('Z')),
        "{good}"
    );
    assert_eq!(bad["run_dir"], second_dir.to_str().unwrap());
    assert_eq!(bad["graph"], "bad.toml");
    assert_eq!(bad["status"], "failed");
    assert_eq!(
        (&bad["done"], &bad["failed"], &bad["total"]),
        (&1.into(), &1.into(), &2.into())
    );
    assert_eq!(bad["pid"], serde_json::Value::Null);

    // The table says the same, a row per run under a header.
    let out = common::run(&dir, &["runs"]);
    assert!(out.status.success(), "{}", text(&out));
    let table = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(lines[0].starts_with("RUN DIR"), "{table}");
    assert!(
        lines[1].contains("good.toml") && lines[1].contains("succeeded"),
        "{table}"
    );
    assert!(
        lines[2].contains("bad.toml") && lines[2].contains("failed"),
        "{table}"
    );

    // A directory with no runs is an empty list, not an error.
    let out = common::run(&dir, &["runs", "--json", "nowhere"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
}
