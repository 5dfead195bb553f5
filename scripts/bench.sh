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
# Criterion micro-benchmarks of the scheduler core: cargo bench -p constellation
set -euo pipefail
cd "$(dirname "$0")/.."

all=(local_spawn local_fib local_pingpong queued_bytes shell_true graph_chains
     net_steal net_event_rtt net_fib)
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
# One process per benchmark, so none inherits another's heap.
for name in "${names[@]}"; do
  target/release/constellation-bench "$name"
done
