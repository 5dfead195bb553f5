//! Files as dependencies: an activity that reads a file runs after the
//! one that writes it, with paths compared as the activities resolve them.

use std::collections::{HashMap, HashSet};
use std::path::{Component, Path, PathBuf};

use super::deps::{dedup_sorted, Csr};
use super::errors::Errors;
use super::Graph;
use crate::file::RawGraph;

impl Graph {
    /// Makes every activity that reads a file run after the one that
    /// writes it, and refuses a file written by two activities: which
    /// version a reader got would depend on timing. Paths are compared as
    /// the activities resolve them: relative to their `cwd`, with `.` and
    /// `..` taken out (symbolic links are not followed: nothing exists yet).
    /// Costs nothing when no entry has `outputs`.
    ///
    /// Returns the edges it added, (reader, writer), with the file, for
    /// naming a cycle they close.
    pub(super) fn add_file_dependencies(
        &mut self,
        raw: &RawGraph,
        errors: &mut Errors,
    ) -> HashMap<(u32, u32), PathBuf> {
        let mut read_from = HashMap::new();
        if self.entries.iter().all(|e| e.outputs.is_empty()) {
            return read_from;
        }
        let mut writer: HashMap<PathBuf, u32> = HashMap::new();
        // A sweep writing one file from every instance would repeat the
        // same error thousands of times: one per pair of entries.
        let mut reported: HashSet<(usize, usize)> = HashSet::new();
        for (k, entry) in self.entries.iter().enumerate() {
            if entry.outputs.is_empty() {
                continue;
            }
            for n in self.starts[k]..self.starts[k + 1] {
                let n = n as usize;
                let cwd = self.cwd(n);
                for output in self.outputs(n) {
                    let file = resolved_path(cwd.as_deref(), &output);
                    match writer.get(&file) {
                        Some(&first) if first as usize != n => {
                            let first = first as usize;
                            let first_entry = self.kind_of(first);
                            if reported.insert((first_entry, k)) {
                                let message = format!(
                                    "`{}` writes `{}`, and so does `{}` at {}: give each file one producer",
                                    self.id(n),
                                    output.display(),
                                    self.id(first),
                                    errors.place(
                                        first_entry,
                                        "outputs",
                                        &raw.activities[first_entry].id
                                    )
                                );
                                errors.at_field(k, &raw.activities[k], "outputs", message);
                            }
                        }
                        Some(_) => {}
                        None => {
                            writer.insert(file, n as u32);
                        }
                    }
                }
            }
        }
        if writer.is_empty() || !errors.list.is_empty() {
            return read_from;
        }
        let mut after = Csr::new(self.len());
        for (k, entry) in self.entries.iter().enumerate() {
            for n in self.starts[k]..self.starts[k + 1] {
                let base = after.targets.len();
                let before = self.after.of(n as usize);
                after.targets.extend_from_slice(before);
                if !entry.inputs.is_empty() {
                    let cwd = self.cwd(n as usize);
                    for input in self.inputs(n as usize) {
                        let file = resolved_path(cwd.as_deref(), &input);
                        if let Some(&from) = writer.get(&file) {
                            // Reading a file it writes itself is updating
                            // it in place.
                            if from != n && before.binary_search(&from).is_err() {
                                after.targets.push(from);
                                read_from.entry((n, from)).or_insert(input.clone());
                            }
                        }
                    }
                }
                let list = &mut after.targets[base..];
                if list.len() > before.len() {
                    list.sort_unstable();
                    let kept = dedup_sorted(list);
                    after.targets.truncate(base + kept);
                }
                after.close();
            }
        }
        self.after = after;
        read_from
    }
}

/// `path` as an activity with working directory `cwd` opens it, written
/// plainly: `work/./a/../x` and `work/x` are one file. Relative paths stay
/// relative to the directory the run starts in.
pub(super) fn resolved_path(cwd: Option<&Path>, path: &Path) -> PathBuf {
    let joined = match cwd {
        Some(dir) if path.is_relative() => dir.join(path),
        _ => path.to_path_buf(),
    };
    let mut plain = PathBuf::new();
    for component in joined.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => match plain.components().next_back() {
                Some(Component::Normal(_)) => {
                    plain.pop();
                }
                // `/..` is `/`.
                Some(Component::RootDir | Component::Prefix(_)) => {}
                _ => plain.push(".."),
            },
            other => plain.push(other),
        }
    }
    plain
}
