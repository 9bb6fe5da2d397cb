"""The README's main job: write an image dataset as tar shards, stream it, train on it.

1. Writes ``--samples`` synthetic JPEG images with their labels into WebDataset-style tar
   shards in a temporary directory (`ShardWriter`). The class is the quadrant that holds a
   light square on a noisy background of random colour: enough to learn over a few epochs
   (loss ~1.0 after the first, ~0.1 after the third), not so little that one epoch learns
   it all.
2. Streams them with ``conveyor.DataLoader(num_workers=2)`` through `TarShards`: shard and
   buffer shuffling, JPEG decode, random crop, batching; every worker reads whole shards.
3. Trains a tiny CNN for a few epochs and prints loss, accuracy and loader throughput,
   then removes the temporary directory.

Run with ``conveyor demo`` (or ``python -m conveyor.demo``) ``[--num-workers N] [--epochs E]
[--samples S]``; it needs Pillow (``pip install conveyor[image]``).
"""

from __future__ import annotations

import argparse
import io
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from conveyor import DataLoader
from conveyor.datapipes.iter.shards import TarShards
from conveyor.formats import ShardWriter

CLASSES = 4


def _jpeg(label: int, side: int, rng: np.random.Generator) -> bytes:
    """A noisy background of random colour with a lighter square (side / 5) somewhere in
    quadrant ``label`` (0: top left, 1: top right, 2: bottom left, 3: bottom right)."""
    from PIL import Image

    background = rng.integers(0, 160, 3)
    pixels = np.clip(background + rng.integers(-60, 60, (side, side, 3)), 0, 255)
    half, square = side // 2, max(1, side // 5)
    top = (label // 2) * half + int(rng.integers(0, max(1, half - square)))
    left = (label % 2) * half + int(rng.integers(0, max(1, half - square)))
    pixels[top : top + square, left : left + square] = rng.integers(120, 256, 3)
    buffer = io.BytesIO()
    Image.fromarray(pixels.astype(np.uint8)).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def write_dataset(directory: str, samples: int, side: int, per_shard: int) -> list[str]:
    """Synthetic labelled JPEGs in tar shards under ``directory``; returns the shard paths."""
    rng = np.random.default_rng(0)
    with ShardWriter(f"{directory}/train-%04d.tar", max_count=per_shard) as writer:
        for index in range(samples):
            label = int(rng.integers(0, CLASSES))
            writer.write({"__key__": f"{index:06d}", "jpg": _jpeg(label, side, rng), "cls": label})
    return writer.shards


class RandomCrop:
    """Picklable: a random ``size`` x ``size`` crop of the CHW uint8 image, with the label."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __call__(self, sample: dict[str, Any]) -> tuple[torch.Tensor, int]:
        image: torch.Tensor = sample["jpg"]
        top = random.randint(0, image.shape[1] - self.size)
        left = random.randint(0, image.shape[2] - self.size)
        return image[:, top : top + self.size, left : left + self.size], sample["cls"]


def tiny_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2),
        nn.LeakyReLU(0.1),  # plain ReLU units died at times: the loss stayed at ln 4
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(8 * 16, CLASSES),
    )


def train_epoch(
    loader: DataLoader[Any], model: nn.Module, optimizer: torch.optim.Optimizer
) -> dict[str, float]:
    """One pass; returns samples, loss, accuracy, seconds and the share spent waiting."""
    seen = correct = 0
    loss_sum = wait_s = 0.0
    start = ready = time.perf_counter()
    for images, labels in loader:
        wait_s += time.perf_counter() - ready
        logits = model(images.float().div_(255))
        loss = nn.functional.cross_entropy(logits, labels)
        optimizer.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        seen += len(labels)
        loss_sum += loss.item() * len(labels)
        correct += int((logits.argmax(1) == labels).sum())
        ready = time.perf_counter()
    seconds = time.perf_counter() - start
    return {
        "samples": seen,
        "loss": loss_sum / seen,
        "accuracy": correct / seen,
        "seconds": seconds,
        "wait": wait_s / seconds,
    }


DESCRIPTION = (
    "Write synthetic JPEGs into tar shards, stream them with worker processes "
    "(decode, random crop, batch), train a tiny CNN, print throughput."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's options (shared by ``conveyor demo`` and ``python -m conveyor.demo``)."""
    parser.add_argument("--num-workers", type=int, default=2, help="DataLoader workers")
    parser.add_argument("--batch-size", type=int, default=32, help="images per batch")
    parser.add_argument("--samples", type=int, default=1024, help="images to write")
    parser.add_argument("--side", type=int, default=64, help="image side in pixels")
    parser.add_argument("--crop", type=int, default=56, help="random crop side in pixels")
    parser.add_argument("--per-shard", type=int, default=128, help="samples per tar shard")
    parser.add_argument("--epochs", type=int, default=3, help="training epochs")


def require_pillow() -> None:
    """Fail before any work, with what to install, when Pillow is missing."""
    try:
        import PIL  # noqa: F401
    except ImportError as error:
        raise ImportError(
            "the demo writes and decodes JPEGs and needs Pillow: pip install conveyor[image]"
        ) from error


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conveyor.demo", description=DESCRIPTION)
    add_arguments(parser)
    try:
        return run(parser.parse_args(argv))
    except (ValueError, ImportError) as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 1


def check_arguments(args: argparse.Namespace) -> None:
    """`ValueError` naming the option, before any work (not a traceback from a worker)."""
    at_least = {"samples": 1, "side": 8, "crop": 1, "per_shard": 1, "batch_size": 1}
    at_least |= {"num_workers": 0, "epochs": 0}
    for name, low in at_least.items():
        if getattr(args, name) < low:
            raise ValueError(f"--{name.replace('_', '-')} must be at least {low}")
    if args.crop > args.side:
        raise ValueError(
            f"--crop {args.crop} is larger than the images (--side {args.side}): "
            "the random crop must fit inside them"
        )


def run(args: argparse.Namespace) -> int:
    """Run the demo with parsed options (`add_arguments`); returns the exit status 0.

    Raises `ValueError` for options it cannot run with, `ImportError` without Pillow."""
    check_arguments(args)
    require_pillow()
    torch.manual_seed(0)
    torch.set_num_threads(1)  # the workers use the other cores
    with tempfile.TemporaryDirectory(prefix="conveyor-demo-") as directory:
        start = time.perf_counter()
        print(f"conveyor demo: writing {args.samples} JPEGs into tar shards ...", flush=True)
        shards = write_dataset(directory, args.samples, args.side, args.per_shard)
        print(
            f"conveyor demo: wrote {args.samples} JPEGs ({args.side}x{args.side}) into "
            f"{len(shards)} tar shards in {time.perf_counter() - start:.2f} s"
        )
        pipe = TarShards(f"{directory}/train-*.tar", shuffle=True, shuffle_buffer=256)
        loader = DataLoader(
            pipe.map(RandomCrop(args.crop)),
            batch_size=args.batch_size,
            num_workers=args.num_workers,
        )
        print(
            f"streaming: decode + random crop {args.crop} + batch {args.batch_size}, "
            f"{args.num_workers} worker processes, each reading whole shards"
        )
        model = tiny_model()
        optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
        for epoch in range(args.epochs):
            stats = train_epoch(loader, model, optimizer)
            print(
                f"epoch {epoch}: {stats['samples']:.0f} images in {stats['seconds']:.2f} s = "
                f"{stats['samples'] / stats['seconds']:,.0f} img/s, loss {stats['loss']:.3f}, "
                f"accuracy {stats['accuracy']:.0%}, waiting for data {stats['wait']:.0%}"
            )
    print("done; temporary shards removed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
