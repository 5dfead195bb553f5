#!/usr/bin/env bash
# Supernova pipeline, step 9: remove the work directory.
# Usage: cleanup.sh --work DIR
# Calls `supernova step cleanup`; $SUPERNOVA names the binary if it is not on PATH.
set -euo pipefail
exec "${SUPERNOVA:-supernova}" step cleanup "$@"
