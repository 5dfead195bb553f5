//! What the user asked for: a [`PilotSpec`], and its validation.
//!
//! # Agent walltime and the safety margin
//!
//! A batch system kills a job the moment its walltime runs out. Agents
//! that are killed mid-task lose that task and never tell the pool they
//! are leaving, so the pool waits for heartbeats to time out before
//! rescheduling. To avoid this the agents are given a *shorter* walltime
//! than the job: `agent walltime = job walltime - margin`, where the margin
//! is 5 % of the job walltime, but at least 30 s (time to drain and
//! deregister) and at most 10 min (beyond that the lost capacity outweighs
//! any benefit). A 2 h job thus runs agents for 1 h 54 min; a 1 day job
//! for 23 h 50 min. See [`safety_margin`].

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use timefmt::format_seconds;

/// Percentage of the job walltime reserved for agents to leave cleanly.
pub const MARGIN_PERCENT: u128 = 5;
/// Smallest safety margin: enough for an agent to drain and deregister.
pub const MIN_MARGIN: Duration = Duration::from_secs(30);
/// Largest safety margin: more would waste allocation time for nothing.
pub const MAX_MARGIN: Duration = Duration::from_secs(600);
/// Shortest job walltime we submit: anything shorter leaves the agents
/// less time to work than the margin takes.
pub const MIN_WALLTIME: Duration = Duration::from_secs(60);
/// Job name used when the user gives none.
pub const DEFAULT_JOB_NAME: &str = "constellation";

/// Where pilots are started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// A Slurm cluster: one `sbatch` job, one agent per node via `srun`.
    Slurm,
    /// A PBS/Torque or PBS Pro cluster: one `qsub` job, agents via `pbsdsh`.
    Pbs,
    /// A list of hosts reached with `ssh`: one detached agent per host.
    Ssh,
    /// This machine: N agents started in the background.
    Local,
}

impl Backend {
    /// All backends, in the order the CLI lists them.
    pub const ALL: [Backend; 4] = [Backend::Slurm, Backend::Pbs, Backend::Ssh, Backend::Local];

    /// Lower-case name, as used on the command line and in directory names.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Slurm => "slurm",
            Backend::Pbs => "pbs",
            Backend::Ssh => "ssh",
            Backend::Local => "local",
        }
    }

    /// True for backends with a batch system (and so a walltime it enforces,
    /// a queue, and raw submit arguments).
    pub fn is_batch(self) -> bool {
        matches!(self, Backend::Slurm | Backend::Pbs)
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Backend {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Backend::ALL
            .into_iter()
            .find(|b| b.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| SpecError::UnknownBackend(s.to_string()))
    }
}

/// Which PBS family a cluster runs. They differ in how a job starts one
/// task per node: Torque's `pbsdsh -u` starts one per unique host; PBS Pro
/// (and OpenPBS) has no `-u` and starts one task per `$PBS_NODEFILE` line,
/// so its pilot asks for one MPI slot per node instead (see
/// [`crate::glidein::script`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PbsFlavor {
    /// Torque (and the old OpenPBS 2.x it came from): `-l nodes=N:ppn=K`,
    /// `pbsdsh -u`.
    #[default]
    Torque,
    /// PBS Professional and OpenPBS 19+: `-l select=N:...:mpiprocs=1`,
    /// `-l place=scatter`, `pbsdsh --`.
    Pro,
}

impl PbsFlavor {
    /// Lower-case name, as used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            PbsFlavor::Torque => "torque",
            PbsFlavor::Pro => "pro",
        }
    }
}

impl fmt::Display for PbsFlavor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PbsFlavor {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "torque" => Ok(PbsFlavor::Torque),
            "pro" | "pbspro" | "openpbs" => Ok(PbsFlavor::Pro),
            _ => Err(SpecError::UnknownPbsFlavor(s.to_string())),
        }
    }
}

