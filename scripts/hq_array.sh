#!/usr/bin/env bash
# HyperQueue's answer to graph_1m (scripts/bench.sh, issue 21): one `hq` server and ONE worker
# with 2 CPUs on loopback, `hq submit --array 1-N true`, N = HQ_ACTIVITIES (default 1,000,000).
# Prints one JSON object per line, like scripts/bench.sh:
#   {"bench":NAME,"value":X,"unit":U,"higher_is_better":B,"activities":N,"output":MODE}
# each the median of BENCH_RUNS runs (default 5); each run goes to stderr.
#
# Usage: scripts/hq_array.sh
#   HQ_ACTIVITIES  tasks in the array (default 1000000; 100000 for a quick look)
#   BENCH_RUNS     runs per output mode (default 5)
#   HQ_OUTPUTS     the output modes to measure, space-separated (default "none"):
#                    none     --stdout=none --stderr=none: no files at all. HyperQueue's docs
#                             (docs/jobs/jobs.md) give this for tasks whose output is not wanted,
#                             and it is what graph_1m's `true` leaves: nothing.
#                    stream   --stream=DIR on tmpfs: all output in a few files, the docs'
#                             recommendation for many tasks (docs/jobs/streaming.md); the
#                             counterpart of `constellation run --output stream`.
#                    default  HyperQueue's default, two files per task (job-1/ID.stdout and
#                             .stderr) under the submit directory on tmpfs: 2 files x N.
#   HQ_WORKER_CPUS the worker's CPUs (default 2, as graph_1m's 2 executors; more only to diagnose:
#                  each task asks for 1 CPU, so this is how many `true` run at once)
#   HQ_WAIT_LIMIT  seconds a run may take before it is given up as broken (default 60 + N/10)
#   BENCH_SCRATCH  where the server directory, the worker's work dir and all task output go
#                  (default /dev/shm, tmpfs, as graph_1m)
#   HQ_BIN         an `hq` binary to use; otherwise target/hq-venv/bin/hq, built on first use
#   HQ_SRC         a HyperQueue source tree to build `hq` from (a checkout of
#                  github.com/It4innovations/hyperqueue). Without it the build asks cargo for the
#                  v0.27.0 tag from GitHub.
#   HQ_PROFILE     the cargo profile of that build (default release; HyperQueue's own binaries
#                  use its `dist` profile: LTO, 1 codegen unit, much slower to build)
#   HQ_FEATURES    the crate features of that build instead of HyperQueue's defaults (jemalloc,
#                  dashboard, highs), e.g. "jemalloc microlp": the pure-Rust MILP solver instead of
#                  HiGHS, whose C++ takes the longest to build (issue 21's figures used this)
#
# Figures per output mode: hq_array (wall seconds from `hq submit` until `hq job wait` returns:
# submission, scheduling and all N tasks), hq_array_submit (seconds `hq submit` took),
# hq_array_rate (tasks/s over the wall), hq_array_server_peak_rss and hq_array_worker_peak_rss
# (VmHWM of each process, read from /proc just before it is stopped), hq_array_files (files
# the run left in the scratch directory, server directory excluded), and the CPU seconds of the
# server (hq_array_server_cpu), the worker (hq_array_worker_cpu) and the `true`s the worker ran
# (hq_array_tasks_cpu), from /proc/PID/stat: on a busy machine these say more than the wall.
# The server and the worker start, and the worker registers, before the clock starts; every
# process the script starts is stopped on exit, also on failure or Ctrl-C.
#
# The `hq` build: tako's default MILP solver, HiGHS, is C++ built with cmake (and bindgen, which
# needs libclang); cmake comes from PyPI into target/hq-venv (like target/nvrtc-venv in
# scripts/test.sh). The PyPI wheel `hyperqueue` is no substitute: it has no `hq` command, its
# LocalCluster runs server and worker as threads of the Python process, and its Python API
# submits a graph of N task descriptions, not an array.
set -euo pipefail
cd "$(dirname "$0")/.."

count=${HQ_ACTIVITIES:-1000000}
runs=${BENCH_RUNS:-5}
outputs=${HQ_OUTPUTS:-none}
cpus=${HQ_WORKER_CPUS:-2}
# Generous: a run slower than 10 tasks/s on average is broken, not slow.
wait_limit=${HQ_WAIT_LIMIT:-$((60 + count / 10))}
venv=$PWD/target/hq-venv

case $count in '' | *[!0-9]* | 0)
  echo "hq_array.sh: HQ_ACTIVITIES must be a positive integer, got '$count'" >&2; exit 2 ;;
esac
case $runs in '' | *[!0-9]* | 0)
  echo "hq_array.sh: BENCH_RUNS must be a positive integer, got '$runs'" >&2; exit 2 ;;
esac
case $cpus in '' | *[!0-9]* | 0)
  echo "hq_array.sh: HQ_WORKER_CPUS must be a positive integer, got '$cpus'" >&2; exit 2 ;;
