"""What the GPU benchmarks share: the device, CPU and GPU-busy meters, JSON lines, corpora.

Every GPU benchmark runs conveyor and torch.utils.data in one process tree, interleaved,
and has a ``--smoke`` mode that runs the same code on the CPU with tiny sizes (so a machine
without a GPU checks that the script still runs; no figure from it means anything).
"""

from __future__ import annotations

import io
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def pick_device(smoke: bool) -> torch.device:
    """CUDA for a real run; the CPU under ``--smoke``. A real run without CUDA exits 2."""
    if smoke:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        print("no CUDA here: run with --smoke to check the script on the CPU", file=sys.stderr)
        raise SystemExit(2)
    return torch.device("cuda")


def machine() -> dict[str, Any]:
    """What the figures ran on."""
    info: dict[str, Any] = {
        "cpus": len(os.sched_getaffinity(0)),
        "torch": torch.__version__,
        "load": os.getloadavg(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


def emit(record: dict[str, Any], out: str | None) -> None:
    """One JSON line to stdout, and appended to ``out``."""
    line = json.dumps(record, default=str)
    print(line, flush=True)
    if out:
        with open(out, "a") as handle:
            handle.write(line + "\n")


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


class TreeCpu:
    """CPU seconds used by this process and its children since `start` (psutil)."""

    def __init__(self) -> None:
        self._me = psutil.Process()
        self._start = 0.0

    def _now(self) -> float:
        total = 0.0
        for process in [self._me, *self._me.children(recursive=True)]:
            try:
                times = process.cpu_times()
            except psutil.Error:
                continue
            total += times.user + times.system
        return total

    def start(self) -> None:
        self._start = self._now()

    def seconds(self) -> float:
        return self._now() - self._start


def thread_cpu_s(native_id: int) -> float:
    """CPU seconds of one thread of this process (/proc/self/task/<tid>/stat)."""
    try:
        with open(f"/proc/self/task/{native_id}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def pin_thread() -> threading.Thread | None:
    """The loader's pin-memory thread running now (conveyor's or torch's), if any."""
    for thread in threading.enumerate():
        if "pin" in thread.name.lower() or "pin_memory" in str(getattr(thread, "_target", "")):
            return thread
    return None


class GpuBusy:
    """Samples the GPU's utilisation (NVML) every ``period_s`` while running."""

    def __init__(self, period_s: float = 0.05) -> None:
        self.period_s = period_s
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handle: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            index = torch.cuda.current_device() if torch.cuda.is_available() else 0
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self._nvml = pynvml
        except Exception:
            self._handle = None

    def __enter__(self) -> GpuBusy:
        if self._handle is not None:
            self._thread = threading.Thread(target=self._run, daemon=True, name="gpu-busy")
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            rates = self._nvml.nvmlDeviceGetUtilizationRates(self._handle)
            self.samples.append(float(rates.gpu))

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @property
    def percent(self) -> float | None:
        return statistics.mean(self.samples) if self.samples else None


def rates(images: int, seconds: float, cpu_s: float) -> dict[str, float]:
    """img/s, busy cores (CPU seconds per wall second) and img/s per busy core."""
    seconds = max(seconds, 1e-9)
    busy = max(cpu_s, 1e-3) / seconds
    return {"img_s": images / seconds, "busy_cores": busy, "img_s_per_busy_core": images / cpu_s
            if cpu_s > 0 else float("nan")}  # fmt: skip


def timed(batches: Iterator[Any], warm: int, measure: int, step: Callable[[Any], None]) -> float:
    """Seconds for ``measure`` steps after ``warm`` steps (CUDA synchronised at both ends)."""
    for _ in range(warm):
        step(next(batches))
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(measure):
        step(next(batches))
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start


# --------------------------------------------------------------------------- corpora
ODD_KINDS = ("cmyk", "progressive", "grey", "subsampling-444", "restart-markers")


def odd_jpeg(base: bytes, kind: str) -> bytes:
    """``base`` re-encoded as one of `ODD_KINDS` (what ImageNet's odd 1 % looks like)."""
    from PIL import Image

    image = Image.open(io.BytesIO(base)).convert("RGB")
    buffer = io.BytesIO()
    if kind == "cmyk":
        image.convert("CMYK").save(buffer, "JPEG", quality=90)
    elif kind == "progressive":
        image.save(buffer, "JPEG", quality=90, progressive=True)
    elif kind == "grey":
        image.convert("L").save(buffer, "JPEG", quality=90)
    elif kind == "subsampling-444":
        image.save(buffer, "JPEG", quality=90, subsampling=0)
    else:  # restart markers every row of MCUs
        image.save(buffer, "JPEG", quality=90, restart_marker_rows=1)
    return buffer.getvalue()


def corpus(n: int, size: tuple[int, int], odd_fraction: float, seed: int = 7) -> list[bytes]:
    """``n`` photographic JPEGs of ``size`` (quality 90), ``odd_fraction`` of them odd."""
    from s3_imagenet import make_photo

    rng = np.random.default_rng(seed)
    unique = [make_photo(rng, *size) for _ in range(min(n, 64))]
    blobs = [unique[i % len(unique)] for i in range(n)]
    odd_every = round(1 / odd_fraction) if odd_fraction else 0
    for index in range(0, n, odd_every) if odd_every else ():
        blobs[index] = odd_jpeg(blobs[index], ODD_KINDS[(index // odd_every) % len(ODD_KINDS)])
    return blobs


def write_shards(root: Path, blobs: list[bytes], per_shard: int) -> list[str]:
    """Tar shards of ``{"jpg", "cls"}`` samples (reused when already there)."""
    from conveyor.formats import ShardWriter

    manifest = root / f"manifest-{len(blobs)}-{per_shard}.json"
    if manifest.exists():
        shards: list[str] = json.loads(manifest.read_text())
        return shards
    root.mkdir(parents=True, exist_ok=True)
    with ShardWriter(str(root / "shard-%05d.tar"), max_count=per_shard) as writer:
        for i, blob in enumerate(blobs):
            writer.write({"__key__": f"{i:07d}", "jpg": blob, "cls": i % 1000})
    manifest.write_text(json.dumps(list(writer.shards)))
    return list(writer.shards)
