#!/usr/bin/env bash
# Supernova pipeline, step 7.1: cut the equalized images into tiles.
# Usage: split.sh --work DIR
# Calls `supernova step split`; $SUPERNOVA names the binary if it is not on PATH.
set -euo pipefail
exec "${SUPERNOVA:-supernova}" step split "$@"
