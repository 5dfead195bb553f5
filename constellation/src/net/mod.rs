//! The network driver: processes on one machine or many join into one pool
//! over libp2p, and their executors steal work from each other.
//!
//! A [`Node`] is a local [`Pool`] plus a driver thread that
//! runs a libp2p swarm. The pool keeps scheduling exactly as it does alone;
//! when its executors run dry they ask other nodes for work, and events for
//! activities elsewhere leave through the driver.
//!
//! ```no_run
//! use constellation::net::{Node, NodeConfig};
//! use constellation::Pool;
//!
//! // The first node listens; the others name it as their bootstrap.
//! let first = Node::start(NodeConfig::default(), Pool::builder().executors(2))?;
//! let address = first.join_address();
//! let second = Node::start(
//!     NodeConfig { bootstrap: vec![address], ..NodeConfig::default() },
//!     Pool::builder().executors(2),
//! )?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Transport
//! TCP, then a pnet pre-shared key ([`key`]), then noise, then yamux, with
//! one request-response protocol ([`message`], framed by [`codec`]). QUIC
//! is not offered: it cannot carry a pnet key. A node that listens on
//! anything but loopback refuses to start without a key.
//!
//! # The node protocol
//! Everything between nodes is decided by one sans-IO state machine,
//! [`protocol::StateMachine`](crate::protocol::StateMachine), the same one the simulator
//! runs; the driver thread only carries its messages over libp2p, feeds it
//! the time, and hosts it on the local pool. What follows is what that
//! protocol does; its module says how.
//!
//! # Membership
//! A node says hello to its bootstrap nodes; from then on SWIM (through
//! `foca`) spreads membership: every node learns every member and what its
//! executors offer. SWIM probes members at random; a member that does not
//! answer is suspected, and declared dead if it does not refute that within
//! [`NodeConfig::failure_timeout`]. A node starved of CPU for a while is
//! suspected, refutes, and stays a member; one that was declared dead all
//! the same rejoins under a renewed identity.
//!
//! # Stealing
//! An executor that finds nothing on its node goes to sleep and the node
//! asks another node for work matching that executor's context, choosing
//! the victim by [`Strategy`]. At most one request per distinct executor
//! context is in flight, and full rounds of empty replies make it pause
//! (1 ms, doubling, at most 50 ms). The victim sends up to half of its
//! queued work, at most [`NodeConfig::max_steal`] activities. Only activities
//! that never started move, and only ones that may leave their node.
//! Under hierarchical stealing a request to another site asks for less
//! ([`WideSteal`]): what the idle executors can start, doubling after each
//! full reply while the own site stays dry.
//!
//! # Events
//! An event goes to its target's origin node (named in the target's id),
//! which forwards it to where the activity went; a thief tells the origin
//! where the activity is, so a route takes at most two hops once that
//! news has arrived. An event that arrives before its activity waits for
//! it, up to [`NodeConfig::early_event_wait`]. Events that reach no activity
//! are logged and counted ([`NetStats::undeliverable`]), never dropped
//! silently.
//!
//! # Failures: execution is at-least-once
//! The exporter of an activity keeps a copy until it hears that the
//! activity finished. If the node it went to dies, the copy is queued again
//! with its attempt count raised, up to [`NodeConfig::max_attempts`]; past
//! that, or if the activity is not [`restartable`](crate::Activity::restartable),
//! it is given up and reported ([`NetStats::lost`], [`Node::take_lost`],
//! and [`NodeError::Lost`] from [`Node::done`]). An activity can therefore run
//! more than once, and events its first run sent can arrive as well as
//! those of its second: results should be idempotent.

pub mod codec;

mod driver;
mod join;
pub mod key;
pub mod message;

pub mod transport;

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use libp2p::PeerId;
use parking_lot::Mutex;

use crate::activity::Activity;
use crate::context::ExecutorContext;
use crate::core::{MatchTable, SubmitError};
use crate::event::PayloadValue;
use crate::id::{ActivityId, NodeId};
use crate::local::{DoneError, Pool, PoolBuilder, PoolError, RunSummary};
use message::{Request, Response};

