//! Why and how a run stops before its graph is done: SIGINT or SIGTERM,
//! its pool node gone for longer than `--reconnect`, or a full journal
//! disk. A stopping run asks the agents to kill its commands there
//! ([`cancel_on_agents`]), kills its own, and ends with an error that
//! says how to resume it ([`Stop::exit`]).

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::bail;
use constellation::net::Node;
use constellation::NodeId;
use gluein::service::{ServiceRequest, ServiceResponse};

use super::progress::Progress;
use super::RunArgs;

/// How long a command may take to end after the SIGTERM of a stopping run,
/// before it gets SIGKILL.
pub(super) const KILL_GRACE: Duration = Duration::from_secs(3);

/// How long a stopping run waits for the reports of the commands it killed.
pub(super) const KILLED_REPORTS_WAIT: Duration = Duration::from_secs(10);

/// How long a stopping run waits for each agent's answer to its request to
/// kill the run's commands there.
const KILL_REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// How many agents a stopping run asks at once.
const KILL_REQUESTS_AT_ONCE: usize = 32;

/// Asks every agent of the pool to kill the commands of this run's
/// activities and to start none of them any more
/// ([`ServiceRequest::KillOrigin`], this node being their origin). Returns
/// how many activities will report because of it (killed commands, and
/// dropped retries reporting their failed attempt), each marked cancelled.
/// An agent that does not answer within [`KILL_REQUEST_TIMEOUT`] or refuses
/// is named in a warning: the stop goes on without it.
pub(super) fn cancel_on_agents(node: &Node) -> usize {
    let agents: Vec<NodeId> = (super::pool::agents_of(node))
        .filter(|member| !member.master)
        .map(|member| member.node)
        .collect();
    if agents.is_empty() {
        return 0;
    }
    let request = gluein::service::encode(&ServiceRequest::KillOrigin {
        origin: executors::shell::origin_text(node.node_id()),
    });
    let (mut killed, mut dropped) = (0, 0);
    for group in agents.chunks(KILL_REQUESTS_AT_ONCE) {
        let answers: Vec<(NodeId, Result<ServiceResponse, String>)> = std::thread::scope(|scope| {
            let asking: Vec<_> = (group.iter())
                .map(|&agent| {
                    let request = request.clone();
                    scope.spawn(move || {
                        let answer = node
                            .ask_app(agent, request, KILL_REQUEST_TIMEOUT)
                            .map_err(|error| error.to_string())
                            .and_then(|bytes| gluein::service::decode(&bytes));
                        (agent, answer)
                    })
                })
                .collect();
            (asking.into_iter())
                .filter_map(|asked| asked.join().ok())
                .collect()
        });
        for (agent, answer) in answers {
            match answer {
                Ok(ServiceResponse::Killed {
                    running,
                    not_started,
                }) => {
                    killed += running;
                    dropped += not_started;
                }
                Ok(other) => eprintln!(
                    "warning: agent {agent} answered the request to kill this run's commands \
                     with {other:?}"
                ),
                Err(error) => eprintln!(
                    "warning: could not have agent {agent} kill this run's commands: {error}"
                ),
            }
        }
    }
    eprintln!(
        "asked {} agent(s) to kill this run's commands: {killed} killed, {dropped} retries dropped",
        agents.len()
    );
    killed + dropped
}

/// Why a run stopped before its graph was done.
pub(super) enum Stop {
    /// SIGINT or SIGTERM.
    Signal,
    /// The pool node has been gone since `since`, longer than `--reconnect`.
    PoolGone { since: Instant },
    /// The disk holding the journal is full: what runs is not recorded.
    DiskFull,
}

impl Stop {
    /// What the run does now, in words.
    pub(super) fn stopping(&self) -> &'static str {
        match self {
            Stop::Signal => "stopping: killing the commands this run started",
            Stop::PoolGone { .. } => {
                "stopping: the pool node did not come back; killing the commands this run started"
            }
            Stop::DiskFull => {
                "stopping: the journal cannot be written; killing the commands this run started"
            }
        }
    }

    /// Ends the stopped run: exit code 130 after a signal, or the error
    /// that says what stopped it and how to resume, with `unfinished`
    /// activities left and the journal at `journal_path`.
    pub(super) fn exit(
        self,
        args: &RunArgs,
        journal_path: &Path,
        unfinished: usize,
    ) -> anyhow::Result<ExitCode> {
        match self {
            Stop::Signal => {
                use std::io::Write as _;
                let _ = std::io::stdout().flush();
                std::process::exit(130);
            }
            Stop::DiskFull => bail!(
                "the disk holding the journal {} filled during the run: no command started after \
                 that, and {unfinished} activities did not finish; the attempts made are journaled \
                 and the run is interrupted; free space there and resume with \
                 `constellation run {} --resume {}`",
                journal_path.display(),
                args.graph.display(),
                journal_path.display()
            ),
            Stop::PoolGone { since } => {
                let pool = args.pool.as_deref().unwrap_or_default();
                bail!(
                    "the pool node at {pool} is gone (this run lost it {} s ago: it stopped, or stopped answering); \
                     {unfinished} activities did not finish; resume with \
                     `constellation run {} --resume {} --pool {pool}`",
                    since.elapsed().as_secs(),
                    args.graph.display(),
                    journal_path.display()
                )
            }
        }
    }
}

/// Watches a pool run's pool node: when it is gone, says so, and gives
/// up once it has been gone for longer than `--reconnect`.
#[derive(Default)]
pub(super) struct PoolNodeWatch {
    gone_since: Option<Instant>,
}

impl PoolNodeWatch {
    /// [`Stop::PoolGone`] once the pool node has been gone for longer than
    /// `reconnect`.
    pub(super) fn check(
        &mut self,
        node: &Node,
        reconnect: Duration,
        progress: &Progress,
    ) -> Option<Stop> {
        if !node.wait_for_master_gone(Some(Duration::ZERO)) {
            if self.gone_since.take().is_some() {
                progress.say("the pool node is back; the run goes on");
            }
            return None;
        }
        let since = *self.gone_since.get_or_insert_with(|| {
            progress.say(&if reconnect.is_zero() {
                "the pool node is gone (no member sees it any more)".to_string()
            } else {
                format!(
                    "the pool node is gone (no member sees it any more); \
                     waiting up to {} s for it to come back (--reconnect)",
                    reconnect.as_secs()
                )
            });
            Instant::now()
        });
        (since.elapsed() >= reconnect).then_some(Stop::PoolGone { since })
    }
}
