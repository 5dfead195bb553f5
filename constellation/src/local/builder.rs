//! Configuring and starting a pool: [`PoolBuilder`] and why a start fails.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use arc_swap::ArcSwap;
use parking_lot::{Condvar, Mutex};
use rustc_hash::FxHashMap;

use super::executor::executor_main;
use super::park::{CachePadded, Parker};
use super::pool_state::{Handoff, PoolState, Shard, MAX_EXECUTORS};
use super::{Pool, Uplink};
use crate::context::ExecutorContext;
use crate::core::{MatchTable, Scheduler};
use crate::id::{ActivityId, NodeId};
use crate::resources::Resources;

/// Configures and starts a [`Pool`].
#[derive(Debug, Clone, Default)]
pub struct PoolBuilder {
    executors: Vec<ExecutorContext>,
    resources: Vec<Arc<Resources>>,
    trace: bool,
}

impl PoolBuilder {
    /// Adds `count` executors that run `anywhere` work.
    pub fn executors(self, count: usize) -> Self {
        self.executors_with(count, ExecutorContext::anywhere())
    }

    /// Adds `count` executors offering `context`.
    pub fn executors_with(mut self, count: usize, context: ExecutorContext) -> Self {
        let plain = Arc::new(Resources::new());
        self.executors.extend(std::iter::repeat_n(context, count));
        self.resources.extend(std::iter::repeat_n(plain, count));
        self
    }

    /// Adds one executor offering `context` with `resources`: environment
    /// for the programs it starts and handles its activities look up, e.g.
    /// one GPU.
    pub fn executor_with_resources(
        mut self,
        context: ExecutorContext,
        resources: Resources,
    ) -> Self {
        self.executors.push(context);
        self.resources.push(Arc::new(resources));
        self
    }

    /// Adds one executor offering `context`.
    pub fn executor(self, context: ExecutorContext) -> Self {
        self.executors_with(1, context)
    }

    /// Records a [`TraceRecord`] for every activity call; they come back in
    /// [`RunSummary::trace`].
    ///
    /// [`TraceRecord`]: crate::trace::TraceRecord
    /// [`RunSummary::trace`]: super::RunSummary::trace
    pub fn trace(mut self, enabled: bool) -> Self {
        self.trace = enabled;
        self
    }

    /// Starts the executor threads.
    pub fn start(self) -> Result<Pool, PoolError> {
        self.start_inner(None)
    }

    /// Starts the executor threads as one node of a networked pool: events
    /// and news for other nodes go to `uplink`, and work that no executor
    /// here can run is accepted, to wait for a thief from another node.
    pub fn start_with_uplink(self, uplink: Arc<dyn Uplink>) -> Result<Pool, PoolError> {
        self.start_inner(Some(uplink))
    }

    fn start_inner(self, uplink: Option<Arc<dyn Uplink>>) -> Result<Pool, PoolError> {
        if self.executors.is_empty() {
            return Err(PoolError::NoExecutors);
        }
        if self.executors.len() > MAX_EXECUTORS {
            return Err(PoolError::TooManyExecutors(self.executors.len()));
        }
        let node = NodeId::random();
        let matcher = Arc::new(MatchTable::new(&self.executors));
        let admission = match uplink {
            Some(_) => Arc::new(MatchTable::open(&self.executors)),
            None => matcher.clone(),
        };
        let shards = self
            .executors
            .iter()
            .map(|context| Shard {
                core: CachePadded(Mutex::new(Scheduler::in_pool(
                    node,
                    vec![context.clone()],
                    admission.clone(),
                ))),
                inbox: CachePadded(Mutex::new(Vec::new())),
                inbox_pending: CachePadded(AtomicBool::new(false)),
                queued: CachePadded(AtomicUsize::new(0)),
                outside_ids: CachePadded(AtomicU64::new(0)),
            })
            .collect();
        let shared = Arc::new(PoolState {
            node,
            started: Instant::now(),
            matcher: ArcSwap::new(matcher),
            admission: ArcSwap::new(admission),
            contexts: ArcSwap::from_pointee(self.executors.clone()),
            relabels: CachePadded(AtomicU64::new(0)),
            relabelling: Mutex::new(()),
            shards,
            handoffs: OnceLock::new(),
            uplink,
            remote_homes: Mutex::new(FxHashMap::default()),
            outstanding: CachePadded(AtomicI64::new(0)),
            idle_count: CachePadded(AtomicUsize::new(0)),
            round_robin: CachePadded(AtomicUsize::new(0)),
            quiescence: Mutex::new(()),
            quiescent: Condvar::new(),
            shutdown: AtomicBool::new(false),
            undeliverable: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            longest_call_ns: AtomicU64::new(0),
            trace: self.trace,
        });
        let mut threads = Vec::with_capacity(self.executors.len());
        let setups = self.executors.into_iter().zip(self.resources);
        for (index, (context, resources)) in setups.enumerate() {
            let shared = shared.clone();
            let thread = std::thread::Builder::new()
                .name(format!("executor-{index}"))
                .spawn(move || executor_main(shared, index, context, resources))
                .map_err(PoolError::Spawn)?;
            threads.push(thread);
        }
        let handoffs = threads
            .iter()
            .map(|t| Handoff {
                parker: CachePadded(Parker::new(t.thread().clone())),
                mailbox: CachePadded(Mutex::new(VecDeque::new())),
                idle: CachePadded(AtomicBool::new(false)),
            })
            .collect();
        if shared.handoffs.set(handoffs).is_err() {
            unreachable!("handoffs are set once, here");
        }
        Ok(Pool {
            address: ActivityId::in_slot(node, 0, 0),
            shared,
            threads,
        })
    }
}

/// Why a pool could not start.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// A pool needs at least one executor.
    #[error("a pool needs at least one executor")]
    NoExecutors,
    /// More executors than one node can address.
    #[error("{0} executors is more than one pool supports ({MAX_EXECUTORS})")]
    TooManyExecutors(usize),
    /// The operating system refused a thread.
    #[error("could not start an executor thread: {0}")]
    Spawn(std::io::Error),
}
