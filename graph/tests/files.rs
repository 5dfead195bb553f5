//! Graph files, good and bad, as users write them.

use std::path::Path;

use graph::{Format, Graph, GraphErrors};

fn parse(text: &str) -> Result<Graph, GraphErrors> {
    Graph::parse(text, Format::Toml, "pipeline.toml", Path::new("."))
}

fn error(text: &str) -> String {
    parse(text).expect_err("the file is bad").to_string()
}

/// The node with `id`.
fn node(graph: &Graph, id: &str) -> usize {
    graph.index_of(id).unwrap_or_else(|| panic!("no node {id}"))
}

/// The nodes `id` runs after, expanded, in node order.
fn after(graph: &Graph, id: &str) -> Vec<usize> {
    let mut after: Vec<usize> = graph.dependencies(node(graph, id)).collect();
    after.sort_unstable();
    after.dedup();
    after
}

#[test]
fn sweeps_expand_and_dependencies_follow_them() {
    let graph = parse(
        r#"
[[activity]]
id = "prepare"
script = "mkdir -p work"

[[activity]]
id = "detect-{pair}-{band}"
for = { pair = "1..=3", band = ["r", "i"] }
command = "detect.sh"
args = ["work/{pair}.{band}.fits"]
after = ["prepare"]
context = "site:vu|anywhere"
timeout = "1m30s"
retries = 2

[[activity]]
id = "combine-{pair}"
for = { pair = "1..4" }
command = "combine.sh"
after = ["detect-{pair}-*"]

[[activity]]
id = "report"
command = "report.sh"
after = ["combine-*"]
"#,
    )
    .unwrap();
    assert_eq!(graph.len(), 1 + 6 + 3 + 1);
    assert_eq!(after(&graph, "detect-2-i"), [0]);
    let detect = graph.spec(node(&graph, "detect-2-i"));
    assert_eq!(detect.program.argv(), ["detect.sh", "work/2.i.fits"]);
    assert_eq!(detect.context.to_string(), "site:vu | anywhere");
    assert_eq!(detect.timeout, Some(std::time::Duration::from_secs(90)));
    assert_eq!(detect.retry.max_attempts, 3);
    let combine: Vec<&str> = (after(&graph, "combine-2").into_iter())
        .map(|n| graph.id(n))
        .collect();
    assert_eq!(combine, ["detect-2-r", "detect-2-i"]);
    assert_eq!(after(&graph, "report").len(), 3);
    let order = graph.topological_order();
    let position = |id: &str| order.iter().position(|&n| graph.id(n) == id).unwrap();
    assert!(position("prepare") < position("detect-3-r"));
    assert!(position("detect-3-r") < position("combine-3"));
    assert!(position("combine-3") < position("report"));
}

#[test]
fn sweeps_read_from_a_file_next_to_the_graph() {
    let dir = std::env::temp_dir().join(format!("constellation-graph-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("pairs.txt"), "# pairs\nSN-A\n\nSN-B\n").unwrap();
    let path = dir.join("sweep.toml");
    std::fs::write(
        &path,
        "[[activity]]\nid = \"x-{p}\"\nfor = { p = { file = \"pairs.txt\" } }\ncommand = \"true\"\n",
    )
    .unwrap();
    let graph = Graph::load(&path).unwrap();
    let ids: Vec<&str> = (0..graph.len()).map(|n| graph.id(n)).collect();
    assert_eq!(ids, ["x-SN-A", "x-SN-B"]);
    // The sweep file is kept as read, for the journal to store once.
    assert_eq!(graph.sources().len(), 2);
    assert_eq!(
        graph.sources()[1],
        ("pairs.txt".into(), "# pairs\nSN-A\n\nSN-B\n".into())
    );
}

#[test]
fn json_is_accepted_too() {
    let graph = Graph::parse(
        r#"{"activity": [
            {"id": "a", "command": "true"},
            {"id": "b", "script": "echo hi", "after": ["a"]}
        ]}"#,
        Format::Json,
        "g.json",
        Path::new("."),
    )
    .unwrap();
    assert_eq!(after(&graph, "b"), [0]);
    let bad = Graph::parse(
        r#"{"activity": [{"id": "a", "command": "true", "after": ["nope"]}]}"#,
        Format::Json,
        "g.json",
        Path::new("."),
    )
    .unwrap_err()
    .to_string();
    assert_eq!(
        bad,
        "g.json: activity 1 (`a`): `a` runs after `nope`, which is not an activity of this graph"
    );
}

