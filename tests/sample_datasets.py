"""Datasets and batch types shared by tests and benchmarks. Module level, so spawn/forkserver
workers can import them."""

from __future__ import annotations

import faulthandler
import io
import os
import random
import signal
import threading
import time
from typing import Any

import numpy as np
import torch


class Range:
    """Map-style without subclassing any Dataset class (duck typing, as torch allows)."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if not 0 <= i < self.n:
            raise IndexError(i)
        return i


class RandomDraws:
    """Each sample records what the worker's global RNGs produce: checks seeding parity."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[int, float, float, float]:
        return i, random.random(), float(torch.rand(())), float(np.random.rand())


class WorkerStamp:
    """Each sample says which worker made it and what get_worker_info() reported."""

    def __init__(self, n: int, get_worker_info: Any):
        self.n = n
        self.get_worker_info = get_worker_info

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        info = self.get_worker_info()
        return {
            "index": i,
            "worker": -1 if info is None else info.id,
            "num_workers": 0 if info is None else info.num_workers,
            "seed": 0 if info is None else info.seed,
            "pid": os.getpid(),
        }


class FailAt:
    """Raises ``exc_type`` for one index."""

    def __init__(self, n: int, bad: int, exc_type: type[Exception] = ValueError):
        self.n = n
        self.bad = bad
        self.exc_type = exc_type

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if i == self.bad:
            raise self.exc_type(f"bad sample {i}")
        return i


class DieAt:
    """The worker that fetches index ``bad`` ends itself: by signal, or with os._exit."""

    def __init__(self, n: int, bad: int, how: str):
        self.n = n
        self.bad = bad
        self.how = how

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if i == self.bad:
            if self.how == "exit":
                os._exit(7)
            # a deliberate crash: no faulthandler dump (pytest enables it, forks inherit it)
            faulthandler.disable()
            os.kill(os.getpid(), getattr(signal, self.how))
        return i


class BlockAt:
    """Fetching index ``bad`` blocks until the event is set (or forever for processes)."""

    def __init__(self, n: int, bad: int, event: threading.Event | None = None):
        self.n = n
        self.bad = bad
        self.event = event

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if i == self.bad:
            if self.event is not None:
                self.event.wait(30)
            else:
                time.sleep(3600)
        return i


