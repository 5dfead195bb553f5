#!/usr/bin/env bash
# Benchmarks of the embedded runtime. Prints one JSON object per line:
#   {"bench":NAME,"value":X,"unit":U,"higher_is_better":B}
# The value is the median of BENCH_RUNS runs (default 5); each run goes to stderr.
#
# Usage: scripts/bench.sh [NAME...]
#   local_spawn     1,000,000 trivial activities submitted from outside, 2 executors
#   local_fib       fib(30) by divide and conquer (2,692,537 activities), 2 executors
#   local_pingpong  events/s between two activities on different executors
#   queued_bytes    resident bytes per queued trivial activity, 1,000,000 queued
#   shell_true      10,000 shell activities running `true` (SHELL_TRUE_COUNT), 2 executors, output files on tmpfs
#                   (/dev/shm or $BENCH_SCRATCH), with the fork/exec ceiling (spawning `true`
#                   2 at a time) and the ratio; also prints shell_true_disk, output files on disk.
#                   BENCH_BALLAST_MIB=N makes the bench hold N MiB of touched heap, as a big runner
#                   does, to show whether starting a command costs more as its starter grows
#   graph_chains    `constellation run` of 100 independent chains of 100 activities running `true`,
#                   2 executors, journal and output on tmpfs: wall seconds and activities/s
#   graph_typo      seconds for `constellation run` to reject a 1,000,000-item sweep whose `after`
#                   names no activity (a typo), with the runner's peak RSS; the run must fail with
#                   the unknown-dependency error. GRAPH_TYPO_ACTIVITIES sets the size
#   graph_1m        `constellation run` of a sweep of 1,000,000 `true`, 2 executors, journal and
#                   output on tmpfs (/dev/shm or $BENCH_SCRATCH): wall seconds, seconds to the
#                   first command (the journal's first attempt), peak RSS of the runner, journal
#                   bytes and activities/s, one line each. Then, on each run's journal: seconds for
#                   `constellation report`, and for a `--resume` after the last half of the
#                   activities is set back to pending (as a run killed half-way leaves them): seconds
#                   to its first command, stopped there with SIGINT. GRAPH_1M_ACTIVITIES sets the
#                   size (100000 for a quick look). Both use /usr/bin/time; graph_1m reads the journal
#                   with sqlite3
#   submit_latency  median ms from the start of `constellation submit` of a one-activity graph to
#                   that activity's start (its first attempt in the job's journal), on an idle loopback
#                   pool with one local agent of 2 executors; BENCH_RUNS submits (at least 5), each
#                   waited for before the next. State dir and output on tmpfs; reads journals with sqlite3
#   pool_chains     the graph_chains workload (100 chains of 100 `true`) submitted to that pool: seconds
#                   from the start of `submit` to the end of `constellation wait`, and activities/s
#   net_steal       200,000 trivial activities on a master with no executors, stolen over loopback
#                   by one net-node worker with 2 executors (master-worker): activities/s, with
#                   the worker's steal requests and imported activities
#   net_event_rtt   median round trip in µs of 20,000 events between activities on two net-node
#                   processes over loopback, 1 executor each, with the p99
#   net_fib         fib(27) (635,621 activities) across 3 net-node processes of 2 executors,
#                   random stealing over loopback: seconds and activities/s
#   supernova       the supernova pipeline on the demo data (6 pairs, 512-1280 px): wall seconds
#                   of the sequential reference, the monolithic version (2 executors x 1 thread,
#                   and 1 executor x 2 threads) and the many-task version (2 executors), with the
#                   many-task speedup over the sequential reference
#   sim_scale       the simulator on 10,000 executors (1,250 nodes x 8, 100 sites) and 1,000,000
#                   activities, random stealing: wall seconds of the simulation itself
# Criterion micro-benchmarks of the scheduler core: cargo bench -p constellation
set -euo pipefail
cd "$(dirname "$0")/.."

all=(local_spawn local_fib local_pingpong queued_bytes shell_true graph_chains graph_typo graph_1m
     submit_latency pool_chains net_steal net_event_rtt net_fib supernova sim_scale)
names=("$@")
[ ${#names[@]} -gt 0 ] || names=("${all[@]}")
for name in "${names[@]}"; do
  case " ${all[*]} " in
    *" $name "*) ;;
    *) echo "bench.sh: unknown benchmark '$name'; known: ${all[*]}" >&2; exit 2 ;;
  esac
