#!/usr/bin/env python
"""Scaling with worker count: S1 (transfer) and S3 (JPEG decode + crop) at 1..14 workers.

Runs the repository's own S1 and S3 scripts (benchmarks/s1_transfer.py and
benchmarks/s3_imagenet.py; the shared suite's scenarios, conveyor and torch side by side in
one process tree, interleaved) once per worker count, and prints the curves and each
curve's knee (the fewest workers reaching 90 % of its best). S3's peers run where their
packages import (WebDataset, torchdata; ``--peers`` picks some); the best peer is the fastest
of them at each count. Each result is appended to ``--out`` as soon as it is measured.

    python benchmarks/scaling.py --workers 1,2,4,8,14        # a 16-core machine
    python benchmarks/scaling.py --smoke                     # tiny, to see that it runs
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from gpu_common import machine

HERE = Path(__file__).resolve().parent
OURS = "conveyor-fast"
PEERS = {"torch-pil": None, "wds-pil": "webdataset", "tdl-pil": "torchdata",
         "tdn-thread-pil": "torchdata"}  # fmt: skip


def run(command: list[str], allow_failure: bool = False) -> str:
    """The command's stdout; its failure ends this script unless ``allow_failure`` (S3
    prints its measurements before its report: they are used even if the report fails)."""
    print("$ " + " ".join(command), file=sys.stderr, flush=True)
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    sys.stderr.write(done.stderr[-2000:])
    if done.returncode and not allow_failure:
        raise SystemExit(f"{command[1]} exited {done.returncode}")
    if done.returncode:
        print(
            f"({command[1]} exited {done.returncode}; its measurements are kept)", file=sys.stderr
        )
    return done.stdout


def s1(workers: list[int], args: argparse.Namespace) -> dict[int, dict[str, float]]:
    with tempfile.NamedTemporaryFile("r", suffix=".jsonl") as out:
        script = str(HERE / "s1_transfer.py")
        run([sys.executable, script, "--workers", ",".join(map(str, workers)),
             "--batch-sizes", str(args.s1_batch_size), "--variants", "tensor",
             "--reps", str(args.reps), "--target-mb", str(args.s1_target_mb),
             "--out", out.name])  # fmt: skip
        rows = [json.loads(line) for line in out.read().splitlines() if line.strip()]
    return {
        row["num_workers"]: {"conveyor": row["conveyor"], "torch": row["torch"]} for row in rows
    }


def s3(nw: int, pipelines: list[str], args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Per pipeline: median img/s and CPU seconds per 1,000 images of the process tree."""
    # one set of shards for every count (two per worker at the most workers): built once
    shards = 2 * max(2, *(int(n) for n in args.workers.split(",")))
    command = [sys.executable, str(HERE / "s3_imagenet.py"), "--num-workers", str(nw),
               "--pipelines", ",".join(pipelines), "--reps", str(args.reps),
               "--images", str(args.s3_images), "--shards", str(shards),
               "--passes", "1", "--batch-size", str(args.s3_batch_size), "--warm-batches",
               "2", "--psnr-draws", "5", "--image-size", args.image_size]  # fmt: skip
    stdout = run(command, allow_failure=True)
    runs: dict[str, list[dict[str, float]]] = {}
    for line in stdout.splitlines():
        if line.startswith("{") and '"pipeline"' in line:
            record = json.loads(line)
            runs.setdefault(record["pipeline"], []).append(record)
    return {
        name: {key: statistics.median(r[key] for r in records)
               for key in ("img_s", "cpu_s_per_kimg")}
        for name, records in runs.items()
    }  # fmt: skip


def emit(record: dict[str, Any], out: str | None) -> None:
    """One JSON line, appended to ``out`` as soon as it is measured (a run stopped by its
    time limit keeps what it measured)."""
    if out:
        with open(out, "a") as handle:
            handle.write(json.dumps(record) + "\n")


