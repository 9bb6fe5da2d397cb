#!/usr/bin/env bash
# Wheels that scripts/gpu_check.sh installs on the device machine (it has no network), made
# here beforehand into .whl/ (ignored by git; name it in the device run's `carry`):
#   simplejpeg   conveyor.vision's fast CPU decoder (the CPU fallback and conveyor-cpu's path;
#                without it those use Pillow and measure slower than they are)
#   webdataset, braceexpand, torchdata   S3's peers in benchmarks/scaling.py
# The device's python3 is CPython 3.12 on x86-64 (see /work/.library/device/KINDS.md);
# versions are the ones conveyor's test extra runs with here. About 0.6 MB in all.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
mkdir -p .whl
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl \
    simplejpeg==1.9.0 webdataset==1.0.2 braceexpand==0.1.7 torchdata==0.11.0
ls -l .whl
