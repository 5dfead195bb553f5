//! Graphs of 100,000 activities: built lazily, with dependencies kept per
//! template pair where the file allows it. Counts, not timings: a graph
//! that expanded every activity or every edge would show it in the counts
//! the graph exposes.

use std::path::Path;

use executors::shell::Program;
use graph::{Format, Graph};

fn parse(text: &str) -> Graph {
    Graph::parse(text, Format::Toml, "pipeline.toml", Path::new("."))
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_sweep_of_100k_renders_ids_and_specs_at_both_ends() {
    let graph = parse(
        r#"
[[activity]]
id = "prepare"
command = "true"

[[activity]]
id = "work-{band}-{n}"
for = { band = ["r", "i"], n = "1..=50000" }
script = "process {n} > out/{band}-{n}.txt"
args = ["ignored"]
env = { BAND = "{band}" }
cwd = "work/{band}"
context = "cpu|anywhere"
timeout = "1m"
retries = 1
after = ["prepare"]
"#,
    );
    assert_eq!(graph.len(), 1 + 100_000);
    assert_eq!(graph.kinds(), ["prepare", "work-{band}-{n}"]);
    // Variables in name order, the last changing fastest: `n` within `band`.
    let ends = [
        (1, "work-r-1"),
        (50_000, "work-r-50000"),
        (50_001, "work-i-1"),
        (100_000, "work-i-50000"),
    ];
    for (n, id) in ends {
        assert_eq!(graph.id(n), id);
        assert_eq!(graph.index_of(id), Some(n));
        assert_eq!(graph.kind(n), "work-{band}-{n}");
    }
    assert_eq!(graph.index_of("work-i-50001"), None);
    let last = graph.spec(100_000);
    match &last.program {
        Program::Script { text, .. } => assert_eq!(text, "process 50000 > out/i-50000.txt"),
        other => panic!("{other:?}"),
    }
    assert_eq!(last.name.as_deref(), Some("work-i-50000"));
    assert_eq!(last.env.get("BAND").map(String::as_str), Some("i"));
    assert_eq!(last.cwd.as_deref(), Some(Path::new("work/i")));
    assert_eq!(last.context.to_string(), "cpu | anywhere");
    assert_eq!(last.retry.max_attempts, 2);
    assert_eq!(graph.spec(1).env.get("BAND").map(String::as_str), Some("r"));
    // One context for the whole sweep, plus `prepare`'s.
    assert_eq!(graph.contexts().len(), 2);
    assert_eq!(graph.context_of(1), graph.context_of(100_000));
    // `after = ["prepare"]` is one group with one member and one
    // consuming entry, not 100,000 edges.
    assert_eq!(graph.group_count(), 1);
    assert_eq!(graph.edge_count(), 2);
    assert_eq!(graph.dependencies(77_777).collect::<Vec<_>>(), [0]);
    // Hashes differ between activities and are stable.
    assert_ne!(graph.spec_hash(1), graph.spec_hash(2));
    assert_eq!(graph.spec_hash(100_000), parse_again_hash());
}

/// The last activity's hash from a second parse of the same file: a hash
/// depends on what the activity does, not on where it is in memory.
fn parse_again_hash() -> u64 {
    let graph = parse(
        r#"
[[activity]]
id = "work-{band}-{n}"
for = { band = ["i"], n = "50000..=50000" }
script = "process {n} > out/{band}-{n}.txt"
args = ["ignored"]
env = { BAND = "{band}" }
cwd = "work/{band}"
context = "cpu|anywhere"
timeout = "1m"
retries = 1
after = ["prepare"]

[[activity]]
id = "prepare"
command = "true"
"#,
    );
    graph.spec_hash(0)
}

#[test]
fn a_fan_in_through_a_glob_is_one_group() {
    // 1,000 activities after each of 1,000: as edges, 1,000,000 of them;
    // as a group, 1,000 members and one consuming entry.
    let graph = parse(
        r#"
[[activity]]
id = "a-{i}"
for = { i = "1..=1000" }
command = "true"

[[activity]]
id = "b-{j}"
for = { j = "1..=1000" }
command = "true"
after = ["a-*"]
"#,
    );
    assert_eq!(graph.group_count(), 1);
    assert_eq!(graph.edge_count(), 1_000 + 1);
    let b = graph.index_of("b-500").unwrap();
    let after: Vec<usize> = graph.dependencies(b).collect();
    assert_eq!(after, (0..1_000).collect::<Vec<_>>());
    let order = graph.topological_order();
    assert_eq!(order.len(), 2_000);
    let first_b = order.iter().position(|&n| n >= 1_000).unwrap();
    assert!(
        order[first_b..].iter().all(|&n| n >= 1_000),
        "an `a` after a `b`"
    );
    // A resume skips a `b` only if every `a` is skipped.
    let mut done = vec![true; 2_000];
    assert!(graph.skippable(&done).iter().all(|&s| s));
    done[999] = false;
    let skip = graph.skippable(&done);
    assert_eq!(skip.iter().filter(|&&s| s).count(), 999);
}

#[test]
fn templated_dependencies_at_100k_resolve_each_to_its_partner() {
    let graph = parse(
        r#"
[[activity]]
id = "b-{n}"
for = { n = "1..=100000" }
command = "true"
after = ["a-{n}"]

[[activity]]
id = "a-{n}"
for = { n = "1..=100000" }
command = "true"
"#,
    );
    assert_eq!(graph.group_count(), 0);
    assert_eq!(graph.edge_count(), 100_000);
    for n in [1, 2, 50_000, 99_999, 100_000] {
        let b = graph.index_of(&format!("b-{n}")).unwrap();
        let after: Vec<&str> = graph.dependencies(b).map(|d| graph.id(d)).collect();
        assert_eq!(after, [format!("a-{n}")]);
    }
    // Every `a` comes out before its `b`, though the file lists `b` first.
    let order = graph.topological_order();
    assert_eq!(order.len(), 200_000);
    let mut position = vec![0; order.len()];
    for (k, &n) in order.iter().enumerate() {
        position[n] = k;
    }
    assert!((0..100_000).all(|b| position[b + 100_000] < position[b]));
}

#[test]
fn templated_globs_match_among_ids_that_share_their_prefix() {
    // `sum-{g}` after `part-{g}-*`: each sum after its own group's parts,
    // found through the sorted ids, never another group's.
    let graph = parse(
        r#"
[[activity]]
id = "part-{g}-{k}"
for = { g = "1..=100", k = "1..=100" }
command = "true"

[[activity]]
id = "sum-{g}"
for = { g = "1..=100" }
command = "true"
after = ["part-{g}-*"]
"#,
    );
    assert_eq!(graph.edge_count(), 10_000);
    let sum = graph.index_of("sum-1").unwrap();
    let mut after: Vec<&str> = graph.dependencies(sum).map(|d| graph.id(d)).collect();
    after.sort_unstable();
    assert_eq!(after.len(), 100, "{after:?}");
    assert!(
        after.iter().all(|id| id.starts_with("part-1-")),
        "{after:?}"
    );
}
