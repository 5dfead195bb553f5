//! "Did you mean …?" for names in `after` that match no activity, from an
//! index built once per graph.
//!
//! Comparing an unknown name with every id is quadratic when a typo is
//! repeated across a sweep (a sweep of 20,000 took 8 minutes to report).
//! Ids of a sweep share a *shape*, the id with each run of digits replaced
//! by a placeholder (`detect-17` is `detect-#`), and a graph has few
//! shapes however many activities it has. So an unknown name is compared
//! with a bounded number of candidates: the ids next to it in its own
//! shape (`detect-0` → `detect-1`), and, for the shapes nearest to its
//! shape, the id with its numbers put in (`detecd-17` → `detect-17`) and a
//! few of that shape's ids. Graphs with few ids are searched in full.

use std::cell::Cell;
use std::collections::{HashMap, HashSet, VecDeque};

/// Up to this many ids, every id is a candidate, as before the index.
const FEW_IDS: usize = 256;
/// Up to this many shapes, every shape is compared with the name's shape;
/// beyond, only those sharing its first half or its second half (one
/// typo leaves one half intact).
const FEW_SHAPES: usize = 256;
/// Shapes kept per bucket of a first or second half.
const BUCKET_CAP: usize = 128;
/// Ids kept per shape as candidates: its first ones and its last ones.
const SAMPLE: usize = 8;
/// Nearest shapes whose ids are tried.
const NEAR_SHAPES: usize = 4;

/// Stands for a run of digits in a shape. Ids contain no control
/// characters, so it cannot clash with one.
const DIGITS: char = '\0';

/// The ids of one shape that are kept as candidates.
#[derive(Default)]
struct Family<'g> {
    first: Vec<&'g str>,
    last: VecDeque<&'g str>,
}

impl<'g> Family<'g> {
    fn add(&mut self, id: &'g str) {
        if self.first.len() < SAMPLE {
            self.first.push(id);
            return;
        }
        if self.last.len() == SAMPLE {
            self.last.pop_front();
        }
        self.last.push_back(id);
    }

    fn sample(&self) -> impl Iterator<Item = &'g str> + '_ {
        self.first.iter().chain(self.last.iter()).copied()
    }
}

/// Finds a name among a graph's ids and returns the graph's copy.
type Lookup<'g> = Box<dyn Fn(&str) -> Option<&'g str> + 'g>;

/// Suggests known ids, or `after` patterns, for unknown names.
pub(crate) struct Suggestions<'g> {
    /// Every id, when there are at most [`FEW_IDS`].
    few: Vec<&'g str>,
    /// The graph's own copy of an id, if it is one.
    lookup: Lookup<'g>,
    /// The distinct shapes, in the order of their first id.
    shapes: Vec<String>,
    families: Vec<Family<'g>>,
    shape_at: HashMap<String, usize>,
    /// Shapes by their first half and by their second half, when there
    /// are more than [`FEW_SHAPES`].
    by_start: HashMap<String, Vec<usize>>,
    by_end: HashMap<String, Vec<usize>>,
    /// Edit distances computed and ids looked up: the work done.
    comparisons: Cell<usize>,
}

