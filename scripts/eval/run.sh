#!/usr/bin/env bash
# Reproduces the evaluation (docs/EVALUATION.md): the paper's three
# scenarios on the simulator with both step profiles, the stealing
# strategies at 100 to 10,000 executors, a node-failure run, the emulated
# scenario 1 on the real runtime, and the simulator's scale figure.
#
#   scripts/eval/run.sh [OUT_DIR]      (default eval-out)
#
# Tables go to stdout and OUT_DIR/tables.txt; journals and utilization
# plots of the simulated runs to OUT_DIR (`constellation report
# OUT_DIR/scenario1-paper-anywhere.db` reads one). SEEDS (default 3) sets
# the seeds per configuration. Over 20 minutes on 2 cores once the release
# build is there (scripts/eval/run.sh builds it first).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-eval-out}
seeds=${SEEDS:-3}
mkdir -p "$out"
cargo build --release --quiet -p supernova -p constellation --examples --bins
# Where cargo put them: CARGO_TARGET_DIR, when set, moves the target directory
# (relative to this directory, as cargo reads it here).
release=${CARGO_TARGET_DIR:-target}/release
bin=$release/supernova
{
  "$bin" eval scenario1 scenario2 scenario3 --seeds "$seeds" --out "$out"
  "$bin" eval strategies failure
  "$bin" eval emulate --emulate-pairs 80 --emulate-scale 0.01 --emulate-runs 3
  echo "Simulator scale: 10,000 executors (1,250 nodes x 8, 100 sites), 1,000,000 activities"
  "$release/examples/sim_scale" --runs 3
} 2> >(tee "$out/progress.log" >&2) | tee "$out/tables.txt"
echo "tables in $out/tables.txt, journals and plots in $out/" >&2
