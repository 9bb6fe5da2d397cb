#!/usr/bin/env bash
# Sets up .venv if needed (only what the demo needs: torch, conveyor and Pillow for its
# JPEGs), then runs `conveyor demo`: write tar shards, stream them with 2 workers, train a
# tiny model, print throughput. Arguments go to `conveyor demo` (see --help).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CONVEYOR_EXTRAS="${CONVEYOR_EXTRAS:-image}" source "$root/scripts/setup.sh"
cd "$root"
"$venv/bin/conveyor" demo "$@"
