#!/usr/bin/env bash
# Runs PyTorch's and torchdata's own data-loading tests against torch (as written) and against
# conveyor (imports rewritten), and prints what passes on torch but not on conveyor.
#
# usage: scripts/conformance.sh DIR [PYTEST_ARGS...]
#   DIR holds the upstream test files, laid out as in their repositories:
#     DIR/test/test_dataloader.py, DIR/test/test_datapipe.py          (pytorch/pytorch)
#     DIR/test/stateful_dataloader/*.py                               (pytorch/data v0.11.0)
#   They are never copied into this repository. Results go to DIR/results/ (JUnit XML per
#   file and run) and the table is printed. The tests need packages conveyor does not:
#   a virtual environment is made in ${CONFORMANCE_VENV:-DIR/.venv} with torch (pinned by
#   constraints.txt), torchdata 0.11, expecttest, parameterized and conveyor itself, and a
#   second one (DIR/.venv-hf) that adds Hugging Face datasets for test_hugging_face.py only:
#   datasets brings pandas and dill, which switch on other code paths in test_datapipe.py.
#   CONFORMANCE_ONLY="test_datapipe.py ..." limits the run to some files;
#   CONFORMANCE_SIDES="conveyor" reruns one side and keeps the other side's last results;
#   CONVEYOR_SRC=/path/to/src measures another conveyor checkout (e.g. an older commit);
#   CONFORMANCE_RESULTS=DIR2 keeps results apart (default DIR/results).
set -euo pipefail
if [ $# -lt 1 ] || [ ! -d "$1/test" ]; then
    echo "usage: $0 DIR  (DIR/test/test_dataloader.py, DIR/test/stateful_dataloader/, ...)" >&2
    exit 2
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$(cd "$1" && pwd)"
shift
venv="${CONFORMANCE_VENV:-$dir/.venv}"
py="${PYTHON:-python3.11}"
command -v "$py" >/dev/null 2>&1 || py=python3

hf_venv="${CONFORMANCE_HF_VENV:-$dir/.venv-hf}"
make_venv() {  # make_venv DIR [EXTRA_PACKAGE...]
    local where="$1"
    shift
    [ -x "$where/bin/python" ] || "$py" -m venv "$where"
    if ! "$where/bin/python" -c "import torchdata, expecttest, parameterized, conveyor" \
        2>/dev/null || { [ $# -gt 0 ] && ! "$where/bin/python" -c "import $1" 2>/dev/null; }; then
        "$where/bin/pip" install --quiet -c "$root/constraints.txt" torch==2.13.0 \
            torchdata==0.11.0 expecttest parameterized pytest pytest-timeout psutil numpy "$@" \
            2>&1 | grep -v '^WARNING' || true
        "$where/bin/pip" install --quiet --no-deps -e "$root" 2>&1 | grep -v '^WARNING' || true
    fi
}
make_venv "$venv"

work="${CONFORMANCE_RESULTS:-$dir/results}"
sides="${CONFORMANCE_SIDES:-torch conveyor}"
mkdir -p "$work"
for side in $sides; do
    # Each side gets its own copy so the rewritten files never shadow the originals.
    rm -rf "${work:?}/$side"
    mkdir -p "$work/$side"
    cp -r "$dir/test" "$work/$side/test"
    "$venv/bin/python" "$root/scripts/conformance_report.py" adapt "$work/$side/test"
done
if [[ " $sides " == *" conveyor "* ]]; then
    "$venv/bin/python" "$root/scripts/conformance_report.py" rewrite "$work/conveyor/test"
fi
if [ -n "${CONVEYOR_SRC:-}" ]; then
    export PYTHONPATH="$CONVEYOR_SRC${PYTHONPATH:+:$PYTHONPATH}"
fi

files=()
all_files=()
cd "$dir"
for f in test/test_dataloader.py test/test_datapipe.py test/stateful_dataloader/*.py; do
    [ -f "$dir/$f" ] || continue
    all_files+=("$f")
    if [ -n "${CONFORMANCE_ONLY:-}" ] && [[ " $CONFORMANCE_ONLY " != *" $(basename "$f") "* ]]; then
        continue
    fi
    files+=("$f")
done

for side in $sides; do
    for f in "${files[@]}"; do
        name="$(echo "$f" | tr '/' '_')"
        python="$venv/bin/python"
        if [ "$(basename "$f")" = test_hugging_face.py ]; then
            make_venv "$hf_venv" datasets
            python="$hf_venv/bin/python"
        fi
        echo "== $side: $f" >&2
        rm -f "$work/$side-$name.xml" "$work/$side-$name.log"
        (
            cd "$work/$side/$(dirname "$f")"
            # unittest-style files; pytest only collects and reports them. Each test is bounded.
            timeout "${CONFORMANCE_FILE_TIMEOUT_S:-3600}" nice -n 10 "$python" -m pytest \
                "$(basename "$f")" -q -p no:cacheprovider -o addopts="" \
                --timeout="${CONFORMANCE_TEST_TIMEOUT_S:-300}" \
                --junitxml="$work/$side-$name.xml" "$@" >"$work/$side-$name.log" 2>&1
        ) || true
    done
done

"$venv/bin/python" "$root/scripts/conformance_report.py" report "$work" "${all_files[@]}"
