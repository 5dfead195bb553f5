//! Resolving `after` items into dependencies: items without placeholders
//! once per entry into shared groups, the others per activity, and names
//! that match nothing into errors with a suggestion.

use std::collections::HashMap;

use super::deps::{dedup_sorted, Csr, Group};
use super::errors::Errors;
use super::fields::glob_match;
use super::{Entry, Graph};
use crate::file::RawGraph;
use crate::suggest::Suggestions;
use crate::template::Template;

impl Graph {
    /// Resolves every `after` item: those without placeholders once per
    /// entry into groups, the others per activity. Names that match
    /// nothing are errors, one per entry and item, with a suggestion.
    pub(super) fn resolve_after(&mut self, raw: &RawGraph, errors: &mut Errors) {
        let mut unknown: Vec<UnknownAfter> = Vec::new();
        // Groups by text (and the node a lone activity's glob leaves out).
        let mut group_at: HashMap<(String, Option<u32>), u32> = HashMap::new();
        for e in 0..self.entries.len() {
            let (start, end) = (self.starts[e], self.starts[e + 1]);
            let mut groups = Vec::new();
            for (item, template) in self.entries[e].after.iter().enumerate() {
                if template.has_placeholders() {
                    continue;
                }
                let name = template.render_by(|_| "");
                // A glob leaves out the activity itself; with many
                // activities in the entry the group keeps them, and the
                // cycle they make is reported.
                let excluded = (name.contains('*') && end - start == 1).then_some(start);
                let key = (name, excluded);
                let group = match group_at.get(&key) {
                    Some(&g) => Some(g),
                    None => {
                        let group = self.resolve_group(&key.0, excluded);
                        (group.size > 0).then(|| {
                            self.groups.push(group);
                            let g = (self.groups.len() - 1) as u32;
                            group_at.insert(key.clone(), g);
                            g
                        })
                    }
                };
                match group {
                    Some(g) => {
                        self.groups[g as usize].consumers.push(e as u32);
                        groups.push(g);
                    }
                    None => unknown.push(UnknownAfter {
                        node: start as usize,
                        item,
                        dependency: key.0.clone(),
                        more: (end - start - 1) as usize,
                        last: (end - start > 1).then(|| ((end - 1) as usize, key.0)),
                    }),
                }
            }
            groups.sort_unstable();
            groups.dedup();
            self.entries[e].groups = groups;
        }
        let mut memberships: Vec<(u32, u32)> = (self.groups.iter().enumerate())
            .flat_map(|(g, group)| group.nodes().map(move |n| (n as u32, g as u32)))
            .collect();
        memberships.sort_unstable();
        self.memberships = memberships;

        if self.entries.iter().any(Entry::has_placeholder_after) {
            self.resolve_per_activity(&mut unknown);
        }
        if unknown.is_empty() {
            return;
        }
        unknown.sort_by_key(|u| (u.node, u.item));
        let suggestions = Suggestions::new((0..self.len()).map(|n| self.id(n)), self.len(), |id| {
            self.index_of(id).map(|n| self.id(n))
        });
        for u in unknown {
            let entry_index = self.kind_of(u.node);
            let hint = (suggestions.suggest(&u.dependency))
                .map(|c| format!(" (did you mean `{c}`?)"))
                .unwrap_or_default();
            let what = if u.dependency.contains('*') {
                "matches no activity"
            } else {
                "is not an activity of this graph"
            };
            let others = match (&u.last, u.more) {
                (Some((m, last)), 1) => format!("; so does `{}` (after `{last}`)", self.id(*m)),
                (Some((m, last)), more) => format!(
                    "; so do {more} more of this entry's activities, up to `{}` (after `{last}`)",
                    self.id(*m)
                ),
                (None, _) => String::new(),
            };
            let message = format!(
                "`{}` runs after `{}`, which {what}{hint}{others}",
                self.id(u.node),
                u.dependency
            );
            let entry = &raw.activities[entry_index];
            errors.at_after_item(entry_index, entry, u.item, message);
        }
    }

