//! What a shell activity runs, and how: the serde description that travels
//! with the activity.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use constellation::ContextList;
use serde::{Deserialize, Serialize};

/// The environment variable that overrides [`default_output_dir`].
pub const OUTPUT_DIR_VAR: &str = "CONSTELLATION_OUTPUT_DIR";

/// Where captured output goes when a spec names no directory:
/// `$CONSTELLATION_OUTPUT_DIR`, or `constellation-output` under the
/// executor's working directory.
pub fn default_output_dir() -> PathBuf {
    std::env::var_os(OUTPUT_DIR_VAR)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("constellation-output"))
}

/// The program to start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Program {
    /// An executable, found on `PATH` unless it contains a `/`, with its
    /// arguments. Nothing is interpreted by a shell.
    Exec {
        /// The executable.
        program: String,
        /// Its arguments.
        args: Vec<String>,
    },
    /// Script text run by an interpreter, e.g. `/bin/sh -c TEXT`. Arguments
    /// after the text become `$1`, `$2`, ….
    Script {
        /// The interpreter and its options before the text, e.g. `["/bin/bash", "-euo", "pipefail", "-c"]`.
        interpreter: Vec<String>,
        /// The script.
        text: String,
        /// Positional arguments.
        args: Vec<String>,
    },
}

impl Program {
    /// The argv the program starts with; the first item is the executable.
    pub fn argv(&self) -> Vec<String> {
        match self {
            Program::Exec { program, args } => std::iter::once(program.clone())
                .chain(args.iter().cloned())
                .collect(),
            Program::Script {
                interpreter,
                text,
                args,
            } => {
                let mut argv = interpreter.clone();
                argv.push(text.clone());
                // `sh -c TEXT NAME ARGS…` sets $0 to NAME; keep $1 the first argument.
                argv.push("constellation-script".to_string());
                argv.extend(args.iter().cloned());
                argv
            }
        }
    }

    /// A short description for messages: the program name, or the script's first line.
    pub fn describe(&self) -> String {
        match self {
            Program::Exec { program, .. } => program.clone(),
            Program::Script { text, .. } => {
                let first = text.lines().next().unwrap_or("").trim();
                let mut shown: String = first.chars().take(60).collect();
                if shown.len() < first.len() || text.lines().nth(1).is_some() {
                    shown.push('…');
                }
                format!("script `{shown}`")
            }
        }
    }
}

/// Where a command's standard output and error go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Capture {
    /// Into `stdout` and `stderr` files in a directory of their own per
    /// activity, under this directory (see [`ShellSpec::output_dir_for`]).
    Files {
        /// The parent of the per-activity directories.
        dir: PathBuf,
    },
    /// Into memory, keeping at most `limit` bytes of each stream; the rest is
    /// read and counted, so the command never blocks on a full pipe.
    Memory {
        /// Bytes kept per stream.
        limit: usize,
    },
    /// Thrown away (`/dev/null`).
    Discard,
}

impl Default for Capture {
    fn default() -> Self {
        Capture::Files {
            dir: default_output_dir(),
        }
    }
}

/// Which failures are worth another attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum RetryOn {
    /// Any failure: a non-zero exit, a signal, a timeout, or a failed start.
    #[default]
    AnyFailure,
    /// Only timeouts and deaths by signal, which are often transient (a
    /// node under memory pressure); a non-zero exit is taken as the answer.
    TimeoutOrSignal,
}

/// How often a failed command is run again, and how long to wait between tries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Attempts in all, at least 1. The default, 1, never retries: most
    /// scripts that fail once fail again.
    pub max_attempts: u32,
    /// The wait before the second attempt; it doubles for each later one.
    pub delay: Duration,
    /// The longest wait between attempts.
    pub max_delay: Duration,
    /// Which failures are retried.
    pub retry_on: RetryOn,
}

impl RetryPolicy {
    /// Never retry.
    pub const NEVER: RetryPolicy = RetryPolicy {
        max_attempts: 1,
        delay: Duration::from_secs(1),
        max_delay: Duration::from_secs(60),
        retry_on: RetryOn::AnyFailure,
    };

    /// Up to `attempts` attempts in all, with the default back-off
    /// (1 s, doubling, at most 60 s).
    pub fn attempts(attempts: u32) -> Self {
        RetryPolicy {
            max_attempts: attempts.max(1),
            ..Self::NEVER
        }
    }

    /// The wait before attempt `next` (2 for the first retry).
    pub fn delay_before(&self, next: u32) -> Duration {
        let doublings = next.saturating_sub(2).min(31);
        self.delay
            .saturating_mul(1 << doublings)
            .min(self.max_delay)
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self::NEVER
    }
}

/// Everything about one command: what to run, with which environment and
/// files, where it may run, and what to do when it fails.
///
/// Build one with [`ShellSpec::command`] or [`ShellSpec::script`] and the
/// builder methods, then run it as a [`ShellActivity`](super::ShellActivity).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShellSpec {
    /// A name for messages and the output directory; defaults to the activity id.
    pub name: Option<String>,
    /// The program.
    pub program: Program,
    /// Variables added to the executor's environment. They win over the
    /// variables the executor sets (`CONSTELLATION_*`, `CUDA_VISIBLE_DEVICES`).
    pub env: BTreeMap<String, String>,
    /// The working directory; the executor's own if `None`.
    pub cwd: Option<PathBuf>,
    /// A file fed to standard input; `/dev/null` if `None`.
    pub stdin: Option<PathBuf>,
    /// Where the output goes.
    pub capture: Capture,
    /// The longest one attempt may take; its whole process group is killed then.
    pub timeout: Option<Duration>,
    /// What happens after a failure.
    pub retry: RetryPolicy,
    /// Where the command may run.
    pub context: ContextList,
    /// Whether the command may be started again from the beginning if the
    /// node running it dies. True by default: a script that writes its
    /// outputs whole is safe to repeat.
    pub restartable: bool,
}

