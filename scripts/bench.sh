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
#   shell_true      10,000 shell activities running `true`, 2 executors, output files on tmpfs
#                   (/dev/shm or $BENCH_SCRATCH), with the fork/exec ceiling (spawning `true`
#                   2 at a time) and the ratio; also prints shell_true_disk, output files on disk
#   graph_chains    `constellation run` of 100 independent chains of 100 activities running `true`,
#                   2 executors, journal and output on tmpfs: wall seconds and activities/s
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

all=(local_spawn local_fib local_pingpong queued_bytes shell_true graph_chains
     net_steal net_event_rtt net_fib supernova sim_scale)
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
  *" graph_chains "*) cargo build --release --quiet -p gluein --bin constellation ;;
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

# One process per benchmark, so none inherits another's heap.
for name in "${names[@]}"; do
  if [ "$name" = supernova ]; then
    supernova_bench
  elif [ "$name" = sim_scale ]; then
    sim_scale_bench
  else
    target/release/constellation-bench "$name"
  fi
done
