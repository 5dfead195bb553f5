//! A run whose journal's disk fills: no command starts after that, the
//! run says so, the attempts already made are journaled once there is
//! room, and the run ends `interrupted`, to be resumed.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{exited, log, numbered_graph, scratch, spawn, wait_for_log};
use journal::Journal;

/// A tmpfs of `kib` KiB mounted on `dir`, unmounted when dropped; `None`
/// where this process may not mount (the caller skips, saying why).
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(dir: &Path, kib: u64) -> Option<SmallDisk> {
        std::fs::create_dir_all(dir).expect("mount point");
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
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Lines in the files of `dir/starts`: one per execution.
fn executions(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("starts"))
        .expect("starts directory")
        .map(|entry| {
            let text = std::fs::read_to_string(entry.expect("start").path()).unwrap_or_default();
            text.lines().count()
        })
        .sum()
}

#[test]
fn a_full_disk_stops_new_starts_and_the_attempts_made_are_journaled_once_there_is_room() {
    let dir = scratch("full-disk");
    let small = dir.join("small");
    let Some(_disk) = SmallDisk::mount(&small, 1024) else {
        eprintln!("skipped: cannot mount a small tmpfs here (not root?)");
        return;
    };
    std::fs::create_dir_all(dir.join("starts")).expect("starts directory");
    // The first command to run fills the journal's disk; each sleeps a
    // second, so the run sees the disk full while the next one runs.
    let graph = numbered_graph(
        &dir.join("graph.toml"),
        "f",
        6,
        &format!(
            "echo $$ >> {starts}/{{n}}; if mkdir {dir}/filled 2>/dev/null; then \
             head -c 100000000 /dev/zero > {small}/fill 2>/dev/null; fi; sleep 1",
            starts = dir.join("starts").display(),
            dir = dir.display(),
            small = small.display()
        ),
    );
    let journal_path = small.join("journal.db");
    let args = [
        "run",
        graph.to_str().expect("UTF-8 path"),
        "-n",
        "1",
        "--journal",
        journal_path.to_str().expect("UTF-8 path"),
        "--progress",
        "none",
    ];
    let mut runner = spawn(&dir, &args, "run.log");
    let limit = Duration::from_secs(60);
    wait_for_log(&dir, "run.log", "waiting up to 300 s for room", limit);
    let said = log(&dir, "run.log");
    assert!(
        said.contains(&format!(
            "the disk holding the journal {} is full",
            journal_path.display()
        )) && said.contains("no command starts any more"),
        "{said}"
    );
    let before_room = executions(&dir);
    assert!(before_room < 6, "new starts stopped: {before_room}\n{said}");

    std::fs::remove_file(small.join("fill")).expect("free the disk");
    let status = exited(&mut runner, limit, &dir, "run.log");
    let said = log(&dir, "run.log");
    assert_eq!(status.code(), Some(2), "{said}");
    assert!(
        said.contains("filled during the run: no command started after that")
            && said.contains("--resume"),
        "{said}"
    );
    let executed = executions(&dir);
    assert_eq!(executed, before_room, "nothing started while it waited");
    let journal = Journal::open_read_only(&journal_path).expect("the journal");
    let attempts = journal.attempts(None).expect("attempts");
    assert_eq!(
        attempts.len(),
        executed,
        "one attempt per execution: {attempts:#?}\n{said}"
    );
    assert_eq!(journal.runs().expect("runs")[0].status, "interrupted");
}
