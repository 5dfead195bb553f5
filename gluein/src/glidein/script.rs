//! Pilot script generation, one flavour per backend.
//!
//! The scripts are plain bash so users can read, edit and rerun them from
//! the allocation directory. Every value that comes from the user (paths,
//! labels, hosts) goes through [`shell_quote`]; values that go into
//! `#SBATCH`/`#PBS` directive lines, which no shell parses, are checked
//! instead (see [`check_directive_path`]).
//!
//! * **Slurm**: one batch job; `srun` starts one agent per node.
//! * **PBS/Torque**: one batch job; `pbsdsh -u` starts one agent per
//!   unique host.
//! * **PBS Pro / OpenPBS**: one batch job whose chunks each hold one MPI
//!   slot on their own host (`select=N:...:mpiprocs=1`, `place=scatter`),
//!   so plain `pbsdsh`, which starts one task per `$PBS_NODEFILE` line,
//!   starts one agent per node; the script checks the node file first.
//! * **ssh**: run on the login node; starts one detached agent per host,
//!   records `host:pid` lines, and exits. A cancel script stops them.
//! * **local**: run detached on this machine; starts N agents, records their
//!   pids, waits, and writes the exit status. A cancel script stops them.

use std::path::Path;

use thiserror::Error;

use crate::glidein::alloc::{
    EXIT_STATUS_FILE, PIDS_FILE, PILOT_PID_FILE, STDERR_FILE, STDOUT_FILE,
};
use crate::glidein::spec::{Backend, PbsFlavor, PilotSpec};
use timefmt::{format_clock as format_slurm, format_clock_hours as format_pbs};

/// Options every generated `ssh` call uses: never prompt (there is nobody to
/// answer), and give up on unreachable hosts quickly.
pub const SSH_OPTIONS: [&str; 4] = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=10"];

/// `ssh`, then `-o OPTION` for each of the user's `options`, then
/// [`SSH_OPTIONS`]. The user's come first because ssh keeps the first
/// value it sees for a key, so `ConnectTimeout=30` overrides ours.
pub fn ssh_command(options: &[String]) -> Vec<String> {
    let mut words = vec!["ssh".to_string()];
    for option in options {
        words.push("-o".to_string());
        words.push(option.clone());
    }
    words.extend(SSH_OPTIONS.iter().map(|s| s.to_string()));
    words
}

/// Exit status of the ssh pilot when some, but not all, agents started.
pub const SSH_PARTIAL_EXIT: i32 = 3;

/// A problem that prevents writing a correct script.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ScriptError {
    /// The allocation directory cannot be put into a directive line.
    #[error("allocation directory `{path}` contains {what}, which cannot go into a #{directive} directive: set CONSTELLATION_HOME to a directory whose path has no spaces, quotes, `%`, `#`, `:` or `\\`")]
    UnsafeDirectivePath {
        /// The offending path.
        path: String,
        /// The offending character, described.
        what: String,
        /// `SBATCH` or `PBS`.
        directive: &'static str,
    },
    /// The allocation directory path is not UTF-8.
    #[error(
        "allocation directory `{0}` is not valid UTF-8: set CONSTELLATION_HOME to a plain path"
    )]
    NonUtf8(String),
}