#[test]
fn unknown_dependencies_point_at_the_item_and_suggest_a_fix() {
    let message = error(
        "[[activity]]\nid = \"prepare\"\ncommand = \"true\"\n\n[[activity]]\nid = \"detect\"\ncommand = \"true\"\nafter = [\"prepare\", \"prepar\"]\n",
    );
    assert_eq!(
        message,
        "pipeline.toml:8:21: `detect` runs after `prepar`, which is not an activity of this graph (did you mean `prepare`?)"
    );
    let glob = error("[[activity]]\nid = \"a\"\ncommand = \"true\"\nafter = [\"zz-*\"]\n");
    assert!(glob.contains("`zz-*`, which matches no activity"), "{glob}");
}

#[test]
fn a_typo_in_a_sweeps_after_is_reported_once_with_a_suggestion() {
    // 100,000 activities after a misspelt name: one error for the item,
    // not 100,000, and a suggestion from the index (comparing each unknown
    // name with every id took 8 minutes at 20,000).
    let text = r#"
[[activity]]
id = "prepare"
command = "true"

[[activity]]
id = "work-{n}"
for = { n = "1..=100000" }
command = "true"
after = ["prepar"]
"#;
    assert_eq!(
        error(text),
        "pipeline.toml:10:10: `work-1` runs after `prepar`, which is not an activity of this graph \
         (did you mean `prepare`?); so do 99999 more of this entry's activities, \
         up to `work-100000` (after `prepar`)"
    );

    // A misspelt template: each name differs, the suggestion follows it.
    let text = r#"
[[activity]]
id = "fetch-{n}"
for = { n = "1..=100000" }
command = "true"

[[activity]]
id = "work-{n}"
for = { n = "1..=100000" }
command = "true"
after = ["fecth-{n}"]

[[activity]]
id = "summary"
command = "true"
after = ["fech-*"]
"#;
    let message = error(text);
    let lines: Vec<&str> = message.lines().collect();
    assert_eq!(
        lines,
        [
            "pipeline.toml:11:10: `work-1` runs after `fecth-1`, which is not an activity of \
             this graph (did you mean `fetch-1`?); so do 99999 more of this entry's activities, \
             up to `work-100000` (after `fecth-100000`)",
            "pipeline.toml:16:10: `summary` runs after `fech-*`, which matches no activity \
             (did you mean `fetch-*`?)",
        ]
    );
}

#[test]
fn a_name_past_the_end_of_a_sweep_suggests_its_last_id() {
    let message = error(
        r#"
[[activity]]
id = "fetch-{n}"
for = { n = "1..=1000" }
command = "true"

[[activity]]
id = "late"
command = "true"
after = ["fetch-1001", "fetch-0"]
"#,
    );
    let lines: Vec<&str> = message.lines().collect();
    assert_eq!(
        lines,
        [
            "pipeline.toml:10:10: `late` runs after `fetch-1001`, which is not an activity of \
             this graph (did you mean `fetch-1000`?)",
            "pipeline.toml:10:24: `late` runs after `fetch-0`, which is not an activity of \
             this graph (did you mean `fetch-1`?)",
        ]
    );
}

#[test]
fn cycles_are_named() {
    let message = error(
        r#"
[[activity]]
id = "a"
command = "true"
after = ["c"]

[[activity]]
id = "b"
command = "true"
after = ["a"]

[[activity]]
id = "c"
command = "true"
after = ["b"]
"#,
    );
    assert!(
        message.contains("the dependencies form a cycle: ")
            && ["a -> b -> c -> a", "b -> c -> a -> b", "c -> a -> b -> c"]
                .iter()
                .any(|c| message.contains(c)),
        "{message}"
    );
    assert!(message.starts_with("pipeline.toml:"), "{message}");
    let own = error("[[activity]]\nid = \"a\"\ncommand = \"true\"\nafter = [\"a\"]\n");
    assert!(own.contains("cycle: a -> a"), "{own}");
}

