//! Changing what an executor offers while it runs, and what the scheduler
//! knows of the whole pool's executors.

use std::sync::Arc;

use super::{split_entry, Scheduler, State};
use crate::context::ExecutorContext;
use crate::core::{ExecutorIndex, MatchTable, RelabelError};

impl<T> Scheduler<T> {
    /// What `executor` offers now.
    pub fn executor_context(&self, executor: ExecutorIndex) -> Option<&ExecutorContext> {
        self.executors.get(executor).map(|state| &state.context)
    }

    /// Gives `executor` a new context while it runs. Activities it already
    /// started stay with it; queued work it can no longer run is left for
    /// executors that can (they steal it, here or from other nodes).
    ///
    /// Refused when the executor holds queued activities pinned to it that
    /// the new context cannot run: nobody else may take those, so they
    /// would wait forever.
    pub fn relabel(
        &mut self,
        executor: ExecutorIndex,
        context: ExecutorContext,
    ) -> Result<(), RelabelError> {
        let Some(state) = self.executors.get(executor) else {
            return Err(RelabelError::NoSuchExecutor {
                executor,
                executors: self.executors.len(),
            });
        };
        let slots = &self.slots;
        let mut stranded: Vec<u32> = (state.pinned.entries())
            .filter_map(|entry| {
                let (slot, generation) = split_entry(entry);
                let slot_entry = slots.get(slot as usize)?;
                let record = slot_entry.record.as_ref()?;
                let queued = slot_entry.generation == generation && record.state == State::Queued;
                (queued && context.priority_of(&record.contexts).is_none()).then_some(slot)
            })
            .collect();
        stranded.sort_unstable();
        stranded.dedup();
        if let Some(&first) = stranded.first() {
            let id = (self.slots[first as usize].record.as_ref()).map(|record| record.id);
            return Err(RelabelError::PinnedWork {
                executor,
                count: stranded.len(),
                example: id.expect("a stranded slot is occupied"),
            });
        }
        self.executors[executor].context = context;
        let contexts: Vec<ExecutorContext> = (self.executors.iter())
            .map(|state| state.context.clone())
            .collect();
        self.matcher = Arc::new(MatchTable::new(&contexts));
        // An idle executor may now match queued work: the driver wakes it,
        // and quiescence must be judged afresh.
        self.quiescence_reported = false;
        Ok(())
    }

    /// Replaces what this scheduler knows of the whole pool's executors,
    /// which decides the work it accepts; for drivers whose pool changed
    /// (an executor was relabelled, a node joined or left).
    pub fn set_pool(&mut self, pool: Arc<MatchTable>) {
        self.pool = pool;
    }
}
