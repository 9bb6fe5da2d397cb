#!/usr/bin/env bash
# Issue 29's GPU checks in one command, sized for this workplace's device machine (one H100 or
# H200, 16 cores, no network, 10 minutes a command): the gpu-marked tests (tests/gpu and the
# GPU guide's examples), then the GPU benchmarks, conveyor and torch in one run each.
# conveyor is used from src/ (PYTHONPATH) with the machine's own python3 (CUDA torch,
# torchvision with nvJPEG, timm, pytest): a .venv made here cannot travel (CPU torch, ~2 GB).
# Wheels in .whl/ (scripts/gpu_wheels.sh, run beforehand where pip works; carry .whl) are
# installed into /tmp/conveyor-site first: simplejpeg (the CPU decoders' fast path),
# webdataset and torchdata (S3's peers). Without them those parts run slower or are left out.
#
#   bash scripts/gpu_check.sh                   # tests h2d decode train scaling: <= 9 min
#   bash scripts/gpu_check.sh tests h2d decode  # some stages
#   bash scripts/gpu_check.sh smoke             # the same benchmark commands with --smoke:
#                                               # tiny, on the CPU (CI runs this)
#
# Each stage has a time limit, and all together at most GPU_CHECK_BUDGET_S seconds (default
# 540): a stage gets what is left, and is skipped under 30 s. Results go to $OUT (the device
# tool's folder) or ./gpu-results: machine.txt, tests.xml, one JSON-lines file per benchmark
# (written as each measurement ends, so a stage cut off keeps what it measured) and all.log:
# at most 7 files. Exit status 0 only if every stage asked for passed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
SITE=/tmp/conveyor-site
export PYTHONPATH="$PWD/src:$SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export BENCH_DATA_DIR=${BENCH_DATA_DIR:-/tmp/conveyor-bench-data}
RESULTS=${OUT:-gpu-results}
BUDGET=${GPU_CHECK_BUDGET_S:-540}
mkdir -p "$RESULTS"
LOG="$RESULTS/all.log"
stages=${*:-tests h2d decode train scaling}
status=0
# The suite turns warnings into errors; the GPU machine's torch is another version (2.11
# there, 2.13 in CI), whose deprecations are shown on the device, not failed on.
LENIENT="-W default::DeprecationWarning -W default::FutureWarning"

stage() {  # stage NAME SECONDS COMMAND...: run it under min(SECONDS, what the budget has left)
    local name=$1 limit=$2 start=$SECONDS left=$((BUDGET - SECONDS))
    shift 2
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -lt 30 ]; then
        echo "== $name: skipped, ${left} s of the ${BUDGET} s budget left" | tee -a "$LOG"
        status=1
        return
    fi
    echo "== $name (limit ${limit} s): $*" | tee -a "$LOG"
    timeout "$limit" "$@" 2>&1 | tee -a "$LOG"
    local code=${PIPESTATUS[0]}
    echo "== $name: exit $code in $((SECONDS - start)) s" | tee -a "$LOG"
    [ "$code" = 0 ] || status=1
}

if compgen -G ".whl/*.whl" >/dev/null; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" .whl/*.whl 2>&1 | tee -a "$LOG"
fi
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
  echo "cores $(nproc)"; uptime
  $PY - <<'EOF' 2>&1
import importlib, torch
print("python", __import__("sys").version.split()[0], "torch", torch.__version__,
      "cuda", torch.version.cuda, "available", torch.cuda.is_available())
for name in ("torchvision", "timm", "pynvml", "simplejpeg", "webdataset", "torchdata", "conveyor"):
    try:
        module = importlib.import_module(name)
        print(name, getattr(module, "__version__", "?"), getattr(module, "__file__", ""))
    except Exception as error:
        print(name, "missing:", error)
EOF
} | tee "$RESULTS/machine.txt" | tee -a "$LOG"

# The benchmarks' arguments; `smoke` runs the same commands with --smoke (tiny, on the CPU)
H2D="benchmarks/gpu_h2d.py --workers 8 --batches 30 --reps 3"
DECODE="benchmarks/gpu_decode.py --images 4096 --workers 8 --passes 2 --reps 3"
TRAIN="benchmarks/gpu_train.py --model resnet50 --steps 15 --warm 4 --conveyor-workers 6,12
    --torch-workers 4,6,8,10,12,14"
SCALING="benchmarks/scaling.py --workers 1,2,4,8,14 --reps 1 --s1-target-mb 200
    --s3-images 2048 --peers wds-pil,tdn-thread-pil"

if [ "$stages" != smoke ] && [ "${GPU_CHECK_ALLOW_CPU:-0}" != 1 ] &&
    ! $PY -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
    echo "no CUDA here: the GPU stages need it (smoke runs on the CPU;" \
        "GPU_CHECK_ALLOW_CPU=1 runs the rest anyway: tests skip, benchmarks exit 2)" | tee -a "$LOG"
    exit 3
fi
for name in $stages; do
    case $name in
    tests) stage tests 90 $PY -m pytest -m gpu tests/gpu tests/integration/test_docs.py \
        -q -p no:cacheprovider --junitxml="$RESULTS/tests.xml" $LENIENT ;;
    h2d) stage h2d 60 $PY $H2D --out "$RESULTS/h2d.jsonl" ;;
    decode) stage decode 75 $PY $DECODE --out "$RESULTS/decode.jsonl" ;;
    train) stage train 135 $PY $TRAIN --out "$RESULTS/train.jsonl" ;;
    scaling) stage scaling 200 $PY $SCALING --out "$RESULTS/scaling.jsonl" ;;
    smoke) for command in "$H2D" "$DECODE" "$TRAIN" "$SCALING"; do
            script=${command%%.py *}
            stage "smoke ${script#*/}" 120 $PY $command --smoke \
                --out "$RESULTS/smoke-${script#*/}.jsonl"
        done ;;
    *) echo "unknown stage $name (tests h2d decode train scaling smoke)" >&2; status=2 ;;
    esac
done
echo "== done in $SECONDS s, exit $status" | tee -a "$LOG"
exit $status
