#!/usr/bin/env bash
# Creates (or refreshes) the project's virtual environment in .venv.
# Sourced by demo.sh and test.sh; safe to run again: it reinstalls only when
# pyproject.toml, constraints.txt or the extras (CONVEYOR_EXTRAS, default: test) changed,
# and says what it does on stderr. torch is always pinned through constraints.txt and
# installed first: an unpinned torch would pull several GB of CUDA wheels.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
py="${PYTHON:-python3.11}"
command -v "$py" >/dev/null 2>&1 || py=python3
extras="${CONVEYOR_EXTRAS:-test}"
stamp="$venv/.setup-stamp"
want="$(cat "$root/pyproject.toml" "$root/constraints.txt" | sha256sum | cut -c1-16)-$extras"
say() { echo "setup: $*" >&2; }
setup_start=$SECONDS
if [ ! -x "$venv/bin/python" ]; then
    say "creating .venv with $("$py" -c 'import sys; print("Python", sys.version.split()[0])')"
    "$py" -m venv "$venv"
fi
pip_install() {
    local log
    log="$(mktemp)"
    if ! "$venv/bin/pip" install --quiet --disable-pip-version-check -c "$root/constraints.txt" "$@" >"$log" 2>&1; then
        grep -v '^WARNING: Location' "$log" >&2 || true
        rm -f "$log"
        echo "setup: pip install $* failed" >&2
        exit 1
    fi
    rm -f "$log"
}
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    say "installing $(cat "$root/constraints.txt") (CPU wheel; pinned first so nothing pulls CUDA)"
    pip_install "torch==2.13.0"
    say "installing conveyor[$extras] (editable) and its dependencies"
    pip_install -e "$root[$extras]"
    "$venv/bin/python" -c "import conveyor, torch"
    echo "$want" > "$stamp"
    say "ready in $((SECONDS - setup_start)) s: $venv"
fi
# Byte-compile the editable sources: with PYTHONDONTWRITEBYTECODE set (as on the shared
# machines) Python would compile every module on every import, ~4x `import conveyor`'s time
# (docs/benchmarks.md, S4). A wheel install gets these from pip; only changed files recompile.
"$venv/bin/python" -m compileall -q "$root/src" >/dev/null