    /// The nodes `name` (an id, or a glob) names, leaving out `excluded`:
    /// one pass over the ids.
    fn resolve_group(&self, name: &str, excluded: Option<u32>) -> Group {
        let mut group = Group::default();
        if name.contains('*') {
            for n in 0..self.len() as u32 {
                if Some(n) != excluded && glob_match(name, self.id(n as usize)) {
                    group.push(n);
                }
            }
        } else if let Some(n) = self.index_of(name) {
            group.push(n as u32);
        }
        group
    }

    /// The `after` items with placeholders, rendered and resolved for each
    /// activity of their entries, into the per-activity lists.
    fn resolve_per_activity(&mut self, unknown: &mut Vec<UnknownAfter>) {
        // Globs with placeholders look among the ids that share their
        // text up to the first `*`, found in the ids sorted.
        let globs = (self.entries.iter()).any(|e| {
            (e.after.iter()).any(|t| t.has_placeholders() && t.render_by(|_| "").contains('*'))
        });
        let sorted: Vec<u32> = if globs {
            let mut sorted: Vec<u32> = (0..self.len() as u32).collect();
            sorted.sort_unstable_by(|&a, &b| self.id(a as usize).cmp(self.id(b as usize)));
            sorted
        } else {
            Vec::new()
        };
        let mut after = Csr::new(self.len());
        let mut unknown_at: HashMap<(usize, usize), usize> = HashMap::new();
        let mut found: Vec<u32> = Vec::new();
        for e in 0..self.entries.len() {
            let entry = &self.entries[e];
            let (start, end) = (self.starts[e], self.starts[e + 1]);
            let templated: Vec<(usize, &Template)> = (entry.after.iter().enumerate())
                .filter(|(_, t)| t.has_placeholders())
                .collect();
            for n in start..end {
                if templated.is_empty() {
                    after.close();
                    continue;
                }
                let digits = entry.digits(n - start);
                let base = after.targets.len();
                for &(item, template) in &templated {
                    let dependency = template.render_by(|name| entry.value(&digits, name));
                    found.clear();
                    if dependency.contains('*') {
                        let prefix = &dependency[..dependency.find('*').unwrap_or(0)];
                        let from = sorted.partition_point(|&m| self.id(m as usize) < prefix);
                        for &m in &sorted[from..] {
                            let id = self.id(m as usize);
                            if !id.starts_with(prefix) {
                                break;
                            }
                            if m != n && glob_match(&dependency, id) {
                                found.push(m);
                            }
                        }
                    } else if let Some(m) = self.index_of(&dependency) {
                        found.push(m as u32);
                    }
                    if found.is_empty() {
                        match unknown_at.entry((e, item)) {
                            std::collections::hash_map::Entry::Occupied(at) => {
                                let first = &mut unknown[*at.get()];
                                first.more += 1;
                                first.last = Some((n as usize, dependency));
                            }
                            std::collections::hash_map::Entry::Vacant(at) => {
                                at.insert(unknown.len());
                                unknown.push(UnknownAfter {
                                    node: n as usize,
                                    item,
                                    dependency,
                                    more: 0,
                                    last: None,
                                });
                            }
                        }
                    }
                    after.targets.extend_from_slice(&found);
                }
                let list = &mut after.targets[base..];
                list.sort_unstable();
                let kept = dedup_sorted(list);
                after.targets.truncate(base + kept);
                after.close();
            }
        }
        self.after = after;
    }
}

/// An `after` item that names no activity: where it is first met, and
/// how many more activities of its entry meet it.
pub(super) struct UnknownAfter {
    /// The first node whose `after` has it.
    node: usize,
    /// Its index in the entry's `after` list.
    item: usize,
    /// The name, rendered for that node.
    dependency: String,
    /// Further nodes of the entry with the same item unknown.
    more: usize,
    /// The last of those, with the name rendered for it.
    last: Option<(usize, String)>,
}