/// A problem with the requested pilot, found before anything is run.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SpecError {
    /// The backend name is not one we know.
    #[error("unknown glide-in backend `{0}`: use one of slurm, pbs, ssh, local")]
    UnknownBackend(String),
    /// The PBS flavor name is not one we know.
    #[error("unknown PBS flavor `{0}`: use torque (Torque) or pro (PBS Professional, OpenPBS)")]
    UnknownPbsFlavor(String),
    /// `--nodes 0`.
    #[error("--nodes must be at least 1")]
    NoNodes,
    /// `--executors-per-node 0`.
    #[error("--executors-per-node must be at least 1 (leave it out to let the agent decide)")]
    NoExecutors,
    /// The walltime is shorter than [`MIN_WALLTIME`].
    #[error("--walltime {given:?} is too short: agents stop {margin}s early to leave cleanly, so ask for at least {min}s (e.g. `--walltime 10m`)")]
    WalltimeTooShort {
        /// Requested walltime, shown as written in the unit form (`250ms`,
        /// `1s`): whole seconds would show a part of a second as `0s`.
        given: Duration,
        /// The safety margin in seconds.
        margin: u64,
        /// The minimum in seconds.
        min: u64,
    },
    /// A text option was given but empty (`--context ""`).
    #[error("{0} is empty: give a value or leave the option out")]
    Empty(&'static str),
    /// The job name has characters some batch system rejects.
    #[error("job name `{0}` is invalid: use 1-64 letters, digits, `_`, `-` or `.`, starting with a letter (PBS requires that)")]
    BadJobName(String),
    /// A path the agents need is relative; the pilot runs elsewhere.
    #[error("{what} `{path}` is relative, but pilots run in another directory (PBS starts in $HOME): give an absolute path")]
    RelativePath {
        /// Which option.
        what: &'static str,
        /// The path as given.
        path: String,
    },
    /// A path that is not valid UTF-8 cannot be written into a script.
    #[error("{what} `{path}` is not valid UTF-8: rename it, the pilot script cannot quote it")]
    NonUtf8Path {
        /// Which option.
        what: &'static str,
        /// The path, lossily converted.
        path: String,
    },
    /// The ssh backend got no hosts.
    #[error("the ssh backend needs hosts to start agents on: give at least one host")]
    NoHosts,
    /// `--nodes` does not match the host list for ssh.
    #[error("the ssh backend starts one agent per host, but --nodes is {nodes} and {hosts} hosts were given: make them equal")]
    NodesHostsMismatch {
        /// Requested node count.
        nodes: usize,
        /// Number of hosts given.
        hosts: usize,
    },
    /// A host name that would be unsafe (option injection) or unusable as a
    /// file name.
    #[error("host `{0}` is invalid: host names must not be empty, start with `-`, or contain `/`, whitespace or quotes")]
    BadHost(String),
    /// The same host twice in the ssh host list.
    #[error("host `{0}` is listed twice: the ssh backend starts one agent per host; use --executors-per-node for more executors")]
    DuplicateHost(String),
    /// Hosts given to a backend that does not use them.
    #[error("hosts are only used by the ssh backend, not {0}: leave them out")]
    HostsNotUsed(Backend),
    /// Raw submit arguments given to a backend with no submit command.
    #[error("extra arguments after `--` are passed to sbatch/qsub, but the {0} backend has no batch system: leave them out")]
    RawArgsNotUsed(Backend),
    /// ssh options given to a backend that does not use ssh.
    #[error("ssh options are only used by the ssh backend, not {0}: leave them out")]
    SshOptionsNotUsed(Backend),
    /// An ssh option that is not `Key=value` (what `ssh -o` takes).
    #[error("ssh option `{0}` is invalid: write it as ssh's -o takes it, `Key=value` (e.g. `Port=2222` or `IdentityFile=~/.ssh/cluster`), on one line")]
    BadSshOption(String),
}