def chosen_peers(names: str) -> list[str]:
    """torch-pil (always: the table's torch column) and the other peers asked for (default:
    all) whose package imports here."""
    wanted = dict.fromkeys(["torch-pil", *(names.split(",") if names else PEERS)])
    unknown = [name for name in wanted if name not in PEERS]
    if unknown:
        raise SystemExit(f"unknown peers {unknown} (known: {', '.join(PEERS)})")
    return [p for p in wanted if PEERS[p] is None or importlib.util.find_spec(str(PEERS[p]))]


def knee(curve: dict[int, float]) -> int:
    if not curve:
        return 0
    best = max(curve.values())
    return min(n for n, value in curve.items() if value >= 0.9 * best)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--workers", default="1,2,4,8,14")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--s1-batch-size", type=int, default=256)
    parser.add_argument("--s1-target-mb", type=float, default=600)
    parser.add_argument("--s3-images", type=int, default=2000)
    parser.add_argument("--s3-batch-size", type=int, default=64)
    parser.add_argument("--image-size", default="500x375")
    parser.add_argument("--peers", default="", help="S3 peers, comma-separated (default: all)")
    parser.add_argument("--out", help="append JSON lines here (S1, then each S3 count, then all)")
    parser.add_argument("--smoke", action="store_true", help="tiny: does it run?")
    args = parser.parse_args()
    if args.smoke:
        args.workers, args.reps, args.s1_batch_size, args.s1_target_mb = "1,2", 1, 16, 20
        args.s3_images, args.s3_batch_size, args.image_size = 48, 8, "96x72"
    workers = [int(n) for n in args.workers.split(",")]
    peers = chosen_peers(args.peers)
    emit({"benchmark": "scaling", "machine": machine(), "args": vars(args), "peers": peers},
         args.out)  # fmt: skip
    transfer = s1(workers, args)
    emit({"s1": transfer}, args.out)
    decode: dict[int, dict[str, dict[str, float]]] = {}
    for nw in workers:
        decode[nw] = s3(nw, [OURS, *peers], args)
        emit({"s3_workers": nw, "s3": decode[nw]}, args.out)
    table: list[dict[str, Any]] = []
    print("| workers | S1 conveyor MB/s | S1 torch MB/s | S3 conveyor img/s | S3 torch img/s | "
          "S3 best peer img/s (which) |\n|---|---|---|---|---|---|")  # fmt: skip
    measured = [nw for nw in workers if OURS in decode[nw] and "torch-pil" in decode[nw]]
    for nw in workers:
        rates = {name: row["img_s"] for name, row in decode[nw].items()}
        if nw not in measured:  # its S3 run failed (said above): the S1 row alone
            s1_row = transfer[nw]
            print(f"| {nw} | {s1_row['conveyor']:.0f} | {s1_row['torch']:.0f} | - | - | - |")
            continue
        best = max((p for p in peers if p in rates), key=lambda p: rates[p], default="torch-pil")
        table.append({"workers": nw, "s1": transfer[nw], "s3": decode[nw], "best_peer": best})
        s1_row = transfer[nw]
        print(f"| {nw} | {s1_row['conveyor']:.0f} | {s1_row['torch']:.0f} | {rates[OURS]:.0f} "
              f"| {rates['torch-pil']:.0f} | {rates[best]:.0f} ({best}) |")  # fmt: skip
    knees = {
        "s1 conveyor": knee({n: transfer[n]["conveyor"] for n in workers}),
        "s1 torch": knee({n: transfer[n]["torch"] for n in workers}),
        "s3 conveyor": knee({n: decode[n][OURS]["img_s"] for n in measured}),
        "s3 torch": knee({n: decode[n]["torch-pil"]["img_s"] for n in measured}),
    }
    print("knees (fewest workers reaching 90 % of the curve's best): "
          + ", ".join(f"{k} {v}" for k, v in knees.items()))  # fmt: skip
    emit({"scaling": table, "knees": knees, "peers": peers}, args.out)


if __name__ == "__main__":
    main()
