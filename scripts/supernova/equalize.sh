#!/usr/bin/env bash
# Supernova pipeline, steps 5 and 6: resample, match PSFs and flux scale.
# Usage: equalize.sh --work DIR --epoch a|b
# Calls `supernova step equalize`; $SUPERNOVA names the binary if it is not on PATH.
set -euo pipefail
exec "${SUPERNOVA:-supernova}" step equalize "$@"
