//! Contexts: the labels that match activities to executors.
//!
//! A [`Context`] is an application-defined label with an optional rank
//! (`size=812`) or rank range (`size=100..=900`). There is no fixed schema:
//! `GPU`, `site:vu` and `dataset-7` are all just labels. Activities carry a
//! [`ContextList`] (any-of or priority-ordered); executors carry an
//! [`ExecutorContext`]: a priority-ordered list plus a rank [`Preference`].

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The label of the default context. Activities that say nothing run on
/// executors that list `anywhere`, which executors do by default.
pub(crate) const ANYWHERE: &str = "anywhere";

/// An interned context label. Cheap to copy and compare; labels are few and
/// live for the whole process, so the interner never frees them.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Label(u32);

struct Interner {
    ids: HashMap<Arc<str>, u32>,
    names: Vec<Arc<str>>,
}

fn interner() -> &'static RwLock<Interner> {
    static INTERNER: OnceLock<RwLock<Interner>> = OnceLock::new();
    INTERNER.get_or_init(|| {
        let anywhere: Arc<str> = Arc::from(ANYWHERE);
        RwLock::new(Interner {
            ids: HashMap::from([(anywhere.clone(), 0)]),
            names: vec![anywhere],
        })
    })
}

impl Label {
    /// The `anywhere` label, interned first so it is always `Label(0)`.
    pub const ANYWHERE: Label = Label(0);

    /// Interns `name`, returning the same label for the same text.
    pub fn new(name: &str) -> Label {
        if let Some(&id) = interner().read().ids.get(name) {
            return Label(id);
        }
        let mut table = interner().write();
        if let Some(&id) = table.ids.get(name) {
            return Label(id);
        }
        let id = u32::try_from(table.names.len()).expect("fewer than 2^32 distinct labels");
        let name: Arc<str> = Arc::from(name);
        table.names.push(name.clone());
        table.ids.insert(name, id);
        Label(id)
    }

    /// The label's text.
    pub fn name(&self) -> Arc<str> {
        interner().read().names[self.0 as usize].clone()
    }

    /// A dense index, usable to index per-label tables.
    pub fn index(&self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl fmt::Debug for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Label({:?})", &*self.name())
    }
}

impl Serialize for Label {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.name())
    }
}

impl<'de> Deserialize<'de> for Label {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Ok(Label::new(&name))
    }
}

/// An inclusive range of ranks. A single rank `r` is the range `r..=r`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RankRange {
    /// Lowest rank in the range.
    pub lo: i64,
    /// Highest rank in the range.
    pub hi: i64,
}

impl RankRange {
    /// The range holding just `rank`.
    pub fn single(rank: i64) -> Self {
        RankRange { lo: rank, hi: rank }
    }

    /// Whether `rank` lies inside the range.
    pub fn contains(&self, rank: i64) -> bool {
        self.lo <= rank && rank <= self.hi
    }

    fn overlaps(&self, other: &RankRange) -> bool {
        self.lo <= other.hi && other.lo <= self.hi
    }
}

/// One context: a label and an optional rank range.
///
/// Two contexts match when their labels are equal and their ranks overlap. A
/// context without a rank matches any rank.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Context {
    /// The label, e.g. `GPU` or `site:vu`.
    pub label: Label,
    /// The rank or rank range, if any.
    pub rank: Option<RankRange>,
}

impl Context {
    /// A context with a label and no rank.
    pub fn new(label: &str) -> Self {
        Context {
            label: Label::new(label),
            rank: None,
        }
    }

    /// The default context, `anywhere`.
    pub fn anywhere() -> Self {
        Context {
            label: Label::ANYWHERE,
            rank: None,
        }
    }

    /// This context with a single rank, e.g. the size of an input.
    pub fn with_rank(mut self, rank: i64) -> Self {
        self.rank = Some(RankRange::single(rank));
        self
    }

    /// This context with an inclusive rank range.
    pub fn with_range(mut self, lo: i64, hi: i64) -> Self {
        self.rank = Some(RankRange { lo, hi });
        self
    }

