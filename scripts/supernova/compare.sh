#!/usr/bin/env bash
# Supernova pipeline, step 7.2: compare one tile pair (skips tiles 7.1 did not keep).
# Usage: compare.sh --work DIR --tile N
# Calls `supernova step compare`; $SUPERNOVA names the binary if it is not on PATH.
set -euo pipefail
exec "${SUPERNOVA:-supernova}" step compare "$@"
