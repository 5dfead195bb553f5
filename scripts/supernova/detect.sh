#!/usr/bin/env bash
# Supernova pipeline, steps 2 and 3: detect objects in image a or b.
# Usage: detect.sh --work DIR --epoch a|b
# Calls `supernova step detect`; $SUPERNOVA names the binary if it is not on PATH.
set -euo pipefail
exec "${SUPERNOVA:-supernova}" step detect "$@"