    /// Whether an activity with this context may run on an executor offering `offered`.
    pub fn matches(&self, offered: &Context) -> bool {
        self.label == offered.label
            && match (&self.rank, &offered.rank) {
                (Some(want), Some(have)) => want.overlaps(have),
                _ => true,
            }
    }

    /// The rank used to order activities: the low end of the range.
    pub fn sort_rank(&self) -> Option<i64> {
        self.rank.map(|r| r.lo)
    }
}

impl fmt::Display for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.label)?;
        match self.rank {
            None => Ok(()),
            Some(RankRange { lo, hi }) if lo == hi => write!(f, "={lo}"),
            Some(RankRange { lo, hi }) => write!(f, "={lo}..={hi}"),
        }
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Context({self})")
    }
}

/// Why a context string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContextParseError {
    /// The text, or one item of a list, was empty.
    #[error("empty context label in {0:?}")]
    EmptyLabel(String),
    /// The part after `=` is not a number or a range.
    #[error("bad rank {rank:?} in context {text:?}: expected a number like `812` or a range like `100..=900`")]
    BadRank {
        /// The whole context text.
        text: String,
        /// The part that failed.
        rank: String,
    },
    /// The range is empty, e.g. `9..=3`.
    #[error("empty rank range in context {0:?}: the low end is above the high end")]
    EmptyRange(String),
}

impl FromStr for Context {
    type Err = ContextParseError;

    /// Parses `label`, `label=RANK`, `label=LO..=HI` or `label=LO..HI` (high end exclusive).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        let (label, rank) = match text.split_once('=') {
            Some((label, rank)) => (label.trim(), Some(rank.trim())),
            None => (text, None),
        };
        if label.is_empty() {
            return Err(ContextParseError::EmptyLabel(text.to_string()));
        }
        let context = Context::new(label);
        let Some(rank) = rank else {
            return Ok(context);
        };
        let bad = || ContextParseError::BadRank {
            text: text.to_string(),
            rank: rank.to_string(),
        };
        let number = |s: &str| s.trim().parse::<i64>().map_err(|_| bad());
        let range = if let Some((lo, hi)) = rank.split_once("..=") {
            RankRange {
                lo: number(lo)?,
                hi: number(hi)?,
            }
        } else if let Some((lo, hi)) = rank.split_once("..") {
            let hi = number(hi)?.checked_sub(1).ok_or_else(bad)?;
            RankRange {
                lo: number(lo)?,
                hi,
            }
        } else {
            RankRange::single(number(rank)?)
        };
        if range.lo > range.hi {
            return Err(ContextParseError::EmptyRange(text.to_string()));
        }
        Ok(Context {
            rank: Some(range),
            ..context
        })
    }
}

/// How an activity's context list is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ListMode {
    /// Any matching executor is as good as any other.
    AnyOf,
    /// Earlier contexts are preferred: when several idle executors could run
    /// the activity, one matching an earlier context is woken first.
    Priority,
}

/// The contexts an activity can run in.
///
/// The default, `anywhere`, costs no allocation; other lists share their
/// items behind an `Arc`, so cloning a list is cheap.
#[derive(Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct ContextList(Option<Arc<ListInner>>);

#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
struct ListInner {
    mode: ListMode,
    items: Vec<Context>,
}

impl ContextList {
    /// The default list: `anywhere`.
    pub fn anywhere() -> Self {
        ContextList(None)
    }

    /// A list of contexts of which any may be used.
    pub fn any_of(items: impl IntoIterator<Item = Context>) -> Self {
        Self::with_mode(ListMode::AnyOf, items)
    }

    /// A priority-ordered list: earlier contexts are preferred.
    pub fn priority(items: impl IntoIterator<Item = Context>) -> Self {
        Self::with_mode(ListMode::Priority, items)
    }

    /// A list with just `context`.
    pub fn single(context: Context) -> Self {
        Self::any_of([context])
    }