#[test]
fn duplicate_ids_name_both_places() {
    let message = error(
        "[[activity]]\nid = \"x-1\"\ncommand = \"true\"\n\n[[activity]]\nid = \"x-{i}\"\nfor = { i = \"1..=2\" }\ncommand = \"true\"\n",
    );
    assert_eq!(
        message,
        "pipeline.toml:6:6: duplicate id `x-1`: entry 1 already has it (line 1)"
    );
}

#[test]
fn each_class_of_bad_file_gets_a_clear_message() {
    let cases = [
        ("[[activity]]\nid = \"a\"\n", "pipeline.toml:2:6: `a` has neither `command` nor `script`"),
        (
            "[[activity]]\nid = \"a\"\ncommand = \"x\"\nscript = \"y\"\n",
            "pipeline.toml:4:10: `a` has both `command` and `script`; give one",
        ),
        (
            "[[activity]]\nid = \"a-{pair\"\nfor = { pair = \"1..=2\" }\ncommand = \"x\"\n",
            "pipeline.toml:2:6: in `id`: `{` at byte 2 is never closed",
        ),
        (
            "[[activity]]\nid = \"a-{pari}\"\nfor = { pair = \"1..=2\" }\ncommand = \"x\"\n",
            "pipeline.toml:2:6: in `id`: unknown placeholder `{pari}`; this entry defines `{pair}`",
        ),
        (
            "[[activity]]\nid = \"a\"\ncommand = \"x\"\nargs = [\"{i}\"]\n",
            "pipeline.toml:4:8: in `args`: unknown placeholder `{i}`; this entry defines no variables",
        ),
        (
            "[[activity]]\nid = \"a\"\ncommand = \"x\"\ncontext = \"size=big\"\n",
            "pipeline.toml:4:11: bad context `size=big`: bad rank",
        ),
        (
            "[[activity]]\nid = \"a\"\ncommand = \"x\"\ntimeout = \"ten minutes\"\n",
            "pipeline.toml:4:11: bad duration `ten minutes`",
        ),
        (
            "[[activity]]\nid = \"a-{i}\"\nfor = { i = \"1-5\" }\ncommand = \"x\"\n",
            "pipeline.toml:3:7: sweep variable `i`: `1-5` is not a range",
        ),
        (
            "[[activity]]\nid = \"a-{i}\"\nfor = { i = \"0..=2000000\" }\ncommand = \"x\"\n",
            "has more than 1000000 values",
        ),
        (
            "[[activity]]\nid = \"a\"\ncommand = \"x\"\nretires = 3\n",
            "pipeline.toml:4:1: unknown field `retires`",
        ),
        ("[[activity]]\nid = \"a\"\ncommand = \n", "pipeline.toml:3:11:"),
        ("", "pipeline.toml: the graph has no `[[activity]]` entries"),
    ];
    for (text, expected) in cases {
        let message = error(text);
        assert!(
            message.contains(expected),
            "for\n{text}\nexpected {expected:?}\n     got {message:?}"
        );
    }
}

