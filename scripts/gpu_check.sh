#!/usr/bin/env bash
# Issue 29's GPU checks, on a machine with CUDA (this workplace's device machine): the
# gpu-marked tests (tests/gpu and the GPU guide's examples), then the GPU benchmarks.
# conveyor is used from src/ (PYTHONPATH), with the machine's own python3, torch and
# torchvision: nothing is installed. Results go to $OUT (the device tool's folder) or
# ./gpu-results: one JSON-lines file per benchmark and all.log (at most 5 files).
#
#   bash scripts/gpu_check.sh                   # tests h2d decode train scaling
#   bash scripts/gpu_check.sh tests h2d decode  # some stages (each has a time limit)
#   bash scripts/gpu_check.sh smoke             # every benchmark's --smoke run, on the CPU
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export BENCH_DATA_DIR=${BENCH_DATA_DIR:-/tmp/conveyor-bench-data}
RESULTS=${OUT:-gpu-results}
mkdir -p "$RESULTS"
LOG="$RESULTS/all.log"
stages=${*:-tests h2d decode train scaling}
status=0

stage() {  # stage NAME SECONDS COMMAND...
    local name=$1 limit=$2 start=$SECONDS
    shift 2
    echo "== $name: $*" | tee -a "$LOG"
    timeout "$limit" "$@" 2>&1 | tee -a "$LOG"
    local code=${PIPESTATUS[0]}
    echo "== $name: exit $code in $((SECONDS - start)) s" | tee -a "$LOG"
    [ "$code" = 0 ] || status=1
}

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
  nproc; uptime; $PY -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
} | tee -a "$LOG"
for name in $stages; do
    case $name in
    tests) stage tests 420 $PY -m pytest -m gpu tests/gpu tests/integration/test_docs.py \
        -q -p no:cacheprovider ;;
    h2d) stage h2d 240 $PY benchmarks/gpu_h2d.py --out "$RESULTS/h2d.jsonl" ;;
    decode) stage decode 240 $PY benchmarks/gpu_decode.py --out "$RESULTS/decode.jsonl" ;;
    train) stage train 540 $PY benchmarks/gpu_train.py --model resnet50 \
        --out "$RESULTS/train.jsonl" ;;
    scaling) stage scaling 540 $PY benchmarks/scaling.py --reps 1 --s3-images 1500 \
        --out "$RESULTS/scaling.jsonl" ;;
    smoke) for script in gpu_h2d gpu_decode gpu_train scaling; do
            stage "smoke $script" 600 $PY benchmarks/$script.py --smoke
        done ;;
    *) echo "unknown stage $name (tests h2d decode train scaling smoke)" >&2; status=2 ;;
    esac
done
exit $status
