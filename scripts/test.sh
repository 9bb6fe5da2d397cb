#!/usr/bin/env bash
# Sets up .venv if needed, then runs lint, type checks and the whole test suite.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CONVEYOR_EXTRAS="${CONVEYOR_EXTRAS:-test}" source "$root/scripts/setup.sh"
cd "$root"
"$venv/bin/ruff" check src tests benchmarks
"$venv/bin/ruff" format --check src tests benchmarks
"$venv/bin/mypy"
"$venv/bin/lint-imports" --no-cache
"$venv/bin/python" -m pytest "$@"