/// Everything needed to start one pilot job (one allocation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PilotSpec {
    /// Where to start the pilot.
    pub backend: Backend,
    /// Number of nodes (slurm, pbs), hosts (ssh) or agents (local).
    pub nodes: usize,
    /// Walltime requested from the batch system. Agents get less; see
    /// [`PilotSpec::agent_walltime`].
    pub walltime: Duration,
    /// `--executors` for each agent; `None` lets the agent decide.
    pub executors_per_node: Option<usize>,
    /// `--context` labels for each agent.
    pub context: Option<String>,
    /// `--site` name for each agent.
    pub site: Option<String>,
    /// Pool file the agents read to find the pool (absolute).
    pub pool_file: PathBuf,
    /// The `constellation` binary on the nodes: absolute, or a bare name
    /// looked up on the nodes' `PATH`.
    pub agent_binary: PathBuf,
    /// Hosts for the ssh backend, one agent each; empty otherwise.
    pub hosts: Vec<String>,
    /// Extra arguments for `sbatch`/`qsub`, passed verbatim before the
    /// script so they override the script's directives.
    pub raw_args: Vec<String>,
    /// `Key=value` options passed as `ssh -o Key=value` to every ssh call
    /// of the ssh backend (start, state, cancel); empty otherwise. They come
    /// before our own defaults, and ssh keeps the first value it sees for
    /// each key, so they can override those too.
    pub ssh_options: Vec<String>,
    /// Which PBS the pilot script is written for (PBS backend only).
    pub pbs_flavor: PbsFlavor,
    /// Batch job name.
    pub job_name: String,
}

impl PilotSpec {
    /// A spec with the required fields and defaults for the rest.
    pub fn new(
        backend: Backend,
        nodes: usize,
        walltime: Duration,
        pool_file: impl Into<PathBuf>,
        agent_binary: impl Into<PathBuf>,
    ) -> Self {
        Self {
            backend,
            nodes,
            walltime,
            executors_per_node: None,
            context: None,
            site: None,
            pool_file: pool_file.into(),
            agent_binary: agent_binary.into(),
            hosts: Vec::new(),
            raw_args: Vec::new(),
            ssh_options: Vec::new(),
            pbs_flavor: PbsFlavor::default(),
            job_name: DEFAULT_JOB_NAME.to_string(),
        }
    }

    /// Makes `pool_file`, and `agent_binary` if it contains a `/`, absolute
    /// relative to `cwd`. The CLI calls this with its working directory so
    /// users can type relative paths.
    pub fn absolutize(&mut self, cwd: &Path) {
        if self.pool_file.is_relative() {
            self.pool_file = cwd.join(&self.pool_file);
        }
        let bare_name = self.agent_binary.components().count() == 1
            && !self
                .agent_binary
                .as_os_str()
                .to_string_lossy()
                .contains('/');
        if self.agent_binary.is_relative() && !bare_name {
            self.agent_binary = cwd.join(&self.agent_binary);
        }
    }