class ShardedStream(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """Iterable-style stream of range(start, end), split between workers like torch's docs.

    Subclasses torch's IterableDataset and reads torch's get_worker_info() by default:
    conveyor must recognise both, as users switching imports keep such datasets. Thread
    workers are seen only by conveyor's get_worker_info (torch's is process-global).
    """

    def __init__(self, start: int, end: int, uneven: bool = False, get_worker_info: Any = None):
        self.start = start
        self.end = end
        self.uneven = uneven
        self.get_worker_info = get_worker_info or torch.utils.data.get_worker_info

    def __len__(self) -> int:
        return self.end - self.start

    def __iter__(self) -> Any:
        info = self.get_worker_info()
        if info is None:
            return iter(range(self.start, self.end))
        if self.uneven:
            # Worker w gets every item with item % num_workers == w: unequal lengths.
            return iter(range(self.start + info.id, self.end, info.num_workers))
        per = -(-(self.end - self.start) // info.num_workers)
        lo = self.start + info.id * per
        return iter(range(lo, min(lo + per, self.end)))


class Unsharded(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """Every worker yields the whole range: the classic duplication bug, on purpose."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Any:
        return iter(range(self.n))


class WithGetitems(Range):
    """Batched fetch through __getitems__; records that it was used."""

    def __getitems__(self, indices: list[int]) -> list[tuple[str, int]]:
        return [("batched", i) for i in indices]


class SelfIterating(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """An iterable dataset that is its own iterator: ``__iter__`` rewinds and returns self."""

    def __init__(self, n: int):
        self.n = n
        self.position = 0

    def __iter__(self) -> SelfIterating:
        self.position = 0
        return self

    def __next__(self) -> int:
        if self.position >= self.n:
            raise StopIteration
        self.position += 1
        return self.position - 1


class Nested:
    """Each sample is a nested tensor (rows of different lengths): no single strided view."""

    def __len__(self) -> int:
        return 6

    def __getitem__(self, i: int) -> torch.Tensor:
        rows = [torch.full((length, 3), float(i)) for length in (1, i + 2)]
        return torch.nested.nested_tensor(rows)


class FileList:
    """A file list as ImageFolder keeps one: ``samples`` is a plain list of (path, label).

    Each item also says what holds the records in this worker (``list`` for the user's
    list, ``RecordTable`` for conveyor's shared table) and the worker's pid.
    """

    def __init__(self, records: list[Any]):
        self.samples = records

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> tuple[Any, str, int]:
        return self.samples[i], type(self.samples).__name__, os.getpid()


def file_records(n: int) -> list[Any]:
    """``n`` records of several plain shapes (str, int, float, None, bytes, nested tuples)."""
    shapes = (
        lambda i: (f"/data/img_{i:08d}.jpg", i % 1000),
        lambda i: (f"/data/ünï/{i}.png", None, float(i) / 3, True),
        lambda i: (b"\x00raw" + bytes([i % 256]), (i, (str(i), -i))),
        lambda i: f"caption {i}",
        lambda i: i * 10**20,
    )
    return [shapes[i % len(shapes)](i) for i in range(n)]


class CountedStream(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """range(n) split between workers by stride, with state: the next value per consumer.

    ``state_dict()`` returns plain data (``extra`` adds whatever a test wants in it, e.g. a
    NumPy array, which is not plain)."""

    def __init__(self, n: int, extra: Any = None):
        self.n = n
        self.extra = extra
        self.next_value: int | None = None

    def __iter__(self) -> Any:
        import conveyor  # its get_worker_info sees thread workers too

        info = conveyor.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        start = worker if self.next_value is None else self.next_value
        self.next_value = None
        for value in range(start, self.n, workers):
            self.next_value = value + workers
            yield value
        self.next_value = None  # the next epoch starts over (a state saved here says so)

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"next": self.next_value}
        if self.extra is not None:
            state["extra"] = {"rng": self.extra}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.next_value = state["next"]


class WritesFile:
    """A pickle payload: unpickling it creates ``path`` (what a tampered checkpoint does)."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.path}",))


class Augmented:
    """Map-style: each sample draws an "augmentation" from its own generators."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        import conveyor

        rng = conveyor.sample_generators()
        noise = torch.rand(3, generator=rng.torch)
        jitter = rng.random.random() + float(rng.numpy.standard_normal())
        return torch.cat([torch.tensor([float(i), jitter]), noise])


class Frames:
    """A batch type that pins itself (SPEC §4): ``pin_memory()`` stacks and normalises the
    per-sample uint8 arrays into one float tensor (pinned where an accelerator exists), so
    the pin stage, which one thread does for every batch, does real work. The doctor's
    pin-thread scenario (tests/integration/test_doctor.py, benchmarks/doctor_scenarios.py).
    """

    def __init__(self, arrays: list[np.ndarray[Any, Any]]) -> None:
        self.arrays = arrays

    def pin_memory(self) -> torch.Tensor:
        for _ in self.arrays:
            spin(0.0015)  # Python work per sample (checks, a colour conversion)
        stacked = torch.from_numpy(np.stack(self.arrays)).float().div_(255)
        return stacked.pin_memory() if torch.cuda.is_available() else stacked


def spin(seconds: float) -> None:
    """Busy-wait: a Python CPU cost (a sleep would free the core)."""
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        pass


def _jpeg() -> bytes:
    from PIL import Image

    pixels = (np.random.default_rng(0).random((900, 1200, 3)) * 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=90)
    return out.getvalue()


class Photos:
    """The torchvision-style pipeline: decode the whole 1200x900 JPEG, then crop and
    resize (the doctor's crop-aware decode finding, in its test and its benchmark)."""

    def __init__(self, n: int) -> None:
        self.n, self.data = n, _jpeg()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        from PIL import Image

        image = Image.open(io.BytesIO(self.data)).convert("RGB")
        w, h = image.size
        crop = image.crop((w // 4, h // 4, 3 * w // 4, 3 * h // 4)).resize((224, 224))
        return np.array(crop)  # writable: collate makes a tensor of it
