//! `constellation status`: what the pool's members are doing right now.
//!
//! It joins the pool as an observer (a member whose one executor offers a
//! label nobody asks for), asks every member about itself over the
//! network, prints the answers and leaves.

use std::collections::{BTreeMap, HashSet};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use constellation::net::{MemberStatus, Node};
use constellation::NodeId;
use serde::Serialize;

use super::{is_internal, observe};
use timefmt::parse_duration;

/// Arguments of `constellation status`.
#[derive(Args)]
#[command(after_help = "\
Examples:
  constellation status
  constellation status --pool ~/pools/vu.json --json | jq '.members[] | {node, walltime_left_s}'

The MEMBER column is what `constellation relabel --agent` takes. Queue
lengths count never-started activities where they wait; one that names
several labels counts under each. WALLTIME is the time an agent has left
before its --walltime ends; it stops taking work before then. Queued work
for labels that no executor offers (all agents relabelled away, say) is
listed per label at the end, and under waiting_for_labels in --json.")]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    address: super::PoolAddress,
    /// Print one JSON object instead of tables, for scripts.
    #[arg(long)]
    json: bool,
    /// How long to wait for the pool, and for each member's answer.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    timeout: Duration,
}

/// One member in `--json` output.
#[derive(Serialize)]
struct MemberJson {
    node: String,
    peer: String,
    role: String,
    host: String,
    site: Option<String>,
    pid: u32,
    master: bool,
    uptime_s: f64,
    executors: Vec<ExecutorJson>,
    queued: BTreeMap<String, u64>,
    running: u64,
    waiting: u64,
    finished: u64,
    walltime_left_s: Option<f64>,
    longest_call_s: f64,
    draining: bool,
}

/// One executor in `--json` output.
#[derive(Serialize)]
struct ExecutorJson {
    index: usize,
    labels: String,
    busy: bool,
}

/// A member that did not answer.
#[derive(Serialize)]
struct SilentJson {
    node: String,
    error: String,
}

#[derive(Serialize)]
struct StatusJson {
    members: Vec<MemberJson>,
    silent: Vec<SilentJson>,
    /// Queued work per label that no executor of any member offers: it
    /// waits until one is relabelled or joins.
    waiting_for_labels: BTreeMap<String, u64>,
}

