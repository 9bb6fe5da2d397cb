"""What the data-order certificate costs per sample (conveyor.state.certificate).

Each delivered sample's identity is hashed and summed: map-style indices (a batch's list),
stream samples by ``__url__``/``__key__`` (TarShards, WebDataset), and stream positions.
Timed the way it runs: once per batch, over a batch of each size, median of repetitions.

    python benchmarks/certificate_cost.py
"""

from __future__ import annotations

import os
import statistics
import timeit
from functools import partial

from conveyor.state.certificate import digest_identities, digest_indices, digest_keyed


def per_sample_us(call: object, samples: int, number: int = 2000, repeat: int = 7) -> float:
    times = timeit.repeat(call, number=number, repeat=repeat)  # type: ignore[arg-type]
    return statistics.median(times) / number / samples * 1e6


def main() -> None:
    print(f"load: {os.getloadavg()}")
    for size in (1, 8, 32, 256):
        indices = list(range(10_000, 10_000 + size))
        keyed = [
            {"__key__": f"{i:08d}", "__url__": "s3://bucket/train/shard-000123.tar", "jpg": b""}
            for i in range(size)
        ]
        positions = range(5000, 5000 + size)
        rows = {
            "map-style indices": per_sample_us(partial(digest_indices, indices), size),
            "stream __url__/__key__": per_sample_us(partial(digest_keyed, keyed), size),
            "stream positions": per_sample_us(partial(digest_identities, positions), size),
        }
        cells = ", ".join(f"{name} {us:.3f} us" for name, us in rows.items())
        print(f"batch {size:4d}: {cells}")


if __name__ == "__main__":
    main()
