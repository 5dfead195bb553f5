//! Slurm and PBS pilots: one batch job whose directives ask for the nodes,
//! and one step that starts an agent on each of them.

use super::{file_in, finish, margin_comment, shell_join};
use crate::glidein::alloc::{STDERR_FILE, STDOUT_FILE};
use crate::glidein::spec::{PbsFlavor, PilotSpec};
use timefmt::{format_clock as format_slurm, format_clock_hours as format_pbs};

/// Slurm: directives, then one `srun` step with one agent task per node.
/// `--kill-on-bad-exit=0` keeps the other agents running if one dies.
///
/// The agent's cores are asked for: a task gets one CPU by default, and on
/// a shared node the agent would then see fewer cores than it has
/// executors. With `--executors-per-node K` each task asks for K CPUs;
/// without, the agent starts an executor per core it finds, so the nodes
/// are asked for whole (`--exclusive`) and the step for the CPUs the job
/// got. `srun` is told too: since Slurm 22.05 it does not inherit
/// `--cpus-per-task` from the batch job.
pub(super) fn slurm_script(spec: &PilotSpec, dir: &str) -> String {
    let n = spec.nodes;
    let mut lines = vec![
        "#!/bin/bash".to_string(),
        format!("#SBATCH --job-name={}", spec.job_name),
        format!("#SBATCH --nodes={n}"),
        "#SBATCH --ntasks-per-node=1".to_string(),
    ];
    lines.push(match spec.executors_per_node {
        Some(k) => format!("#SBATCH --cpus-per-task={k}"),
        None => "#SBATCH --exclusive".to_string(),
    });
    lines.extend([
        format!("#SBATCH --time={}", format_slurm(spec.walltime)),
        format!("#SBATCH --output={}", file_in(dir, STDOUT_FILE)),
        format!("#SBATCH --error={}", file_in(dir, STDERR_FILE)),
    ]);
    lines.extend(margin_comment(spec));
    lines.push(format!("# {}", slurm_request(spec)));
    lines.push("set -euo pipefail".to_string());
    let cpus = match spec.executors_per_node {
        Some(k) => k.to_string(),
        None => {
            // SLURM_JOB_CPUS_PER_NODE reads like `16(x2),8`: the step asks
            // for what the smallest node has, which every node can give.
            lines.push(
                "cpus=$(awk -F, '{m = 0; for (i = 1; i <= NF; i++) { v = $i; sub(/\\(.*/, \"\", v); \
                 if (m == 0 || v + 0 < m) m = v + 0 }; print m}' <<<\"$SLURM_JOB_CPUS_PER_NODE\")"
                    .to_string(),
            );
            "\"$cpus\"".to_string()
        }
    };
    lines.push(format!(
        "srun --nodes={n} --ntasks-per-node=1 --cpus-per-task={cpus} --kill-on-bad-exit=0 {}",
        shell_join(&spec.agent_command())
    ));
    finish(lines)
}

/// What a Slurm pilot asks of each node, in words, for the script's
/// comment and so for `--dry-run`.
pub fn slurm_request(spec: &PilotSpec) -> String {
    match spec.executors_per_node {
        Some(k) => format!(
            "Asks {} node(s) for one agent task each with {k} CPUs (--cpus-per-task={k}), \
             one per executor.",
            spec.nodes
        ),
        None => format!(
            "Asks {} whole node(s) (--exclusive) for one agent task each with all their \
             CPUs; the agent starts an executor per core.",
            spec.nodes
        ),
    }
}