/// Asks every member and prints what they say.
pub(crate) fn main(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let node = observe(&args.address, "status", args.timeout)?;
    let (mut answers, silent) = ask_everyone(&node, args.timeout);
    node.leave();
    // Observers (this command, `relabel`) are not what anyone asks about.
    answers.retain(|status| !matches!(status.role.as_str(), "status" | "relabel"));
    answers.sort_by(|a, b| {
        (role_order(&a.role), &a.host, a.member.node).cmp(&(
            role_order(&b.role),
            &b.host,
            b.member.node,
        ))
    });
    if args.json {
        let json = StatusJson {
            members: answers.iter().map(member_json).collect(),
            silent: (silent.iter())
                .map(|(node, error)| SilentJson {
                    node: node.to_string(),
                    error: error.clone(),
                })
                .collect(),
            waiting_for_labels: (unoffered(&answers).into_iter())
                .map(|(label, at)| (label, at.iter().map(|(_, n)| n).sum()))
                .collect(),
        };
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        print!("{}", render(&answers, &silent));
    }
    Ok(if silent.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Every member's answer, asked all at once, and the members that gave none.
fn ask_everyone(node: &Node, timeout: Duration) -> (Vec<MemberStatus>, Vec<(NodeId, String)>) {
    // Observers are not reported, so they are not asked either: one that
    // has just left (the previous `status` of a script polling the pool)
    // can still be in the member list, and asking it would fail and make
    // this command exit 1 for a member nobody cares about.
    let members: Vec<_> = (node.members().into_iter())
        .filter(|member| !super::is_observer(member))
        .collect();
    let replies: Vec<(NodeId, Result<MemberStatus, String>)> = std::thread::scope(|scope| {
        let asking: Vec<_> = (members.iter())
            .map(|member| {
                let id = member.node;
                scope.spawn(move || {
                    (
                        id,
                        node.member_status(id, timeout).map_err(|e| e.to_string()),
                    )
                })
            })
            .collect();
        (asking.into_iter())
            .filter_map(|handle| handle.join().ok())
            .collect()
    });
    let mut answers = Vec::new();
    let mut silent = Vec::new();
    for (id, reply) in replies {
        match reply {
            Ok(status) => answers.push(status),
            Err(error) => silent.push((id, error)),
        }
    }
    (answers, silent)
}

fn role_order(role: &str) -> u8 {
    match role {
        "pool" => 0,
        "run" => 1,
        "agent" => 2,
        _ => 3,
    }
}

/// The executors that run work, with their indices (the pool node's
/// placeholder and a run's coordinator are left out).
fn work_executors(status: &MemberStatus) -> Vec<(usize, String, bool)> {
    (status.member.executors.iter().enumerate())
        .filter(|(_, context)| !is_internal(context))
        .map(|(index, context)| {
            let busy = status.busy.get(index).copied().unwrap_or(false);
            (index, context.label_list(), busy)
        })
        .collect()
}

fn member_json(status: &MemberStatus) -> MemberJson {
    MemberJson {
        node: status.member.node.to_string(),
        peer: status.member.peer.clone(),
        role: status.role.clone(),
        host: status.host.clone(),
        site: status.member.site.clone(),
        pid: status.pid,
        master: status.member.master,
        uptime_s: status.uptime_s,
        executors: (work_executors(status).into_iter())
            .map(|(index, labels, busy)| ExecutorJson {
                index,
                labels,
                busy,
            })
            .collect(),
        queued: status.queued.iter().cloned().collect(),
        running: status.running,
        waiting: status.waiting,
        finished: status.finished,
        walltime_left_s: status.walltime_left_s,
        longest_call_s: status.longest_call_s,
        draining: status.draining,
    }
}

/// The human report: a summary line, one row per member, the executors'
/// labels, and the queues per label.
fn render(answers: &[MemberStatus], silent: &[(NodeId, String)]) -> String {
    let mut out = String::new();
    let executors: Vec<Vec<(usize, String, bool)>> = answers.iter().map(work_executors).collect();
    let total: usize = executors.iter().map(Vec::len).sum();
    let busy: usize = (executors.iter().flatten()).filter(|e| e.2).count();
    let mut queued: BTreeMap<String, Vec<(NodeId, u64)>> = BTreeMap::new();
    for status in answers {
        for (label, count) in &status.queued {
            queued
                .entry(label.clone())
                .or_default()
                .push((status.member.node, *count));
        }
    }
    let waiting: u64 = answers.iter().map(queued_total).sum();
    let running: u64 = answers.iter().map(|s| s.running).sum();
    let agents = answers.iter().filter(|s| s.role == "agent").count();
    out.push_str(&format!(
        "{} member(s), {agents} agent(s); {total} executor(s), {busy} busy; {running} running, {waiting} queued\n",
        answers.len()
    ));
    if answers.is_empty() {
        out.push_str("(nobody answered)\n");
    } else {
        out.push('\n');
        let mut rows = vec![[
            "MEMBER", "ROLE", "HOST", "SITE", "EXEC", "BUSY", "QUEUED", "RUNNING", "WAITING",
            "DONE", "WALLTIME", "UP", "STATE",
        ]
        .map(String::from)
        .to_vec()];
        for (status, executors) in answers.iter().zip(&executors) {
            rows.push(vec![
                status.member.node.to_string(),
                status.role.clone(),
                status.host.clone(),
                status.member.site.clone().unwrap_or_else(|| "-".into()),
                executors.len().to_string(),
                executors.iter().filter(|e| e.2).count().to_string(),
                queued_total(status).to_string(),
                status.running.to_string(),
                status.waiting.to_string(),
                status.finished.to_string(),
                (status.walltime_left_s)
                    .map(short_duration)
                    .unwrap_or_else(|| "-".into()),
                short_duration(status.uptime_s),
                if status.draining {
                    "draining"
                } else {
                    "serving"
                }
                .to_string(),
            ]);
        }
        out.push_str(&clitools::columns(&rows));
    }
    let labelled: Vec<String> = (answers.iter().zip(&executors))
        .flat_map(|(status, executors)| {
            group_runs(executors)
                .into_iter()
                .map(move |(range, labels)| {
                    format!("  {}  {range:<7} {labels}", status.member.node)
                })
        })
        .collect();
    if !labelled.is_empty() {
        out.push_str("\nExecutors (MEMBER  INDEX  LABELS, in priority order):\n");
        for line in labelled {
            out.push_str(&line);
            out.push('\n');
        }
    }
    if !queued.is_empty() {
        out.push_str("\nQueued, per label:\n");
        let width = queued.keys().map(String::len).max().unwrap_or(0);
        for (label, at) in &queued {
            let total: u64 = at.iter().map(|(_, n)| n).sum();
            let places: Vec<String> = at.iter().map(|(node, n)| format!("{node}: {n}")).collect();
            out.push_str(&format!(
                "  {label:<width$}  {total:>6}  ({})\n",
                places.join(", ")
            ));
        }
    }
    let unoffered = unoffered(answers);
    if !unoffered.is_empty() {
        let width = unoffered.keys().map(String::len).max().unwrap_or(0);
        let total: u64 = (unoffered.values().flatten()).map(|(_, n)| n).sum();
        out.push_str(&format!(
            "\n{total} queued waiting for labels no executor offers (relabel executors, \
             or start agents that offer them):\n"
        ));
        for (label, at) in &unoffered {
            let total: u64 = at.iter().map(|(_, n)| n).sum();
            let places: Vec<String> = at.iter().map(|(node, n)| format!("{node}: {n}")).collect();
            out.push_str(&format!(
                "  {label:<width$}  {total:>6}  ({})\n",
                places.join(", ")
            ));
        }
    }
    for (_, error) in silent {
        // The error names the member already.
        out.push_str(&format!("\n{error}\n"));
    }
    out
}

/// Queued work, per label and member, whose label no executor of any
/// member offers now, e.g. after every `gpu` agent was relabelled: it
/// waits in silence otherwise. Counted per label like the queues (an
/// activity naming several labels counts under each), so one that names
/// an offered label too can still run.
fn unoffered(answers: &[MemberStatus]) -> BTreeMap<String, Vec<(NodeId, u64)>> {
    let offered: HashSet<String> = (answers.iter())
        .flat_map(|status| status.member.executors.iter())
        .flat_map(|executor| executor.contexts.iter())
        .map(|context| context.label.name().to_string())
        .collect();
    let mut waiting: BTreeMap<String, Vec<(NodeId, u64)>> = BTreeMap::new();
    for status in answers {
        for (label, count) in &status.queued {
            if *count > 0 && !offered.contains(label) {
                (waiting.entry(label.clone()).or_default()).push((status.member.node, *count));
            }
        }
    }
    waiting
}

/// Consecutive executors with the same labels, as `#0-3` and the labels.
fn group_runs(executors: &[(usize, String, bool)]) -> Vec<(String, String)> {
    let mut groups: Vec<(usize, usize, String)> = Vec::new();
    for (index, labels, _) in executors {
        match groups.last_mut() {
            Some((_, last, same)) if *same == *labels && *last + 1 == *index => *last = *index,
            _ => groups.push((*index, *index, labels.clone())),
        }
    }
    (groups.into_iter())
        .map(|(first, last, labels)| match first == last {
            true => (format!("#{first}"), labels),
            false => (format!("#{first}-{last}"), labels),
        })
        .collect()
}

/// `4s`, `12m05s`, `3h02m`, `2d04h`: two units at most, for a table.
fn short_duration(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

/// A member's queues summed. An activity naming several labels sits
/// under each, so this is an upper bound, enough for a glance at a table.
fn queued_total(status: &MemberStatus) -> u64 {
    status.queued.iter().map(|(_, n)| n).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_fit_a_column() {
        assert_eq!(short_duration(4.4), "4s");
        assert_eq!(short_duration(725.0), "12m05s");
        assert_eq!(short_duration(3.0 * 3600.0 + 150.0), "3h02m");
        assert_eq!(short_duration(2.0 * 86400.0 + 4.0 * 3600.0), "2d04h");
        assert_eq!(short_duration(-3.0), "0s");
    }

    #[test]
    fn runs_of_equal_labels_are_grouped() {
        let executors = vec![
            (0, "cpu".to_string(), true),
            (1, "cpu".to_string(), false),
            (2, "gpu".to_string(), false),
            (4, "gpu".to_string(), false),
        ];
        assert_eq!(
            group_runs(&executors),
            [
                ("#0-1".to_string(), "cpu".to_string()),
                ("#2".to_string(), "gpu".to_string()),
                ("#4".to_string(), "gpu".to_string()),
            ]
        );
    }
}
