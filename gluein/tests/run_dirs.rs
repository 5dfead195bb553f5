//! Runs started in the same second each get a run directory and a journal
//! of their own (issue 22: two runs started in the same second clashed on
//! one journal, as the directory was named by the second and claimed by a
//! check-then-create). Runs the real `constellation` binary.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{constellation, scratch};

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
    let run_dirs: BTreeSet<PathBuf> = std::fs::read_dir(dir.join("constellation-runs"))
        .expect("runs directory")
        .map(|entry| entry.expect("run directory").path())
        .collect();
    assert_eq!(run_dirs.len(), RUNS, "{run_dirs:?}");
    for journal in &journals {
        let run_dir = dir.join(journal.parent().expect("journal in a run directory"));
        assert!(
            run_dirs.contains(&run_dir),
            "{journal:?} not in {run_dirs:?}"
        );
        // Each journal holds its own run, and only that one.
        let db = journal::Journal::open(&dir.join(journal)).expect("journal opens");
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
