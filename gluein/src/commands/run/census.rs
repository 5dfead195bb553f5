//! The executors of a run's agents, in its journal: each agent of the pool
//! as a node of its own (`HOST#ID`), with its executors' labels and cores,
//! so that a report draws a lane per executor of each agent and counts
//! their cores, and an attempt's slot names the agent that ran it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use constellation::net::{MemberView, Node};
use constellation::{ExecutorContext, NodeId};
use journal::{ExecutorRow, Journal};

use super::pool::agents_of;
use super::record::NodeNames;

/// How long the run waits for an agent to say which host it runs on.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// How long after an agent did not answer the run asks it again.
const ASK_AGAIN_AFTER: Duration = Duration::from_secs(10);

/// The agents whose executors the journal lists, and when the ones that
/// did not answer were last asked.
#[derive(Default)]
pub(super) struct Census {
    /// Per agent, its host and its executors as listed: a relabelled
    /// agent is listed again with its new labels.
    listed: HashMap<NodeId, (String, Vec<ExecutorContext>)>,
    unanswered: HashMap<NodeId, Instant>,
}

impl Census {
    /// Lists in run `run` of `journal` the executors of each agent of the
    /// pool not listed yet, or whose labels changed. The agent is asked
    /// its host name (at most [`ASK_TIMEOUT`] each): one that does not
    /// answer is asked again later, and its attempts still name it, with
    /// no cores.
    pub(super) fn record_new(
        &mut self,
        node: &Node,
        journal: &mut Journal,
        run: i64,
    ) -> anyhow::Result<()> {
        let mut rows = Vec::new();
        for agent in agents_of(node) {
            let known = self.listed.get(&agent.node);
            if known.is_some_and(|(_, executors)| executors == &agent.executors) {
                continue;
            }
            if (self.unanswered.get(&agent.node)).is_some_and(|at| at.elapsed() < ASK_AGAIN_AFTER) {
                continue;
            }
            let asked = match known {
                Some((host, _)) => Ok(host.clone()),
                None => node
                    .member_status(agent.node, ASK_TIMEOUT)
                    .map(|status| status.host),
            };
            let host = match asked {
                Ok(host) => host,
                Err(error) => {
                    tracing::warn!(agent = %agent.node, %error, "an agent did not say which host it runs on; its executors are listed once it does");
                    self.unanswered.insert(agent.node, Instant::now());
                    continue;
                }
            };
            self.unanswered.remove(&agent.node);
            rows.extend(agent_rows(&agent, &host));
            self.listed.insert(agent.node, (host, agent.executors));
        }
        if !rows.is_empty() {
            journal.record_executors(run, &rows)?;
        }
        Ok(())
    }

    /// Lists the executors of node `id`, which ran an attempt on host
    /// `host`, if it is an agent not listed yet (one that did not answer
    /// when asked, say): no question needed, the attempt named its host.
    pub(super) fn ran_on(
        &mut self,
        node: &Node,
        id: NodeId,
        host: &str,
        journal: &mut Journal,
        run: i64,
    ) -> anyhow::Result<()> {
        if self.listed.contains_key(&id) {
            return Ok(());
        }
        if let Some(agent) = agents_of(node).find(|agent| agent.node == id) {
            journal.record_executors(run, &agent_rows(&agent, host))?;
            self.unanswered.remove(&id);
            self.listed.insert(id, (host.to_string(), agent.executors));
        }
        Ok(())
    }
}

/// The journal rows of `agent`'s executors, on host `host`.
fn agent_rows(agent: &MemberView, host: &str) -> Vec<ExecutorRow> {
    let name = NodeNames::HostAndId.name(host, agent.node);
    let count = agent.executors.len().max(1);
    (agent.executors.iter().enumerate())
        .map(|(k, context)| ExecutorRow {
            executor: k as i64,
            node: name.clone(),
            labels: context.label_list(),
            cores: cores_share(context, count),
        })
        .collect()
}

/// An executor's share of its host's cores, as the local run divides them:
/// the `cores=N` label the agent's probe gave it, divided among the
/// agent's `executors`, at least 1. An executor without that label (an
/// agent started or relabelled without its probed labels) counts as 1:
/// it runs one command at a time.
pub(super) fn cores_share(context: &ExecutorContext, executors: usize) -> i64 {
    let cores = (context.contexts.iter())
        .find(|c| &*c.label.name() == "cores")
        .and_then(|c| c.rank)
        .map_or(1, |rank| rank.lo);
    (cores / executors.max(1) as i64).max(1)
}

#[cfg(test)]
mod tests {
    use super::cores_share;
    use constellation::ExecutorContext;

    #[test]
    fn an_agents_cores_are_shared_among_its_executors() {
        let probed: ExecutorContext = "cpu>cores=8>mem=7>anywhere".parse().unwrap();
        assert_eq!(cores_share(&probed, 2), 4);
        assert_eq!(cores_share(&probed, 3), 2);
        assert_eq!(cores_share(&probed, 16), 1);
        let relabelled: ExecutorContext = "gpu".parse().unwrap();
        assert_eq!(cores_share(&relabelled, 2), 1);
    }
}