    /// Checks the spec; every problem found here would otherwise surface
    /// only after the job waited in the queue.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.nodes == 0 {
            return Err(SpecError::NoNodes);
        }
        if self.executors_per_node == Some(0) {
            return Err(SpecError::NoExecutors);
        }
        self.validate_walltime()?;
        validate_nonempty("--context", self.context.as_deref())?;
        validate_nonempty("--site", self.site.as_deref())?;
        validate_job_name(&self.job_name)?;
        self.validate_paths()?;
        self.validate_backend_options()
    }

    fn validate_walltime(&self) -> Result<(), SpecError> {
        if self.walltime < MIN_WALLTIME {
            return Err(SpecError::WalltimeTooShort {
                given: self.walltime,
                margin: safety_margin(self.walltime).as_secs(),
                min: MIN_WALLTIME.as_secs(),
            });
        }
        Ok(())
    }

    fn validate_paths(&self) -> Result<(), SpecError> {
        for (what, path) in [
            ("pool file", &self.pool_file),
            ("agent binary", &self.agent_binary),
        ] {
            if path.to_str().is_none() {
                return Err(SpecError::NonUtf8Path {
                    what,
                    path: path.to_string_lossy().into_owned(),
                });
            }
        }
        if self.pool_file.is_relative() {
            return Err(SpecError::RelativePath {
                what: "pool file",
                path: self.pool_file.display().to_string(),
            });
        }
        let agent = self.agent_binary.to_string_lossy();
        if agent.is_empty() {
            return Err(SpecError::Empty("agent binary"));
        }
        if self.agent_binary.is_relative() && agent.contains('/') {
            return Err(SpecError::RelativePath {
                what: "agent binary",
                path: agent.into_owned(),
            });
        }
        Ok(())
    }

    fn validate_backend_options(&self) -> Result<(), SpecError> {
        if !self.backend.is_batch() && !self.raw_args.is_empty() {
            return Err(SpecError::RawArgsNotUsed(self.backend));
        }
        if self.backend != Backend::Ssh {
            if !self.ssh_options.is_empty() {
                return Err(SpecError::SshOptionsNotUsed(self.backend));
            }
            return match self.hosts.is_empty() {
                true => Ok(()),
                false => Err(SpecError::HostsNotUsed(self.backend)),
            };
        }
        for option in &self.ssh_options {
            validate_ssh_option(option)?;
        }
        if self.hosts.is_empty() {
            return Err(SpecError::NoHosts);
        }
        if self.hosts.len() != self.nodes {
            return Err(SpecError::NodesHostsMismatch {
                nodes: self.nodes,
                hosts: self.hosts.len(),
            });
        }
        validate_hosts(&self.hosts)
    }

    /// Walltime given to each agent: the job walltime minus the
    /// [`safety_margin`], in whole seconds.
    pub fn agent_walltime(&self) -> Duration {
        agent_walltime(self.walltime)
    }

    /// The agent invocation, program first:
    /// `<agent> agent --pool FILE [--executors K] [--context C] [--site S] --walltime Ns`.
    pub fn agent_command(&self) -> Vec<String> {
        let mut cmd = vec![
            self.agent_binary.to_string_lossy().into_owned(),
            "agent".to_string(),
            "--pool".to_string(),
            self.pool_file.to_string_lossy().into_owned(),
        ];
        if let Some(k) = self.executors_per_node {
            cmd.extend(["--executors".to_string(), k.to_string()]);
        }
        if let Some(context) = &self.context {
            cmd.extend(["--context".to_string(), context.clone()]);
        }
        if let Some(site) = &self.site {
            cmd.extend(["--site".to_string(), site.clone()]);
        }
        cmd.extend([
            "--walltime".to_string(),
            format_seconds(self.agent_walltime()),
        ]);
        cmd
    }
}

/// The margin by which agents stop before the job's walltime: 5 % of it,
/// clamped to [`MIN_MARGIN`]..=[`MAX_MARGIN`], rounded up to whole seconds.
pub fn safety_margin(walltime: Duration) -> Duration {
    // Integer arithmetic: floats would turn 5 % of 600 s into 30.000000004 s.
    let secs = (walltime.as_nanos() * MARGIN_PERCENT).div_ceil(100 * 1_000_000_000);
    let secs = u64::try_from(secs).unwrap_or(u64::MAX);
    Duration::from_secs(secs).clamp(MIN_MARGIN, MAX_MARGIN)
}

/// `walltime - safety_margin(walltime)`, truncated to whole seconds; zero if
/// the walltime is not longer than the margin.
pub fn agent_walltime(walltime: Duration) -> Duration {
    let secs = walltime.saturating_sub(safety_margin(walltime)).as_secs();
    Duration::from_secs(secs)
}

fn validate_nonempty(what: &'static str, value: Option<&str>) -> Result<(), SpecError> {
    match value {
        Some(v) if v.trim().is_empty() => Err(SpecError::Empty(what)),
        _ => Ok(()),
    }
}

/// Job names go into `#SBATCH`/`#PBS` directive lines, which are not parsed
/// by a shell, so we allow only characters that need no quoting anywhere.
fn validate_job_name(name: &str) -> Result<(), SpecError> {
    let ok = (1..=64).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(SpecError::BadJobName(name.to_string()))
    }
}

