//! A command that writes nothing leaves no files: `constellation run` as a
//! user runs it, with real commands, and the output directory counted
//! afterwards.

mod common;

use std::path::Path;
use std::process::Output;

use common::text;

use journal::Journal;

/// `constellation ARGS` in `dir`, to its end, its output echoed for a
/// failing test's log.
fn constellation(dir: &Path, args: &[&str]) -> Output {
    let output = common::constellation(dir)
        .env("RUST_LOG", "error")
        .args(args)
        .output()
        .unwrap();
    eprintln!("--- constellation {args:?}: {}", text(&output));
    output
}

/// Every file and folder under `root`, as paths relative to it, sorted;
/// links are listed, never followed.
fn entries(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let relative = path.strip_prefix(root).unwrap().display().to_string();
            if entry.file_type().unwrap().is_dir() {
                found.push(format!("{relative}/"));
                pending.push(path);
            } else {
                found.push(relative);
            }
        }
    }
    found.sort();
    found
}

#[test]
fn only_commands_that_wrote_something_leave_files() {
    let dir = common::scratch("quiet-outputs-mixed");
    std::fs::write(
        dir.join("mixed.toml"),
        r#"
[[activity]]
id = "says-{n}"
for = { n = "1..=3" }
script = "echo said {n}"

[[activity]]
id = "warns"
script = "echo warned >&2"

[[activity]]
id = "both"
script = "echo out; echo err >&2"

[[activity]]
id = "quiet-{n}"
for = { n = "1..=20" }
command = "true"

[[activity]]
id = "keeps"
script = "echo kept > run/output/keeps/result.txt"

[[activity]]
id = "fails-quietly"
script = "exit 3"

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
            "--progress",
            "none",
            "--journal",
            "run/journal.db",
        ],
    );
    let said = text(&out);
    assert!(!out.status.success(), "two commands fail: {said}");

    assert_eq!(
        entries(&dir.join("run/output")),
        [
            "both/",
            "both/stderr",
            "both/stdout",
            "fails-loudly/",
            "fails-loudly/stderr",
            "keeps/",
            "keeps/result.txt",
            "says-1/",
            "says-1/stdout",
            "says-2/",
            "says-2/stdout",
            "says-3/",
            "says-3/stdout",
            "warns/",
            "warns/stderr",
        ]
    );
    let output = dir.join("run/output");
    let read = |p: &str| std::fs::read_to_string(output.join(p)).unwrap();
    assert_eq!(read("says-2/stdout"), "said 2\n");
    assert_eq!(read("warns/stderr"), "warned\n");
    assert_eq!(read("keeps/result.txt"), "kept\n");

    // The failure with output names its file and shows its last line; the
    // quiet one says it wrote nothing, and names no file that is not there.
    // Paths are as the run names them, relative to where it ran.
    assert!(
        said.contains("stderr: run/output/fails-loudly/stderr"),
        "{said}"
    );
    assert!(said.contains("| broken input"), "{said}");
    let quiet = said
        .split("FAILED ")
        .find(|f| f.starts_with("fails-quietly:"))
        .unwrap_or_else(|| panic!("no failure for fails-quietly in {said}"));
    assert!(quiet.contains("exited with status 3"), "{quiet}");
    assert!(quiet.contains("wrote no error output"), "{quiet}");
    assert!(!quiet.contains("stderr:"), "{quiet}");

    // The journal names a file for each stream that holds something, with
    // its size, and none for the streams that were empty.
    let journal = Journal::open(&dir.join("run/journal.db")).unwrap();
    let attempts = journal.attempts(None).unwrap();
    assert_eq!(attempts.len(), 3 + 1 + 1 + 20 + 1 + 1 + 1);
    for a in &attempts {
        for (path, bytes) in [
            (&a.recorded.stdout, a.recorded.stdout_bytes),
            (&a.recorded.stderr, a.recorded.stderr_bytes),
        ] {
            match path {
                Some(path) => {
                    let on_disk = std::fs::metadata(dir.join(path)).unwrap().len();
                    assert!(on_disk > 0, "{}: {path} is empty", a.activity);
                    assert_eq!(bytes, Some(on_disk as i64), "{}", a.activity);
                }
                None => assert_eq!(bytes, Some(0), "{}", a.activity),
            }
        }
    }
    let row = |id: &str| attempts.iter().find(|a| a.activity == id).unwrap();
    let says = row("says-3").recorded.stdout.as_deref().unwrap();
    assert_eq!(std::fs::read_to_string(dir.join(says)).unwrap(), "said 3\n");
    assert_eq!(row("says-3").recorded.stderr, None);
    assert_eq!(
        (
            &row("quiet-7").recorded.stdout,
            &row("quiet-7").recorded.stderr
        ),
        (&None, &None)
    );
    let warned = row("warns").recorded.stderr.as_deref().unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.join(warned)).unwrap(),
        "warned\n"
    );

    // The report reads the journal without the files that are not there.
    let report = constellation(&dir, &["report", "run/journal.db"]);
    assert!(report.status.success(), "{}", text(&report));
    let report = text(&report);
    assert!(report.contains("failed"), "{report}");
}

/// A sweep of quiet commands leaves an output directory with nothing in it.
/// Not timed. 20,000 commands by default, which a debug build runs in a
/// few minutes on a loaded 2-core machine (with release builds sharing the
/// cores it ran about 40 commands a second, so 100,000 would take most of
/// an hour); `QUIET_OUTPUTS_COUNT=100000` runs the issue's figure.
#[test]
fn a_sweep_of_quiet_commands_leaves_no_files() {
    let count: usize = match std::env::var("QUIET_OUTPUTS_COUNT") {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("QUIET_OUTPUTS_COUNT={text:?} is not a count")),
        Err(_) => 20_000,
    };
    let dir = common::scratch("quiet-outputs-many");
    std::fs::write(
        dir.join("many.toml"),
        format!(
            "[[activity]]\nid = \"t-{{n}}\"\nfor = {{ n = \"1..={count}\" }}\ncommand = \"true\"\n"
        ),
    )
    .unwrap();
    let out = constellation(
        &dir,
        &[
            "run",
            "many.toml",
            "-n",
            "2",
            "--progress",
            "none",
            "--journal",
            "run/journal.db",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let journal = Journal::open(&dir.join("run/journal.db")).unwrap();
    let attempts = journal.attempts(None).unwrap();
    assert_eq!(attempts.len(), count);
    assert!(attempts
        .iter()
        .all(|a| a.recorded.outcome == "exited" && a.recorded.stdout.is_none()));
    let left = entries(&dir.join("run/output"));
    assert!(
        left.is_empty(),
        "{} entries left, first {:?}",
        left.len(),
        &left[..left.len().min(5)]
    );
}
