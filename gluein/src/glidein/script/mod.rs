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

use crate::glidein::spec::{Backend, PilotSpec};

mod batch;
mod local;
mod ssh;
#[cfg(test)]
mod tests;

pub use batch::{pbs_request, slurm_request};
use batch::{pbs_script, slurm_script};
use local::{local_cancel_script, local_script};
pub use ssh::ssh_remote_command;
use ssh::{ssh_cancel_script, ssh_script};

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