/// `ssh -o` takes `Key=value` (or `Key value`); checking the shape here
/// turns a typo into an error now instead of a failed ssh on every host.
/// A newline would end the option inside ssh's config parser and let a
/// second directive in, so control characters are refused.
fn validate_ssh_option(option: &str) -> Result<(), SpecError> {
    let bad = || SpecError::BadSshOption(option.to_string());
    let (key, value) = option.split_once(['=', ' ']).ok_or_else(bad)?;
    let key_ok = !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric());
    let value_ok = !value.trim().is_empty() && !value.chars().any(char::is_control);
    if key_ok && value_ok {
        Ok(())
    } else {
        Err(bad())
    }
}

/// Host names become `ssh` arguments and log file names: a leading `-`
/// would be read as an ssh option, and `/` would escape the directory.
fn validate_hosts(hosts: &[String]) -> Result<(), SpecError> {
    let mut seen = std::collections::HashSet::new();
    for host in hosts {
        let bad = host.is_empty()
            || host.starts_with('-')
            || host
                .chars()
                .any(|c| c == '/' || c.is_whitespace() || c.is_control() || c == '\'' || c == '"');
        if bad {
            return Err(SpecError::BadHost(host.clone()));
        }
        if !seen.insert(host.as_str()) {
            return Err(SpecError::DuplicateHost(host.clone()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(backend: Backend) -> PilotSpec {
        PilotSpec::new(
            backend,
            2,
            Duration::from_secs(7_200),
            "/home/u/pool.json",
            "/opt/constellation/bin/constellation",
        )
    }

    #[test]
    fn margin_is_five_percent_clamped() {
        let m = |s| safety_margin(Duration::from_secs(s)).as_secs();
        assert_eq!(m(60), 30); // 3 s -> raised to 30 s
        assert_eq!(m(600), 30);
        assert_eq!(m(3_600), 180);
        assert_eq!(m(7_200), 360);
        assert_eq!(m(12_000), 600);
        assert_eq!(m(86_400), 600); // 72 min -> capped at 10 min
        assert_eq!(m(1_001), 51); // 50.05 s rounds up
    }

    #[test]
    fn agent_walltime_leaves_margin() {
        let s = spec(Backend::Slurm);
        assert_eq!(s.agent_walltime(), Duration::from_secs(6_840));
        assert_eq!(
            agent_walltime(Duration::from_secs(86_400)).as_secs(),
            85_800
        );
        assert_eq!(agent_walltime(Duration::from_secs(20)).as_secs(), 0);
    }

    #[test]
    fn agent_command_has_optional_flags() {
        let mut s = spec(Backend::Slurm);
        assert_eq!(
            s.agent_command(),
            [
                "/opt/constellation/bin/constellation",
                "agent",
                "--pool",
                "/home/u/pool.json",
                "--walltime",
                "6840s"
            ]
        );
        s.executors_per_node = Some(8);
        s.context = Some("gpu,a100".into());
        s.site = Some("lumi".into());
        let cmd = s.agent_command().join(" ");
        assert!(cmd.contains("--executors 8 --context gpu,a100 --site lumi --walltime 6840s"));
    }

    #[test]
    fn valid_specs_pass() {
        spec(Backend::Slurm).validate().unwrap();
        spec(Backend::Pbs).validate().unwrap();
        spec(Backend::Local).validate().unwrap();
        let mut s = spec(Backend::Ssh);
        s.hosts = vec!["node1".into(), "alice@node2".into()];
        s.validate().unwrap();
        let mut s = spec(Backend::Slurm);
        s.agent_binary = "constellation".into(); // bare name: found on PATH
        s.validate().unwrap();
    }

    #[test]
    fn invalid_specs_are_explained() {
        let check = |f: &dyn Fn(&mut PilotSpec), backend, want: &str| {
            let mut s = spec(backend);
            f(&mut s);
            let msg = s.validate().unwrap_err().to_string();
            assert!(msg.contains(want), "expected `{want}` in `{msg}`");
        };
        check(&|s| s.nodes = 0, Backend::Slurm, "--nodes");
        check(
            &|s| s.executors_per_node = Some(0),
            Backend::Slurm,
            "--executors-per-node",
        );
        check(
            &|s| s.walltime = Duration::from_secs(59),
            Backend::Slurm,
            "too short",
        );
        check(
            &|s| s.context = Some(" ".into()),
            Backend::Slurm,
            "--context is empty",
        );
        check(
            &|s| s.job_name = "my job".into(),
            Backend::Pbs,
            "job name `my job`",
        );
        check(
            &|s| s.job_name = "1job".into(),
            Backend::Pbs,
            "starting with a letter",
        );
        check(
            &|s| s.pool_file = "pool.json".into(),
            Backend::Slurm,
            "absolute",
        );
        check(
            &|s| s.agent_binary = "bin/constellation".into(),
            Backend::Slurm,
            "agent binary",
        );
        check(
            &|s| s.raw_args = vec!["-A".into()],
            Backend::Local,
            "no batch system",
        );
        check(
            &|s| s.hosts = vec!["n1".into()],
            Backend::Slurm,
            "only used by the ssh",
        );
        check(&|_| {}, Backend::Ssh, "needs hosts");
        check(
            &|s| s.hosts = vec!["n1".into()],
            Backend::Ssh,
            "--nodes is 2 and 1 hosts",
        );
        check(
            &|s| s.hosts = vec!["n1".into(), "-oProxyCommand=x".into()],
            Backend::Ssh,
            "invalid",
        );
        check(
            &|s| s.hosts = vec!["n1".into(), "n1".into()],
            Backend::Ssh,
            "listed twice",
        );
        check(
            &|s| s.ssh_options = vec!["Port=2222".into()],
            Backend::Slurm,
            "only used by the ssh backend",
        );
        for bad in [
            "Port",
            "=2222",
            "Port=",
            "Port= ",
            "-p=2",
            "Port=22\nProxyCommand=x",
        ] {
            check(
                &|s| {
                    s.hosts = vec!["n1".into(), "n2".into()];
                    s.ssh_options = vec![bad.into()];
                },
                Backend::Ssh,
                "is invalid",
            );
        }
    }

    #[test]
    fn ssh_options_in_both_ssh_spellings_pass() {
        let mut s = spec(Backend::Ssh);
        s.hosts = vec!["n1".into(), "n2".into()];
        s.ssh_options = vec![
            "Port=2222".into(),
            "IdentityFile=~/.ssh/my key".into(),
            "UserKnownHostsFile /dev/null".into(),
        ];
        s.validate().unwrap();
    }

    #[test]
    fn absolutize_resolves_relative_paths_only() {
        let mut s = spec(Backend::Local);
        s.pool_file = "pool.json".into();
        s.agent_binary = "target/debug/constellation".into();
        s.absolutize(Path::new("/work"));
        assert_eq!(s.pool_file, Path::new("/work/pool.json"));
        assert_eq!(
            s.agent_binary,
            Path::new("/work/target/debug/constellation")
        );
        s.agent_binary = "constellation".into();
        s.absolutize(Path::new("/work"));
        assert_eq!(s.agent_binary, Path::new("constellation"));
    }

    #[test]
    fn backend_names_round_trip() {
        for b in Backend::ALL {
            assert_eq!(b.name().parse::<Backend>().unwrap(), b);
        }
        assert_eq!("SLURM".parse::<Backend>().unwrap(), Backend::Slurm);
        let msg = "lsf".parse::<Backend>().unwrap_err().to_string();
        assert!(msg.contains("`lsf`") && msg.contains("slurm, pbs, ssh, local"));
    }

    #[test]
    fn pbs_flavor_names() {
        assert_eq!("torque".parse::<PbsFlavor>().unwrap(), PbsFlavor::Torque);
        for pro in ["pro", "PBSPro", "openpbs"] {
            assert_eq!(pro.parse::<PbsFlavor>().unwrap(), PbsFlavor::Pro, "{pro}");
        }
        assert_eq!(PbsFlavor::Pro.to_string(), "pro");
        let msg = "lsf".parse::<PbsFlavor>().unwrap_err().to_string();
        assert!(msg.contains("`lsf`") && msg.contains("torque"), "{msg}");
    }
}
