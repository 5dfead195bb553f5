//! External MPI programs as shell activities: `mpiexec -n N prog args` or
//! `srun -n N prog args`, on the hosts of the agent's allocation.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::spec::ShellSpec;

/// How an [`MpiProgram`] starts its ranks.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum MpiLauncher {
    /// `srun` inside a Slurm allocation (`SLURM_JOB_ID` is set), else
    /// `mpiexec`, given `PBS_NODEFILE` as its host file inside a PBS job.
    /// Decided on the executor that runs the program, not where it was
    /// submitted.
    #[default]
    Auto,
    /// `mpiexec` (MPICH Hydra or Open MPI), optionally on these hosts.
    Mpiexec {
        /// Hosts for `-hosts a,b,c`; the allocation's or the local host if empty.
        hosts: Vec<String>,
    },
    /// `srun`, which takes the hosts from the Slurm allocation.
    Srun,
}

/// An external MPI code, started with `N` ranks by an MPI launcher.
///
/// ```
/// use executors::shell::{MpiProgram, ShellActivity};
/// let spec = MpiProgram::new(4, "./heat2d").args(["--steps", "1000"]).into_spec();
/// let activity = ShellActivity::new(spec.name("heat2d"));
/// # let _ = activity;
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MpiProgram {
    ranks: u32,
    program: String,
    args: Vec<String>,
    launcher: MpiLauncher,
    launcher_path: Option<PathBuf>,
}

impl MpiProgram {
    /// `program` with `ranks` ranks (at least 1), launched the [`MpiLauncher::Auto`] way.
    pub fn new(ranks: u32, program: impl Into<String>) -> Self {
        MpiProgram {
            ranks: ranks.max(1),
            program: program.into(),
            args: Vec::new(),
            launcher: MpiLauncher::Auto,
            launcher_path: None,
        }
    }

    /// Adds arguments for the program.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Chooses the launcher.
    pub fn launcher(mut self, launcher: MpiLauncher) -> Self {
        self.launcher = launcher;
        self
    }

    /// Uses this `mpiexec` or `srun` binary instead of the one on `PATH`.
    pub fn launcher_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.launcher_path = Some(path.into());
        self
    }

    /// The shell spec that runs it. The launcher is chosen when the
    /// activity runs, from the executor's environment, so the spec is a
    /// small script; `MPI_RANKS` and the program's argv are passed as
    /// positional arguments, never spliced into the script text.
    pub fn into_spec(self) -> ShellSpec {
        let launcher = self.launcher_path.as_ref().map(|p| p.display().to_string());
        let (choice, hosts) = match &self.launcher {
            MpiLauncher::Auto => ("auto", String::new()),
            MpiLauncher::Mpiexec { hosts } => ("mpiexec", hosts.join(",")),
            MpiLauncher::Srun => ("srun", String::new()),
        };
        let script = r#"
ranks=$1; choice=$2; hosts=$3; launcher=$4; shift 4
if [ "$choice" = auto ]; then
    if [ -n "${SLURM_JOB_ID:-}" ]; then choice=srun; else choice=mpiexec; fi
fi
case $choice in
srun)
    exec "${launcher:-srun}" -n "$ranks" "$@" ;;
*)
    if [ -n "$hosts" ]; then
        exec "${launcher:-mpiexec}" -n "$ranks" -hosts "$hosts" "$@"
    elif [ -n "${PBS_NODEFILE:-}" ]; then
        exec "${launcher:-mpiexec}" -n "$ranks" -f "$PBS_NODEFILE" "$@"
    else
        exec "${launcher:-mpiexec}" -n "$ranks" "$@"
    fi ;;
esac
"#;
        ShellSpec::script(script.trim_start())
            .arg(self.ranks.to_string())
            .arg(choice)
            .arg(hosts)
            .arg(launcher.unwrap_or_default())
            .arg(self.program)
            .args(self.args)
    }
}
