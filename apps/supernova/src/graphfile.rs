//! The many-task version as a graph file for `constellation run`: the same
//! steps, each a script in `scripts/supernova/` that calls `supernova step`.
//!
//! Each step is one `[[activity]]` entry with a `for` sweep over the pairs
//! (and over the epochs for steps 2, 3, 5 and 6, over the tiles for 7.2),
//! not one entry per activity: the file stays small for a thousand pairs,
//! and `constellation run`'s end-of-run table has one row per step, since
//! it groups activities by the entry's id template. Sweep values form a
//! cross product and contexts are not templated, so pairs are grouped: one
//! entry per step for each distinct context (a single group for the
//! default `anywhere`), and one 7.2 entry for each distinct tile count
//! within it. Every entry of one step has the same id template.
//!
//! The tiles step 7.2 will compare are only known after step 7.1, but how
//! many tiles an image has is known from its size; the graph has one
//! compare activity per tile, and a tile that 7.1 did not keep is a no-op.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use crate::contexts::Placement;
use crate::manifest::Manifest;
use crate::tiles;

/// What the graph needs to know besides the manifest.
pub struct GraphOptions {
    /// The dataset directory.
    pub dataset: PathBuf,
    /// Where work directories go.
    pub work_root: PathBuf,
    /// Where step 8 writes candidate lists.
    pub results: PathBuf,
    /// The directory holding the step scripts.
    pub scripts: PathBuf,
    /// The `supernova` binary the scripts call.
    pub binary: PathBuf,
    /// Which context strategy the nodes carry.
    pub placement: Placement,
}

/// TOML basic string with `\` and `"` escaped.
fn quoted(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// `text` as template text that renders to itself: every field but the
/// context is a template in a swept entry, and paths may contain braces.
fn literal(text: &str) -> String {
    text.replace('{', "{{").replace('}', "}}")
}

/// A path as literal template text.
fn literal_path(path: &Path) -> String {
    literal(&path.display().to_string())
}

/// A TOML array of quoted strings.
fn list<S: AsRef<str>>(items: &[S]) -> String {
    let items: Vec<String> = items.iter().map(|i| quoted(i.as_ref())).collect();
    format!("[{}]", items.join(", "))
}

/// Pairs that can share an entry: the same context and, for step 7.2, the
/// same number of tiles.
struct Group<'a> {
    context: String,
    /// Pair ids by tile count, each in manifest order.
    by_tiles: Vec<(usize, Vec<&'a str>)>,
}

impl Group<'_> {
    fn pairs(&self) -> Vec<&str> {
        let mut pairs: Vec<&str> = self
            .by_tiles
            .iter()
            .flat_map(|(_, ids)| ids.iter().copied())
            .collect();
        pairs.sort_unstable();
        pairs
    }
}

/// The manifest's pairs grouped by context, then by tile count, each in
/// order of first appearance.
fn groups<'a>(manifest: &'a Manifest, placement: Placement) -> Vec<Group<'a>> {
    let mut groups: Vec<Group> = Vec::new();
    for pair in &manifest.pairs {
        let context = placement
            .activity_context(pair)
            .to_string()
            .replace(' ', "");
        let tiles = tiles::count(pair.width, pair.height, &Default::default());
        let group = match groups.iter().position(|g| g.context == context) {
            Some(at) => &mut groups[at],
            None => {
                groups.push(Group {
                    context,
                    by_tiles: Vec::new(),
                });
                groups.last_mut().unwrap()
            }
        };
        match group.by_tiles.iter_mut().find(|(count, _)| *count == tiles) {
            Some((_, ids)) => ids.push(&pair.id),
            None => group.by_tiles.push((tiles, vec![&pair.id])),
        }
    }
    groups
}

/// One `[[activity]]` entry of the graph.
struct Entry<'a> {
    /// The id template, e.g. `{pair}-detect-{epoch}`.
    id: &'a str,
    /// The step script's file name.
    script: &'a str,
    /// Argument templates.
    args: Vec<String>,
    /// Dependency templates.
    after: Vec<&'a str>,
    /// The sweep's variables, as TOML values, in the order written.
    sweep: Vec<(&'a str, String)>,
}

/// Writes the graph's entries for one group of pairs.
struct Writer<'a> {
    out: String,
    options: &'a GraphOptions,
}

impl Writer<'_> {
    fn entry(&mut self, entry: Entry, context: &str) {
        let options = self.options;
        let out = &mut self.out;
        let _ = writeln!(out, "[[activity]]\nid = {}", quoted(entry.id));
        let sweep: Vec<String> = (entry.sweep.iter())
            .map(|(name, values)| format!("{name} = {values}"))
            .collect();
        let _ = writeln!(out, "for = {{ {} }}", sweep.join(", "));
        let script = literal_path(&options.scripts.join(entry.script));
        let _ = writeln!(out, "command = {}", quoted(&script));
        let _ = writeln!(out, "args = {}", list(&entry.args));
        let binary = literal_path(&options.binary);
        let _ = writeln!(out, "env = {{ SUPERNOVA = {} }}", quoted(&binary));
        let _ = writeln!(out, "context = {}", quoted(context));
        if !entry.after.is_empty() {
            let _ = writeln!(out, "after = {}", list(&entry.after));
        }
        out.push('\n');
    }
}

