//! Local pilots: run detached on this machine, start N agents, wait for
//! them, and write the exit status; the cancel script stops them.

use super::{finish, margin_comment, shell_join, shell_quote};
use crate::glidein::alloc::{EXIT_STATUS_FILE, PIDS_FILE, PILOT_PID_FILE};
use crate::glidein::spec::PilotSpec;

/// local: N agents in the background; TERM (from cancel.sh) is passed on so
/// agents leave cleanly; the first non-zero agent status becomes ours and
/// is written to the exit status file, since nobody waits for this process.
pub(super) fn local_script(spec: &PilotSpec, dir: &str) -> String {
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
pub(super) fn local_cancel_script(dir: &str, agents: usize) -> String {
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
