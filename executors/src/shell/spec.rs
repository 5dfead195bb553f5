//! What a shell activity runs, and how: the serde description that travels
//! with the activity.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use constellation::ContextList;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

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
    /// Into stream files in this directory, one per executor thread, as
    /// framed records that say which activity, attempt and channel each
    /// chunk is of: a million commands write a few files instead of two
    /// each. The command's pipes are read as it writes, never held whole.
    /// Read an attempt's output back through its
    /// [`Output::Stream`](super::Output::Stream) place and
    /// [`stream`](super::stream).
    Stream {
        /// The directory of the stream files.
        dir: PathBuf,
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
    /// spec's name or else `activity`, made a file name by
    /// [`output_folder_name`], so different names never share a folder.
    pub fn output_dir_for(&self, root: &Path, activity: &str) -> PathBuf {
        root.join(output_folder_name(self.name.as_deref().unwrap_or(activity)))
    }
}

/// The longest folder name [`output_folder_name`] returns: most file
/// systems allow 255 bytes in one name.
pub const MAX_FOLDER_NAME: usize = 255;

/// How much of an over-long escaped name is kept, readable, before the hash
/// that tells such names apart.
const KEPT_BEFORE_HASH: usize = 200;

/// Characters kept as they are in folder names; everything else is escaped.
/// `%` (the escape) and `~` (which marks a hashed name) are not among them.
fn kept_in_folder_name(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"-_.=+,".contains(&byte)
}

/// A folder name for an activity name, different for different names.
///
/// Names of letters, digits and `-_.=+,` stay as they are (`detect-7.r`).
/// Every other byte becomes `%XX`, its value in hex, and `%` itself too
/// (`a/b` gives `a%2Fb`, `a_b` stays `a_b`); `""`, `.` and `..`, which are
/// not usable names, become `%`, `%2E` and `%2E%2E`. Each of these decodes
/// back to the name, so no two names share a folder. An escaped name longer
/// than [`MAX_FOLDER_NAME`] keeps its first 200 bytes and ends in `~` and
/// 32 hex digits of the name's SHA-256: no shorter name contains `~`, and
/// two long names share a folder only if 128 bits of their hashes agree.
pub fn output_folder_name(name: &str) -> String {
    use std::fmt::Write as _;
    let mut escaped = String::with_capacity(name.len());
    match name {
        "" => escaped.push('%'),
        "." => escaped.push_str("%2E"),
        ".." => escaped.push_str("%2E%2E"),
        _ => {
            for &byte in name.as_bytes() {
                if kept_in_folder_name(byte) {
                    escaped.push(byte as char);
                } else {
                    let _ = write!(escaped, "%{byte:02X}");
                }
            }
        }
    }
    if escaped.len() <= MAX_FOLDER_NAME {
        return escaped;
    }
    // Cut before an escape rather than through it, so the kept part reads right.
    let mut cut = KEPT_BEFORE_HASH;
    if let Some(percent) = escaped[cut - 2..cut].rfind('%') {
        cut = cut - 2 + percent;
    }
    escaped.truncate(cut);
    let digest = Sha256::digest(name.as_bytes());
    escaped.push('~');
    for byte in &digest[..16] {
        let _ = write!(escaped, "{byte:02x}");
    }
    escaped
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
            Path::new("/out/3f2a9c1e%3A1.42")
        );
        let spec = spec.name("../../etc");
        assert_eq!(
            spec.output_dir_for(root, "x"),
            Path::new("/out/..%2F..%2Fetc")
        );
        let spec = ShellSpec::command("true").name("..");
        assert_eq!(spec.output_dir_for(root, "x"), Path::new("/out/%2E%2E"));
        for ordinary in ["detect-7.r", "a_b", "SN_2014J-band.i", "x=1,y+2"] {
            assert_eq!(output_folder_name(ordinary), ordinary);
        }
    }

    /// Reverses the escape of [`output_folder_name`] for names short enough
    /// not to be hashed: the proof that no two of them share a folder.
    fn decode(folder: &str) -> Vec<u8> {
        if folder == "%" {
            return Vec::new();
        }
        let bytes = folder.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 3;
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        out
    }

    fn assert_usable(folder: &str) {
        assert!(!folder.is_empty() && folder != "." && folder != "..");
        assert!(folder.len() <= MAX_FOLDER_NAME, "{} bytes", folder.len());
        assert!(!folder.contains('/') && !folder.contains('\0'));
    }

    #[test]
    fn names_that_clashed_get_folders_of_their_own() {
        // Each pair shared one folder when odd characters became `_`.
        for (a, b) in [
            ("a/b", "a_b"),
            ("αβ", "γδ"),
            ("..", "_.."),
            ("", "_"),
            (".", "_."),
        ] {
            let (fa, fb) = (output_folder_name(a), output_folder_name(b));
            assert_ne!(fa, fb, "{a:?} and {b:?}");
            assert_usable(&fa);
            assert_usable(&fb);
            assert_eq!(decode(&fa), a.as_bytes());
            assert_eq!(decode(&fb), b.as_bytes());
        }
    }

    #[test]
    fn every_name_gets_a_usable_folder_no_other_name_gets() {
        // Names drawn from an alphabet rich in the characters that used to
        // clash, every length from 0 to 4 over 7 symbols: all 2,801 of them.
        let alphabet = ["a", "_", "/", ".", "%", "~", "é"];
        let mut names = vec![String::new()];
        let mut last = vec![String::new()];
        for _ in 0..4 {
            last = last
                .iter()
                .flat_map(|n| alphabet.iter().map(move |c| format!("{n}{c}")))
                .collect();
            names.extend(last.iter().cloned());
        }
        let mut seen = std::collections::HashMap::new();
        for name in &names {
            let folder = output_folder_name(name);
            assert_usable(&folder);
            assert_eq!(decode(&folder), name.as_bytes(), "{name:?} -> {folder}");
            if let Some(other) = seen.insert(folder.clone(), name.clone()) {
                panic!("{other:?} and {name:?} both get {folder}");
            }
        }
        assert_eq!(seen.len(), 2801);
    }

    #[test]
    fn long_names_are_cut_and_told_apart_by_a_hash() {
        // 200 bytes of Greek escape to 600: too long for a file name.
        let a = "α".repeat(100);
        let b = format!("{}β", "α".repeat(99));
        let (fa, fb) = (output_folder_name(&a), output_folder_name(&b));
        assert_ne!(fa, fb);
        assert_usable(&fa);
        assert_usable(&fb);
        assert!(fa.starts_with("%CE%B1%CE%B1") && fa.contains('~'), "{fa}");
        // The cut falls before an escape, never inside one.
        let kept = fa.split('~').next().unwrap();
        assert_eq!(decode(kept), "α".repeat(kept.len() / 6).as_bytes());
        // Stable across runs and versions: the journal of one run and a
        // resumed run name the same folder.
        assert_eq!(fa, output_folder_name(&a));
        let plain = "x".repeat(255);
        assert_eq!(output_folder_name(&plain), plain);
        let long_plain = "x".repeat(256);
        assert_usable(&output_folder_name(&long_plain));
        assert_ne!(
            output_folder_name(&long_plain),
            output_folder_name(&"x".repeat(257))
        );
    }

    #[test]
    fn long_scripts_are_described_by_their_first_line() {
        let spec = ShellSpec::script("set -e\nmake all");
        assert_eq!(spec.program.describe(), "script `set -e…`");
    }
}