impl<'g> Suggestions<'g> {
    /// The index of `ids` (in graph order, `count` of them); `lookup`
    /// finds a name among them.
    pub(crate) fn new(
        ids: impl Iterator<Item = &'g str>,
        count: usize,
        lookup: impl Fn(&str) -> Option<&'g str> + 'g,
    ) -> Suggestions<'g> {
        let mut suggestions = Suggestions {
            few: Vec::new(),
            lookup: Box::new(lookup),
            shapes: Vec::new(),
            families: Vec::new(),
            shape_at: HashMap::new(),
            by_start: HashMap::new(),
            by_end: HashMap::new(),
            comparisons: Cell::new(0),
        };
        let few = count <= FEW_IDS;
        let mut shape = String::new();
        for id in ids {
            if few {
                suggestions.few.push(id);
            }
            shape_into(id, &mut shape);
            let at = match suggestions.shape_at.get(&shape) {
                Some(&at) => at,
                None => {
                    let at = suggestions.shapes.len();
                    suggestions.shape_at.insert(shape.clone(), at);
                    suggestions.shapes.push(shape.clone());
                    suggestions.families.push(Family::default());
                    at
                }
            };
            suggestions.families[at].add(id);
        }
        if suggestions.shapes.len() > FEW_SHAPES {
            for (at, shape) in suggestions.shapes.iter().enumerate() {
                let chars: Vec<char> = shape.chars().collect();
                let half = chars.len() / 2;
                for (buckets, key) in [
                    (&mut suggestions.by_start, &chars[..half]),
                    (&mut suggestions.by_end, &chars[half..]),
                ] {
                    let key: String = key.iter().collect();
                    let bucket = buckets.entry(key).or_default();
                    if bucket.len() < BUCKET_CAP {
                        bucket.push(at);
                    }
                }
            }
        }
        suggestions
    }

    /// Edit distances computed and ids looked up so far.
    #[cfg(test)]
    pub(crate) fn comparisons(&self) -> usize {
        self.comparisons.get()
    }

    /// The known id nearest to `wanted`, if it is close; for a pattern
    /// (`detec-*`), the nearest pattern that matches ids (`detect-*`).
    pub(crate) fn suggest(&self, wanted: &str) -> Option<String> {
        if wanted.contains('*') {
            return self.suggest_pattern(wanted);
        }
        let limit = (wanted.len() / 3).max(1);
        let mut best: Option<(usize, &str)> = None;
        let consider = |candidate: &str, best: &mut Option<(usize, &'g str)>| {
            let Some(id) = (self.lookup)(candidate) else {
                return;
            };
            if let Some(d) = self.distance_within(wanted, id, limit) {
                if best.is_none_or(|(bd, bid)| (d, id) < (bd, bid)) {
                    *best = Some((d, id));
                }
            }
        };
        if !self.few.is_empty() {
            for id in &self.few {
                consider(id, &mut best);
            }
            return best.map(|(_, id)| id.to_string());
        }
        let mut shape = String::new();
        shape_into(wanted, &mut shape);
        let numbers: Vec<&str> = digit_runs(wanted).collect();
        // Its own shape: the ids whose numbers are one away, and a few more.
        if let Some(&at) = self.shape_at.get(&shape) {
            for neighbour in neighbours(&shape, &numbers) {
                self.count(1);
                consider(&neighbour, &mut best);
            }
            for id in self.families[at].sample() {
                consider(id, &mut best);
            }
        }
        // The nearest other shapes: its numbers in them, and a few of their ids.
        for at in self.near_shapes(&shape, limit) {
            let other = &self.shapes[at];
            if other.matches(DIGITS).count() == numbers.len() {
                self.count(1);
                consider(&fill(other, &numbers), &mut best);
            }
            for id in self.families[at].sample() {
                consider(id, &mut best);
            }
        }
        best.map(|(_, id)| id.to_string())
    }

    /// The pattern nearest to `wanted` among the graph's shapes written
    /// as patterns (`detect-#` as `detect-*`).
    fn suggest_pattern(&self, wanted: &str) -> Option<String> {
        let limit = (wanted.len() / 3).max(1);
        let mut shape = String::new();
        shape_into(&wanted.replace('*', &DIGITS.to_string()), &mut shape);
        self.near_shapes(&shape, limit)
            .into_iter()
            .map(|at| self.shapes[at].replace(DIGITS, "*"))
            .find(|pattern| pattern != wanted)
    }

    /// Up to [`NEAR_SHAPES`] shapes other than `shape` within `limit`
    /// edits of it, nearest first.
    fn near_shapes(&self, shape: &str, limit: usize) -> Vec<usize> {
        let mut near: Vec<(usize, usize)> = Vec::new();
        let mut try_shape = |at: usize| {
            if let Some(d) = self.distance_within(shape, &self.shapes[at], limit) {
                if d > 0 {
                    near.push((d, at));
                }
            }
        };
        if self.shapes.len() <= FEW_SHAPES {
            (0..self.shapes.len()).for_each(&mut try_shape);
        } else {
            // A shape one insertion or deletion away has its halves split
            // one character off from this one's.
            let chars: Vec<char> = shape.chars().collect();
            let half = chars.len() / 2;
            let mut seen = HashSet::new();
            for length in half.saturating_sub(1)..=(half + 1).min(chars.len()) {
                let start: String = chars[..length].iter().collect();
                let end: String = chars[chars.len() - length..].iter().collect();
                let buckets = [self.by_start.get(&start), self.by_end.get(&end)];
                for &at in buckets.into_iter().flatten().flatten() {
                    if seen.insert(at) {
                        try_shape(at);
                    }
                }
            }
        }
        near.sort_unstable();
        near.truncate(NEAR_SHAPES);
        near.into_iter().map(|(_, at)| at).collect()
    }

    fn count(&self, work: usize) {
        self.comparisons.set(self.comparisons.get() + work);
    }

    /// The edit distance between `a` and `b` if it is at most `limit`.
    fn distance_within(&self, a: &str, b: &str, limit: usize) -> Option<usize> {
        self.count(1);
        edit_distance_within(a, b, limit)
    }
}

