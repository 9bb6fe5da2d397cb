#!/usr/bin/env bash
# Creates (or refreshes) the project's virtual environment in .venv.
# Sourced by demo.sh and test.sh; safe to run again: it reinstalls only when
# pyproject.toml or constraints.txt changed. torch is always pinned through
# constraints.txt: an unpinned torch would pull several GB of CUDA wheels.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
py="${PYTHON:-python3.11}"
command -v "$py" >/dev/null 2>&1 || py=python3
extras="${CONVEYOR_EXTRAS:-test}"
stamp="$venv/.setup-stamp"
want="$(cat "$root/pyproject.toml" "$root/constraints.txt" | sha256sum | cut -c1-16)-$extras"
if [ ! -x "$venv/bin/python" ]; then
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
    pip_install "torch==2.13.0"
    pip_install -e "$root[$extras]"
    "$venv/bin/python" -c "import conveyor, torch"
    echo "$want" > "$stamp"
fi
