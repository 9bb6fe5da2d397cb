"""pin_memory=True on a machine with an accelerator: correctness, then speed against torch.

Checks (exit code 1 if any fails):
- every tensor of every batch is pinned (dict, namedtuple, custom type with pin_memory()),
  values are right, batches arrive in order;
- with process workers a thread named ``conveyor-pin-memory`` pins them, and it is gone
  once the iterator is closed (end of epoch, ``del``);
- a pinned batch copies to the device with ``non_blocking=True``.
Then S1-shaped batches (uint8 64x3x224x224) with pin_memory=True, conveyor and torch
interleaved: MB/s of loader + pin + H2D copy, medians and paired ratio.

    python benchmarks/pin_check.py            # exits 2 (skipped) with no accelerator
    python benchmarks/pin_check.py --reps 5 --batches 100
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import threading
import time
from typing import Any, NamedTuple

import torch
import torch.utils.data as tud

import conveyor

SHAPE = (3, 224, 224)


class Pair(NamedTuple):
    image: torch.Tensor
    label: int


class Custom:
    """A batch type with its own pin_memory(), as torch documents."""

    def __init__(self, data: torch.Tensor):
        self.data = data

    def pin_memory(self) -> Custom:
        return Custom(self.data.pin_memory())


def collate_custom(samples: list[Any]) -> dict[str, Any]:
    stacked = conveyor.default_collate([s.image for s in samples])
    return {"custom": Custom(stacked.float()), "pair": Pair(stacked, len(samples))}


class Images:
    def __init__(self, n: int):
        self.n = n
        self.pool = torch.randint(0, 255, (64, *SHAPE), dtype=torch.uint8)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Pair:
        image = self.pool[i % 64].clone()
        image.view(-1)[0] = i % 251
        return Pair(image, i)


def _pin_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "conveyor-pin-memory"]


def check_correctness(device: torch.device) -> list[str]:
    problems: list[str] = []
    loader = conveyor.DataLoader(
        Images(256), batch_size=16, num_workers=2, pin_memory=True, collate_fn=collate_custom
    )
    it = iter(loader)
    first = next(it)
    if len(_pin_threads()) != 1:
        problems.append(f"expected one pin thread, found {len(_pin_threads())}")
    for k, batch in enumerate([first, *it]):
        image = batch["pair"].image
        if not image.is_pinned() or not batch["custom"].data.is_pinned():
            problems.append(f"batch {k} not pinned")
        stamps = image.reshape(16, -1)[:, 0].tolist()
        if stamps != [(16 * k + j) % 251 for j in range(16)]:
            problems.append(f"batch {k} has the wrong samples")
        on_device = image.to(device, non_blocking=True)
        if not torch.equal(on_device.cpu(), image):
            problems.append(f"batch {k} differs after the H2D copy")
    del it, first
    gc.collect()
    if _pin_threads():
        problems.append("pin thread still running after the epoch")
    it = iter(loader)
    next(it)
    del it
    gc.collect()
    if _pin_threads():
        problems.append("pin thread still running after del")
    return problems


class Plain:
    def __init__(self, n: int):
        self.n = n
        self.pool = torch.randint(0, 255, (64, *SHAPE), dtype=torch.uint8)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.pool[i % 64]


def throughput(module: Any, device: torch.device, batches: int, bs: int) -> float:
    loader = module.DataLoader(
        Plain(bs * (batches + 10)), batch_size=bs, num_workers=2, pin_memory=True
    )
    it = iter(loader)
    for _ in range(6):
        next(it).to(device, non_blocking=True)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(batches):
        next(it).to(device, non_blocking=True)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    del it, loader
    return batches * bs * 150528 / seconds / 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    if not torch.accelerator.is_available():
        print(json.dumps({"skipped": "no accelerator: pinning cannot be checked here"}))
        return 2
    accelerator = torch.accelerator.current_accelerator()
    assert accelerator is not None
    device = torch.device(accelerator.type)
    torch.set_num_threads(1)
    problems = check_correctness(device)
    print(json.dumps({"check": "correctness", "ok": not problems, "problems": problems}))
    ours: list[float] = []
    theirs: list[float] = []
    for rep in range(args.reps):
        pair = [(conveyor, ours), (tud, theirs)]
        for module, sink in pair if rep % 2 == 0 else pair[::-1]:
            sink.append(throughput(module, device, args.batches, args.batch_size))
    ratio = statistics.median(a / b for a, b in zip(ours, theirs, strict=True))
    print(
        json.dumps(
            {
                "scenario": f"pin_memory bs{args.batch_size} nw2 + H2D non_blocking",
                "device": str(device),
                "conveyor_MB_s": statistics.median(ours),
                "torch_MB_s": statistics.median(theirs),
                "conveyor_over_torch": ratio,
                "reps": args.reps,
            }
        )
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
