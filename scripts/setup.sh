#!/usr/bin/env bash
# Creates (or refreshes) the project's virtual environment in .venv.
# Sourced by demo.sh and test.sh; safe to run again: it installs only when pyproject.toml or
# constraints.txt changed, or when the extras asked for (CONVEYOR_EXTRAS, default: test) are
# not all installed (the test extra includes the demo's image extra, so alternating demo.sh
# and test.sh installs nothing). It says what it does on stderr, with pip's progress. torch
# is always pinned through constraints.txt and installed first: an unpinned torch would pull
# several GB of CUDA wheels. SETUP_CHECK_ONLY=1: say whether it would install, exit 0 if not
# and 10 if it would, change nothing.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
py="${PYTHON:-python3.11}"
command -v "$py" >/dev/null 2>&1 || py=python3
extras="${CONVEYOR_EXTRAS:-test}"
stamp="$venv/.setup-stamp"
want="$(cat "$root/pyproject.toml" "$root/constraints.txt" | sha256sum | cut -c1-16)"
say() { echo "setup: $*" >&2; }
setup_start=$SECONDS

# Why an install is needed ("" when it is not): a new venv, changed requirements, or an
# extra whose requirements (conveyor's metadata, nested extras followed) are not installed.
install_reason() {
    if [ ! -x "$venv/bin/python" ]; then
        echo "no virtual environment yet"
    elif [ "$(head -n1 "$stamp" 2>/dev/null)" != "$want" ]; then
        echo "pyproject.toml or constraints.txt changed since the last install"
    elif ! "$venv/bin/python" "$root/scripts/extras_installed.py" "$extras" >/dev/null 2>&1; then
        echo "conveyor[$extras] is not all installed: $("$venv/bin/python" "$root/scripts/extras_installed.py" "$extras" 2>&1 | tail -n1)"
    fi
}

# pip with its progress on stderr: one line per package collected and per step, and a
# line every 10 s while a step (unpacking torch, building) runs silently.
pip_install() {
    local log pid shown=0 total quiet_since=$SECONDS step_start=$SECONDS
    log="$(mktemp)"
    "$venv/bin/pip" install --disable-pip-version-check --progress-bar off \
        -c "$root/constraints.txt" "$@" >"$log" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        sleep 1
        total=$(wc -l <"$log")
        if [ "$total" -gt "$shown" ]; then
            sed -n "$((shown + 1)),${total}p" "$log" \
                | grep -E '^(Collecting|Installing collected|Successfully installed|Building|Obtaining)' \
                | cut -c1-160 | sed 's/^/setup:   /' >&2 || true
            shown=$total
            quiet_since=$SECONDS
        elif [ $((SECONDS - quiet_since)) -ge 10 ]; then
            say "  ... still installing ($((SECONDS - step_start)) s)"
            quiet_since=$SECONDS
        fi
    done
    if ! wait "$pid"; then
        grep -v '^WARNING: Location' "$log" >&2 || true
        rm -f "$log"
        say "pip install $* failed"
        exit 1
    fi
    rm -f "$log"
}

reason="$(install_reason)"
if [ "${SETUP_CHECK_ONLY:-0}" = 1 ]; then
    if [ -z "$reason" ]; then
        say "nothing to install for conveyor[$extras]"
        exit 0
    fi
    say "would install: $reason"
    exit 10
fi
if [ -n "$reason" ]; then
    say "installing because $reason"
    if [ ! -x "$venv/bin/python" ]; then
        say "creating .venv with $("$py" -c 'import sys; print("Python", sys.version.split()[0])')"
        "$py" -m venv "$venv"
    fi
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