pub use crate::protocol::strategy::{Strategy, WideSteal};
/// What a node counts: the node protocol's counters, with the frames and
/// connections the driver refused.
pub use crate::protocol::Stats as NetStats;
pub use join::{JoinFailure, JoinProblem, MasterState};
pub use key::PoolKey;
/// A node's libp2p identity (an ed25519 key pair), as
/// [`NodeConfig::identity`] takes it.
pub use libp2p::identity::Keypair;
/// One part of a [`Multiaddr`] (`/ip4/…`, `/tcp/…`), as libp2p reads it.
pub use libp2p::multiaddr::Protocol;
/// Addresses of nodes, as libp2p writes them (`/ip4/…/tcp/…/p2p/…`).
pub use libp2p::Multiaddr;
pub use message::{MemberStatus, NetPeer, RelabelRequest};

/// An app request as it reaches this node's [`AppHandler`].
#[derive(Debug, Clone)]
pub struct AppRequest {
    /// The peer that asked. Only peers with the pool key get this far.
    pub from: PeerId,
    /// What it asked, in the application's own encoding.
    pub body: Vec<u8>,
}

/// What a node's application answers to app requests: the answer's bytes,
/// or why it refuses. It runs on a thread of tokio's blocking pool, not on
/// the driver's, so it may take a while (a database, a process to start)
/// without holding up the protocol; requests may arrive at once from
/// several peers, so it must be `Sync`.
pub type AppHandler = Arc<dyn Fn(AppRequest) -> Result<Vec<u8>, String> + Send + Sync>;

/// How a node joins and behaves in a pool.
#[derive(Clone)]
pub struct NodeConfig {
    /// Where to listen. The default is loopback with a port the OS picks.
    pub listen: Multiaddr,
    /// Members to dial at start (with or without a `/p2p/` suffix). Empty
    /// for the first node of a pool.
    pub bootstrap: Vec<Multiaddr>,
    /// The pool's pre-shared key; required to listen off loopback.
    pub key: Option<PoolKey>,
    /// This node's site, for hierarchical stealing.
    pub site: Option<String>,
    /// How idle executors find work on other nodes.
    pub strategy: Strategy,
    /// Whether this node is the master that master-worker stealing asks.
    pub master: bool,
    /// The steal pool this node belongs to: only nodes that steal from it
    /// may take its work.
    pub steal_pool: String,
    /// The steal pool this node takes work from.
    pub steal_from: String,
    /// The most activities one steal reply carries.
    pub max_steal: usize,
    /// How many activities a hierarchical steal from another site asks
    /// for (by default: what the idle executors can start, doubling while
    /// the site stays dry).
    pub wide_steal: WideSteal,
    /// How long a member SWIM suspects (it missed a probe) has to show it
    /// is alive before it is declared dead. SWIM probes every half of this
    /// (at most every 2 s), so a member that died is given up about this
    /// plus three probe periods later: 7.5 s for the default 3 s.
    pub failure_timeout: Duration,
    /// How many times an activity may be handed out before it is given up
    /// when the nodes running it die.
    pub max_attempts: u32,
    /// The largest frame accepted or sent, in bytes.
    pub max_frame: usize,
    /// How long an event for an activity not (yet) here waits for it.
    pub early_event_wait: Duration,
    /// What this process is, for `constellation status`: `agent`, `pool`,
    /// `run`, ... The default is `node`.
    pub role: String,
    /// The host this node runs on, for `constellation status`.
    pub host: String,
    /// Answers the app requests ([`Node::ask_app`]) that reach this node;
    /// without one, they are refused.
    pub app_handler: Option<AppHandler>,
    /// The node's libp2p identity; `None` makes a new one. A pool node
    /// that keeps its identity (and address) across a restart is dialled
    /// again by the members that knew it, and they recognise its peer id.
    pub identity: Option<Keypair>,
    /// When this node must be gone (an agent's walltime), if it must.
    pub deadline: Option<Instant>,
}

