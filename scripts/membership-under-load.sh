#!/usr/bin/env bash
# Membership under load: runs the network test fifty_nodes_learn_each_other
# (tests/net_membership.rs: 50 nodes in one process, joining through the
# first, must all know each other) RUNS times while shell busy loops keep
# every core busy, and passes only if every run passed.
#
# This is issue 19's check "fifty_nodes_learn_each_other passes 10 of 10 runs
# while another process keeps both cores busy": a node starved of CPU must be
# suspected and then refute it, not be left out of the pool for good.
#
# Usage: scripts/membership-under-load.sh [--help]
#
# Environment:
#   RUNS                       how many runs (default 10)
#   FAIL_FAST                  1: stop after the first failed run (a failing
#                              run can take the test's whole 100 s limit)
#   BUSY                       how many busy loops (default: nproc, one per core)
#   CONSTELLATION_TEST_NODES   nodes per run (default 50; the test's own knob)
#   RUST_LOG                   passed to the test (e.g. constellation=debug)
#
# The test binary is built once, in the debug profile, before the busy loops
# start: `cargo test --workspace --test net_membership --no-run`. Selecting
# the whole workspace gives the same features, hence the same artifacts, as
# `cargo test --workspace` (scripts/test.sh): after the suite it builds
# nothing, and alone it builds only what this one test needs. (With
# `-p constellation-workloads` cargo would unify features over that package
# only, and build second copies of the crates whose features then differ
# (rand_chacha, serde_json, ...) and of all above them.) Each run then
# executes that binary with the test's exact name as its filter.
# Each run's output goes to $CARGO_TARGET_DIR/membership-under-load/run-N.log
# (target/ by default); a failed run's panic message is printed too. The busy
# loops are killed however the script ends (a trap on EXIT, INT and TERM).
#
# Exit status: 0 if all RUNS runs passed, 1 if any failed, 2 for bad usage;
# a failed build exits with cargo's status.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

case "${1:-}" in
  -h | --help) usage; exit 0 ;;
  "") ;;
  *) echo "membership-under-load.sh: unknown argument ${1}; see --help" >&2; exit 2 ;;
esac

test_name=fifty_nodes_learn_each_other
runs=${RUNS:-10}
fail_fast=${FAIL_FAST:-0}
busy=${BUSY:-$(nproc)}
for value in "$runs" "$busy"; do
  if ! [[ "$value" =~ ^[0-9]+$ ]]; then
    echo "membership-under-load.sh: RUNS and BUSY must be whole numbers, got ${value}" >&2
    exit 2
  fi
done
if [ "$runs" -lt 1 ]; then
  echo "membership-under-load.sh: RUNS must be at least 1" >&2
  exit 2
fi

# Seconds since the epoch with a fraction. (Not $EPOCHREALTIME: its decimal
# point follows the locale, and awk would misread a comma.)
now() { date +%s.%N; }

echo "==> building the test binary (cargo test --workspace --test net_membership --no-run)"
# The JSON messages name the test binary; the human output only says it on
# stderr. The package's bins are built too (for CARGO_BIN_EXE_*) and have
# executables of their own, so pick the artifact of the test target.
messages=$(cargo test --workspace --test net_membership --no-run --locked \
  --message-format=json-render-diagnostics)
binary=$(printf '%s\n' "$messages" \
  | grep '"reason":"compiler-artifact"' \
  | grep '"name":"net_membership"' \
  | grep '"test":true' \
  | sed -E 's/.*"executable":"([^"]+)".*/\1/' | tail -n 1)
if [ -z "$binary" ] || [ ! -x "$binary" ]; then
  echo "membership-under-load.sh: cargo built no net_membership test binary" >&2
  exit 1
fi
# Listed into a variable: `grep -q` in a pipe would quit early, and under
# pipefail the binary's broken pipe would read as "no such test".
listed=$("$binary" --list --exact "$test_name" 2>/dev/null || true)
if ! grep -q "^${test_name}: test" <<<"$listed"; then
  echo "membership-under-load.sh: ${binary} has no test ${test_name}" >&2
  exit 1
fi
echo "binary: ${binary}"

logs="${CARGO_TARGET_DIR:-target}/membership-under-load"
mkdir -p "$logs"
rm -f "$logs"/run-*.log

loops=()
running=""
# Stops the run in progress, if any, and the busy loops: only the processes
# this script started, by their ids.
stop_all() {
  for pid in $running "${loops[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in $running "${loops[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  running=""
  loops=()
}
trap stop_all EXIT
# A signal ends the script (and so runs the EXIT trap) with the usual status.
trap 'exit 130' INT
trap 'exit 143' TERM

echo "==> starting ${busy} busy loop(s) on $(nproc) core(s)"
for _ in $(seq 1 "$busy"); do
  ( while :; do :; done ) &
  loops+=("$!")
done
echo "busy loops: ${loops[*]:-none}"

passed=0
ran=0
total_start=$(now)
for run in $(seq 1 "$runs"); do
  log="$logs/run-${run}.log"
  ran=$run
  start=$(now)
  status=0
  # In the background and waited for: bash runs a trap only once the
  # foreground command ends, which could be the test's whole 100 s limit,
  # while `wait` returns to the trap at once.
  "$binary" --exact "$test_name" --nocapture --test-threads=1 >"$log" 2>&1 &
  running=$!
  wait "$running" || status=$?
  running=""
  seconds=$(awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
  # The test prints how long membership took once it was complete.
  learnt=$(grep -o 'every node knew the other [0-9]* [^ ]* after the last one started' "$log" \
    | sed -E 's/every node knew the other ([0-9]+) ([^ ]+) after.*/all knew the other \1 after \2/' \
    | head -n 1 || true)
  if [ "$status" -eq 0 ]; then
    passed=$((passed + 1))
    echo "run ${run}/${runs}: passed in ${seconds} s${learnt:+ (${learnt})}"
  else
    echo "run ${run}/${runs}: FAILED (exit ${status}) in ${seconds} s${learnt:+ (${learnt})}; log: ${log}"
    # The panic message says what was missing: which node knew whom.
    grep -E "panicked|membership incomplete|knows the wrong|took longer" "$log" | head -n 5 \
      | cut -c1-600 | sed 's/^/    /' || true
    if [ "$fail_fast" = 1 ] && [ "$run" -lt "$runs" ]; then
      echo "FAIL_FAST=1: the remaining $((runs - run)) run(s) are skipped"
      break
    fi
  fi
done
total=$(awk -v a="$total_start" -v b="$(now)" 'BEGIN { printf "%.0f", b - a }')

stop_all
skipped=""
[ "$ran" -eq "$runs" ] || skipped=", $((runs - ran)) not run"
echo "==> passed ${passed} of ${runs} (${busy} busy loop(s)${skipped}, ${total} s in all; logs in ${logs})"
[ "$passed" -eq "$runs" ]