done

cargo build --release --quiet -p constellation-workloads --bin constellation-bench
case " ${names[*]} " in
  *" graph_chains "* | *" graph_typo "* | *" graph_1m "* | *" submit_latency "* | *" pool_chains "*)
    cargo build --release --quiet -p gluein --bin constellation ;;
esac
case " ${names[*]} " in
  *" net_"*) cargo build --release --quiet -p constellation-workloads --bin net-node ;;
esac

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

# The supernova pipeline's versions on the demo data; "wall clock" is the
# run alone (no data generation, journal or plot).
supernova_bench() {
  cargo build --release --quiet -p supernova
  local bin=target/release/supernova scratch data runs=${BENCH_RUNS:-5}
  scratch=$(mktemp -d)
  data="$scratch/data"
  "$bin" generate --out "$data" >/dev/null 2>&1
  declare -A walls
  local versions=("sequential" "monolithic -n 2" "monolithic -n 1 --threads 2" "many-task -n 2")
  declare -A names=(["sequential"]=supernova_sequential ["monolithic -n 2"]=supernova_monolithic_2x1
    ["monolithic -n 1 --threads 2"]=supernova_monolithic_1x2 ["many-task -n 2"]=supernova_many_task)
  for run in $(seq "$runs"); do
    for version in "${versions[@]}"; do
      local out="$scratch/run-$run-${version// /_}"
      # shellcheck disable=SC2086 # the version string holds its flags
      wall=$("$bin" run --data "$data" --out "$out" --version $version 2>/dev/null |
        awk '/^wall clock/ {print $3}')
      echo "supernova run $run, $version: $wall s" >&2
      walls["$version"]+="$wall "
    done
  done
  for version in "${versions[@]}"; do
    local name=${names[$version]} value
    value=$(tr ' ' '\n' <<<"${walls[$version]}" | grep . | median)
    printf '{"bench":"%s","value":%s,"unit":"s","higher_is_better":false}\n' "$name" "$value"
  done
  local sequential many
  sequential=$(tr ' ' '\n' <<<"${walls[sequential]}" | grep . | median)
  many=$(tr ' ' '\n' <<<"${walls[many-task -n 2]}" | grep . | median)
  printf '{"bench":"supernova_speedup","value":%s,"unit":"x","higher_is_better":true}\n' \
    "$(awk -v s="$sequential" -v m="$many" 'BEGIN {printf "%.2f", s / m}')"
  rm -rf "$scratch"
}

# The example prints its figures and, last, one JSON line; only that goes
# to stdout here.
sim_scale_bench() {
  cargo build --release --quiet -p constellation --example sim_scale
  target/release/examples/sim_scale --runs "${BENCH_RUNS:-5}" |
    awk '/^\{/ {print; next} {print > "/dev/stderr"}'
}

# Seconds since the epoch, with fractions.
now() { date +%s.%N; }

# `constellation run` of a graph file of one `prepare` and a sweep of
# GRAPH_TYPO_ACTIVITIES (default 1,000,000) activities after `prepar`:
# the seconds until it fails with the unknown-dependency error, and its
# peak RSS. A run that succeeds, or fails otherwise, stops the benchmark.
graph_typo_bench() {
  local exe=$PWD/target/release/constellation runs=${BENCH_RUNS:-5}
  local count=${GRAPH_TYPO_ACTIVITIES:-1000000} scratch
  scratch=$(mktemp -d "${BENCH_SCRATCH:-/dev/shm}/constellation-bench-typo-XXXXXX")
  printf '%s\n' '[[activity]]' 'id = "prepare"' 'command = "true"' '' \
    '[[activity]]' 'id = "work-{n}"' "for = { n = \"1..=$count\" }" 'command = "true"' \
    'after = ["prepar"]' >"$scratch/typo.toml"
  local seconds=() rss=()
  for run in $(seq "$runs"); do
    local started ended status=0
    started=$(now)
    (cd "$scratch" && /usr/bin/time -f %M -o rss "$exe" run typo.toml -n 2 --progress none \
      --journal "run-$run/journal.db" >stdout 2>stderr) || status=$?
    ended=$(now)
    if [ "$status" = 0 ] || ! grep -q "which is not an activity of this graph" "$scratch/stderr"; then
      echo "graph_typo: expected the unknown-dependency error, got status $status:" >&2
      head -c 2000 "$scratch/stderr" >&2
      rm -rf "$scratch"
      return 1
    fi
    local wall kb
    wall=$(awk -v a="$started" -v b="$ended" 'BEGIN {printf "%.3f", b - a}')
    kb=$(tail -n 1 "$scratch/rss")
    echo "graph_typo run $run: $wall s, peak RSS $((kb / 1024)) MiB, $(wc -l <"$scratch/stderr") line(s) on stderr" >&2
    seconds+=("$wall")
    rss+=("$kb")
  done
  rm -rf "$scratch"
  printf '{"bench":"graph_typo","value":%s,"unit":"s","higher_is_better":false,"activities":%s}\n' \
    "$(printf '%s\n' "${seconds[@]}" | median)" "$count"
  printf '{"bench":"graph_typo_peak_rss","value":%s,"unit":"MiB","higher_is_better":false,"activities":%s}\n' \
    "$(printf '%s\n' "${rss[@]}" | median | awk '{printf "%.0f", $1 / 1024}')" "$count"
}