esac
case $wait_limit in '' | *[!0-9]* | 0)
  echo "hq_array.sh: HQ_WAIT_LIMIT must be a positive integer, got '$wait_limit'" >&2; exit 2 ;;
esac
for mode in $outputs; do
  case $mode in none | stream | default) ;;
    *) echo "hq_array.sh: unknown output mode '$mode' in HQ_OUTPUTS; known: none stream default" >&2
       exit 2 ;;
  esac
done

# target/hq-venv: a Python venv holding cmake (for HiGHS), with `hq` installed into its bin/.
hq_setup() {
  if [ -n "${HQ_BIN:-}" ]; then
    [ -x "$HQ_BIN" ] || { echo "hq_array.sh: HQ_BIN=$HQ_BIN is not an executable" >&2; exit 1; }
    hq=$HQ_BIN
    return
  fi
  hq=$venv/bin/hq
  [ -x "$hq" ] && return
  if [ ! -x "$venv/bin/pip" ]; then
    python3 -m venv "$venv"
  fi
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'cmake>=3.20'
  local source=(--git https://github.com/It4innovations/hyperqueue --tag v0.27.0 hyperqueue)
  if [ -n "${HQ_SRC:-}" ]; then
    [ -f "$HQ_SRC/crates/hyperqueue/Cargo.toml" ] || {
      echo "hq_array.sh: HQ_SRC=$HQ_SRC is not a HyperQueue source tree (no crates/hyperqueue)" >&2
      exit 1
    }
    source=(--path "$HQ_SRC/crates/hyperqueue")
  fi
  local features=()
  if [ -n "${HQ_FEATURES:-}" ]; then
    features=(--no-default-features --features "$HQ_FEATURES")
  fi
  echo "hq_array.sh: building hq (${source[*]}, profile ${HQ_PROFILE:-release}," \
    "features ${HQ_FEATURES:-default}) into $venv/bin" >&2
  PATH="$venv/bin:$PATH" cargo install --locked --quiet --profile "${HQ_PROFILE:-release}" \
    "${features[@]}" --root "$venv" "${source[@]}"
}

hq_setup
echo "hq_array.sh: $("$hq" --version), $count tasks, 1 worker with $cpus CPUs, $runs run(s)," \
  "outputs: $outputs;" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
now() { date +%s.%N; }
# Peak resident set of a live process, in KiB.
peak_kib() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }
# CPU seconds (user + system) a live process has used itself, and those of the children it
# has waited for (the worker's `true`s); the comm field is skipped, it may hold spaces.
cpu_seconds() { # pid
  local tick stat
  tick=$(getconf CLK_TCK)
  stat=$(sed 's/.*) //' "/proc/$1/stat")
  awk -v t="$tick" '{printf "%.2f %.2f\n", ($12 + $13) / t, ($14 + $15) / t}' <<<"$stat"
}

scratch=$(mktemp -d "${BENCH_SCRATCH:-/dev/shm}/hq-array-XXXXXX")
server_pid='' worker_pid=''
stop_all() {
  local pid
  for pid in $worker_pid $server_pid; do
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      # A bounded wait for a clean exit, then SIGKILL.
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  server_pid='' worker_pid=''
}
trap 'stop_all; rm -rf "$scratch"' EXIT
trap 'exit 130' INT TERM

