//! ssh pilots: run on the login node, start one detached agent per host,
//! and record `host:pid` lines that the cancel script reads back.

use super::{
    file_in, finish, margin_comment, shell_join, shell_quote, ssh_command, SSH_PARTIAL_EXIT,
};
use crate::glidein::alloc::PIDS_FILE;
use crate::glidein::spec::PilotSpec;

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
pub(super) fn ssh_script(spec: &PilotSpec, dir: &str) -> String {
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
pub(super) fn ssh_cancel_script(dir: &str, options: &[String]) -> String {
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