impl ShellSpec {
    /// Runs `program` (found on `PATH` unless it has a `/`) with no arguments yet.
    pub fn command(program: impl Into<String>) -> Self {
        Self::with_program(Program::Exec {
            program: program.into(),
            args: Vec::new(),
        })
    }

    /// Runs `text` with `/bin/sh -c`.
    pub fn script(text: impl Into<String>) -> Self {
        Self::with_program(Program::Script {
            interpreter: vec!["/bin/sh".to_string(), "-c".to_string()],
            text: text.into(),
            args: Vec::new(),
        })
    }

    fn with_program(program: Program) -> Self {
        ShellSpec {
            name: None,
            program,
            env: BTreeMap::new(),
            cwd: None,
            stdin: None,
            capture: Capture::default(),
            timeout: None,
            retry: RetryPolicy::default(),
            context: ContextList::anywhere(),
            restartable: true,
        }
    }

    /// Names the command, for messages and its output directory.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Adds one argument.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args_mut().push(arg.into());
        self
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args_mut().extend(args.into_iter().map(Into::into));
        self
    }

    fn args_mut(&mut self) -> &mut Vec<String> {
        match &mut self.program {
            Program::Exec { args, .. } | Program::Script { args, .. } => args,
        }
    }

    /// Sets the interpreter of a script, e.g. `["/bin/bash", "-eu", "-c"]`;
    /// the script text follows these arguments. No effect on a command.
    pub fn interpreter<I, S>(mut self, interpreter: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        if let Program::Script {
            interpreter: current,
            ..
        } = &mut self.program
        {
            *current = interpreter.into_iter().map(Into::into).collect();
        }
        self
    }

    /// Sets an environment variable for the command.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(name.into(), value.into());
        self
    }

    /// Runs the command in `dir`.
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// Feeds the file at `path` to standard input.
    pub fn stdin_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.stdin = Some(path.into());
        self
    }

    /// Sets where output goes.
    pub fn capture(mut self, capture: Capture) -> Self {
        self.capture = capture;
        self
    }

    /// Captures output into files under `dir`.
    pub fn output_dir(self, dir: impl Into<PathBuf>) -> Self {
        self.capture(Capture::Files { dir: dir.into() })
    }

    /// Kills the command's process group if one attempt runs longer than `timeout`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets the retry policy.
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Restricts where the command may run, e.g. `"site:vu|anywhere".parse()?`.
    pub fn context(mut self, context: ContextList) -> Self {
        self.context = context;
        self
    }

    /// Marks the command as unsafe to start again after a node failure.
    pub fn restartable(mut self, restartable: bool) -> Self {
        self.restartable = restartable;
        self
    }

    /// The directory that holds this command's `stdout` and `stderr` when
    /// output goes to files under `root`: `root/NAME`, where NAME is the
    /// spec's name or else `activity`, with characters that do not belong in
    /// a file name replaced by `_`.
    pub fn output_dir_for(&self, root: &Path, activity: &str) -> PathBuf {
        let name = self.name.as_deref().unwrap_or(activity);
        let safe: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-_.=+,".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let safe = match safe.as_str() {
            "" | "." | ".." => format!("_{safe}"),
            _ => safe,
        };
        root.join(safe)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_keep_positional_arguments_in_place() {
        let spec = ShellSpec::script("echo $1").arg("hello");
        assert_eq!(
            spec.program.argv(),
            ["/bin/sh", "-c", "echo $1", "constellation-script", "hello"]
        );
        let spec = ShellSpec::command("ls").args(["-l", "/"]);
        assert_eq!(spec.program.argv(), ["ls", "-l", "/"]);
    }

    #[test]
    fn back_off_doubles_up_to_the_cap() {
        let policy = RetryPolicy::attempts(10);
        assert_eq!(policy.delay_before(2), Duration::from_secs(1));
        assert_eq!(policy.delay_before(3), Duration::from_secs(2));
        assert_eq!(policy.delay_before(5), Duration::from_secs(8));
        assert_eq!(policy.delay_before(40), Duration::from_secs(60));
        assert_eq!(RetryPolicy::attempts(0).max_attempts, 1);
    }

    #[test]
    fn output_directories_are_safe_file_names() {
        let root = Path::new("/out");
        let spec = ShellSpec::command("true");
        assert_eq!(
            spec.output_dir_for(root, "3f2a9c1e:1.42"),
            Path::new("/out/3f2a9c1e_1.42")
        );
        let spec = spec.name("../../etc");
        assert_eq!(spec.output_dir_for(root, "x"), Path::new("/out/.._.._etc"));
        let spec = ShellSpec::command("true").name("..");
        assert_eq!(spec.output_dir_for(root, "x"), Path::new("/out/_.."));
    }

    #[test]
    fn long_scripts_are_described_by_their_first_line() {
        let spec = ShellSpec::script("set -e\nmake all");
        assert_eq!(spec.program.describe(), "script `set -e…`");
    }
}
