//! The ssh and local backends: no batch system, so the allocation
//! directory itself is the job record.
//!
//! * ssh: `pilot.sh` runs synchronously on the login node, starts detached
//!   agents and writes `host:pid` lines to `pids`. State is found by asking
//!   each host whether the pid is alive (`kill -0`).
//! * local: `pilot.sh` is started detached (`nohup ... &`); its pid is the
//!   job id. It writes `exit_status` when its agents are done.

use std::process::Output;

use crate::glidein::alloc::{
    Allocation, CANCEL_SCRIPT, EXIT_STATUS_FILE, PIDS_FILE, PILOT_SCRIPT, STDERR_FILE, STDOUT_FILE,
};
use crate::glidein::runner::{
    failure_message, last_line, spawn, BackendError, CommandLine, ParseError, Runner,
};
use crate::glidein::script::{ssh_command, SSH_PARTIAL_EXIT};
use crate::glidein::state::{CancelOutcome, JobState};

/// Exit status with which ssh reports its own failure (as opposed to the
/// remote command's).
const SSH_FAILURE: i32 = 255;

/// One agent started by the ssh or local pilot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentPid {
    /// Host it runs on (`localhost` for the local backend).
    pub host: String,
    /// Its process id there.
    pub pid: u32,
}

/// Parses the `host:pid` lines of a pids file, skipping malformed lines
/// (a line being written right now may be incomplete). The last `:`
/// separates, so IPv6 hosts work.
pub fn parse_pids(text: &str) -> Vec<AgentPid> {
    text.lines()
        .filter_map(|line| {
            let (host, pid) = line.trim().rsplit_once(':')?;
            Some(AgentPid {
                host: host.to_string(),
                pid: pid.parse().ok()?,
            })
        })
        .filter(|a| !a.host.is_empty())
        .collect()
}

/// How the pilot is started for `alloc`: `bash pilot.sh` for ssh (it
/// returns once the agents are detached); for local, a detached `nohup`
/// that prints the pilot's pid. Paths are passed as arguments, not pasted
/// into the `-c` text, so they need no quoting.
pub fn submit_command(local: bool, alloc_dir: &std::path::Path) -> CommandLine {
    let path = |name| alloc_dir.join(name).to_string_lossy().into_owned();
    if !local {
        return CommandLine::new("bash", [path(PILOT_SCRIPT)]);
    }
    CommandLine::new(
        "bash",
        [
            "-c".to_string(),
            // All three standard streams are redirected so the pilot holds
            // none of our pipes and `Runner::run` returns at once.
            r#"nohup bash "$1" > "$2" 2> "$3" < /dev/null & echo $!"#.to_string(),
            "glidein-local".to_string(),
            path(PILOT_SCRIPT),
            path(STDOUT_FILE),
            path(STDERR_FILE),
        ],
    )
}

/// What a successful start reported.
#[derive(Debug, Clone, PartialEq)]
pub struct Started {
    /// Job id to record (the local pilot's pid; none for ssh).
    pub job_id: Option<String>,
    /// Some agents failed to start (ssh), with details.
    pub warning: Option<String>,
}

/// Interprets the output of the ssh pilot: all agents started, some did
/// (a warning), or none (an error).
pub fn interpret_ssh_start(cmd: &CommandLine, out: &Output) -> Result<Started, BackendError> {
    match out.status.code() {
        Some(0) => Ok(Started {
            job_id: None,
            warning: None,
        }),
        Some(SSH_PARTIAL_EXIT) => Ok(Started {
            job_id: None,
            warning: Some(format!(
                "some agents did not start: {}",
                failure_message(out)
            )),
        }),
        _ => Err(BackendError::failed(cmd, out)),
    }
}

