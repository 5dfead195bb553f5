#!/usr/bin/env bash
# A real single-node Slurm cluster on this machine, for the tests and for
# trying the glide-in agents: one munged, one slurmctld and one slurmd, all
# with their config, key, socket, state, spool, logs and pid files inside a
# private state directory, so nothing in /etc or /run is touched.
#
# Usage: scripts/slurm-local.sh start|stop|status|env
#   start   installs slurm-wlm and munge with apt-get if slurmctld or munged
#           is missing, starts the daemons, waits until the node `localhost`
#           is idle and prints the export line on stdout (messages go to
#           stderr, so `eval "$(scripts/slurm-local.sh start)"` works).
#           Every start is a fresh cluster (slurmctld -c: no jobs survive a
#           stop). Says so and exits 0 when the cluster already runs.
#   stop    cancels the cluster's jobs, stops slurmd, slurmctld and munged by
#           the pid files in the state directory. Safe when nothing runs.
#           Removes nothing; the logs stay in the state directory.
#   status  says whether the cluster runs and shows `sinfo`; exits 0 when it
#           runs, 3 when it does not.
#   env     prints the export line the client commands (sbatch, srun,
#           squeue, scancel, scontrol, sinfo) need.
#
# Environment:
#   SLURM_LOCAL_DIR           state directory (default /tmp/constellation-slurm)
#   SLURM_LOCAL_CTLD_PORT     SlurmctldPort (default 6817)
#   SLURM_LOCAL_SLURMD_PORT   SlurmdPort (default 6818)
#   SLURM_LOCAL_TIMEOUT       seconds to wait for the node to be idle (default 30)
set -euo pipefail

STATE_DIR=${SLURM_LOCAL_DIR:-/tmp/constellation-slurm}
CTLD_PORT=${SLURM_LOCAL_CTLD_PORT:-6817}
SLURMD_PORT=${SLURM_LOCAL_SLURMD_PORT:-6818}
TIMEOUT=${SLURM_LOCAL_TIMEOUT:-30}
NODE=localhost
PARTITION=debug

say() { printf 'slurm-local: %s\n' "$*" >&2; }
die() {
  say "error: $*"
  exit 1
}

usage() {
  sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2
  exit 2
}