# `constellation run` of a sweep of GRAPH_1M_ACTIVITIES (default 1,000,000)
# `true` on 2 executors, journal and output on tmpfs. The first command's
# start is the journal's earliest attempt; peak RSS is the runner's (the
# largest process /usr/bin/time waited for: the runner, not a `true`).
graph_1m_bench() {
  local exe=$PWD/target/release/constellation runs=${BENCH_RUNS:-5}
  local count=${GRAPH_1M_ACTIVITIES:-1000000} scratch
  scratch=$(mktemp -d "${BENCH_SCRATCH:-/dev/shm}/constellation-bench-1m-XXXXXX")
  printf '%s\n' '[[activity]]' 'id = "t-{n}"' "for = { n = \"1..=$count\" }" 'command = "true"' \
    >"$scratch/sweep.toml"
  local walls=() firsts=() rss=() journals=() rates=() reports=() resumes=()
  for run in $(seq "$runs"); do
    local started ended status=0
    started=$(now)
    (cd "$scratch" && /usr/bin/time -f %M -o rss "$exe" run sweep.toml -n 2 --progress none \
      --journal "run-$run/journal.db" >stdout 2>stderr) || status=$?
    ended=$(now)
    if [ "$status" != 0 ]; then
      echo "graph_1m: constellation run failed with status $status:" >&2
      head -c 2000 "$scratch/stderr" >&2
      rm -rf "$scratch"
      return 1
    fi
    local journal=$scratch/run-$run/journal.db wall first kb bytes rate
    wall=$(awk -v a="$started" -v b="$ended" 'BEGIN {printf "%.3f", b - a}')
    # Attempts are journaled with their start in Unix seconds (journal/src/schema.sql).
    first=$(sqlite3 "$journal" 'SELECT min(started) FROM attempts' |
      awk -v a="$started" '{printf "%.3f", $1 - a}')
    kb=$(tail -n 1 "$scratch/rss")
    # The database and whatever write-ahead log the run left beside it.
    bytes=0
    for file in "$journal" "$journal-wal"; do
      if [ -e "$file" ]; then bytes=$((bytes + $(stat -c %s "$file"))); fi
    done
    rate=$(awk -v n="$count" -v w="$wall" 'BEGIN {printf "%.1f", n / w}')
    echo "graph_1m run $run: $wall s, first command after $first s, peak RSS $((kb / 1024)) MiB," \
      "journal $bytes bytes, $rate activities/s" >&2
    local report resume
    report=$(graph_1m_report "$exe" "$journal")
    resume=$(graph_1m_resume "$exe" "$scratch" "$journal" "$count") || {
      rm -rf "$scratch"
      return 1
    }
    echo "graph_1m run $run: report in $report s, resume of the last half: first command after $resume s" >&2
    rm -rf "$scratch/run-$run"
    walls+=("$wall") firsts+=("$first") rss+=("$kb") journals+=("$bytes") rates+=("$rate")
    reports+=("$report") resumes+=("$resume")
  done
  rm -rf "$scratch"
  local figure
  figure() { # name value unit higher_is_better
    printf '{"bench":"%s","value":%s,"unit":"%s","higher_is_better":%s,"activities":%s}\n' \
      "$1" "$2" "$3" "$4" "$count"
  }
  figure graph_1m "$(printf '%s\n' "${walls[@]}" | median)" s false
  figure graph_1m_first_command "$(printf '%s\n' "${firsts[@]}" | median)" s false
  figure graph_1m_peak_rss "$(printf '%s\n' "${rss[@]}" | median | awk '{printf "%.0f", $1 / 1024}')" MiB false
  figure graph_1m_journal_bytes "$(printf '%s\n' "${journals[@]}" | median | awk '{printf "%.0f", $1}')" B false
  figure graph_1m_rate "$(printf '%s\n' "${rates[@]}" | median)" activities/s true
  figure graph_1m_report "$(printf '%s\n' "${reports[@]}" | median)" s false
  figure graph_1m_resume_first_command "$(printf '%s\n' "${resumes[@]}" | median)" s false
}