# One run: a fresh server and worker, the array, the figures; writes
# "wall submit kib_server kib_worker files cpu_server cpu_worker cpu_tasks" to $scratch/result. It runs in this shell, not a
# subshell, so that the EXIT trap knows the pids it started.
one_run() { # mode run
  local mode=$1 run=$2 dir=$scratch/run
  rm -rf "$dir"
  mkdir -p "$dir/submit"
  local server=(--server-dir "$dir/server")
  "$hq" "${server[@]}" server start --host 127.0.0.1 >"$dir/server.log" 2>&1 &
  server_pid=$!
  "$hq" "${server[@]}" server wait --timeout 60s >/dev/null
  "$hq" "${server[@]}" worker start --cpus "$cpus" --manager none --work-dir "$dir/worker" \
    >"$dir/worker.log" 2>&1 &
  worker_pid=$!
  timeout 60 "$hq" "${server[@]}" worker wait 1 >/dev/null

  local stdio=()
  case $mode in
    none) stdio=(--stdout none --stderr none) ;;
    stream) stdio=(--stream "$dir/submit/stream") ;;
    default) stdio=() ;;
  esac
  local started submitted ended job
  started=$(now)
  job=$(cd "$dir/submit" && "$hq" "${server[@]}" --output-mode quiet submit --array "1-$count" \
    "${stdio[@]}" -- true)
  submitted=$(now)
  # `hq job wait` alone would wait forever for a worker that died; watch both, and give up
  # after HQ_WAIT_LIMIT seconds.
  (cd "$dir/submit" && exec "$hq" "${server[@]}" job wait "$job" >"$dir/wait.log" 2>&1) &
  local waiter=$! deadline status=0
  deadline=$(awk -v s="$submitted" -v l="$wait_limit" 'BEGIN {printf "%d", s + l}')
  while kill -0 "$waiter" 2>/dev/null; do
    if ! kill -0 "$worker_pid" 2>/dev/null || [ "$(date +%s)" -ge "$deadline" ]; then
      kill "$waiter" 2>/dev/null || true
      wait "$waiter" 2>/dev/null || true
      echo "hq_array: the worker died, or job $job did not finish in $wait_limit s; worker log:" >&2
      tail -n 20 "$dir/worker.log" >&2
      return 1
    fi
    sleep 0.05
  done
  wait "$waiter" || status=$?
  ended=$(now)
  if [ "$status" != 0 ]; then
    echo "hq_array: hq job wait $job failed with status $status:" >&2
    tail -n 20 "$dir/wait.log" >&2
    return 1
  fi
  local kib_server kib_worker files finished
  kib_server=$(peak_kib "$server_pid")
  kib_worker=$(peak_kib "$worker_pid")
  local cpu_server cpu_worker cpu_tasks
  read -r cpu_server _ < <(cpu_seconds "$server_pid")
  read -r cpu_worker cpu_tasks < <(cpu_seconds "$worker_pid")
  # `job list`, not `job info`: the latter lists every one of the N tasks.
  finished=$("$hq" "${server[@]}" --output-mode json job list --all | python3 -c '
import json, sys
print(next(j["task_stats"]["finished"] for j in json.load(sys.stdin) if j["id"] == int(sys.argv[1])))
' "$job")
  if [ "$finished" != "$count" ]; then
    echo "hq_array: job $job finished $finished of $count tasks" >&2
    return 1
  fi
  "$hq" "${server[@]}" server stop >/dev/null 2>&1 || true
  stop_all
  files=$(find "$dir" -path "$dir/server" -prune -o -type f -print | grep -vc '\.log$' || true)
  printf '%s %s %s %s %s %s %s %s\n' >"$scratch/result" \
    "$(awk -v a="$started" -v b="$ended" 'BEGIN {printf "%.3f", b - a}')" \
    "$(awk -v a="$started" -v b="$submitted" 'BEGIN {printf "%.3f", b - a}')" \
    "$kib_server" "$kib_worker" "$files" "$cpu_server" "$cpu_worker" "$cpu_tasks"
  rm -rf "$dir"
}

for mode in $outputs; do
  walls=() submits=() servers=() workers=() rates=() files=() cpu_servers=() cpu_workers=()
  cpu_tasks_all=()
  for run in $(seq "$runs"); do
    one_run "$mode" "$run"
    read -r wall submit kib_server kib_worker left cpu_server cpu_worker cpu_tasks \
      <"$scratch/result"
    rate=$(awk -v n="$count" -v w="$wall" 'BEGIN {printf "%.1f", n / w}')
    echo "hq_array run $run, output $mode: $wall s (submit $submit s), $rate tasks/s," \
      "peak RSS server $((kib_server / 1024)) MiB, worker $((kib_worker / 1024)) MiB," \
      "CPU s server $cpu_server, worker $cpu_worker, its tasks $cpu_tasks," \
      "$left file(s) left; load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    walls+=("$wall") submits+=("$submit") servers+=("$kib_server") workers+=("$kib_worker")
    rates+=("$rate") files+=("$left") cpu_servers+=("$cpu_server") cpu_workers+=("$cpu_worker")
    cpu_tasks_all+=("$cpu_tasks")
  done
  figure() { # name value unit higher_is_better
    printf '{"bench":"%s","value":%s,"unit":"%s","higher_is_better":%s,"activities":%s,"output":"%s"}\n' \
      "$1" "$2" "$3" "$4" "$count" "$mode"
  }
  figure hq_array "$(printf '%s\n' "${walls[@]}" | median)" s false
  figure hq_array_submit "$(printf '%s\n' "${submits[@]}" | median)" s false
  figure hq_array_rate "$(printf '%s\n' "${rates[@]}" | median)" tasks/s true
  figure hq_array_server_peak_rss \
    "$(printf '%s\n' "${servers[@]}" | median | awk '{printf "%.0f", $1 / 1024}')" MiB false
  figure hq_array_worker_peak_rss \
    "$(printf '%s\n' "${workers[@]}" | median | awk '{printf "%.0f", $1 / 1024}')" MiB false
  figure hq_array_files "$(printf '%s\n' "${files[@]}" | median)" files false
  figure hq_array_server_cpu "$(printf '%s\n' "${cpu_servers[@]}" | median)" s false
  figure hq_array_worker_cpu "$(printf '%s\n' "${cpu_workers[@]}" | median)" s false
  figure hq_array_tasks_cpu "$(printf '%s\n' "${cpu_tasks_all[@]}" | median)" s false
done