    fn with_mode(mode: ListMode, items: impl IntoIterator<Item = Context>) -> Self {
        let items: Vec<Context> = items.into_iter().collect();
        if items.is_empty() || (items.len() == 1 && items[0] == Context::anywhere()) {
            return ContextList(None);
        }
        ContextList(Some(Arc::new(ListInner { mode, items })))
    }

    /// How the list is read.
    pub fn mode(&self) -> ListMode {
        self.0.as_ref().map_or(ListMode::AnyOf, |inner| inner.mode)
    }

    /// The contexts, in order.
    pub fn items(&self) -> &[Context] {
        const ANYWHERE_LIST: &[Context] = &[Context {
            label: Label::ANYWHERE,
            rank: None,
        }];
        self.0.as_ref().map_or(ANYWHERE_LIST, |inner| &inner.items)
    }

    /// Whether this is the default `anywhere` list.
    pub fn is_anywhere(&self) -> bool {
        self.0.is_none()
    }
}

impl fmt::Display for ContextList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let separator = match self.mode() {
            ListMode::AnyOf => " | ",
            ListMode::Priority => " > ",
        };
        for (i, context) in self.items().iter().enumerate() {
            if i > 0 {
                f.write_str(separator)?;
            }
            write!(f, "{context}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for ContextList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContextList({self})")
    }
}

impl FromStr for ContextList {
    type Err = ContextParseError;

    /// Parses `a,b,c` or `a|b|c` as any-of and `a>b>c` as priority-ordered.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (mode, separator) = if text.contains('>') {
            (ListMode::Priority, '>')
        } else if text.contains('|') {
            (ListMode::AnyOf, '|')
        } else {
            (ListMode::AnyOf, ',')
        };
        let items = text
            .split(separator)
            .map(str::parse)
            .collect::<Result<Vec<Context>, _>>()?;
        Ok(Self::with_mode(mode, items))
    }
}

/// Which of several matching activities an executor takes first, by rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum Preference {
    /// The highest rank first, e.g. the largest input.
    Biggest,
    /// The lowest rank first.
    Smallest,
    /// Ranks inside `lo..=hi` first (lowest first); others only when none is left there.
    Range(i64, i64),
    /// No rank order: the executor's own newest work, or the oldest it can steal.
    #[default]
    Any,
}

/// What an executor offers: a priority-ordered context list and a preference.
///
/// An executor with `[site:vu, anywhere]` runs `site:vu` work whenever there
/// is some, and `anywhere` work otherwise.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ExecutorContext {
    /// Contexts in priority order; earlier ones are served first.
    pub contexts: Vec<Context>,
    /// The rank order within one context.
    pub preference: Preference,
}

impl ExecutorContext {
    /// The contexts in priority order, comma separated: how executors
    /// show their labels to programs and journals (`CONSTELLATION_LABELS`).
    /// It parses back into the same contexts.
    pub fn label_list(&self) -> String {
        let labels: Vec<String> = self.contexts.iter().map(ToString::to_string).collect();
        labels.join(",")
    }

    /// An executor serving `contexts`, in order, with no rank preference.
    pub fn new(contexts: impl IntoIterator<Item = Context>) -> Self {
        ExecutorContext {
            contexts: contexts.into_iter().collect(),
            preference: Preference::Any,
        }
    }

    /// The default executor context: `anywhere`.
    pub fn anywhere() -> Self {
        Self::new([Context::anywhere()])
    }

    /// This context with a rank preference.
    pub fn with_preference(mut self, preference: Preference) -> Self {
        self.preference = preference;
        self
    }

    /// Whether an activity with `list` can run here, and if so at which
    /// priority (0 is the executor's first context).
    pub fn priority_of(&self, list: &ContextList) -> Option<usize> {
        self.contexts
            .iter()
            .position(|offered| list.items().iter().any(|wanted| wanted.matches(offered)))
    }
}

impl Default for ExecutorContext {
    fn default() -> Self {
        Self::anywhere()
    }
}

impl fmt::Display for ExecutorContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, context) in self.contexts.iter().enumerate() {
            if i > 0 {
                f.write_str(" > ")?;
            }
            write!(f, "{context}")?;
        }
        Ok(())
    }
}