#[test]
fn ids_that_cannot_name_a_folder_are_rejected_where_they_are_written() {
    // A 100,000-character id passed the check and failed at run time with
    // "File name too long".
    let long = format!(
        "[[activity]]\nid = \"ok\"\ncommand = \"true\"\n\n[[activity]]\nid = \"{}\"\ncommand = \"true\"\n",
        "x".repeat(100_000)
    );
    let message = error(&long);
    assert!(
        message.starts_with("pipeline.toml:6:6: the id `xxxx")
            && message.ends_with("has 100000 bytes; at most 200 are allowed"),
        "{message}"
    );
    assert!(message.len() < 200, "the message repeats the id: {message}");
    // Exactly the limit is fine, in bytes: 100 two-byte letters.
    parse(&format!(
        "[[activity]]\nid = \"{}\"\ncommand = \"true\"\n",
        "α".repeat(100)
    ))
    .unwrap();
    let message = error(&format!(
        "[[activity]]\nid = \"{}a\"\ncommand = \"true\"\n",
        "α".repeat(100)
    ));
    assert!(
        message.starts_with("pipeline.toml:2:6: the id `ααα"),
        "{message}"
    );
    // Control characters, written as escapes or arriving from a sweep.
    assert_eq!(
        error("[[activity]]\nid = \"a\\tb\"\ncommand = \"true\"\n"),
        "pipeline.toml:2:6: the id \"a\\tb\" contains the control character '\\t'; ids are printable text"
    );
    assert_eq!(
        error("[[activity]]\nid = \"x-{v}\"\nfor = { v = [\"ok\", \"new\\nline\"] }\ncommand = \"true\"\n"),
        "pipeline.toml:2:6: the id \"x-new\\nline\" contains the control character '\\n'; ids are printable text"
    );
    // Odd but usable ids pass: their output folders are told apart.
    let graph =
        parse("[[activity]]\nid = \"a/b\"\ncommand = \"true\"\n\n[[activity]]\nid = \"a_b\"\ncommand = \"true\"\n").unwrap();
    assert_eq!(graph.len(), 2);
}

#[test]
fn sweep_values_in_scripts_are_quoted_and_misplaced_placeholders_are_errors() {
    let graph = parse(
        "[[activity]]\nid = \"s-{v}\"\nfor = { v = [\"x; touch pwned\", \"7\"] }\nscript = \"echo {v} > out; {v:raw}\"\n",
    )
    .unwrap();
    let text = |n: usize| match graph.spec(n).program {
        executors::shell::Program::Script { text, .. } => text,
        other => panic!("{other:?}"),
    };
    assert_eq!(text(0), "echo 'x; touch pwned' > out; x; touch pwned");
    assert_eq!(text(1), "echo 7 > out; 7");
    let cases = [
        (
            "[[activity]]\nid = \"a-{v}\"\nfor = { v = [\"1\"] }\nscript = \"echo \\\"{v}\\\"\"\n",
            "pipeline.toml:4:10: in `script`: `{v}` is inside \"…\" quotes in the script",
        ),
        (
            "[[activity]]\nid = \"a-{v}\"\nfor = { v = [\"1\"] }\nscript = '''\nset -e\ncat <<EOF\n{v}\nEOF\n'''\n",
            "pipeline.toml:4:10: in `script`: `{v}` is in a here-document",
        ),
        (
            "[[activity]]\nid = \"a-{v}\"\nfor = { v = [\"1\"] }\ncommand = \"x\"\nargs = [\"{v:raw}\"]\n",
            "pipeline.toml:5:8: in `args`: `{v:raw}` only means something in `script`",
        ),
        (
            "[[activity]]\nid = \"a-{v:raw}\"\nfor = { v = [\"1\"] }\ncommand = \"x\"\n",
            "pipeline.toml:2:6: in `id`: `{v:raw}` only means something in `script`",
        ),
        (
            "[[activity]]\nid = \"a-{v}\"\nfor = { v = [\"1\"] }\nscript = \"echo {v:shell}\"\n",
            "pipeline.toml:4:10: in `script`: bad placeholder `{v:shell}`: the only form after `:` is `raw`",
        ),
    ];
    for (text, expected) in cases {
        let message = error(text);
        assert!(
            message.contains(expected),
            "for\n{text}\nexpected {expected:?}\n     got {message:?}"
        );
    }
}

#[test]
fn every_error_in_a_file_is_reported_at_once() {
    let message = error(
        "[[activity]]\nid = \"a\"\n\n[[activity]]\nid = \"b\"\ncommand = \"x\"\ntimeout = -1\n",
    );
    assert_eq!(message.lines().count(), 2, "{message}");
}

