#!/usr/bin/env bash
# Supernova pipeline, step 7.3: merge the tiles' residuals.
# Usage: recombine.sh --work DIR
# Calls `supernova step recombine`; $SUPERNOVA names the binary if it is not on PATH.
set -euo pipefail
exec "${SUPERNOVA:-supernova}" step recombine "$@"