/// `id` with each run of ASCII digits replaced by [`DIGITS`], into `shape`.
fn shape_into(id: &str, shape: &mut String) {
    shape.clear();
    let mut in_digits = false;
    for c in id.chars() {
        if c.is_ascii_digit() || c == DIGITS {
            if !in_digits {
                shape.push(DIGITS);
            }
            in_digits = true;
        } else {
            shape.push(c);
            in_digits = false;
        }
    }
}

/// The runs of ASCII digits in `id`, in order.
fn digit_runs(id: &str) -> impl Iterator<Item = &str> {
    id.split(|c: char| !c.is_ascii_digit())
        .filter(|run| !run.is_empty())
}

/// `shape` with its placeholders replaced by `numbers`, in order.
fn fill(shape: &str, numbers: &[&str]) -> String {
    let mut numbers = numbers.iter();
    let mut id = String::with_capacity(shape.len() + 8);
    for c in shape.chars() {
        match c {
            DIGITS => id.push_str(numbers.next().copied().unwrap_or("")),
            c => id.push(c),
        }
    }
    id
}

/// The names of `shape` with `numbers`, one number at a time one more or
/// one less (zero-padded numbers keep their width).
fn neighbours(shape: &str, numbers: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for (k, number) in numbers.iter().enumerate() {
        let Ok(value) = number.parse::<u64>() else {
            continue;
        };
        let width = if number.starts_with('0') {
            number.len()
        } else {
            0
        };
        for next in [value.checked_sub(1), value.checked_add(1)]
            .into_iter()
            .flatten()
        {
            let text = format!("{next:0width$}");
            let mut changed = numbers.to_vec();
            changed[k] = &text;
            found.push(fill(shape, &changed));
        }
    }
    found
}