#[test]
fn a_missing_file_says_so() {
    let message = Graph::load(Path::new("/nonexistent/pipeline.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        message.starts_with("/nonexistent/pipeline.toml: cannot read the graph file"),
        "{message}"
    );
}

#[test]
fn an_activity_reading_a_file_runs_after_the_one_writing_it() {
    let graph = parse(
        r#"
[[activity]]
id = "b"
script = "cat x.txt"
inputs = ["x.txt"]

[[activity]]
id = "a"
script = "echo hi > x.txt"
outputs = ["./x.txt"]

[[activity]]
id = "c-{i}"
for = { i = "1..=2" }
script = "cat ../part-{i}"
cwd = "sub"
inputs = ["../part-{i}"]

[[activity]]
id = "part-{i}"
for = { i = "1..=2" }
script = "echo {i} > part-{i}"
outputs = ["part-{i}"]
"#,
    )
    .unwrap();
    let index = |id: &str| node(&graph, id);
    assert_eq!(after(&graph, "b"), [index("a")]);
    assert!(after(&graph, "a").is_empty());
    // `sub/../part-2` is `part-2`.
    assert_eq!(after(&graph, "c-2"), [index("part-2")]);
    let order = graph.topological_order();
    let at = |id: &str| order.iter().position(|&n| n == index(id)).unwrap();
    assert!(at("a") < at("b") && at("part-1") < at("c-1"), "{order:?}");
}

#[test]
fn two_activities_writing_one_file_are_an_error_naming_both() {
    let message = error(
        "[[activity]]\nid = \"a\"\ncommand = \"true\"\noutputs = [\"out/x.txt\"]\n\n\
         [[activity]]\nid = \"b-{i}\"\nfor = { i = \"1..=3\" }\ncommand = \"true\"\ncwd = \"out\"\noutputs = [\"x.txt\"]\n",
    );
    // One error for the pair of entries, not one per instance.
    assert_eq!(
        message,
        "pipeline.toml:11:11: `b-1` writes `x.txt`, and so does `a` at pipeline.toml:4:11: \
         give each file one producer"
    );
}

#[test]
fn a_cycle_through_files_names_each_link_with_its_place() {
    let message = error(
        "[[activity]]\nid = \"a\"\ncommand = \"true\"\ninputs = [\"y\"]\noutputs = [\"x\"]\n\n\
         [[activity]]\nid = \"b\"\ncommand = \"true\"\nafter = [\"a\"]\noutputs = [\"y\"]\n",
    );
    assert_eq!(
        message,
        "pipeline.toml:10:9: the dependencies form a cycle: b -> a -> b; \
         `b` at pipeline.toml:10:9, `a` at pipeline.toml:4:10 (it reads `y`, which `b` writes)",
    );
}

#[test]
fn file_dependencies_stay_linear_on_a_large_sweep() {
    // 100,000 writers, a reader of each, and one activity after all of
    // them: a scan per file or per dependency would take hours here.
    let text = r#"
[[activity]]
id = "w-{i}"
for = { i = "1..=100000" }
command = "true"
outputs = ["data/{i}.out"]

[[activity]]
id = "r-{i}"
for = { i = "1..=100000" }
command = "true"
inputs = ["data/{i}.out"]

[[activity]]
id = "r"
command = "true"
after = ["w-*"]
inputs = ["data/1.out", "data/100000.out"]
"#;
    let started = std::time::Instant::now();
    let graph = parse(text).unwrap();
    assert_eq!(after(&graph, "r").len(), 100_000);
    assert_eq!(after(&graph, "r-7"), [6]);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn each_activity_knows_where_it_is_written() {
    let graph = parse(
        "[[activity]]\nid = \"plain\"\ncommand = \"true\"\n\n\
         [[activity]]\nid = \"k-{i}\"\nfor = { i = \"1..=2\" }\ncommand = \"true\"\ncontext = \"gpu\"\n",
    )
    .unwrap();
    // At the context, or at the id when there is none.
    assert_eq!(graph.place(0), "pipeline.toml:2:6");
    assert_eq!(graph.place(2), "pipeline.toml:9:11");
    let json = Graph::parse(
        r#"{"activity": [{"id": "a", "command": "true", "context": "gpu"}]}"#,
        Format::Json,
        "g.json",
        Path::new("."),
    )
    .unwrap();
    assert_eq!(json.place(0), "g.json: activity 1 (`a`)");
}
