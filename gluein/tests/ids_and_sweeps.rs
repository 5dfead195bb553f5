//! Ids and sweep values that used to be trusted too much, run through the
//! real `constellation run`: ids whose output folders clashed, and sweep
//! values that ran as shell code.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::{run, scratch, text};
use journal::Journal;

/// Each activity's standard output file, as the journal names it, made
/// absolute against `dir` (the run's working directory).
fn stdout_files(dir: &Path, journal: &str) -> Vec<(String, std::path::PathBuf)> {
    Journal::open(&dir.join(journal))
        .unwrap()
        .attempts(Some(1))
        .unwrap()
        .into_iter()
        .map(|a| {
            let file = a.recorded.stdout.expect("output kept in a file");
            (a.activity, dir.join(file))
        })
        .collect()
}

#[test]
fn ids_whose_folder_names_clashed_each_keep_their_own_output() {
    let dir = scratch("clashing-ids");
    // Each pair shared one output folder when odd characters became `_`;
    // the later one overwrote the other's stdout.
    let ids = ["a/b", "a_b", "αβ", "γδ", "..", "_.."];
    let mut graph = String::new();
    for (n, id) in ids.iter().enumerate() {
        graph.push_str(&format!(
            "[[activity]]\nid = \"{id}\"\nscript = \"echo output of {n}\"\n\n"
        ));
    }
    std::fs::write(dir.join("clash.toml"), graph).unwrap();
    let output = run(&dir, &["run", "clash.toml", "-n", "2", "--journal", "j.db"]);
    assert!(output.status.success(), "{}", text(&output));

    let files = stdout_files(&dir, "j.db");
    assert_eq!(files.len(), ids.len(), "{files:?}");
    let distinct: BTreeSet<_> = files.iter().map(|(_, f)| f.clone()).collect();
    assert_eq!(distinct.len(), ids.len(), "shared files: {files:?}");
    for (n, id) in ids.iter().enumerate() {
        let (_, file) = files.iter().find(|(a, _)| a == id).unwrap();
        assert!(
            file.starts_with(dir.join("output")),
            "{id}: {}",
            file.display()
        );
        assert_eq!(
            std::fs::read_to_string(file).unwrap(),
            format!("output of {n}\n"),
            "{id}: {}",
            file.display()
        );
    }
    // Ordinary ids keep readable folder names.
    assert!(dir.join("output/a_b/stdout").is_file());
    assert!(dir.join("output/a%2Fb/stdout").is_file());
}

#[test]
fn sweep_values_reach_scripts_as_one_argument_and_raw_values_as_code() {
    let dir = scratch("quoted-sweeps");
    std::fs::write(
        dir.join("sweep.toml"),
        r#"
[[activity]]
id = "quoted-{n}"
for = { n = ["x; touch pwned", "it's \"$(touch pwned2)\" `touch pwned3` *", "7"] }
script = "printf '<%s>\\n' {n}"

[[activity]]
id = "raw-{cmd}"
for = { cmd = ["touch spliced"] }
script = "echo before; {cmd:raw}"
"#,
    )
    .unwrap();
    let output = run(&dir, &["run", "sweep.toml", "-n", "2", "--journal", "j.db"]);
    assert!(output.status.success(), "{}", text(&output));
    // The values ran as shell code before they were quoted.
    for file in ["pwned", "pwned2", "pwned3"] {
        assert!(!dir.join(file).exists(), "{file} was created");
    }
    let files = stdout_files(&dir, "j.db");
    let stdout = |id: &str| {
        let (_, file) = files
            .iter()
            .find(|(a, _)| a == id)
            .unwrap_or_else(|| panic!("{id} not in {files:?}"));
        std::fs::read_to_string(file).unwrap()
    };
    // printf prints one line per argument: each value is exactly one.
    assert_eq!(stdout("quoted-x; touch pwned"), "<x; touch pwned>\n");
    let tricky = "it's \"$(touch pwned2)\" `touch pwned3` *";
    assert_eq!(stdout(&format!("quoted-{tricky}")), format!("<{tricky}>\n"));
    assert_eq!(stdout("quoted-7"), "<7>\n");
    // The raw form still splices text in as code.
    assert!(dir.join("spliced").is_file());
    assert_eq!(stdout("raw-touch spliced"), "before\n");
}

#[test]
fn a_placeholder_inside_quotes_in_a_script_stops_the_run_before_anything_runs() {
    let dir = scratch("quoted-placeholder");
    std::fs::write(
        dir.join("bad.toml"),
        "[[activity]]\nid = \"first\"\nscript = \"touch ran\"\n\n[[activity]]\nid = \"say-{n}\"\nfor = { n = [\"a b\"] }\nscript = \"echo \\\"{n}\\\"\"\n",
    )
    .unwrap();
    let output = run(&dir, &["run", "bad.toml", "--journal", "j.db"]);
    assert!(!output.status.success());
    let message = text(&output);
    assert!(
        message.contains("bad.toml:8:10: in `script`: `{n}` is inside \"…\" quotes"),
        "{message}"
    );
    assert!(!dir.join("ran").exists());
}