/// What a PBS pilot asks of each node, in words, for the script's comment
/// and so for `--dry-run`.
pub fn pbs_request(spec: &PilotSpec) -> String {
    let n = spec.nodes;
    match (spec.pbs_flavor, spec.executors_per_node) {
        (PbsFlavor::Torque, Some(k)) => {
            format!("Asks {n} node(s) for {k} CPUs each (ppn={k}), one per executor.")
        }
        (PbsFlavor::Torque, None) => format!(
            "Asks {n} node(s) without a CPU count: Torque then gives the queue's default, \
             often one CPU, while the agent starts an executor per core it sees; give \
             --executors-per-node to ask for ppn=K."
        ),
        (PbsFlavor::Pro, Some(k)) => {
            format!("Asks {n} node(s) for {k} CPUs each (ncpus={k}), one per executor.")
        }
        (PbsFlavor::Pro, None) => format!(
            "Asks {n} whole node(s) (place=scatter:excl); the agent starts an executor per core."
        ),
    }
}

/// PBS: directives, then `pbsdsh` in the background and `wait`, so the
/// SIGTERM that `qdel` sends before SIGKILL is passed on to it (both
/// families' pbsdsh forward it to their tasks).
pub(super) fn pbs_script(spec: &PilotSpec, dir: &str) -> String {
    let resources = match spec.pbs_flavor {
        PbsFlavor::Torque => vec![match spec.executors_per_node {
            Some(k) => format!("nodes={}:ppn={k}", spec.nodes),
            None => format!("nodes={}", spec.nodes),
        }],
        // One chunk per node, each with one MPI slot, so $PBS_NODEFILE has
        // one line per node. Without --executors-per-node the agent uses
        // every core it finds, so the node is asked for whole (`excl`).
        PbsFlavor::Pro => match spec.executors_per_node {
            Some(k) => vec![
                format!("select={}:ncpus={k}:mpiprocs=1", spec.nodes),
                "place=scatter".to_string(),
            ],
            None => vec![
                format!("select={}:mpiprocs=1", spec.nodes),
                "place=scatter:excl".to_string(),
            ],
        },
    };
    let mut lines = vec![
        "#!/bin/bash".to_string(),
        format!("#PBS -N {}", spec.job_name),
    ];
    lines.extend(resources.iter().map(|r| format!("#PBS -l {r}")));
    lines.extend([
        format!("#PBS -l walltime={}", format_pbs(spec.walltime)),
        format!("#PBS -o {}", file_in(dir, STDOUT_FILE)),
        format!("#PBS -e {}", file_in(dir, STDERR_FILE)),
        "#PBS -j n".to_string(),
    ]);
    lines.extend(margin_comment(spec));
    lines.push(format!("# {}", pbs_request(spec)));
    lines.push("set -euo pipefail".to_string());
    let agent = shell_join(&spec.agent_command());
    match spec.pbs_flavor {
        PbsFlavor::Torque => lines.extend([
            "# -u: one agent per unique host of the job, not one per core.".to_string(),
            format!("pbsdsh -u {agent} &"),
        ]),
        PbsFlavor::Pro => lines.extend([
            "# PBS Pro's pbsdsh has no -u: it starts one task per line of the node".to_string(),
            "# file, which mpiprocs=1 and place=scatter make one line per node.".to_string(),
            "# qsub arguments can change that; then stop rather than start several".to_string(),
            "# agents per node.".to_string(),
            "entries=$(grep -c . \"$PBS_NODEFILE\" || true)".to_string(),
            "hosts=$(sort -u \"$PBS_NODEFILE\" | grep -c . || true)".to_string(),
            "if [ \"$entries\" -ne \"$hosts\" ]; then".to_string(),
            "  echo \"glidein: \\$PBS_NODEFILE lists $entries slots on $hosts hosts, so pbsdsh would start more than one agent per node; keep mpiprocs=1 and place=scatter in the job's select\" >&2".to_string(),
            "  exit 1".to_string(),
            "fi".to_string(),
            format!("pbsdsh -- {agent} &"),
        ]),
    }
    lines.extend([
        "agents=$!".to_string(),
        "trap 'kill -TERM \"$agents\" 2>/dev/null || true' TERM".to_string(),
        "status=0".to_string(),
        "wait \"$agents\" || status=$?".to_string(),
        "exit \"$status\"".to_string(),
    ]);
    finish(lines)
}
