#!/usr/bin/env bash
# Measures the supernova pipeline's time per step against image size, the
# input of the simulator's workload model (apps/supernova/src/eval/steps.rs).
#
#   scripts/eval/measure-steps.sh [OUT.tsv]    (default apps/supernova/eval/step-times.tsv)
#
# For each side in SIDES (default 512 1024 1536 2048) it generates PAIRS
# (default 2) square pairs and runs the sequential version RUNS times
# (default 3), one thread, no platform, writing one line per run and step:
# side, run, step, activities, mean seconds per activity. Run it on a quiet
# machine: the model's shape comes from these figures.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-apps/supernova/eval/step-times.tsv}
sides=(${SIDES:-512 1024 1536 2048})
pairs=${PAIRS:-2}
runs=${RUNS:-3}
cargo build --release --quiet -p supernova
bin=$PWD/target/release/supernova
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
{
  printf '# side\trun\tstep\tcount\tmean_s\n'
  for side in "${sides[@]}"; do
    "$bin" generate --out "$scratch/d$side" --pairs "$pairs" --min-size "$side" \
      --max-size "$side" --seed 5 >/dev/null
    for run in $(seq "$runs"); do
      "$bin" run --data "$scratch/d$side" --version sequential --out "$scratch/r$side-$run" 2>/dev/null |
        sed -n '/^time per step/,/^wall clock/p' |
        awk -v side="$side" -v run="$run" '/^[0-9]/ {printf "%s\t%s\t%s\t%s\t%s\n", side, run, $1, $2, $4}'
      echo "measure-steps: side $side, run $run done" >&2
    done
  done
} > "$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out" >&2
