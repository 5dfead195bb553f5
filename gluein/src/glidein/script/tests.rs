use super::*;
use crate::glidein::alloc::testing::{write_executable, TempDir};
use crate::glidein::spec::PbsFlavor;
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
    assert!(text.contains("ssh -o 'BatchMode=yes' -o 'ConnectTimeout=10' \"$host\" \"$remote\""));
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