impl FromStr for ExecutorContext {
    type Err = ContextParseError;

    /// Parses a priority list, separated by `,` or `>`, e.g. `site:vu,anywhere`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let contexts = text
            .split([',', '>'])
            .map(str::parse)
            .collect::<Result<Vec<Context>, _>>()?;
        Ok(Self::new(contexts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_intern_to_the_same_value() {
        assert_eq!(Label::new("GPU"), Label::new("GPU"));
        assert_ne!(Label::new("GPU"), Label::new("CPU"));
        assert_eq!(Label::new(ANYWHERE), Label::ANYWHERE);
        assert_eq!(&*Label::new("site:vu").name(), "site:vu");
    }

    #[test]
    fn parses_labels_ranks_and_ranges() {
        let c: Context = "size=812".parse().unwrap();
        assert_eq!(c.label, Label::new("size"));
        assert_eq!(c.rank, Some(RankRange::single(812)));
        let r: Context = "size=100..=900".parse().unwrap();
        assert_eq!(r.rank, Some(RankRange { lo: 100, hi: 900 }));
        let x: Context = "size=100..900".parse().unwrap();
        assert_eq!(x.rank, Some(RankRange { lo: 100, hi: 899 }));
        let plain: Context = "site:vu".parse().unwrap();
        assert_eq!(plain.rank, None);
        assert_eq!(plain.to_string(), "site:vu");
        assert_eq!(r.to_string(), "size=100..=900");
    }

    #[test]
    fn rejects_bad_context_text_with_a_reason() {
        assert!(matches!(
            "".parse::<Context>(),
            Err(ContextParseError::EmptyLabel(_))
        ));
        assert!(matches!(
            "size=big".parse::<Context>(),
            Err(ContextParseError::BadRank { .. })
        ));
        assert!(matches!(
            "size=9..=3".parse::<Context>(),
            Err(ContextParseError::EmptyRange(_))
        ));
        let message = "size=big".parse::<Context>().unwrap_err().to_string();
        assert!(message.contains("expected a number"), "{message}");
    }

    #[test]
    fn matching_needs_equal_labels_and_overlapping_ranks() {
        let gpu = Context::new("GPU");
        assert!(gpu.matches(&Context::new("GPU")));
        assert!(!gpu.matches(&Context::new("CPU")));
        let job = Context::new("size").with_rank(812);
        assert!(job.matches(&Context::new("size").with_range(500, 1000)));
        assert!(!job.matches(&Context::new("size").with_range(0, 500)));
        assert!(
            job.matches(&Context::new("size")),
            "an unranked offer takes any rank"
        );
        assert!(Context::new("size").matches(&Context::new("size").with_range(0, 5)));
    }

    #[test]
    fn context_lists_parse_their_mode() {
        let any: ContextList = "site:vu|site:uva".parse().unwrap();
        assert_eq!(any.mode(), ListMode::AnyOf);
        assert_eq!(any.items().len(), 2);
        let prio: ContextList = "site:vu>anywhere".parse().unwrap();
        assert_eq!(prio.mode(), ListMode::Priority);
        assert_eq!(prio.to_string(), "site:vu > anywhere");
        let default: ContextList = "anywhere".parse().unwrap();
        assert!(default.is_anywhere());
    }

    #[test]
    fn executor_priority_is_the_first_matching_context() {
        let exec: ExecutorContext = "site:vu,anywhere".parse().unwrap();
        assert_eq!(
            exec.priority_of(&ContextList::single(Context::new("site:vu"))),
            Some(0)
        );
        assert_eq!(exec.priority_of(&ContextList::anywhere()), Some(1));
        assert_eq!(
            exec.priority_of(&ContextList::single(Context::new("GPU"))),
            None
        );
    }

    #[test]
    fn contexts_round_trip_through_msgpack_by_name() {
        let list: ContextList = "size=3..=9>anywhere".parse().unwrap();
        let bytes = rmp_serde::to_vec(&list).unwrap();
        let back: ContextList = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(list, back);
    }
}
