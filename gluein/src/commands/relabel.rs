//! `constellation relabel`: new labels for a live agent's executors.
//!
//! The agent keeps running: calls in progress go on, and from its next
//! call each relabelled executor takes only work that matches its new
//! labels. Every member hears of the change, so work for the new labels
//! can be submitted and stolen at once.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::Args;
use constellation::net::{MemberView, Node};
use constellation::ExecutorContext;

use super::{is_internal, observe, user_labels};
use timefmt::parse_duration;

/// Arguments of `constellation relabel`.
#[derive(Args)]
#[command(after_help = "\
Examples:
  constellation relabel --agent 8b0e4d13 --context gpu
  constellation relabel --agent 8b0e4d13 --context site:vu,anywhere --executor 0 --executor 1

The executors offer exactly the labels given, in that priority order: the
probed ones and `anywhere` are dropped unless you list them (`constellation
status` shows what each offers now). Their rank preference is kept.
Queued work the new labels do not match stays for executors that do;
activities already started finish where they are.")]
pub(crate) struct RelabelArgs {
    #[command(flatten)]
    address: super::PoolAddress,
    /// The agent: its MEMBER id from `constellation status` (any unique
    /// prefix), its full node id, or its libp2p peer id.
    #[arg(long, value_name = "ID")]
    agent: String,
    /// The new labels, comma separated, first served first, e.g. `gpu,anywhere`.
    #[arg(long, value_name = "LABELS")]
    context: String,
    /// Relabel only this executor (by index, from `status`); repeatable.
    /// Default: all of the agent's executors.
    #[arg(long = "executor", value_name = "INDEX")]
    executors: Vec<u32>,
    /// Print JSON (the member, and each executor's labels before and
    /// after) for scripts, in the style of `status --json`.
    #[arg(long)]
    json: bool,
    /// How long to wait for the pool and for the agent's answer.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    timeout: Duration,
}

/// Resolves the agent, sends it the new labels, and says what changed.
pub(crate) fn main(args: RelabelArgs) -> anyhow::Result<ExitCode> {
    let labels = user_labels(Some(&args.context))?;
    if labels.is_empty() {
        bail!("--context names no labels; give at least one, e.g. --context gpu");
    }
    let node = observe(&args.address, "relabel", args.timeout)?;
    let outcome = relabel(&node, &args, labels);
    node.leave();
    outcome
}

fn relabel(
    node: &Node,
    args: &RelabelArgs,
    labels: Vec<constellation::Context>,
) -> anyhow::Result<ExitCode> {
    let members = node.members();
    let agent = find_member(&members, &args.agent)?;
    let before = node
        .member_status(agent.node, args.timeout)
        .with_context(|| format!("asking {} about itself", agent.node))?;
    let work: Vec<&ExecutorContext> = (before.member.executors.iter())
        .filter(|e| !is_internal(e))
        .collect();
    if work.is_empty() {
        bail!(
            "{} is a {} with no executors for work; relabel an agent (see `constellation status`)",
            agent.node,
            before.role
        );
    }
    let preference = work[0].preference;
    let context = ExecutorContext::new(labels).with_preference(preference);
    let executors = (!args.executors.is_empty()).then(|| args.executors.clone());
    node.relabel_member(agent.node, executors, context.clone(), args.timeout)?;
    let after = node.member_status(agent.node, args.timeout)?;
    let changed: Vec<ExecutorChange> = (before.member.executors.iter())
        .zip(&after.member.executors)
        .enumerate()
        .filter(|(_, (old, new))| old != new)
        .map(|(index, (old, new))| ExecutorChange {
            index,
            before: old.label_list(),
            after: new.label_list(),
        })
        .collect();
    if args.json {
        let json = RelabelJson {
            node: agent.node.to_string(),
            peer: agent.peer.to_string(),
            role: after.role.clone(),
            host: after.host.clone(),
            changed,
        };
        println!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "relabelled {} ({} on {}):",
        agent.node, after.role, after.host
    );
    for change in &changed {
        println!(
            "  #{}  {}  ->  {}",
            change.index, change.before, change.after
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `relabel --json`: the agent, named as `status --json` names members.
#[derive(serde::Serialize)]
struct RelabelJson {
    node: String,
    peer: String,
    role: String,
    host: String,
    /// Only the executors whose labels changed.
    changed: Vec<ExecutorChange>,
}

/// One relabelled executor: its labels in priority order, comma separated.
#[derive(serde::Serialize)]
struct ExecutorChange {
    index: usize,
    before: String,
    after: String,
}

/// The member `id` names: a prefix of its node id, or its peer id.
fn find_member<'a>(members: &'a [MemberView], id: &str) -> anyhow::Result<&'a MemberView> {
    let wanted = id.trim().to_ascii_lowercase().replace('-', "");
    if wanted.is_empty() {
        bail!("--agent is empty; give a MEMBER id from `constellation status`");
    }
    let matches: Vec<&MemberView> = (members.iter())
        .filter(|m| {
            m.node.uuid().simple().to_string().starts_with(&wanted) || m.peer.to_string() == id
        })
        .collect();
    match matches.as_slice() {
        [one] => Ok(one),
        [] => {
            let known: Vec<String> = members.iter().map(|m| m.node.to_string()).collect();
            bail!(
                "no member of the pool has the id {id:?}; members: {} (see `constellation status`)",
                known.join(", ")
            )
        }
        many => {
            let ids: Vec<String> = many.iter().map(|m| m.node.uuid().to_string()).collect();
            bail!(
                "{id:?} names {} members ({}); give more of the id",
                many.len(),
                ids.join(", ")
            )
        }
    }
}
