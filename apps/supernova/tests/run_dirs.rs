//! Two `supernova run`s started at the same instant, without `--out`, each
//! get a run directory and a journal of their own (issue 22: the directory
//! was named by the second alone, so they clashed on one journal).

mod common;
use common::scratch;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn supernova(cwd: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_supernova"));
    command.current_dir(cwd);
    command
}

#[test]
fn two_runs_started_together_keep_separate_journals() {
    let dir = scratch("run-dirs-same-instant");
    let generated = supernova(&dir)
        .args(["generate", "--out", "data", "--pairs", "1", "--seed", "3"])
        .args(["--min-size", "96", "--max-size", "128"])
        .output()
        .expect("start supernova generate");
    assert!(generated.status.success(), "{generated:?}");
    // Start just after a second begins, so both runs name their directories
    // within that second unless the machine stalls for most of it.
    let into_second = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .subsec_nanos();
    std::thread::sleep(Duration::from_nanos(u64::from(1_000_000_000 - into_second)));
    let runs: Vec<_> = (0..2)
        .map(|_| {
            supernova(&dir)
                .args(["run", "--data", "data", "-n", "1"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start supernova run")
        })
        .collect();
    let mut journals = BTreeSet::new();
    for run in runs {
        let out = run.wait_with_output().expect("run ends");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{:?}\n{stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let journal = stdout
            .lines()
            .find_map(|line| line.strip_prefix("journal "))
            .unwrap_or_else(|| panic!("no journal line in {stdout}"));
        journals.insert(journal.trim().to_string());
    }
    assert_eq!(journals.len(), 2, "the runs shared a journal: {journals:?}");
    let run_dirs: Vec<String> = std::fs::read_dir(dir.join("supernova-runs"))
        .expect("runs directory")
        .map(|e| {
            e.expect("run directory")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(run_dirs.len(), 2, "{run_dirs:?}");
    for journal in &journals {
        assert!(dir.join(journal).is_file(), "{journal} missing");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
