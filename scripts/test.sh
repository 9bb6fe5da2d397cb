#!/usr/bin/env bash
# Sets up .venv if needed, then runs lint, type checks, the documentation build (warnings
# are errors) and the whole test suite (which runs every example of the documentation).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CONVEYOR_EXTRAS="${CONVEYOR_EXTRAS:-test}" source "$root/scripts/setup.sh"
cd "$root"
"$venv/bin/ruff" check src tests benchmarks
"$venv/bin/ruff" format --check src tests benchmarks
"$venv/bin/mypy"
"$venv/bin/lint-imports" --no-cache
echo "docs: mkdocs build --strict" >&2
NO_MKDOCS_2_WARNING=1 "$venv/bin/mkdocs" build --strict --quiet --site-dir "$root/site"
export CONVEYOR_DOCS_SITE="$root/site"  # tests/integration/test_docs.py checks this build
"$venv/bin/python" -m pytest "$@"