/// Interprets the output of the local start command: the pilot's pid.
pub fn interpret_local_start(cmd: &CommandLine, out: &Output) -> Result<Started, BackendError> {
    if !out.status.success() {
        return Err(BackendError::failed(cmd, out));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let pid = last_line(&stdout)
        .filter(|l| l.parse::<u32>().is_ok())
        .ok_or_else(|| BackendError::parse(cmd, ParseError::new("expected a pid", &stdout)))?;
    Ok(Started {
        job_id: Some(pid.to_string()),
        warning: None,
    })
}

/// `ssh [-o OPTION]... HOST 'kill -0 PID'`: exit 0 if the agent is alive.
/// `options` are the user's ssh options (see [`ssh_command`]).
pub fn ssh_alive_command(agent: &AgentPid, options: &[String]) -> CommandLine {
    let mut words = ssh_command(options);
    words.push(agent.host.clone());
    words.push(format!("kill -0 {}", agent.pid));
    let program = words.remove(0);
    CommandLine::new(&program, words)
}

/// State of an ssh allocation: running while any agent lives. Hosts that
/// cannot be reached make the answer an error unless another agent is
/// known to be alive.
pub fn ssh_query(alloc: &Allocation, runner: &dyn Runner) -> Result<JobState, BackendError> {
    let agents = read_pids(alloc);
    let mut unreachable = None;
    for agent in &agents {
        let cmd = ssh_alive_command(agent, &alloc.record.ssh_options);
        let out = spawn(&cmd, runner)?;
        match out.status.code() {
            Some(0) => return Ok(JobState::Running),
            Some(SSH_FAILURE) | None => unreachable = Some(BackendError::failed(&cmd, &out)),
            Some(_) => {} // kill -0 failed: that agent is gone
        }
    }
    match unreachable {
        Some(err) => Err(err),
        None => Ok(JobState::Finished { exit: None }),
    }
}

fn read_pids(alloc: &Allocation) -> Vec<AgentPid> {
    alloc
        .read_file(PIDS_FILE)
        .ok()
        .flatten()
        .map(|t| parse_pids(&t))
        .unwrap_or_default()
}

/// `bash -c 'kill -0 "$1"' glidein-check PID`: exit 0 if alive.
pub fn local_alive_command(pid: &str) -> CommandLine {
    CommandLine::new(
        "bash",
        ["-c", r#"kill -0 "$1" 2>/dev/null"#, "glidein-check", pid],
    )
}

/// State of a local allocation: the recorded exit status if the pilot
/// wrote one, else running while the pilot process lives.
pub fn local_query(alloc: &Allocation, runner: &dyn Runner) -> Result<JobState, BackendError> {
    if let Some(state) = local_exit_state(alloc) {
        return Ok(state);
    }
    let Some(pid) = alloc.record.job_id.as_deref() else {
        return Ok(alloc.record.state.clone());
    };
    let out = spawn(&local_alive_command(pid), runner)?;
    if out.status.success() {
        return Ok(JobState::Running);
    }
    // The pilot may have written its status between the two checks.
    Ok(local_exit_state(alloc).unwrap_or_else(|| JobState::Failed {
        reason: format!("local pilot (pid {pid}) is gone without recording an exit status"),
    }))
}

fn local_exit_state(alloc: &Allocation) -> Option<JobState> {
    let text = alloc.read_file(EXIT_STATUS_FILE).ok().flatten()?;
    let code = text.trim().parse().ok()?;
    Some(JobState::Finished { exit: Some(code) })
}

/// `bash cancel.sh` in the allocation directory.
pub fn cancel_command(alloc: &Allocation) -> CommandLine {
    CommandLine::new(
        "bash",
        [alloc.path(CANCEL_SCRIPT).to_string_lossy().into_owned()],
    )
}

/// Stops the agents of an ssh or local allocation with its cancel script.
pub fn cancel(alloc: &Allocation, runner: &dyn Runner) -> Result<CancelOutcome, BackendError> {
    let cmd = cancel_command(alloc);
    let out = spawn(&cmd, runner)?;
    if out.status.success() {
        Ok(CancelOutcome::Cancelled)
    } else {
        Err(BackendError::failed(&cmd, &out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::glidein::runner::testing::output;
    use std::path::Path;

    #[test]
    fn pids_file_parsing() {
        let text = "node1:123\nalice@node2:456\n::1:789\nbroken\nnode3:\nnode4:12x\n:5\n";
        assert_eq!(
            parse_pids(text),
            [
                AgentPid {
                    host: "node1".into(),
                    pid: 123
                },
                AgentPid {
                    host: "alice@node2".into(),
                    pid: 456
                },
                AgentPid {
                    host: "::1".into(),
                    pid: 789
                },
            ]
        );
    }

    #[test]
    fn start_commands() {
        let ssh = submit_command(false, Path::new("/a b"));
        assert_eq!(ssh.to_string(), "bash '/a b/pilot.sh'");
        let local = submit_command(true, Path::new("/a"));
        assert_eq!(local.args[3..], ["/a/pilot.sh", "/a/stdout", "/a/stderr"]);
    }

    #[test]
    fn ssh_start_outcomes() {
        let cmd = CommandLine::new("bash", ["pilot.sh"]);
        let ok = interpret_ssh_start(&cmd, &output(0, "started 2 of 2\n", "")).unwrap();
        assert_eq!(ok.warning, None);
        let partial = interpret_ssh_start(
            &cmd,
            &output(
                3,
                "",
                "glidein: could not start an agent on n2 (ssh failed)\n",
            ),
        )
        .unwrap();
        assert!(partial.warning.unwrap().contains("n2"));
        let err = interpret_ssh_start(&cmd, &output(1, "", "all failed\n")).unwrap_err();
        assert!(err.to_string().contains("all failed"));
    }

    #[test]
    fn local_start_outcomes() {
        let cmd = CommandLine::new("bash", ["-c", "x"]);
        let ok = interpret_local_start(&cmd, &output(0, "4242\n", "")).unwrap();
        assert_eq!(ok.job_id.as_deref(), Some("4242"));
        assert!(interpret_local_start(&cmd, &output(0, "nope\n", "")).is_err());
        assert!(interpret_local_start(&cmd, &output(1, "", "boom")).is_err());
    }

    #[test]
    fn alive_commands() {
        let agent = AgentPid {
            host: "node1".into(),
            pid: 42,
        };
        assert_eq!(
            ssh_alive_command(&agent, &[]).to_string(),
            "ssh -o 'BatchMode=yes' -o 'ConnectTimeout=10' node1 'kill -0 42'"
        );
        let options = ["Port=2222".to_string(), "IdentityFile=/k/id 1".to_string()];
        assert_eq!(
            ssh_alive_command(&agent, &options).to_string(),
            "ssh -o 'Port=2222' -o 'IdentityFile=/k/id 1' -o 'BatchMode=yes' \
             -o 'ConnectTimeout=10' node1 'kill -0 42'"
        );
        assert_eq!(local_alive_command("7").args.last().unwrap(), "7");
    }
}
