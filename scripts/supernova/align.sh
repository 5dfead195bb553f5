#!/usr/bin/env bash
# Supernova pipeline, step 4: match the two object lists and fit the transform.
# Usage: align.sh --work DIR
# Calls `supernova step align`; $SUPERNOVA names the binary if it is not on PATH.
set -euo pipefail
exec "${SUPERNOVA:-supernova}" step align "$@"
