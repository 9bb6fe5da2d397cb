"""Ray workers vs process workers (conveyor and torch), side by side in one process tree.

Two loads, each run for every loader in rotating order, ``--reps`` times; medians:

* ``sleep``: a sample costs 10 ms of GIL-released waiting (``time.sleep``), so capacity
  scales with workers even on 2 cores: 8 workers can make at most 800 samples/s. Reports
  samples/s (after the first batch) against that ideal, and the time to the first batch
  (``iter()`` to the first batch: actor or process start-up included).
* ``images``: batches of 3x224x224 uint8 images (made once per worker, then returned);
  reports MB/s through Ray's object store (same node) and through conveyor's slabs.

The Ray "cluster" is a local ``ray.init`` on this machine (actors with ``num_cpus=0``).

    python benchmarks/ray_workers.py --reps 5
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import ray
import torch
import torch.utils.data as tud

import conveyor

SAMPLE_COST_S = 0.010
IMAGE_SHAPE = (3, 224, 224)


class Sleepy:
    """A sample is 10 ms of waiting that releases the GIL (I/O, a remote call)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        time.sleep(SAMPLE_COST_S)
        return i


class Images:
    """3x224x224 uint8 images; the pixels are made once per worker, so transfer dominates."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.image: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.image is None:
            self.image = torch.randint(0, 255, IMAGE_SHAPE, dtype=torch.uint8)
        return self.image


def make_loader(kind: str, dataset: Any, workers: int, batch_size: int) -> Any:
    options: dict[str, Any] = {
        "batch_size": batch_size,
        "num_workers": workers,
        "persistent_workers": True,
    }
    if kind == "torch process":
        return tud.DataLoader(dataset, **options)
    if kind == "conveyor process":
        return conveyor.DataLoader(dataset, **options)
    return conveyor.DataLoader(
        dataset, worker_type="ray", ray_remote_args={"num_cpus": 0}, **options
    )


def run_once(loader: Any) -> tuple[float, float, int, int]:
    """(seconds to the first batch of a fresh loader; then, over a second epoch on the same
    persistent workers: seconds, samples, bytes)."""
    started = time.perf_counter()
    for _ in loader:
        first = time.perf_counter() - started
        break
    for _ in loader:  # the rest of the workers start: warm-up, not measured
        pass
    samples = nbytes = 0
    started = time.perf_counter()
    for batch in loader:
        samples += len(batch)
        nbytes += batch.numel() * batch.element_size()
    elapsed = time.perf_counter() - started
    iterator = getattr(loader, "_iterator", None)
    if iterator is not None:
        iterator._shutdown_workers()
    return first, elapsed, samples, nbytes


KINDS = ["conveyor ray", "conveyor process", "torch process"]


def measure(
    name: str, make: Callable[[str], Any], reps: int, rate: Callable[[tuple[float, ...]], float]
) -> dict[str, tuple[float, float]]:
    """Per kind: medians of (first batch s, rate); kinds rotate each repetition."""
    firsts: dict[str, list[float]] = {k: [] for k in KINDS}
    rates: dict[str, list[float]] = {k: [] for k in KINDS}
    for rep in range(reps):
        order = KINDS[rep % len(KINDS) :] + KINDS[: rep % len(KINDS)]
        for kind in order:
            first, rest, samples, nbytes = run_once(make(kind))
            firsts[kind].append(first)
            rates[kind].append(rate((rest, samples, nbytes)))
            print(
                f"  {name} rep {rep} {kind:17s} first {first:6.2f} s  rate {rates[kind][-1]:8.1f}"
            )
    return {k: (statistics.median(firsts[k]), statistics.median(rates[k])) for k in KINDS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--samples", type=int, default=1600, help="sleep load, per epoch")
    parser.add_argument("--images", type=int, default=1024, help="images load, per epoch")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # torch's "more workers than CPUs" warning
    ray.init(include_dashboard=False, log_to_driver=False)
    ideal = args.workers / SAMPLE_COST_S

    def sleep_rate(r: tuple[float, ...]) -> float:
        return r[1] / r[0]

    def bytes_rate(r: tuple[float, ...]) -> float:
        return r[2] / r[0] / 2**20

    sleep = measure(
        "sleep",
        lambda kind: make_loader(kind, Sleepy(args.samples), args.workers, 8),
        args.reps,
        sleep_rate,
    )
    images = measure(
        "images",
        lambda kind: make_loader(kind, Images(args.images), 2, 32),
        args.reps,
        bytes_rate,
    )
    ray.shutdown()
    print(f"\n{args.workers} workers, 10 ms GIL-released samples (ideal {ideal:.0f}/s), medians:")
    print("| loader | samples/s | of ideal | first batch s | 3x224x224 uint8 MB/s (2 workers) |")
    print("|---|---|---|---|---|")
    for kind in KINDS:
        first, rate = sleep[kind]
        print(f"| {kind} | {rate:.0f} | {rate / ideal:.2f} | {first:.2f} | {images[kind][1]:.0f} |")


if __name__ == "__main__":
    main()
