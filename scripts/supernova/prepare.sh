#!/usr/bin/env bash
# Supernova pipeline, step 1: copy a pair's images into its work directory.
# Usage: prepare.sh --data DATASET --pair ID --work DIR [--site NAME] [--wan-mbps MB/s]
# Calls `supernova step prepare`; $SUPERNOVA names the binary if it is not on PATH.
set -euo pipefail
exec "${SUPERNOVA:-supernova}" step prepare "$@"