/// Quotes `s` for bash (and any POSIX shell) so it stays one word, whatever
/// it contains. Plain words are left alone to keep scripts readable.
pub fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars().all(|c| {
            c.is_ascii_alphanumeric()
                || matches!(c, '_' | '-' | '.' | '/' | ',' | ':' | '+' | '=' | '@' | '%')
        });
    if plain && !looks_like_assignment(s) {
        return s.to_string();
    }
    // Inside single quotes nothing is special except `'` itself, which we
    // write as: close quote, escaped quote, reopen quote.
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `NAME=value` as a command's first word would be a variable assignment,
/// so such words are quoted even though `=` alone is harmless.
fn looks_like_assignment(s: &str) -> bool {
    s.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// Quotes each word and joins them with spaces.
pub fn shell_join<S: AsRef<str>>(words: &[S]) -> String {
    words
        .iter()
        .map(|w| shell_quote(w.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Checks that `dir` can be written verbatim into `#SBATCH --output=` or
/// `#PBS -o` lines: sbatch splits directives on whitespace and expands
/// `%j`-style patterns, PBS reads `host:path`, and neither unquotes.
pub fn check_directive_path(backend: Backend, dir: &Path) -> Result<(), ScriptError> {
    let text = path_str(dir)?;
    let directive = match backend {
        Backend::Slurm => "SBATCH",
        Backend::Pbs => "PBS",
        Backend::Ssh | Backend::Local => return Ok(()),
    };
    let bad = text.chars().find(|&c| {
        c.is_whitespace()
            || c.is_control()
            || matches!(c, '\'' | '"' | '\\' | '%' | '#')
            || (backend == Backend::Pbs && c == ':')
    });
    match bad {
        None => Ok(()),
        Some(c) => Err(ScriptError::UnsafeDirectivePath {
            path: text.to_string(),
            what: format!("{c:?}"),
            directive,
        }),
    }
}

fn path_str(path: &Path) -> Result<&str, ScriptError> {
    path.to_str()
        .ok_or_else(|| ScriptError::NonUtf8(path.to_string_lossy().into_owned()))
}

/// `dir/name` as text (the directory has been checked to be UTF-8).
fn file_in(dir: &str, name: &str) -> String {
    format!("{}/{name}", dir.trim_end_matches('/'))
}

/// The pilot script for `spec.backend`, for allocation directory `dir`.
/// `spec` must have been validated.
pub fn pilot_script(spec: &PilotSpec, dir: &Path) -> Result<String, ScriptError> {
    check_directive_path(spec.backend, dir)?;
    let dir = path_str(dir)?;
    Ok(match spec.backend {
        Backend::Slurm => slurm_script(spec, dir),
        Backend::Pbs => pbs_script(spec, dir),
        Backend::Ssh => ssh_script(spec, dir),
        Backend::Local => local_script(spec, dir),
    })
}

/// The cancel script for backends that have no batch system to ask
/// (ssh, local); `None` for Slurm and PBS, which use `scancel`/`qdel`.
pub fn cancel_script(spec: &PilotSpec, dir: &Path) -> Result<Option<String>, ScriptError> {
    let dir = path_str(dir)?;
    Ok(match spec.backend {
        Backend::Slurm | Backend::Pbs => None,
        Backend::Ssh => Some(ssh_cancel_script(dir, &spec.ssh_options)),
        Backend::Local => Some(local_cancel_script(dir, spec.nodes)),
    })
}

/// Comment lines explaining the agent walltime, shared by all scripts.
fn margin_comment(spec: &PilotSpec) -> Vec<String> {
    let agent = spec.agent_walltime().as_secs();
    let margin = spec.walltime.as_secs() - agent;
    vec![
        format!(
            "# Constellation glide-in pilot ({} backend), generated by `constellation glidein`.",
            spec.backend
        ),
        format!(
            "# Agents stop after {agent}s, {margin}s before the {}s walltime, so they leave",
            spec.walltime.as_secs()
        ),
        "# the pool cleanly instead of being killed mid-task.".to_string(),
    ]
}

fn finish(lines: Vec<String>) -> String {
    let mut text = lines.join("\n");
    text.push('\n');
    text
}

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
fn slurm_script(spec: &PilotSpec, dir: &str) -> String {
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
fn pbs_script(spec: &PilotSpec, dir: &str) -> String {
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

/// The POSIX sh command line run on each ssh host: detach one agent with
/// its output in the allocation directory and print its pid. Wrapped in
/// `sh -c` so it works whatever the user's login shell is (csh has no `2>`).
pub fn ssh_remote_command(spec: &PilotSpec, dir: &str, host: &str) -> String {
    let out = file_in(dir, &format!("{host}.stdout"));
    let err = file_in(dir, &format!("{host}.stderr"));
    let inner = format!(
        "mkdir -p {} || exit 1; nohup {} > {} 2> {} < /dev/null & echo $!",
        shell_quote(dir),
        shell_join(&spec.agent_command()),
        shell_quote(&out),
        shell_quote(&err),
    );
    format!("sh -c {}", shell_quote(&inner))
}

/// ssh: start all hosts in parallel (an unreachable host costs the
/// connect timeout, not N of them), record `host:pid`, and exit 0 if all
/// started, [`SSH_PARTIAL_EXIT`] if some did, 1 if none did.
fn ssh_script(spec: &PilotSpec, dir: &str) -> String {
    let ssh = shell_join(&ssh_command(&spec.ssh_options));
    let mut lines = vec!["#!/bin/bash".to_string()];
    lines.extend(margin_comment(spec));
    lines.extend([
        "# Starts one detached agent per host and records `host:pid` lines in the".to_string(),
        "# pids file; the agents outlive this script, cancel.sh stops them.".to_string(),
        "set -uo pipefail".to_string(),
        format!("PIDS={}", shell_quote(&file_in(dir, PIDS_FILE))),
        ": > \"$PIDS\"".to_string(),
        "start_agent() {".to_string(),
        "  local host=$1 remote=$2 out pid".to_string(),
        format!("  if ! out=$({ssh} \"$host\" \"$remote\" < /dev/null); then"),
        "    echo \"glidein: could not start an agent on $host (ssh failed)\" >&2".to_string(),
        "    return 1".to_string(),
        "  fi".to_string(),
        "  pid=${out##*$'\\n'}  # last line: login banners may come first".to_string(),
        "  if [[ ! $pid =~ ^[0-9]+$ ]]; then".to_string(),
        "    echo \"glidein: $host answered '$out' instead of a pid\" >&2".to_string(),
        "    return 1".to_string(),
        "  fi".to_string(),
        "  printf '%s:%s\\n' \"$host\" \"$pid\" >> \"$PIDS\"".to_string(),
        "}".to_string(),
        "starters=()".to_string(),
    ]);
    for host in &spec.hosts {
        lines.push(format!(
            "start_agent {} {} &",
            shell_quote(host),
            shell_quote(&ssh_remote_command(spec, dir, host))
        ));
        lines.push("starters+=(\"$!\")".to_string());
    }
    lines.extend([
        "started=0".to_string(),
        "failed=0".to_string(),
        "for s in \"${starters[@]}\"; do".to_string(),
        "  if wait \"$s\"; then started=$((started + 1)); else failed=$((failed + 1)); fi"
            .to_string(),
        "done".to_string(),
        format!(
            "echo \"glidein: started $started of {} agents\"",
            spec.hosts.len()
        ),
        "if [ \"$started\" -eq 0 ]; then exit 1; fi".to_string(),
        format!("if [ \"$failed\" -gt 0 ]; then exit {SSH_PARTIAL_EXIT}; fi"),
        "exit 0".to_string(),
    ]);
    finish(lines)
}

/// ssh cancel: SIGTERM every recorded agent, all hosts at once (so
/// unreachable hosts cost one connect timeout, not one each, and the
/// script fits in the runner's time limit). An agent that is already gone
/// is fine; an unreachable host is an error (its agent may still run).
fn ssh_cancel_script(dir: &str, options: &[String]) -> String {
    let ssh = shell_join(&ssh_command(options));
    finish(vec![
        "#!/bin/bash".to_string(),
        "# Stops the agents started by pilot.sh (one `host:pid` per line in the".to_string(),
        "# pids file) with SIGTERM, so they leave the pool cleanly.".to_string(),
        "set -uo pipefail".to_string(),
        format!("PIDS={}", shell_quote(&file_in(dir, PIDS_FILE))),
        "stop_agent() {".to_string(),
        "  local host=$1 pid=$2 rc".to_string(),
        "  # stdin from /dev/null, or ssh would swallow the rest of the pids file".to_string(),
        format!("  {ssh} \"$host\" \"kill $pid\" < /dev/null"),
        "  rc=$?".to_string(),
        "  if [ \"$rc\" -eq 255 ]; then".to_string(),
        "    echo \"glidein: could not reach $host to stop agent $pid\" >&2".to_string(),
        "    return 1".to_string(),
        "  elif [ \"$rc\" -ne 0 ]; then".to_string(),
        "    echo \"glidein: agent $pid on $host was already gone\" >&2".to_string(),
        "  fi".to_string(),
        "}".to_string(),
        "stoppers=()".to_string(),
        "while IFS= read -r line || [ -n \"$line\" ]; do".to_string(),
        "  host=${line%:*}".to_string(),
        "  pid=${line##*:}".to_string(),
        "  [[ $pid =~ ^[0-9]+$ ]] || continue".to_string(),
        "  stop_agent \"$host\" \"$pid\" &".to_string(),
        "  stoppers+=(\"$!\")".to_string(),
        "done < \"$PIDS\"".to_string(),
        "status=0".to_string(),
        "for s in \"${stoppers[@]}\"; do wait \"$s\" || status=1; done".to_string(),
        "exit \"$status\"".to_string(),
    ])
}

/// local: N agents in the background; TERM (from cancel.sh) is passed on so
/// agents leave cleanly; the first non-zero agent status becomes ours and
/// is written to the exit status file, since nobody waits for this process.
fn local_script(spec: &PilotSpec, dir: &str) -> String {
    let mut lines = vec!["#!/bin/bash".to_string()];
    lines.extend(margin_comment(spec));
    lines.extend([
        "set -uo pipefail".to_string(),
        format!("ALLOC={}", shell_quote(dir)),
        format!("echo \"$$\" > \"$ALLOC/{PILOT_PID_FILE}\""),
        format!(": > \"$ALLOC/{PIDS_FILE}\""),
        "pids=()".to_string(),
        "got_signal=0".to_string(),
        "trap 'got_signal=1; kill -TERM ${pids[*]:-} 2>/dev/null' TERM INT".to_string(),
        format!("for ((i = 1; i <= {}; i++)); do", spec.nodes),
        format!(
            "  {} > \"$ALLOC/agent-$i.stdout\" 2> \"$ALLOC/agent-$i.stderr\" < /dev/null &",
            shell_join(&spec.agent_command())
        ),
        "  pids+=(\"$!\")".to_string(),
        format!("  echo \"localhost:$!\" >> \"$ALLOC/{PIDS_FILE}\""),
        "done".to_string(),
        "status=0".to_string(),
        "for pid in \"${pids[@]}\"; do".to_string(),
        "  got_signal=0".to_string(),
        "  wait \"$pid\"; rc=$?".to_string(),
        "  if [ \"$got_signal\" -eq 1 ] && [ \"$rc\" -gt 128 ]; then".to_string(),
        "    # A trapped signal made wait return early; the agent may still be".to_string(),
        "    # leaving the pool. Wait until it is gone, then ask for its status;".to_string(),
        "    # bash may no longer have it (127, -1), so keep the signal's then.".to_string(),
        "    while kill -0 \"$pid\" 2>/dev/null; do sleep 1; done".to_string(),
        "    wait \"$pid\" 2>/dev/null; again=$?".to_string(),
        "    if [ \"$again\" -ge 0 ] && [ \"$again\" -le 255 ] && [ \"$again\" -ne 127 ]; then rc=$again; fi".to_string(),
        "  fi".to_string(),
        "  if [ \"$rc\" -ne 0 ] && [ \"$status\" -eq 0 ]; then status=$rc; fi".to_string(),
        "done".to_string(),
        "# Written via rename so readers never see an empty file.".to_string(),
        format!("echo \"$status\" > \"$ALLOC/{EXIT_STATUS_FILE}.tmp\""),
        format!("mv -f \"$ALLOC/{EXIT_STATUS_FILE}.tmp\" \"$ALLOC/{EXIT_STATUS_FILE}\""),
        "exit \"$status\"".to_string(),
    ]);
    finish(lines)
}

/// local cancel: SIGTERM the recorded agents; the pilot then sees them
/// exit and records their real statuses. Only if the pilot has not yet
/// recorded all `agents`, TERM the pilot too: its trap forwards the signal
/// to every agent it started, including the unrecorded ones.
fn local_cancel_script(dir: &str, agents: usize) -> String {
    finish(vec![
        "#!/bin/bash".to_string(),
        "# Stops the local agents started by pilot.sh.".to_string(),
        "set -uo pipefail".to_string(),
        format!("ALLOC={}", shell_quote(dir)),
        "stopped=0".to_string(),
        format!("if [ -f \"$ALLOC/{PIDS_FILE}\" ]; then"),
        "  while IFS= read -r line || [ -n \"$line\" ]; do".to_string(),
        "    pid=${line##*:}".to_string(),
        "    if [[ $pid =~ ^[0-9]+$ ]]; then".to_string(),
        "      kill -TERM \"$pid\" 2>/dev/null".to_string(),
        "      stopped=$((stopped + 1))".to_string(),
        "    fi".to_string(),
        format!("  done < \"$ALLOC/{PIDS_FILE}\""),
        "fi".to_string(),
        format!("if [ \"$stopped\" -lt {agents} ] && [ -f \"$ALLOC/{PILOT_PID_FILE}\" ] \\"),
        format!(
            "  && read -r pilot < \"$ALLOC/{PILOT_PID_FILE}\" && [[ $pilot =~ ^[0-9]+$ ]]; then"
        ),
        "  kill -TERM \"$pilot\" 2>/dev/null".to_string(),
        "fi".to_string(),
        "exit 0".to_string(),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::glidein::alloc::testing::{write_executable, TempDir};
    use std::process::Command;
    use std::time::Duration;

    fn spec(backend: Backend) -> PilotSpec {
        let mut s = PilotSpec::new(
            backend,
            4,
            Duration::from_secs(7_200),
            "/home/u/pool.json",
            "/opt/c/bin/constellation",
        );
        s.executors_per_node = Some(16);
        s.context = Some("gpu,a100".into());
        s.site = Some("lumi".into());
        s
    }

    /// Runs `script` with bash and returns stdout.
    fn bash(script: &str) -> String {
        let out = Command::new("bash").arg("-c").arg(script).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    const NASTY: [&str; 12] = [
        "",
        "plain",
        "two words",
        "it's",
        "'",
        "''",
        "a\"b",
        "$HOME `id` $(id) \\ !x",
        "*?[a]{b,c}~",
        "tab\tand\nnewline",
        "-n",
        "ünïcødé ✓",
    ];

    #[test]
    fn quote_survives_bash() {
        // printf prints each argument on its own line between markers, so
        // any word splitting or expansion would show.
        let mut script = "printf '<%s>\\n'".to_string();
        for s in NASTY {
            script.push(' ');
            script.push_str(&shell_quote(s));
        }
        let expected: String = NASTY.iter().map(|s| format!("<{s}>\n")).collect();
        assert_eq!(bash(&script), expected);
    }

    #[test]
    fn double_quoting_survives_two_shells() {
        // The ssh backend quotes a command that a second shell parses again.
        for s in NASTY {
            let inner = format!("printf '<%s>' {}", shell_quote(s));
            let outer = format!("bash -c {}", shell_quote(&inner));
            assert_eq!(bash(&outer), format!("<{s}>"), "{s:?}");
        }
    }

    #[test]
    fn plain_words_stay_unquoted() {
        assert_eq!(
            shell_quote("/opt/c/bin/constellation"),
            "/opt/c/bin/constellation"
        );
        assert_eq!(shell_quote("--walltime=6840s"), "--walltime=6840s");
        assert_eq!(shell_quote("gpu,a100"), "gpu,a100");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote("FOO=bar"), "'FOO=bar'");
        assert_eq!(shell_quote("--account=x"), "--account=x");
        assert_eq!(shell_join(&["a b", "c"]), "'a b' c");
    }

    #[test]
    fn slurm_script_lines() {
        let text = pilot_script(&spec(Backend::Slurm), Path::new("/h/allocs/slurm-1")).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[..8],
            [
                "#!/bin/bash",
                "#SBATCH --job-name=constellation",
                "#SBATCH --nodes=4",
                "#SBATCH --ntasks-per-node=1",
                "#SBATCH --cpus-per-task=16",
                "#SBATCH --time=02:00:00",
                "#SBATCH --output=/h/allocs/slurm-1/stdout",
                "#SBATCH --error=/h/allocs/slurm-1/stderr",
            ]
        );
        assert!(lines.contains(&"set -euo pipefail"));
        assert_eq!(
            *lines.last().unwrap(),
            "srun --nodes=4 --ntasks-per-node=1 --cpus-per-task=16 --kill-on-bad-exit=0 \
             /opt/c/bin/constellation agent --pool /home/u/pool.json --executors 16 --context gpu,a100 --site lumi \
             --walltime 6840s"
        );
        // Directives must all precede the first command for sbatch to see them.
        let first_cmd = lines.iter().position(|l| !l.starts_with('#')).unwrap();
        assert!(lines[first_cmd..].iter().all(|l| !l.starts_with("#SBATCH")));
    }

    #[test]
    fn slurm_pilots_without_executors_per_node_take_whole_nodes() {
        let mut s = spec(Backend::Slurm);
        s.executors_per_node = None;
        let text = pilot_script(&s, Path::new("/h/allocs/slurm-1")).unwrap();
        assert!(text.contains("\n#SBATCH --exclusive\n"), "{text}");
        assert!(!text.contains("--cpus-per-task=16"), "{text}");
        // The script, run with an `srun` that shows its arguments, on a job
        // of two 16-CPU nodes and an 8-CPU one: each agent task asks for
        // what every node has.
        let script = std::env::temp_dir().join(format!("slurm-pilot-{}.sh", std::process::id()));
        std::fs::write(&script, &text).unwrap();
        let out = bash(&format!(
            "srun() {{ echo \"srun $*\"; }}; export -f srun; \
             SLURM_JOB_CPUS_PER_NODE='16(x2),8' bash {}",
            script.display()
        ));
        std::fs::remove_file(&script).unwrap();
        assert_eq!(
            out.trim(),
            "srun --nodes=4 --ntasks-per-node=1 --cpus-per-task=8 --kill-on-bad-exit=0 \
             /opt/c/bin/constellation agent --pool /home/u/pool.json --context gpu,a100 \
             --site lumi --walltime 6840s"
        );
    }

    #[test]
    fn pbs_pilots_say_what_they_ask_for() {
        let asked = |flavor, executors| {
            let mut s = spec(Backend::Pbs);
            s.pbs_flavor = flavor;
            s.executors_per_node = executors;
            let text = pilot_script(&s, Path::new("/a")).unwrap();
            let line = text
                .lines()
                .find(|l| l.starts_with("# Asks "))
                .map(str::to_string);
            line.unwrap_or_else(|| panic!("no `# Asks` line in\n{text}"))
        };
        assert_eq!(
            asked(PbsFlavor::Torque, Some(16)),
            "# Asks 4 node(s) for 16 CPUs each (ppn=16), one per executor."
        );
        assert!(asked(PbsFlavor::Torque, None).contains("often one CPU"));
        assert_eq!(
            asked(PbsFlavor::Pro, Some(16)),
            "# Asks 4 node(s) for 16 CPUs each (ncpus=16), one per executor."
        );
        assert!(asked(PbsFlavor::Pro, None).contains("whole node(s) (place=scatter:excl)"));
    }

    #[test]
    fn slurm_long_walltime_uses_days() {
        let mut s = spec(Backend::Slurm);
        s.walltime = Duration::from_secs(2 * 86_400 + 3_600);
        let text = pilot_script(&s, Path::new("/a")).unwrap();
        assert!(text.contains("#SBATCH --time=2-01:00:00\n"));
        assert!(text.contains("--walltime 175800s\n")); // margin capped at 600 s
    }

    #[test]
    fn pbs_script_lines() {
        let text = pilot_script(&spec(Backend::Pbs), Path::new("/h/allocs/pbs-1")).unwrap();
        for line in [
            "#PBS -N constellation",
            "#PBS -l nodes=4:ppn=16",
            "#PBS -l walltime=02:00:00",
            "#PBS -o /h/allocs/pbs-1/stdout",
            "#PBS -e /h/allocs/pbs-1/stderr",
            "#PBS -j n",
            "pbsdsh -u /opt/c/bin/constellation agent --pool /home/u/pool.json --executors 16 \
             --context gpu,a100 --site lumi --walltime 6840s &",
            "wait \"$agents\" || status=$?",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing `{line}` in\n{text}"
            );
        }
        let mut s = spec(Backend::Pbs);
        s.executors_per_node = None;
        s.walltime = Duration::from_secs(30 * 3_600);
        let text = pilot_script(&s, Path::new("/a")).unwrap();
        assert!(text.contains("#PBS -l nodes=4\n"));
        assert!(text.contains("#PBS -l walltime=30:00:00\n"));
        bash(&format!("bash -n <<'EOF'\n{text}EOF"));
    }

    #[test]
    fn pbs_pro_script_lines() {
        let mut s = spec(Backend::Pbs);
        s.pbs_flavor = PbsFlavor::Pro;
        let text = pilot_script(&s, Path::new("/h/allocs/pbs-1")).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[..9],
            [
                "#!/bin/bash",
                "#PBS -N constellation",
                "#PBS -l select=4:ncpus=16:mpiprocs=1",
                "#PBS -l place=scatter",
                "#PBS -l walltime=02:00:00",
                "#PBS -o /h/allocs/pbs-1/stdout",
                "#PBS -e /h/allocs/pbs-1/stderr",
                "#PBS -j n",
                "# Constellation glide-in pilot (pbs backend), generated by `constellation glidein`.",
            ]
        );
        assert!(lines.contains(
            &"pbsdsh -- /opt/c/bin/constellation agent --pool /home/u/pool.json --executors 16 \
              --context gpu,a100 --site lumi --walltime 6840s &"
        ));
        assert!(!text.contains("pbsdsh -u"), "{text}");
        s.executors_per_node = None;
        let text = pilot_script(&s, Path::new("/a")).unwrap();
        assert!(text.contains("#PBS -l select=4:mpiprocs=1\n#PBS -l place=scatter:excl\n"));
        bash(&format!("bash -n <<'EOF'\n{text}EOF"));
    }

    /// Runs a PBS pilot script with a fake `pbsdsh` (that prints its
    /// arguments) on PATH and a node file with `nodefile` as contents;
    /// returns (exit code, stdout, stderr).
    fn run_pbs_pilot(flavor: PbsFlavor, nodefile: &str) -> (i32, String, String) {
        let tmp = TempDir::new("pbs-pilot");
        let bin = tmp.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let fake = bin.join("pbsdsh");
        write_executable(&fake, "#!/bin/bash\nprintf '<%s>' \"$@\"\necho\n");
        let nodes = tmp.path().join("nodefile");
        std::fs::write(&nodes, nodefile).unwrap();
        let mut s = spec(Backend::Pbs);
        s.pbs_flavor = flavor;
        s.context = Some("two words".into());
        let script = tmp.path().join("pilot.sh");
        std::fs::write(&script, pilot_script(&s, tmp.path()).unwrap()).unwrap();
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = Command::new("bash")
            .arg(&script)
            .env("PATH", path)
            .env("PBS_NODEFILE", &nodes)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    #[test]
    fn pbs_pilots_call_pbsdsh_as_each_flavor_needs() {
        let agent = "</opt/c/bin/constellation><agent><--pool></home/u/pool.json>\
                     <--executors><16><--context><two words><--site><lumi><--walltime><6840s>\n";
        let (code, out, err) = run_pbs_pilot(PbsFlavor::Torque, "n1\nn1\nn2\nn2\n");
        assert_eq!(
            (code, out.as_str()),
            (0, format!("<-u>{agent}").as_str()),
            "{err}"
        );
        // PBS Pro: one node file line per node, as the select asks.
        let (code, out, err) = run_pbs_pilot(PbsFlavor::Pro, "n1\nn2\nn3\nn4\n");
        assert_eq!(
            (code, out.as_str()),
            (0, format!("<-->{agent}").as_str()),
            "{err}"
        );
        // A select changed to several slots per node: refused, pbsdsh not run.
        let (code, out, err) = run_pbs_pilot(PbsFlavor::Pro, "n1\nn1\nn2\nn2\n");
        assert_eq!((code, out.as_str()), (1, ""), "{err}");
        assert!(
            err.contains("lists 4 slots on 2 hosts") && err.contains("mpiprocs=1"),
            "{err}"
        );
    }

    #[test]
    fn directive_paths_are_checked() {
        let s = spec(Backend::Slurm);
        let err = pilot_script(&s, Path::new("/home/my user/a")).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("/home/my user/a") && msg.contains("CONSTELLATION_HOME"),
            "{msg}"
        );
        assert!(pilot_script(&s, Path::new("/scratch/50%/a")).is_err());
        assert!(pilot_script(&spec(Backend::Pbs), Path::new("/a:b")).is_err());
        assert!(pilot_script(&s, Path::new("/a:b")).is_ok());
        // Only directive-based backends care.
        let mut ssh = spec(Backend::Ssh);
        ssh.hosts = vec!["n1".into()];
        ssh.nodes = 1;
        assert!(pilot_script(&ssh, Path::new("/home/my user/a")).is_ok());
    }

    #[test]
    fn ssh_script_starts_each_host() {
        let mut s = spec(Backend::Ssh);
        s.hosts = vec!["node1".into(), "alice@node2".into()];
        s.nodes = 2;
        let text = pilot_script(&s, Path::new("/h/a b")).unwrap();
        assert!(text.contains("PIDS='/h/a b/pids'\n"));
        assert!(
            text.contains("ssh -o 'BatchMode=yes' -o 'ConnectTimeout=10' \"$host\" \"$remote\"")
        );
        assert_eq!(text.matches("start_agent node1 ").count(), 1);
        assert_eq!(text.matches("start_agent alice@node2 ").count(), 1);
        assert!(text.contains("exit 3"));
        bash(&format!("bash -n <<'EOF'\n{text}EOF"));
        let cancel = cancel_script(&s, Path::new("/h/a b")).unwrap().unwrap();
        assert!(cancel.contains("\"kill $pid\" < /dev/null"));
        bash(&format!("bash -n <<'EOF'\n{cancel}EOF"));
    }

    #[test]
    fn ssh_options_go_into_every_ssh_call() {
        let mut s = spec(Backend::Ssh);
        s.hosts = vec!["node1".into()];
        s.nodes = 1;
        s.ssh_options = vec!["Port=2222".into(), "IdentityFile=/h/my key".into()];
        let ssh = "ssh -o 'Port=2222' -o 'IdentityFile=/h/my key' -o 'BatchMode=yes' \
                   -o 'ConnectTimeout=10' \"$host\"";
        let pilot = pilot_script(&s, Path::new("/h/a")).unwrap();
        assert!(pilot.contains(ssh), "{pilot}");
        let cancel = cancel_script(&s, Path::new("/h/a")).unwrap().unwrap();
        assert!(cancel.contains(ssh), "{cancel}");
        bash(&format!("bash -n <<'EOF'\n{cancel}EOF"));
    }

    #[test]
    fn ssh_remote_command_runs_in_a_shell() {
        // Run the remote command locally (as the remote login shell would),
        // with a fake agent that records its arguments.
        let tmp = TempDir::new("remote q'uote");
        let dir = tmp.path().join("alloc dir");
        let agent = tmp.path().join("fake agent");
        write_executable(&agent, "#!/bin/sh\nprintf '%s\\n' \"$@\"\n");
        let mut s = spec(Backend::Ssh);
        s.agent_binary = agent;
        s.context = Some("it's \"quoted\" $HOME".into());
        let dir_str = dir.to_str().unwrap();
        let remote = ssh_remote_command(&s, dir_str, "node1");
        let pid = bash(&remote);
        assert!(pid.trim().parse::<u32>().is_ok(), "{pid}");
        let out = dir.join("node1.stdout");
        for _ in 0..100 {
            if std::fs::read_to_string(&out).is_ok_and(|t| t.contains("--walltime")) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let args = std::fs::read_to_string(out).unwrap();
        assert!(args.contains("\nit's \"quoted\" $HOME\n"), "{args}");
    }

    #[test]
    fn local_script_lines() {
        let text = pilot_script(&spec(Backend::Local), Path::new("/h/it's")).unwrap();
        assert!(text.contains("ALLOC='/h/it'\\''s'\n"));
        assert!(text.contains("for ((i = 1; i <= 4; i++)); do\n"));
        assert!(text.contains(
            "  /opt/c/bin/constellation agent --pool /home/u/pool.json --executors 16 \
             --context gpu,a100 --site lumi --walltime 6840s > \"$ALLOC/agent-$i.stdout\""
        ));
        assert!(text.contains("mv -f \"$ALLOC/exit_status.tmp\" \"$ALLOC/exit_status\"\n"));
        bash(&format!("bash -n <<'EOF'\n{text}EOF"));
        let cancel = cancel_script(&spec(Backend::Local), Path::new("/h"))
            .unwrap()
            .unwrap();
        assert!(cancel.contains("if [ \"$stopped\" -lt 4 ]"));
        bash(&format!("bash -n <<'EOF'\n{cancel}EOF"));
        let slurm = spec(Backend::Slurm);
        assert!(cancel_script(&slurm, Path::new("/h")).unwrap().is_none());
    }
}