/// What the entries of one group share: its pairs as a sweep, the work
/// directory template and the epochs.
struct Sweeps {
    pairs: String,
    work: String,
    epochs: String,
}

impl Sweeps {
    /// A sweep over the group's pairs, then `extra`.
    fn by_pair(&self, extra: &[(&'static str, String)]) -> Vec<(&'static str, String)> {
        let mut sweep = vec![("pair", self.pairs.clone())];
        sweep.extend(extra.iter().cloned());
        sweep
    }

    /// `--work` with the pair's work directory, then `more`.
    fn on_work(&self, more: &[&str]) -> Vec<String> {
        let mut args = vec!["--work".to_string(), self.work.clone()];
        args.extend(more.iter().map(|a| a.to_string()));
        args
    }
}

impl Writer<'_> {
    /// From preparing the pair up to splitting it into tiles.
    fn steps_before_compare(&mut self, sweeps: &Sweeps, context: &str) {
        self.entry(
            Entry {
                id: "{pair}-prepare",
                script: "prepare.sh",
                args: vec![
                    "--data".into(),
                    literal_path(&self.options.dataset),
                    "--pair".into(),
                    "{pair}".into(),
                    "--work".into(),
                    sweeps.work.clone(),
                ],
                after: vec![],
                sweep: sweeps.by_pair(&[]),
            },
            context,
        );
        self.entry(
            Entry {
                id: "{pair}-detect-{epoch}",
                script: "detect.sh",
                args: sweeps.on_work(&["--epoch", "{epoch}"]),
                after: vec!["{pair}-prepare"],
                sweep: sweeps.by_pair(&[("epoch", sweeps.epochs.clone())]),
            },
            context,
        );
        self.entry(
            Entry {
                id: "{pair}-align",
                script: "align.sh",
                args: sweeps.on_work(&[]),
                after: vec!["{pair}-detect-a", "{pair}-detect-b"],
                sweep: sweeps.by_pair(&[]),
            },
            context,
        );
        self.entry(
            Entry {
                id: "{pair}-equalize-{epoch}",
                script: "equalize.sh",
                args: sweeps.on_work(&["--epoch", "{epoch}"]),
                after: vec!["{pair}-align"],
                sweep: sweeps.by_pair(&[("epoch", sweeps.epochs.clone())]),
            },
            context,
        );
        self.entry(
            Entry {
                id: "{pair}-split",
                script: "split.sh",
                args: sweeps.on_work(&[]),
                after: vec!["{pair}-equalize-a", "{pair}-equalize-b"],
                sweep: sweeps.by_pair(&[]),
            },
            context,
        );
    }

    /// The tile comparisons (7.2): one entry per tile count of the group.
    fn compare_steps(&mut self, group: &Group, sweeps: &Sweeps, context: &str) {
        for (count, ids) in &group.by_tiles {
            self.entry(
                Entry {
                    id: "{pair}-compare-{tile}",
                    script: "compare.sh",
                    args: sweeps.on_work(&["--tile", "{tile}"]),
                    after: vec!["{pair}-split"],
                    sweep: vec![
                        ("pair", list(ids)),
                        ("tile", quoted(&format!("0..{count}"))),
                    ],
                },
                context,
            );
        }
    }

    /// Recombining the tiles, extracting the candidates, and the cleanup.
    fn steps_after_compare(&mut self, sweeps: &Sweeps, context: &str) {
        self.entry(
            Entry {
                id: "{pair}-recombine",
                script: "recombine.sh",
                args: sweeps.on_work(&[]),
                // Every tile of the pair: the ids end in the tile number.
                after: vec!["{pair}-compare-*"],
                sweep: sweeps.by_pair(&[]),
            },
            context,
        );
        self.entry(
            Entry {
                id: "{pair}-extract",
                script: "extract.sh",
                args: sweeps.on_work(&[
                    "--pair",
                    "{pair}",
                    "--results",
                    &literal_path(&self.options.results),
                ]),
                after: vec!["{pair}-recombine"],
                sweep: sweeps.by_pair(&[]),
            },
            context,
        );
        self.entry(
            Entry {
                id: "{pair}-cleanup",
                script: "cleanup.sh",
                args: sweeps.on_work(&[]),
                after: vec!["{pair}-extract"],
                sweep: sweeps.by_pair(&[]),
            },
            context,
        );
    }
}

/// The graph file's text for every pair of `manifest`.
pub fn graph(manifest: &Manifest, options: &GraphOptions) -> String {
    let mut writer = Writer {
        out: String::new(),
        options,
    };
    let _ = writeln!(
        writer.out,
        "# The supernova pipeline (many-task version) for {} pairs of {}.\n\
         # Generated by `supernova graph`; run with `constellation run`.\n\
         # One entry per step (per context and, for 7.2, per tile count),\n\
         # swept over the pairs.\n",
        manifest.pairs.len(),
        options.dataset.display()
    );
    let work = format!("{}/{{pair}}", literal_path(&options.work_root));
    let epochs = list(&["a", "b"]);
    for group in groups(manifest, options.placement) {
        let sweeps = Sweeps {
            pairs: list(&group.pairs()),
            work: work.clone(),
            epochs: epochs.clone(),
        };
        let context = group.context.as_str();
        writer.steps_before_compare(&sweeps, context);
        writer.compare_steps(&group, &sweeps, context);
        writer.steps_after_compare(&sweeps, context);
    }
    writer.out
}
