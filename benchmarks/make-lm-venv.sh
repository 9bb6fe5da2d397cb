#!/usr/bin/env bash
# The environment for benchmarks/lm_packing.py: conveyor (editable, text extra) next to the
# language-model loaders it is measured against (Grain, LitData, Hugging Face datasets +
# transformers' DataCollatorWithFlattening, torchtitan). The peers live only here, never in
# conveyor's dependencies; torch is pinned through constraints.txt. Each peer is installed
# on its own, so one that cannot install (with torch 2.13.0 CPU) does not stop the others;
# the script prints which are missing and why pip refused.
#   LM_VENV=/path bash benchmarks/make-lm-venv.sh     (default $HOME/.cache/conveyor-lm)
set -u
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
V=${LM_VENV:-$HOME/.cache/conveyor-lm}
python3.11 -m venv "$V" 2>/dev/null || python3 -m venv "$V"
pip() { "$V/bin/pip" install -q --disable-pip-version-check -c "$root/constraints.txt" "$@"; }
pip torch==2.13.0 || exit 1
pip -e "$root[text]" numpy psutil datasets transformers || exit 1
missing=""
for peer in grain litdata torchtitan; do
    pip "$peer" >"$V/install-$peer.log" 2>&1 || missing="$missing $peer"
done
"$V/bin/pip" uninstall -y -q torchvision 2>/dev/null || true  # CUDA-linked wheel, unused
[ -z "$missing" ] || echo "make-lm-venv: could not install:$missing (see $V/install-*.log)" >&2
echo "$V"
