//! What a simulated run reports: one record per attempt of each activity,
//! each executor's busy time, message counts and the derived figures.
//!
//! Records carry what a run journal needs (activity id and kind, node and
//! executor names and labels, attempt number, start and end as seconds
//! since the start, outcome), so a writer can turn a simulated run into
//! the same journal and trace as a real one.

use serde::{Deserialize, Serialize};

use crate::id::ActivityId;
use crate::protocol::strategy::Strategy;

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AttemptEnd {
    /// The activity finished.
    Completed,
    /// Its node died while it was running or suspended.
    Killed,
}

/// One attempt of one activity: from its first call's start to its finish
/// (or its node's death). A suspended activity holds no executor, so an
/// attempt can last longer than its [`busy`](Self::busy) time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// The activity; its attempts share the id.
    pub activity: ActivityId,
    /// Its template, an index into the workload's activities.
    pub spec: u32,
    /// Its kind, an index into [`SimReport::kinds`].
    pub kind: u32,
    /// Its contexts, an index into [`SimReport::context_lists`].
    pub contexts: u32,
    /// The node that ran it, an index into [`SimReport::nodes`].
    pub node: u32,
    /// The executor's index within that node.
    pub executor: u32,
    /// The node's site.
    pub site: u32,
    /// 1 for the first attempt, 2 after its node died once, and so on.
    pub attempt: u32,
    /// When its first call started, in seconds since the start.
    pub start: f64,
    /// When it finished or was killed, in seconds since the start.
    pub end: f64,
    /// Seconds its first call waited for input data to arrive.
    pub transfer: f64,
    /// Seconds its calls held the executor, the transfer included.
    pub busy: f64,
    /// How it ended.
    pub outcome: AttemptEnd,
}

/// One executor of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutorSummary {
    /// Its node, an index into [`SimReport::nodes`].
    pub node: u32,
    /// Its index within the node.
    pub index: u32,
    /// Its labels, comma separated, as executors show them to journals.
    pub labels: String,
    /// Cores it had.
    pub cores: u32,
    /// Seconds it spent in calls (transfers included).
    pub busy: f64,
}

/// One node of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeSummary {
    /// Its name.
    pub name: String,
    /// Its site, an index into [`SimReport::sites`].
    pub site: u32,
    /// When it joined, seconds since the start.
    pub joined: f64,
    /// When it died, if it did before the run ended.
    pub died: Option<f64>,
    /// Steal requests it answered (asked by other nodes).
    pub requests_handled: u64,
    /// Seconds it spent answering them, by the model's answer cost.
    #[serde(default)]
    pub answering: f64,
}

/// Messages between nodes and data transfers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageCounts {
    /// Steal requests sent.
    pub steal_requests: u64,
    /// Steal requests to a node on another site.
    pub wide_area_steals: u64,
    /// Steal replies that carried no work, and requests that failed
    /// because their victim had died.
    pub empty_replies: u64,
    /// Activities carried by steal replies.
    pub moved: u64,
    /// Activities carried by steal replies between sites.
    pub wide_area_moved: u64,
    /// Finished notices sent back along chains of custody.
    pub finished_notices: u64,
    /// Events sent between nodes (forwarded ones included).
    pub events: u64,
    /// Messages of any kind between different sites.
    pub wide_area: u64,
    /// Messages lost because their destination had died (or had not
    /// joined yet).
    pub dropped: u64,
    /// Membership messages: SWIM probes, acknowledgements and gossip, and
    /// the hellos and goodbyes in which members say what they offer.
    /// [`wide_area`](Self::wide_area) counts those between sites too.
    #[serde(default)]
    pub membership: u64,
    /// Membership messages between different sites.
    #[serde(default)]
    pub wide_area_membership: u64,
    /// Input transfers from another site.
    pub wide_area_transfers: u64,
    /// Bytes of those transfers.
    pub wide_area_bytes: u64,
    /// Input transfers within a site.
    pub local_transfers: u64,
    /// Bytes of those transfers.
    pub local_bytes: u64,
}

/// The outcome of [`simulate`](super::simulate).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimReport {
    /// The strategy simulated.
    pub strategy: Strategy,
    /// The seed used.
    pub seed: u64,
    /// Seconds from the start until the last root finished.
    pub makespan: f64,
    /// Site names, by index.
    pub sites: Vec<String>,
    /// Nodes, by index.
    pub nodes: Vec<NodeSummary>,
    /// Every executor, node by node.
    pub executors: Vec<ExecutorSummary>,
    /// Kind names, by index.
    pub kinds: Vec<String>,
    /// Distinct activity context lists as text, by index.
    pub context_lists: Vec<String>,
    /// Every attempt, in the order attempts ended.
    pub records: Vec<AttemptRecord>,
    /// Messages and transfers.
    pub messages: MessageCounts,
    /// The master node's index.
    pub master: u32,
    /// Steal requests the master answered.
    pub master_load: u64,
    /// The most steal requests one node answered.
    pub busiest_victim: u64,
    /// Activities completed (attempts that ended [`AttemptEnd::Completed`]).
    pub completed: u64,
    /// Activities queued again because the node running them died.
    pub requeued: u64,
    /// Activities given up: the nodes running them died too often.
    pub lost: u64,
    /// Completed attempts beyond the first of one activity (at-least-once
    /// execution: an activity can run twice when a node in the middle of
    /// its chain of custody dies).
    pub duplicates: u64,
    /// Events that reached no activity.
    pub undeliverable: u64,
    /// Seconds of work done by completed attempts (calls, transfers excluded).
    pub work: f64,
    /// Executor-seconds the pool offered: each executor from its node's
    /// join to its death or the end of the run.
    pub capacity: f64,
    /// `work / capacity`: 1.0 when every executor computed all the time.
    /// With equal executors this is the ideal makespan (work spread
    /// evenly) over the real one.
    pub efficiency: f64,
    /// Simulator events processed, for measuring the simulator itself.
    pub events: u64,
    /// When, after the last node joined, every live node's membership
    /// (SWIM) first listed every other live node, in seconds since the
    /// start; `None` if that did not happen before the run ended. Until
    /// then a node steals only from the members it knows.
    #[serde(default)]
    pub membership_converged: Option<f64>,
}

impl SimReport {
    /// Steal requests per completed activity.
    pub fn steals_per_activity(&self) -> f64 {
        self.messages.steal_requests as f64 / (self.completed.max(1)) as f64
    }

    /// The name of node `index`, or `?` for an index out of range.
    pub fn node_name(&self, index: u32) -> &str {
        self.nodes
            .get(index as usize)
            .map_or("?", |node| node.name.as_str())
    }
}