impl std::fmt::Debug for NodeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key and identity are secrets, and the handler is code.
        f.debug_struct("NodeConfig")
            .field("listen", &self.listen)
            .field("bootstrap", &self.bootstrap)
            .field("key", &self.key.as_ref().map(|key| key.fingerprint()))
            .field("site", &self.site)
            .field("strategy", &self.strategy)
            .field("master", &self.master)
            .field("steal_pool", &self.steal_pool)
            .field("steal_from", &self.steal_from)
            .field("max_steal", &self.max_steal)
            .field("wide_steal", &self.wide_steal)
            .field("failure_timeout", &self.failure_timeout)
            .field("max_attempts", &self.max_attempts)
            .field("max_frame", &self.max_frame)
            .field("early_event_wait", &self.early_event_wait)
            .field("role", &self.role)
            .field("host", &self.host)
            .field("app_handler", &self.app_handler.is_some())
            .field(
                "identity",
                &self.identity.as_ref().map(|k| k.public().to_peer_id()),
            )
            .field("deadline", &self.deadline)
            .finish()
    }
}

impl NodeConfig {
    /// The most bytes an activity's encoded state may have to be handed to
    /// another node: half the largest frame, leaving room for the events
    /// waiting for it and the envelope around them. A larger activity
    /// never leaves the node it was created on; if no executor there can
    /// run it, it is given up ([`Node::take_lost`]). Check work against
    /// this before submitting it to a node that has no executor for it.
    pub fn largest_activity(&self) -> usize {
        self.max_frame / 2
    }
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            listen: "/ip4/127.0.0.1/tcp/0".parse().expect("a valid multiaddr"),
            bootstrap: Vec::new(),
            key: None,
            site: None,
            strategy: Strategy::Random,
            master: false,
            steal_pool: "default".to_string(),
            steal_from: "default".to_string(),
            max_steal: 256,
            wide_steal: WideSteal::default(),
            failure_timeout: Duration::from_secs(3),
            max_attempts: 3,
            max_frame: codec::DEFAULT_MAX_FRAME,
            early_event_wait: Duration::from_secs(10),
            role: "node".to_string(),
            host: String::new(),
            identity: None,
            app_handler: None,
            deadline: None,
        }
    }
}

