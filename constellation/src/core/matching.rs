//! Which executors could ever run an activity.
//!
//! Checked once per submission so that work nobody can run is refused with
//! `NoSuitableExecutor` instead of waiting in a queue forever.

use crate::context::{ContextList, ExecutorContext, RankRange};
use crate::core::SubmitError;
use crate::id::ActivityId;

/// Which executors could ever run an activity: for each label, the
/// executors that offer it and the rank range each offers under it.
///
/// Built once from the executors' contexts, indexed as given, and then only
/// read: a [`Scheduler`](super::Scheduler) checks every submission against
/// it ([`check`](Self::check)) and asks it which idle executors to offer new
/// work to ([`executors_for`](Self::executors_for)). Rebuild it when an
/// executor is relabelled. Outside the core, the CLI checks a graph's
/// activities against a pool's executors with it before running anything.
///
/// A [`new`](Self::new) table accepts only what one of its executors
/// matches; an [`open`](Self::open) table, the admission table of a node in
/// a networked pool, also accepts unpinned work that none here matches.
///
/// ```
/// use constellation::{ContextList, ExecutorContext};
/// use constellation::core::MatchTable;
/// use constellation::{IdIssuer, NodeId};
///
/// let executors: Vec<ExecutorContext> = vec!["CPU".parse()?, "GPU,CPU".parse()?];
/// let table = MatchTable::new(&executors);
/// let gpu: ContextList = "GPU".parse()?;
/// assert_eq!(table.executors_for(&gpu).collect::<Vec<_>>(), [1]);
///
/// let id = IdIssuer::new(NodeId::from_u128(1), 0).issue();
/// assert!(table.check(id, &gpu, None).is_ok());
/// assert!(table.check(id, &gpu, Some(0)).is_err(), "pinned to the CPU executor");
/// assert!(table.check(id, &"FPGA".parse()?, None).is_err());
/// assert!(MatchTable::open(&executors).check(id, &"FPGA".parse()?, None).is_ok());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct MatchTable {
    /// Indexed by label: (executor index, offered range or `None` for any rank).
    by_label: Vec<Vec<(usize, Option<RankRange>)>>,
    /// What the executors offer, for error messages.
    offered: String,
    /// Accept any unpinned work, for a node of a networked pool: executors
    /// elsewhere, perhaps ones that join later, may run what none here can.
    open: bool,
}

impl MatchTable {
    /// The table for these executors, indexed as given: executor `i` of the
    /// table is `executors[i]`. It accepts only work one of them matches.
    pub fn new(executors: &[ExecutorContext]) -> Self {
        let mut table = MatchTable {
            offered: describe_executors(executors.iter()),
            ..MatchTable::default()
        };
        for (index, executor) in executors.iter().enumerate() {
            for offered in &executor.contexts {
                let slot = offered.label.index();
                if slot >= table.by_label.len() {
                    table.by_label.resize_with(slot + 1, Vec::new);
                }
                table.by_label[slot].push((index, offered.rank));
            }
        }
        table
    }

    /// Refuses `contexts` unless some executor can run them — or, for work
    /// that may not leave executor `pinned_to`, unless that one can. An
    /// [`open`](Self::open) table accepts any unpinned work.
    ///
    /// # Errors
    /// [`SubmitError::NoSuitableExecutor`] for activity `id`, naming what
    /// the executors offer.
    pub fn check(
        &self,
        id: ActivityId,
        contexts: &ContextList,
        pinned_to: Option<usize>,
    ) -> Result<(), SubmitError> {
        let runnable = match pinned_to {
            Some(executor) => self.executor_can_run(executor, contexts),
            None => self.any_executor_can_run(contexts),
        };
        if runnable {
            return Ok(());
        }
        Err(SubmitError::NoSuitableExecutor {
            id,
            contexts: contexts.clone(),
            offered: match pinned_to {
                Some(executor) => format!(
                    "{} (and the activity may not leave executor {executor})",
                    self.offered
                ),
                None => self.offered.clone(),
            },
        })
    }

    /// A table that checks pinned work against `executors` but accepts any
    /// other work: the admission table of a node in a networked pool.
    pub fn open(executors: &[ExecutorContext]) -> Self {
        MatchTable {
            open: true,
            ..MatchTable::new(executors)
        }
    }

    /// Whether some executor matches `list` (always, for an [`open`](Self::open) table).
    pub fn any_executor_can_run(&self, list: &ContextList) -> bool {
        self.open || self.executors_for(list).next().is_some()
    }

    /// Whether executor `executor` matches `list`.
    pub fn executor_can_run(&self, executor: usize, list: &ContextList) -> bool {
        self.executors_for(list).any(|index| index == executor)
    }

    /// Executors that match `list`, by index: those matching its first
    /// context first, then its second, and so on, so a priority list gives
    /// its earlier contexts the first offer. An executor may appear more
    /// than once. An [`open`](Self::open) table lists only its own executors.
    pub fn executors_for<'a>(&'a self, list: &'a ContextList) -> impl Iterator<Item = usize> + 'a {
        list.items().iter().flat_map(move |wanted| {
            self.by_label
                .get(wanted.label.index())
                .into_iter()
                .flatten()
                .filter(move |(_, offered)| match (wanted.rank, offered) {
                    (Some(want), Some(have)) => want.lo <= have.hi && have.lo <= want.hi,
                    _ => true,
                })
                .map(|(index, _)| *index)
        })
    }
}

/// A one-line description of executor contexts, e.g. `[GPU] [site:vu > anywhere]`.
pub fn describe_executors<'a>(contexts: impl Iterator<Item = &'a ExecutorContext>) -> String {
    let mut distinct: Vec<String> = Vec::new();
    for context in contexts {
        let text = format!("[{context}]");
        if !distinct.contains(&text) {
            distinct.push(text);
        }
    }
    if distinct.is_empty() {
        return "nothing (the pool has no executors)".to_string();
    }
    distinct.join(" ")
}