/// The edit distance between `a` and `b`, or `None` as soon as it is
/// known to exceed `limit`.
fn edit_distance_within(a: &str, b: &str, limit: usize) -> Option<usize> {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    if a.len().abs_diff(b.len()) > limit {
        return None;
    }
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, &ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != cb))
                .min(row[j] + 1)
                .min(above + 1);
            diagonal = above;
        }
        // Distances never shrink down the rows.
        if row.iter().min().is_some_and(|&m| m > limit) {
            return None;
        }
    }
    Some(row[b.len()]).filter(|&d| d <= limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(ids: &[String]) -> HashMap<String, usize> {
        ids.iter()
            .enumerate()
            .map(|(n, id)| (id.clone(), n))
            .collect()
    }

    fn sweep(count: usize) -> Vec<String> {
        let mut ids = vec!["prepare".to_string(), "summary".to_string()];
        ids.extend((1..=count).map(|n| format!("detect-{n}")));
        ids
    }

    /// The work per unknown name is bounded by the index's constants, the
    /// same for a sweep of 1,000 and of 100,000, where a comparison with
    /// every id would do 100,000.
    #[test]
    fn the_work_per_unknown_name_does_not_grow_with_the_graph() {
        let bound = 2 + 2 * SAMPLE + FEW_SHAPES + NEAR_SHAPES * (1 + 2 * SAMPLE);
        for count in [1_000, 100_000] {
            let ids = sweep(count);
            let index = index(&ids);
            let suggestions = Suggestions::new(ids.iter().map(String::as_str), ids.len(), |id| {
                index.get_key_value(id).map(|(k, _)| k.as_str())
            });
            let past_the_end = format!("detect-{}", count + 1);
            let last = format!("detect-{count}");
            let queries = [
                ("detecd-500", Some("detect-500")),
                ("detect-0", Some("detect-1")),
                (past_the_end.as_str(), Some(last.as_str())),
                ("prepar", Some("prepare")),
                ("sumary", Some("summary")),
                ("detec-*", Some("detect-*")),
                ("zzzzzzzzzz-*", None),
                ("completely-unrelated", None),
            ];
            for (wanted, expected) in queries {
                let before = suggestions.comparisons();
                assert_eq!(suggestions.suggest(wanted).as_deref(), expected, "{wanted}");
                let work = suggestions.comparisons() - before;
                assert!(work <= bound, "{wanted} among {count}: {work} comparisons");
                assert!(work <= 40, "{wanted} among {count}: {work} comparisons");
            }
        }
    }

    /// Many distinct shapes (hand-written ids) are searched through
    /// buckets of shared first or last characters, with bounded work.
    #[test]
    fn many_distinct_shapes_are_searched_in_buckets() {
        let ids: Vec<String> = (0..20_000)
            .map(|n| {
                let word: String = format!("{n:05}")
                    .chars()
                    .map(|c| char::from(b'a' + (c as u8 - b'0')))
                    .collect();
                format!("step-{word}-final")
            })
            .collect();
        let index = index(&ids);
        let suggestions = Suggestions::new(ids.iter().map(String::as_str), ids.len(), |id| {
            index.get_key_value(id).map(|(k, _)| k.as_str())
        });
        let before = suggestions.comparisons();
        assert_eq!(
            suggestions.suggest("stpe-abcde-final").as_deref(),
            Some("step-abcde-final")
        );
        let work = suggestions.comparisons() - before;
        assert!(
            work <= 6 * BUCKET_CAP + NEAR_SHAPES * (1 + 2 * SAMPLE),
            "{work}"
        );
        assert!(work < 1_000, "{work} comparisons among 20,000 ids");
    }

    #[test]
    fn few_ids_are_searched_in_full() {
        let ids: Vec<String> = ["prepare", "detect", "summary"].map(String::from).to_vec();
        let index = index(&ids);
        let suggestions = Suggestions::new(ids.iter().map(String::as_str), ids.len(), |id| {
            index.get_key_value(id).map(|(k, _)| k.as_str())
        });
        assert_eq!(suggestions.suggest("prepar").as_deref(), Some("prepare"));
        assert_eq!(suggestions.suggest("nope"), None);
        assert_eq!(suggestions.comparisons(), 6);
    }

    #[test]
    fn zero_padded_numbers_keep_their_width() {
        assert_eq!(
            neighbours(&format!("a-{DIGITS}"), &["007"]),
            ["a-006", "a-008"]
        );
        assert_eq!(edit_distance_within("kitten", "sitting", 3), Some(3));
        assert_eq!(edit_distance_within("kitten", "sitting", 2), None);
    }
}