# Seconds for `constellation report` of the journal at $2 (output thrown away).
graph_1m_report() {
  local started ended
  started=$(now)
  "$1" report "$2" >/dev/null 2>"$2.report-stderr" ||
    { echo "graph_1m: constellation report failed:" >&2; head -c 2000 "$2.report-stderr" >&2; }
  ended=$(now)
  awk -v a="$started" -v b="$ended" 'BEGIN {printf "%.3f", b - a}'
}

# Sets the last half of the journal's activities back to pending, as a run
# killed half-way leaves them, then resumes the run: the seconds until the
# resumed run's first command starts. The run is stopped there with SIGINT;
# a resume that has not started a command after 300 s fails the benchmark.
graph_1m_resume() {
  local exe=$1 scratch=$2 journal=$3 count=$4 started first="" pid
  sqlite3 "$journal" "UPDATE activities SET state = 'pending' WHERE activity > $((count / 2))"
  started=$(now)
  (cd "$scratch" && exec "$exe" run sweep.toml -n 2 --progress none --resume "$journal" \
    >resume.stdout 2>resume.stderr) &
  pid=$!
  for _ in $(seq 1500); do
    first=$(sqlite3 "$journal" 'SELECT min(started) FROM attempts WHERE run = 2' 2>/dev/null)
    [ -n "$first" ] && break
    sleep 0.2
  done
  kill -INT "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  if [ -z "$first" ]; then
    echo "graph_1m: the resumed run started no command in 300 s:" >&2
    head -c 2000 "$scratch/resume.stderr" >&2
    return 1
  fi
  awk -v a="$started" -v b="$first" 'BEGIN {printf "%.3f", b - a}'
}

# A loopback pool in a new directory on tmpfs, with one local agent of 2
# executors, for the job benchmarks: sets pool_dir, pool_pid and agent_pid.
# Fails if the pool file or the agent's join does not show within 60 s.
start_bench_pool() {
  local exe=$PWD/target/release/constellation
  pool_dir=$(mktemp -d "${BENCH_SCRATCH:-/dev/shm}/constellation-bench-pool-XXXXXX")
  (cd "$pool_dir" && exec "$exe" pool start --listen /ip4/127.0.0.1/tcp/0 --pool-file pool.json \
    >pool.log 2>&1) &
  pool_pid=$!
  for _ in $(seq 600); do [ -s "$pool_dir/pool.json" ] && break; sleep 0.1; done
  (cd "$pool_dir" && exec "$exe" agent --pool pool.json -n 2 >agent.log 2>&1) &
  agent_pid=$!
  for _ in $(seq 600); do grep -q "joined with" "$pool_dir/agent.log" 2>/dev/null && break; sleep 0.1; done
  if ! grep -q "joined with" "$pool_dir/agent.log" 2>/dev/null; then
    echo "the bench pool did not start, or its agent did not join, within 60 s:" >&2
    tail -n 20 "$pool_dir/pool.log" "$pool_dir/agent.log" >&2
    stop_bench_pool
    return 1
  fi
}

# Stops the agent and the pool node of start_bench_pool (SIGTERM: the pool
# node stops its jobs' runners) and removes their directory.
stop_bench_pool() {
  kill -TERM "$agent_pid" "$pool_pid" 2>/dev/null || true
  wait "$agent_pid" "$pool_pid" 2>/dev/null || true
  rm -rf "$pool_dir"
}