# Absolute paths of everything inside the state directory.
set_paths() {
  case $STATE_DIR in
    /*) ;;
    *) STATE_DIR=$PWD/$STATE_DIR ;;
  esac
  case $STATE_DIR in
    *[[:space:]]* | *'#'*) die "SLURM_LOCAL_DIR must not contain blanks or '#': $STATE_DIR" ;;
  esac
  CONF=$STATE_DIR/slurm.conf
  CGROUP_CONF=$STATE_DIR/cgroup.conf
  MUNGE_DIR=$STATE_DIR/munge
  MUNGE_KEY=$MUNGE_DIR/munge.key
  MUNGE_SOCKET=$MUNGE_DIR/munge.socket
  LOG_DIR=$STATE_DIR/log
  PID_DIR=$STATE_DIR/run
  CTLD_STATE=$STATE_DIR/ctld-state
  SLURMD_SPOOL=$STATE_DIR/slurmd-spool
  MUNGED_PID=$PID_DIR/munged.pid
  CTLD_PID=$PID_DIR/slurmctld.pid
  SLURMD_PID=$PID_DIR/slurmd.pid
}

# The path of a command, also when /usr/sbin is not on PATH (non-root users).
find_bin() {
  local name=$1 dir
  if command -v "$name" >/dev/null 2>&1; then
    command -v "$name"
    return 0
  fi
  for dir in /usr/sbin /sbin /usr/local/sbin; do
    if [ -x "$dir/$name" ]; then
      echo "$dir/$name"
      return 0
    fi
  done
  return 1
}

install_packages() {
  if find_bin slurmctld >/dev/null && find_bin slurmd >/dev/null && find_bin munged >/dev/null; then
    return 0
  fi
  command -v apt-get >/dev/null 2>&1 ||
    die "slurmctld/slurmd/munged are missing and there is no apt-get; install Slurm and MUNGE by hand"
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "installing slurm-wlm and munge needs root, and sudo is missing"
    sudo=(sudo)
  fi
  say "installing slurm-wlm and munge with apt-get"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >&2
  if ! find_bin slurmctld >/dev/null || ! find_bin munged >/dev/null; then
    die "slurmctld or munged still missing after apt-get install"
  fi
}

# The pid in a pid file when that process is alive and is the expected
# program (a stale pid file whose pid was reused by something else counts as
# not running).
live_pid() {
  local file=$1 name=$2 pid comm
  [ -s "$file" ] || return 1
  pid=$(tr -dc '0-9' <"$file")
  [ -n "$pid" ] || return 1
  alive "$pid" || return 1
  comm=$(cat "/proc/$pid/comm" 2>/dev/null || true)
  case $comm in
    "$name"*) echo "$pid" ;;
    *) return 1 ;;
  esac
}

# Whether a process exists and is not a zombie (an exited daemon stays a
# zombie until the container's init gets round to reaping it).
alive() {
  local state
  kill -0 "$1" 2>/dev/null || return 1
  state=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null || true)
  [ "$state" != Z ]
}

# TERM a daemon by its pid file, wait up to 10 s, then KILL it.
stop_daemon() {
  local name=$1 file=$2 pid i
  if ! pid=$(live_pid "$file" "$name"); then
    rm -f "$file"
    return 0
  fi
  say "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    alive "$pid" || break
    sleep 0.1
  done
  if alive "$pid"; then
    say "$name (pid $pid) did not stop in 10 s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$file"
}

port_in_use() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

log_tails() {
  local log
  for log in "$LOG_DIR"/munged.log "$LOG_DIR"/slurmctld.log "$LOG_DIR"/slurmd.log; do
    [ -f "$log" ] || continue
    say "---- last lines of $log"
    tail -n 15 "$log" >&2 || true
  done
}

fail_start() {
  say "error: $*"
  log_tails
  say "stopping what was started"
  stop_all
  exit 1
}

make_munge_key() {
  [ -s "$MUNGE_KEY" ] && return 0
  local mungekey
  if mungekey=$(find_bin mungekey); then
    "$mungekey" --create --keyfile="$MUNGE_KEY" >&2
  else
    # Older packages have only /usr/sbin/create-munge-key, which writes
    # /etc/munge/munge.key; 1 KiB from /dev/urandom is the same thing.
    dd if=/dev/urandom of="$MUNGE_KEY" bs=1024 count=1 status=none
  fi
  chmod 600 "$MUNGE_KEY"
}

start_munged() {
  local munged munge unmunge i
  munged=$(find_bin munged) || die "munged not found"
  make_munge_key
  rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
  "$munged" --socket="$MUNGE_SOCKET" --key-file="$MUNGE_KEY" \
    --pid-file="$MUNGED_PID" --log-file="$LOG_DIR/munged.log" \
    --seed-file="$MUNGE_DIR/munged.seed" ||
    fail_start "munged did not start"
  for ((i = 0; i < 50; i++)); do
    [ -S "$MUNGE_SOCKET" ] && break
    sleep 0.1
  done
  [ -S "$MUNGE_SOCKET" ] || fail_start "munged made no socket at $MUNGE_SOCKET"
  munge=$(find_bin munge) && unmunge=$(find_bin unmunge) || return 0
  "$munge" --socket="$MUNGE_SOCKET" -n | "$unmunge" --socket="$MUNGE_SOCKET" >/dev/null ||
    fail_start "a munge credential does not decode (munge -n | unmunge)"
}

write_conf() {
  local cpus mem_mb user
  cpus=$(nproc)
  mem_mb=$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 }' /proc/meminfo)
  user=$(id -un)
  cat >"$CONF" <<EOF
# Written by scripts/slurm-local.sh; rewritten on every start.
ClusterName=constellation
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$CTLD_STATE
SlurmdSpoolDir=$SLURMD_SPOOL
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
MailProg=/bin/true
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
MinJobAge=300
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
  # No cgroup plugin is configured (the container has no usable cgroups).
  # Slurm 24.05 and later load one anyway unless told `disabled`, a value
  # older releases reject; an own cgroup.conf also keeps a system-wide one
  # from being read.
  {
    echo "# Written by scripts/slurm-local.sh; rewritten on every start."
    if cgroup_disabled_supported; then
      echo "CgroupPlugin=disabled"
    fi
  } >"$CGROUP_CONF"
}

# Whether this Slurm accepts CgroupPlugin=disabled: its cgroup.conf man page
# lists the value, or, without man pages, its version is 24.05 or later.
cgroup_disabled_supported() {
  local man version major minor
  for man in /usr/share/man/man5/cgroup.conf.5.gz /usr/share/man/man5/cgroup.conf.5; do
    [ -f "$man" ] || continue
    if zcat -f "$man" | grep -q 'CgroupPlugin.*disabled'; then
      return 0
    fi
    return 1
  done
  version=$("$(find_bin slurmctld)" -V | awk '{ print $NF }')
  major=${version%%.*}
  minor=${version#*.}
  minor=${minor%%.*}
  [ "${major:-0}" -gt 24 ] || { [ "${major:-0}" -eq 24 ] && [ "${minor:-0}" -ge 5 ]; }
}

all_running() {
  live_pid "$MUNGED_PID" munged >/dev/null &&
    live_pid "$CTLD_PID" slurmctld >/dev/null &&
    live_pid "$SLURMD_PID" slurmd >/dev/null
}

any_running() {
  live_pid "$MUNGED_PID" munged >/dev/null ||
    live_pid "$CTLD_PID" slurmctld >/dev/null ||
    live_pid "$SLURMD_PID" slurmd >/dev/null
}

node_state() {
  local sinfo
  sinfo=$(find_bin sinfo) || return 1
  SLURM_CONF=$CONF "$sinfo" -h -n "$NODE" -o %T 2>/dev/null | head -n 1
}

wait_idle() {
  local state="" start now
  start=$(date +%s.%N)
  while :; do
    state=$(node_state || true)
    case $state in
      idle) break ;;
      # ReturnToService=2 does not clear a drain: report it at once.
      *drain*) fail_start "node $NODE is $state: $(node_reason)" ;;
    esac
    now=$(date +%s.%N)
    if awk -v a="$start" -v b="$now" -v t="$TIMEOUT" 'BEGIN { exit !(b - a > t) }'; then
      show_node >&2
      fail_start "node $NODE not idle after ${TIMEOUT} s (state: ${state:-unknown})"
    fi
    sleep 0.1
  done
  now=$(date +%s.%N)
  IDLE_AFTER=$(awk -v a="$START_TIME" -v b="$now" 'BEGIN { printf "%.1f", b - a }')
}

show_node() {
  local scontrol
  scontrol=$(find_bin scontrol) || return 0
  SLURM_CONF=$CONF "$scontrol" show node "$NODE" 2>&1 || true
}

node_reason() {
  local scontrol
  scontrol=$(find_bin scontrol) || return 0
  SLURM_CONF=$CONF "$scontrol" show node "$NODE" 2>/dev/null | grep -o 'Reason=.*' || true
}

print_env() {
  printf 'export SLURM_CONF=%s\n' "$CONF"
}

cmd_start() {
  install_packages
  if all_running; then
    say "already running (state directory $STATE_DIR)"
    print_env
    return 0
  fi
  if any_running; then
    say "partly running; stopping the rest before a fresh start"
    stop_all
  fi
  local port
  for port in "$CTLD_PORT" "$SLURMD_PORT"; do
    if port_in_use "$port"; then
      die "port $port is in use by another program; set SLURM_LOCAL_CTLD_PORT / SLURM_LOCAL_SLURMD_PORT"
    fi
  done
  START_TIME=$(date +%s.%N)
  mkdir -p "$STATE_DIR" "$MUNGE_DIR" "$LOG_DIR" "$PID_DIR" "$CTLD_STATE" "$SLURMD_SPOOL"
  # munged refuses group- or world-writable directories on the way to its
  # key and socket.
  chmod 755 "$STATE_DIR" "$MUNGE_DIR" "$LOG_DIR" "$PID_DIR"
  chmod 700 "$CTLD_STATE" "$SLURMD_SPOOL"
  write_conf
  say "Slurm $("$(find_bin slurmctld)" -V | awk '{ print $NF }'), state directory $STATE_DIR"
  start_munged
  local slurmctld slurmd
  slurmctld=$(find_bin slurmctld)
  slurmd=$(find_bin slurmd)
  # SLURM_CONF in the daemons' environment is inherited by every slurmstepd,
  # which lets `stop` find leftover ones.
  SLURM_CONF=$CONF "$slurmctld" -c -f "$CONF" ||
    fail_start "slurmctld did not start"
  SLURM_CONF=$CONF "$slurmd" -N "$NODE" -f "$CONF" ||
    fail_start "slurmd did not start"
  wait_idle
  say "node $NODE idle ${IDLE_AFTER} s after start (partition $PARTITION, $(nproc) CPUs)"
  print_env
}

# Cancel every job of this private cluster and wait for them to end, so no
# job processes outlive the daemons.
cancel_jobs() {
  local squeue scancel jobs i
  squeue=$(find_bin squeue) && scancel=$(find_bin scancel) || return 0
  jobs=$(SLURM_CONF=$CONF timeout 10 "$squeue" -h -o %A 2>/dev/null || true)
  [ -n "$jobs" ] || return 0
  say "cancelling jobs: $(echo "$jobs" | tr '\n' ' ')"
  # shellcheck disable=SC2086 # one job id per word
  SLURM_CONF=$CONF timeout 10 "$scancel" $jobs 2>/dev/null || true
  # Without slurmd the jobs never finish completing; the leftovers are
  # killed after the daemons stop.
  live_pid "$SLURMD_PID" slurmd >/dev/null || return 0
  for ((i = 0; i < 100; i++)); do
    jobs=$(SLURM_CONF=$CONF timeout 10 "$squeue" -h -t RUNNING,COMPLETING,PENDING -o %A 2>/dev/null || true)
    [ -n "$jobs" ] || return 0
    sleep 0.1
  done
  say "jobs still there after 10 s: $(echo "$jobs" | tr '\n' ' ')"
}

# The ids of this script and its ancestors, which must never be killed.
ancestors() {
  local pid=$$
  while [ -n "$pid" ] && [ "$pid" -gt 1 ]; do
    echo "$pid"
    pid=$(awk '{ print $4 }' "/proc/$pid/stat" 2>/dev/null || true)
  done
}

# Processes left when slurmd went away before its jobs ended: the
# slurmstepds it started (they inherit its SLURM_CONF) and the job processes
# (slurmstepd sets SLURM_CONF and SLURM_JOB_ID for them).
kill_stray_job_processes() {
  local dir pid comm env keep
  keep=" $(ancestors | tr '\n' ' ') "
  for dir in /proc/[0-9]*; do
    pid=${dir#/proc/}
    case $keep in *" $pid "*) continue ;; esac
    alive "$pid" || continue
    env=$({ tr '\0' '\n' <"$dir/environ"; } 2>/dev/null || true)
    grep -qxF "SLURM_CONF=$CONF" <<<"$env" || continue
    comm=$(cat "$dir/comm" 2>/dev/null || true)
    if [ "$comm" = slurmstepd ] || grep -q '^SLURM_JOB_ID=' <<<"$env"; then
      say "killing leftover $comm (pid $pid)"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
}

stop_all() {
  if live_pid "$CTLD_PID" slurmctld >/dev/null && live_pid "$MUNGED_PID" munged >/dev/null; then
    cancel_jobs
  fi
  stop_daemon slurmd "$SLURMD_PID"
  stop_daemon slurmctld "$CTLD_PID"
  kill_stray_job_processes
  stop_daemon munged "$MUNGED_PID"
}

cmd_stop() {
  if ! any_running; then
    say "not running (state directory $STATE_DIR)"
    return 0
  fi
  stop_all
  say "stopped"
}

cmd_status() {
  local name file pid
  for name in munged slurmctld slurmd; do
    case $name in
      munged) file=$MUNGED_PID ;;
      slurmctld) file=$CTLD_PID ;;
      slurmd) file=$SLURMD_PID ;;
    esac
    if pid=$(live_pid "$file" "$name"); then
      say "$name running (pid $pid)"
    else
      say "$name not running"
    fi
  done
  if all_running; then
    say "running; SLURM_CONF=$CONF"
    SLURM_CONF=$CONF "$(find_bin sinfo)" || true
    return 0
  fi
  say "not running (state directory $STATE_DIR)"
  return 3
}

main() {
  [ $# -eq 1 ] || usage
  set_paths
  case $1 in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    env) print_env ;;
    -h | --help | help) usage ;;
    *) usage ;;
  esac
}

main "$@"
