#!/usr/bin/env bash
# Sets up .venv if needed, then runs the demo: load a dataset with workers, print throughput.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CONVEYOR_EXTRAS="${CONVEYOR_EXTRAS:-test}" source "$root/scripts/setup.sh"
cd "$root"
"$venv/bin/python" -m conveyor.demo "$@"