# Submits GRAPH (a file in the pool's directory) to the bench pool and
# waits for its job at most TIMEOUT; sets job_id (no subshell: the callers
# time it). On failure, says so for bench NAME with the logs' tails and
# fails; the caller stops the pool.
submit_and_wait() {
  local name=$1 graph=$2 timeout=$3 exe=$PWD/target/release/constellation
  job_id=$(cd "$pool_dir" && "$exe" submit "$graph" --pool pool.json --json 2>>submit.log |
    sed -n 's/.*"id":\([0-9]*\).*/\1/p')
  if [ -z "$job_id" ] || ! (cd "$pool_dir" && "$exe" wait "$job_id" --pool pool.json \
    --timeout "$timeout" >/dev/null 2>>wait.log); then
    echo "$name: job ${job_id:-(not submitted)} did not succeed:" >&2
    tail -n 20 "$pool_dir/submit.log" "$pool_dir/wait.log" "$pool_dir/pool.log" >&2
    return 1
  fi
}

# BENCH_RUNS (at least 5) submits of a one-activity graph to an idle pool:
# the median milliseconds from the start of `submit` to the start of the
# activity, as its job's journal records it.
submit_latency_bench() {
  local runs=${BENCH_RUNS:-5}
  [ "$runs" -ge 5 ] || runs=5
  start_bench_pool || return 1
  printf '%s\n' '[[activity]]' 'id = "one"' 'command = "true"' >"$pool_dir/one.toml"
  local latencies=()
  for run in $(seq "$runs"); do
    local started id first
    started=$(now)
    submit_and_wait submit_latency one.toml 120s || { stop_bench_pool; return 1; }
    id=$job_id
    first=$(sqlite3 "$pool_dir/pool.state/jobs/$id/journal.db" 'SELECT min(started) FROM attempts' |
      awk -v a="$started" '{printf "%.1f", ($1 - a) * 1000}')
    echo "submit_latency run $run: job $id, first activity $first ms after the submit started" >&2
    latencies+=("$first")
  done
  stop_bench_pool
  printf '{"bench":"submit_latency","value":%s,"unit":"ms","higher_is_better":false,"runs":%s}\n' \
    "$(printf '%s\n' "${latencies[@]}" | median)" "$runs"
}

# The graph_chains workload (100 chains of 100 `true`) submitted to a pool
# with one local agent of 2 executors: seconds from the start of `submit`
# to the end of `wait`, median of BENCH_RUNS, with activities/s.
pool_chains_bench() {
  local runs=${BENCH_RUNS:-5}
  local chains=100 length=100
  start_bench_pool || return 1
  awk -v chains=$chains -v len=$length 'BEGIN {
    for (c = 0; c < chains; c++) for (s = 0; s < len; s++) {
      printf "[[activity]]\nid = \"c%d-%d\"\ncommand = \"true\"\n", c, s
      if (s > 0) printf "after = [\"c%d-%d\"]\n", c, s - 1
    }
  }' >"$pool_dir/chains.toml"
  local activities=$((chains * length)) walls=() rates=()
  for run in $(seq "$runs"); do
    local started ended id wall rate
    started=$(now)
    submit_and_wait pool_chains chains.toml 600s || { stop_bench_pool; return 1; }
    id=$job_id
    ended=$(now)
    wall=$(awk -v a="$started" -v b="$ended" 'BEGIN {printf "%.3f", b - a}')
    rate=$(awk -v n="$activities" -v w="$wall" 'BEGIN {printf "%.1f", n / w}')
    echo "pool_chains run $run: job $id, $wall s, $rate activities/s" >&2
    rm -rf "$pool_dir/pool.state/jobs/$id/output"
    walls+=("$wall") rates+=("$rate")
  done
  stop_bench_pool
  printf '{"bench":"pool_chains","value":%s,"unit":"s","higher_is_better":false,"activities":%s,"activities_per_s":%s}\n' \
    "$(printf '%s\n' "${walls[@]}" | median)" "$activities" "$(printf '%s\n' "${rates[@]}" | median)"
}

# One process per benchmark, so none inherits another's heap.
for name in "${names[@]}"; do
  if [ "$name" = supernova ]; then
    supernova_bench
  elif [ "$name" = sim_scale ]; then
    sim_scale_bench
  elif [ "$name" = graph_typo ]; then
    graph_typo_bench
  elif [ "$name" = graph_1m ]; then
    graph_1m_bench
  elif [ "$name" = submit_latency ]; then
    submit_latency_bench
  elif [ "$name" = pool_chains ]; then
    pool_chains_bench
  else
    target/release/constellation-bench "$name"
  fi
done
