//! `supernova graph` writes one entry per step, swept over the pairs, and
//! not one entry per activity: the graph is the same work, but compact, and
//! `constellation run`'s end-of-run table has a row per step instead of a
//! row per activity (522 rows for a small dataset before).

mod common;
use common::{constellation_binary, generate, scratch, text, write_graph};

use std::collections::BTreeSet;
use std::process::Command;

use supernova::manifest::Manifest;
use supernova::tiles;

/// The ids of every activity the pipeline has for `manifest`: what the
/// graph must contain, no more and no less.
fn expected_ids(manifest: &Manifest) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    for pair in &manifest.pairs {
        let p = &pair.id;
        for step in [
            "prepare",
            "detect-a",
            "detect-b",
            "align",
            "equalize-a",
            "equalize-b",
            "split",
            "recombine",
            "extract",
            "cleanup",
        ] {
            ids.insert(format!("{p}-{step}"));
        }
        for tile in 0..tiles::count(pair.width, pair.height, &Default::default()) {
            ids.insert(format!("{p}-compare-{tile}"));
        }
    }
    ids
}

/// The step templates, one per row of the end-of-run table.
const TEMPLATES: [&str; 9] = [
    "{pair}-align",
    "{pair}-cleanup",
    "{pair}-compare-{tile}",
    "{pair}-detect-{epoch}",
    "{pair}-equalize-{epoch}",
    "{pair}-extract",
    "{pair}-prepare",
    "{pair}-recombine",
    "{pair}-split",
];

#[test]
fn the_graph_sweeps_each_step_over_the_pairs_and_runs_end_to_end() {
    let dir = scratch("graph-sweeps");
    let data = dir.join("data");
    generate(
        &dir,
        &data,
        "--pairs 3 --seed 11 --min-size 256 --max-size 480",
    );
    let manifest = Manifest::load(&data).unwrap();
    let tile_counts: BTreeSet<usize> = (manifest.pairs.iter())
        .map(|p| tiles::count(p.width, p.height, &Default::default()))
        .collect();
    assert!(
        tile_counts.len() >= 2,
        "the test wants pairs with different tile counts: {tile_counts:?}"
    );

    let graph_file = dir.join("pipeline.toml");
    // Braces in a path must reach the scripts as written, not be taken for
    // placeholders. (Not in the FITS paths: cfitsio has its own syntax.)
    let results = dir.join("results {y}");
    write_graph(&dir, &data, &graph_file, &results);

    // Compact: eight steps once each and step 7.2 once per tile count,
    // every entry a sweep.
    let file = std::fs::read_to_string(&graph_file).unwrap();
    let entries = file.matches("[[activity]]").count();
    assert_eq!(entries, 8 + tile_counts.len(), "{file}");
    assert_eq!(file.matches("\nfor = ").count(), entries, "{file}");

    // The same work: loaded as `constellation run` loads it, the sweeps
    // expand to exactly the activities of one entry per activity.
    let graph = graph::Graph::load(&graph_file).unwrap_or_else(|e| panic!("{e}\n{file}"));
    let ids: BTreeSet<String> = (0..graph.len()).map(|n| graph.id(n).to_string()).collect();
    assert_eq!(ids.len(), graph.len());
    assert_eq!(ids, expected_ids(&manifest));
    let kinds: BTreeSet<&str> = (0..graph.len()).map(|n| graph.kind(n)).collect();
    assert_eq!(kinds, BTreeSet::from(TEMPLATES));
    for n in 0..graph.len() {
        let id = graph.id(n);
        let after: BTreeSet<&str> = graph.dependencies(n).map(|d| graph.id(d)).collect();
        if let Some(pair) = id.strip_suffix("-recombine") {
            let tiles: BTreeSet<&str> = (ids.iter())
                .filter(|id| id.starts_with(&format!("{pair}-compare-")))
                .map(String::as_str)
                .collect();
            assert_eq!(after, tiles, "{id}");
        }
        if let Some((pair, _)) = id.split_once("-compare-") {
            assert_eq!(after, BTreeSet::from([format!("{pair}-split").as_str()]));
        }
    }

    let run = Command::new(constellation_binary())
        .args(["run", graph_file.to_str().unwrap(), "-n", "2"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let shown = text(&run);
    assert!(run.status.success(), "{shown}");
    // The end-of-run table: a row per step, not per activity.
    let rows: Vec<&str> = (shown.lines())
        .skip_while(|line| !line.starts_with("kind "))
        .skip(1)
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .take_while(|row| row.len() == 5 && row[1].parse::<usize>().is_ok())
        .map(|row| row[0])
        .collect();
    assert_eq!(rows, TEMPLATES, "{shown}");
    for pair in &manifest.pairs {
        assert!(
            results.join(format!("{}.json", pair.id)).exists(),
            "no candidates for {}\n{shown}",
            pair.id
        );
        assert!(
            !dir.join("work").join(&pair.id).exists(),
            "cleanup did not run"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
