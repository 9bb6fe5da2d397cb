"""loader.doctor() on tar shards read from a slow HTTP store one block at a time: the
``remote reads`` verdict, its read-ahead fix, and the predicted against the measured gain.

A real HTTP server on 127.0.0.1 (tests/integration/remote_servers.py) answers every
request ``--latency`` seconds late (its ``/slow/<seconds>/`` path). 16 shards of 16
``{jpg, cls}`` samples (60 kB each) are read by `TarShards` in 4 KiB blocks with
``RemoteOptions(read_ahead=1, read_ahead_max=1)``: a round trip for every block. Two
workers of each kind, ``batch_size=4``, a training step that blocks ``--step-ms``.
Needs conveyor[remote] (fsspec, aiohttp).

    python benchmarks/doctor_remote_reads.py --reps 3
"""

from __future__ import annotations

import argparse
import functools
import io
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from conveyor import DataLoader, TarShards
from conveyor.formats import ShardWriter
from conveyor.storage import RemoteOptions

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integration"))

from remote_servers import QuietServer, RangeHandler  # the tests' range-serving HTTP server

SHARDS, PER_SHARD, BLOCK = 16, 16, 4096


def _jpeg(seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 255, (32, 32, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=90)
    return out.getvalue()


@contextmanager
def _serving(root: Path) -> Iterator[str]:
    handler = type("Handler", (RangeHandler,), {"log": []})
    server = QuietServer(("127.0.0.1", 0), functools.partial(handler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _blocking(seconds: float) -> Callable[[Any], None]:
    def step(batch: Any) -> None:
        time.sleep(seconds)  # a GPU step: the loop waits, no CPU used

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--step-ms", type=float, default=4.0)
    parser.add_argument("--latency", type=float, default=0.03, help="seconds per request")
    parser.add_argument("--batches", type=int, default=32)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="doctor-remote-"))
    with ShardWriter(str(root / "part-%03d.tar"), max_count=PER_SHARD) as writer:
        for i in range(SHARDS * PER_SHARD):
            writer.write({"__key__": f"{i:06d}", "jpg": _jpeg(i), "cls": i})
    one_block = RemoteOptions(read_ahead=1, read_ahead_max=1)
    rows: dict[str, list[tuple[str, float, float, float]]] = {}
    with _serving(root) as url:
        urls = [f"{url}/slow/{args.latency}/part-{i:03d}.tar" for i in range(SHARDS)]
        for rep in range(args.reps):
            for worker_type in ("thread", "process"):
                shards = TarShards(urls, decode=None, block_size=BLOCK, remote=one_block)
                loader = DataLoader(shards, batch_size=4, num_workers=2, worker_type=worker_type)
                report = loader.doctor(_blocking(args.step_ms / 1e3), batches=args.batches)
                if rep == 0:
                    print(report, end="\n\n")
                measured = report.measured_gain if report.measured_gain is not None else 0.0
                row = (report.bottleneck, report.diagnosis.predicted_gain, measured)
                rows.setdefault(worker_type, []).append((*row, report.duration_s))
    print("| workers | verdict (of reps) | predicted gain | measured gain | ratio | doctor took |")
    print("|---|---|---|---|---|---|")
    for worker_type, runs in rows.items():
        right = sum(r[0] == "remote reads" for r in runs)
        predicted = statistics.median(r[1] for r in runs)
        measured = statistics.median(r[2] for r in runs)
        print(
            f"| {worker_type} | remote reads {right}/{len(runs)} | {predicted:+.0%} | "
            f"{measured:+.0%} | {(1 + predicted) / (1 + measured):.2f} | "
            f"{max(r[3] for r in runs):.1f} s |"
        )


if __name__ == "__main__":
    main()
