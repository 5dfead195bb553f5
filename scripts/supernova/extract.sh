#!/usr/bin/env bash
# Supernova pipeline, step 8: extract the supernova candidates.
# Usage: extract.sh --work DIR --pair ID --results DIR
# Calls `supernova step extract`; $SUPERNOVA names the binary if it is not on PATH.
set -euo pipefail
exec "${SUPERNOVA:-supernova}" step extract "$@"