/// Why a node could not start, or did not end cleanly.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The local pool could not start.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// Listening off loopback needs a key.
    #[error("refusing to listen on {0} without a pre-shared key: anyone who can reach it could join the pool and run code. Give a key file (`constellation pool key --new FILE`) or set CONSTELLATION_KEY, or listen on 127.0.0.1")]
    KeyRequired(Multiaddr),
    /// The transport could not be built or could not listen.
    #[error("network setup failed: {0}")]
    Transport(String),
    /// Work remained that can never run.
    #[error(transparent)]
    Stalled(#[from] Box<DoneError>),
    /// Activities were given up after their nodes died.
    #[error("{} activities were given up after the nodes running them died (e.g. {:?}); the run is incomplete", lost.len(), lost.iter().take(5).collect::<Vec<_>>())]
    Lost {
        /// The given-up activities and why.
        lost: Vec<(ActivityId, String)>,
        /// What the run did.
        summary: Box<RunSummary>,
    },
    /// No known member offers what an activity needs.
    #[error(transparent)]
    Submit(#[from] SubmitError),
    /// A member answered a request with a refusal.
    #[error("{node} refused: {reason}")]
    Refused {
        /// The member.
        node: NodeId,
        /// Why.
        reason: String,
    },
    /// A request to a member got no answer.
    #[error("no answer from {node}: {reason}")]
    NoAnswer {
        /// The member.
        node: NodeId,
        /// Why.
        reason: String,
    },
    /// Waiting for members timed out.
    #[error("timed out after {waited:?} with {members} members, waiting for {wanted}")]
    Timeout {
        /// How long it waited.
        waited: Duration,
        /// Members known then, this node included.
        members: usize,
        /// Members wanted.
        wanted: usize,
    },
}

/// A member as this node sees it.
#[derive(Debug, Clone)]
pub struct MemberView {
    /// Its node id.
    pub node: NodeId,
    /// Its libp2p peer id.
    pub peer: PeerId,
    /// Its site.
    pub site: Option<String>,
    /// Whether it is the master.
    pub master: bool,
    /// What its executors offer.
    pub executors: Vec<ExecutorContext>,
}

/// What the driver thread and the node's handle share.
pub(crate) struct Shared {
    pub(crate) members: Mutex<Vec<MemberView>>,
    /// What every executor of the pool offers, this node's included, as
    /// far as this node knows; rebuilt when members come and go.
    pub(crate) offered: Mutex<Arc<MatchTable>>,
    pub(crate) stats: Mutex<NetStats>,
    pub(crate) lost: Mutex<Vec<(ActivityId, String)>>,
    /// Set once a master was a member; whether it still is, `members` says.
    pub(crate) master_seen: std::sync::atomic::AtomicBool,
    /// Set when a master said it leaves, cleared when a master is a member
    /// again: tells a master stopped on purpose from one that died.
    pub(crate) master_left: std::sync::atomic::AtomicBool,
    /// The last failed dial to each bootstrap address that has not been
    /// reached since.
    pub(crate) join_problems: Mutex<Vec<JoinProblem>>,
    pub(crate) changed: parking_lot::Condvar,
}

/// One process's membership of a networked pool: its executors, and the
/// driver that connects them to the other members.
pub struct Node {
    pool: Option<Arc<Pool>>,
    commands: tokio::sync::mpsc::UnboundedSender<driver::Command>,
    thread: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
    peer: PeerId,
    listening: Vec<Multiaddr>,
}

impl Node {
    /// Starts the executors of `pool` and joins (or founds) a pool.
    pub fn start(config: NodeConfig, pool: PoolBuilder) -> Result<Node, NodeError> {
        driver::start(config, pool)
    }

    /// This node's id.
    pub fn node_id(&self) -> NodeId {
        self.pool().node()
    }

    /// This node's libp2p peer id.
    pub fn peer_id(&self) -> PeerId {
        self.peer
    }

    /// The addresses this node listens on, each ending in `/p2p/<peer id>`.
    pub fn listen_addrs(&self) -> &[Multiaddr] {
        &self.listening
    }

    /// The address other nodes give as their bootstrap to join.
    pub fn join_address(&self) -> Multiaddr {
        self.listening[0].clone()
    }

    /// The local pool, to submit to and send from.
    pub fn pool(&self) -> &Pool {
        self.pool.as_ref().expect("the pool lives until done")
    }

    /// Submits an activity from the main program. Refused if neither this
    /// node nor any member known now offers what it needs, or if it may not
    /// leave this node and no executor here can run it.
    pub fn submit<A: Activity>(&self, activity: A) -> Result<ActivityId, NodeError> {
        let contexts = activity.context();
        let address = self.pool().address();
        let here = self.pool().matcher();
        if !activity.may_be_stolen() {
            // It stays on this node, so only this node's executors count.
            here.check(address, &contexts, None)?;
        } else if !here.any_executor_can_run(&contexts) {
            let offered = self.shared.offered.lock().clone();
            offered.check(address, &contexts, None)?;
        }
        Ok(self.pool().submit(activity)?)
    }

    /// Sends `value` to activity `target`, wherever it lives.
    pub fn send<T: PayloadValue>(&self, target: ActivityId, value: T) -> Result<(), NodeError> {
        self.pool()
            .send(target, value)
            .map_err(|undeliverable| NodeError::Transport(undeliverable.to_string()))
    }

    /// The other members known now.
    pub fn members(&self) -> Vec<MemberView> {
        self.shared.members.lock().clone()
    }

    /// Waits until `count` members, this node included, know each other
    /// (as far as this node can tell: it knows `count - 1` others).
    pub fn wait_for_members(&self, count: usize, timeout: Duration) -> Result<(), NodeError> {
        let start = Instant::now();
        let mut members = self.shared.members.lock();
        while members.len() + 1 < count {
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Err(NodeError::Timeout {
                    waited: start.elapsed(),
                    members: members.len() + 1,
                    wanted: count,
                });
            }
            self.shared.changed.wait_for(&mut members, left);
        }
        Ok(())
    }

    /// Whether a master (the pool node) is a member now. A node that joins
    /// a pool has joined once this is true: knowing members but no master
    /// means it reached other workers only, or nobody.
    pub fn master_known(&self) -> bool {
        self.master_state() == MasterState::Known
    }

    /// Where this node stands with the pool's master: not seen yet, a
    /// member, gone after saying it leaves, or lost without a word.
    pub fn master_state(&self) -> MasterState {
        use std::sync::atomic::Ordering;
        let members = self.shared.members.lock();
        if members.iter().any(|member| member.master) {
            MasterState::Known
        } else if !self.shared.master_seen.load(Ordering::SeqCst) {
            MasterState::NotYetSeen
        } else if self.shared.master_left.load(Ordering::SeqCst) {
            MasterState::Left
        } else {
            MasterState::Lost
        }
    }

    /// Why the bootstrap addresses cannot be reached, if the last dial to
    /// one of them failed and it has not been reached since: of the last
    /// failure at each address, the one that got furthest (a wrong key
    /// over a refused connection: a pool file lists every interface of
    /// the pool node, and most may be out of reach from here). `None`
    /// while every dial succeeded or is still under way; a node that
    /// connected but was never answered has no problem to show here.
    pub fn join_problem(&self) -> Option<JoinProblem> {
        let problems = self.shared.join_problems.lock();
        problems
            .iter()
            .max_by_key(|problem| problem.failure)
            .cloned()
    }

    /// Waits until the master, once known, has left or died; `false` if
    /// `timeout` passed first. Worker processes serve until then.
    pub fn wait_for_master_gone(&self, timeout: Option<Duration>) -> bool {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut members = self.shared.members.lock();
        loop {
            let seen = self
                .shared
                .master_seen
                .load(std::sync::atomic::Ordering::SeqCst);
            if seen && !members.iter().any(|member| member.master) {
                return true;
            }
            match deadline {
                Some(deadline) => {
                    if self
                        .shared
                        .changed
                        .wait_until(&mut members, deadline)
                        .timed_out()
                    {
                        return false;
                    }
                }
                None => self.shared.changed.wait(&mut members),
            }
        }
    }

    /// The activities this node gave up since the last call, with why:
    /// those it created (or was the first to take in) whose nodes died on
    /// every attempt allowed, or that could never be handed over. Whoever
    /// waits for their results must stop waiting: they will not come.
    /// Those taken here are not reported again by [`done`](Self::done).
    pub fn take_lost(&self) -> Vec<(ActivityId, String)> {
        std::mem::take(&mut *self.shared.lost.lock())
    }

    /// The driver's counters now.
    pub fn stats(&self) -> NetStats {
        self.shared.stats.lock().clone()
    }

    /// Waits until all work this node submitted or took in is finished —
    /// including work stolen from it, wherever it ran — then leaves the
    /// pool and stops. Fails if work was given up or can never run.
    ///
    /// Activities that other nodes' activities submitted are their nodes'
    /// business: wait for their results (with a collector) before this.
    pub fn done(mut self) -> Result<(RunSummary, NetStats), NodeError> {
        let _ = self.commands.send(driver::Command::StopStealing);
        self.pool().wait_quiescent();
        self.stop_driver();
        let stats = self.shared.stats.lock().clone();
        let pool = Arc::try_unwrap(self.pool.take().expect("done runs once"))
            .unwrap_or_else(|_| unreachable!("the driver thread has ended"));
        let summary = pool
            .done()
            .map_err(|error| NodeError::Stalled(Box::new(error)))?;
        let lost = std::mem::take(&mut *self.shared.lost.lock());
        if !lost.is_empty() {
            return Err(NodeError::Lost {
                lost,
                summary: Box::new(summary),
            });
        }
        Ok((summary, stats))
    }

    /// What this node would tell `constellation status` about itself.
    pub fn status(&self) -> Result<MemberStatus, NodeError> {
        let (reply, answer) = std::sync::mpsc::channel();
        let _ = self.commands.send(driver::Command::Status { reply });
        answer.recv().map_err(|_| NodeError::NoAnswer {
            node: self.node_id(),
            reason: "the network driver has stopped".into(),
        })
    }

    /// Asks member `node` how it is doing.
    pub fn member_status(
        &self,
        node: NodeId,
        timeout: Duration,
    ) -> Result<MemberStatus, NodeError> {
        match self.ask(node, Request::Status, timeout)? {
            Response::Status(status) => Ok(*status),
            other => Err(unexpected(node, &other)),
        }
    }

    /// Asks the application on member `node` (its [`AppHandler`]) and
    /// returns its answer. Fails with [`NodeError::Refused`] if it has no
    /// handler or the handler refuses, and with [`NodeError::NoAnswer`] if
    /// no answer comes within `timeout`.
    pub fn ask_app(
        &self,
        node: NodeId,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, NodeError> {
        match self.ask(node, Request::App(body), timeout)? {
            Response::App(answer) => Ok(answer),
            Response::Refused(reason) => Err(NodeError::Refused { node, reason }),
            other => Err(unexpected(node, &other)),
        }
    }

    /// The pool node (the master) as a member, if this node knows it now.
    pub fn master(&self) -> Option<MemberView> {
        (self.shared.members.lock().iter())
            .find(|member| member.master)
            .cloned()
    }

    /// Gives executors of this node (all if `executors` is `None`) a new
    /// context while they run, and tells the other members, which steal
    /// and send work accordingly from then on.
    pub fn relabel(
        &self,
        executors: Option<Vec<u32>>,
        context: ExecutorContext,
    ) -> Result<(), NodeError> {
        let (reply, answer) = std::sync::mpsc::channel();
        let request = RelabelRequest { executors, context };
        let _ = self
            .commands
            .send(driver::Command::Relabel { request, reply });
        let node = self.node_id();
        match answer.recv() {
            Ok(Ok(())) => Ok(()),
            Ok(Err(reason)) => Err(NodeError::Refused { node, reason }),
            Err(_) => Err(NodeError::NoAnswer {
                node,
                reason: "the network driver has stopped".into(),
            }),
        }
    }

    /// [`relabel`](Self::relabel) for member `node`'s executors.
    pub fn relabel_member(
        &self,
        node: NodeId,
        executors: Option<Vec<u32>>,
        context: ExecutorContext,
        timeout: Duration,
    ) -> Result<(), NodeError> {
        let request = Request::Relabel(RelabelRequest { executors, context });
        match self.ask(node, request, timeout)? {
            Response::Ack => Ok(()),
            Response::Refused(reason) => Err(NodeError::Refused { node, reason }),
            other => Err(unexpected(node, &other)),
        }
    }

    fn ask(
        &self,
        node: NodeId,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, NodeError> {
        let (reply, answer) = std::sync::mpsc::channel();
        let command = driver::Command::Ask {
            node,
            request,
            reply,
        };
        let _ = self.commands.send(command);
        match answer.recv_timeout(timeout) {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(reason)) => Err(NodeError::NoAnswer { node, reason }),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(NodeError::NoAnswer {
                node,
                reason: format!("no answer within {timeout:?}"),
            }),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(NodeError::NoAnswer {
                node,
                reason: "the network driver has stopped".into(),
            }),
        }
    }

    /// Stops asking other nodes for work; work already here still runs, and
    /// others may still steal from this node. An agent calls this when its
    /// allocation is about to end, then [`done`](Self::done).
    pub fn stop_taking_work(&self) {
        let _ = self.commands.send(driver::Command::StopStealing);
    }

    /// Leaves the pool now, without waiting for work: for worker nodes
    /// whose master is gone.
    pub fn leave(mut self) -> NetStats {
        self.stop_driver();
        self.shared.stats.lock().clone()
    }

    fn stop_driver(&mut self) {
        let _ = self.commands.send(driver::Command::Leave);
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("the network driver thread panicked");
            }
        }
    }
}

fn unexpected(node: NodeId, response: &Response) -> NodeError {
    NodeError::NoAnswer {
        node,
        reason: format!("it gave an answer of the wrong kind: {response:?}"),
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop_driver();
    }
}
