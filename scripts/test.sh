#!/usr/bin/env bash
# Sets up .venv if needed, then runs lint, type checks, the documentation build (warnings
# are errors) and the whole test suite (which runs every example of the documentation).
# Each step says what it runs and how long it took; a test still running after 20 s says
# so (CONVEYOR_SLOW_TEST_NOTICE_S), so no step is silent for long.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CONVEYOR_EXTRAS="${CONVEYOR_EXTRAS:-test}" source "$root/scripts/setup.sh"
cd "$root"
step() {  # step NAME COMMAND...: say it, run it, say how long it took
    local name="$1" start=$SECONDS
    shift
    echo "test: $name" >&2
    "$@"
    echo "test: $name: ok in $((SECONDS - start)) s" >&2
}
step "ruff check" "$venv/bin/ruff" check --quiet src tests benchmarks
step "ruff format --check" "$venv/bin/ruff" format --check --quiet src tests benchmarks
step "mypy --strict (about 30 s)" "$venv/bin/mypy"
step "lint-imports (the layers of ARCHITECTURE.md)" "$venv/bin/lint-imports" --no-cache --no-logo
step "mkdocs build --strict" env NO_MKDOCS_2_WARNING=1 \
    "$venv/bin/mkdocs" build --strict --quiet --site-dir "$root/site"
export CONVEYOR_DOCS_SITE="$root/site"  # tests/integration/test_docs.py checks this build
export CONVEYOR_SLOW_TEST_NOTICE_S="${CONVEYOR_SLOW_TEST_NOTICE_S:-20}"
echo "test: pytest (the whole suite: 10-20 min on 2 cores; a dot per test)" >&2
"$venv/bin/python" -m pytest "$@"
