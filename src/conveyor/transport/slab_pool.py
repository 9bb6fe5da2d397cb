"""A worker's slabs: which are free, which the main process holds, how many may exist.

Used by one worker process from one thread (not thread-safe). Lifecycle of a slab:
created (free) → taken by the batch being built → *in flight* once its batch is sent →
free again when the main process says every view of that batch is gone (``release``) →
reused; or retired (dropped here, announced to the main process) when a bigger slab is
needed and the pool is at its bound. See docs/design/transport.md.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable

import numpy as np
import torch

from conveyor.transport.options import SlabConfig
from conveyor.transport.slab import ShmSpaceError, create_slab, slab_name, unlink_quietly

__all__ = ["ALIGN_BYTES", "BatchArena", "Slab", "SlabPool"]

ALIGN_BYTES = 64  # every placement starts on a cache line: any dtype can view it


class Slab:
    """One mapped slab, as a worker sees it: a bump cursor over a uint8 view."""

    __slots__ = ("address", "array", "cursor", "id", "name", "size", "tensor")

    def __init__(self, slab_id: int, name: str, mapping: mmap.mmap):
        self.id = slab_id
        self.name = name
        self.size = len(mapping)
        self.array = np.frombuffer(mapping, dtype=np.uint8)  # holds the mapping alive
        self.tensor = torch.from_numpy(self.array)
        self.address = self.tensor.data_ptr()
        self.cursor = 0

    def fit(self, nbytes: int) -> int | None:
        """Reserve ``nbytes`` at the next aligned offset; None if they do not fit."""
        start = -(-self.cursor // ALIGN_BYTES) * ALIGN_BYTES
        if start + nbytes > self.size:
            return None
        self.cursor = start + nbytes
        return start


class SlabPool:
    """Free list, in-flight set and growth policy of one worker's slabs.

    At most ``config.slabs_per_worker`` slabs exist; past that, ``take`` returns None and
    the caller waits for a release (or gives up and pickles the batch). ``take`` also
    returns None when the byte budget or the tmpfs's free space forbids a new slab; the
    reason is kept in ``scarce`` for the main process to report.
    """

    def __init__(self, config: SlabConfig, worker_id: int):
        self._config = config
        self._worker_id = worker_id
        self._slabs: dict[int, Slab] = {}
        self._free: list[int] = []
        self._in_flight: set[int] = set()
        self._next_id = 0
        self.retired: list[int] = []  # retired since the main process was last told
        self.scarce: str | None = None  # why the last slab could not be made (space/budget)
        self.disabled = config.worker_budget_bytes == 0
        # Slabs are sized to the batch (whole pages): shared memory follows the bytes in
        # flight, as torch's does. Once batch sizes are seen to vary, new slabs get 1/8
        # more, so a slightly larger batch does not make a new slab every time.
        self.headroom = False

    @property
    def inline_max_bytes(self) -> int:
        return self._config.inline_max_bytes

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def total_bytes(self) -> int:
        return sum(slab.size for slab in self._slabs.values())

    def get(self, slab_id: int) -> Slab:
        return self._slabs[slab_id]

    def take(self, nbytes: int) -> Slab | None:
        """A free slab of at least ``nbytes`` (best fit), or a new one; None if neither."""
        if self.disabled:
            return None
        fitting = [i for i in self._free if self._slabs[i].size >= nbytes]
        if fitting:
            best = min(fitting, key=lambda i: self._slabs[i].size)
            self._free.remove(best)
            slab = self._slabs[best]
            slab.cursor = 0
            return slab
        for slab_id in [i for i in self._free if self._slabs[i].size < nbytes]:
            self._retire(slab_id)  # too small for what batches need now: give the memory back
        wanted = nbytes + nbytes // 8 if self.headroom else nbytes
        size = max(1, -(-wanted // mmap.PAGESIZE)) * mmap.PAGESIZE
        if not self._make_room(size):
            return None
        return self._create(size)

    def _make_room(self, size: int) -> bool:
        """Retire free (too small) slabs until the count bound and byte budget allow ``size``."""
        budget = self._config.worker_budget_bytes
        while len(self._slabs) >= self._config.slabs_per_worker or (
            budget is not None and self.total_bytes() + size > budget
        ):
            if not self._free:
                if len(self._slabs) < self._config.slabs_per_worker:
                    self.scarce = f"the budget of {budget} bytes of slabs per worker is used up"
                return False
            self._retire(min(self._free, key=lambda i: self._slabs[i].size))
        return True

    def _create(self, size: int) -> Slab | None:
        slab_id = self._next_id
        self._next_id += 1
        name = slab_name(self._config.prefix, self._worker_id, slab_id)
        try:
            mapping = create_slab(self._config.shm_dir, name, size)
        except ShmSpaceError as exc:
            self.scarce = exc.strerror or str(exc)
            return None
        except OSError as exc:  # no such directory, no permission, ...
            self.scarce = f"cannot create a slab in {self._config.shm_dir}: {exc}"
            return None
        slab = Slab(slab_id, name, mapping)
        self._slabs[slab_id] = slab
        return slab

    def _retire(self, slab_id: int) -> None:
        slab = self._slabs.pop(slab_id)
        self._free.remove(slab_id)
        unlink_quietly(os.path.join(self._config.shm_dir, slab.name))  # if never attached
        self.retired.append(slab_id)
        # The mapping goes when the last tensor viewing it does; never close it here.

    def give_back(self, slab_ids: list[int]) -> None:
        """Slabs that were taken but not sent: free again at once."""
        self._free.extend(i for i in slab_ids if i in self._slabs)

    def sent(self, slab_ids: list[int]) -> None:
        """Slabs whose batch went to the main process: in flight until released."""
        self._in_flight.update(slab_ids)

    def release(self, slab_ids: list[int]) -> None:
        """The main process dropped every view of these slabs: reuse them."""
        for slab_id in slab_ids:
            if slab_id in self._in_flight:
                self._in_flight.discard(slab_id)
                self._free.append(slab_id)

    def close(self) -> None:
        """Unlink every slab file still present (those the main process never attached)."""
        for slab in self._slabs.values():
            unlink_quietly(os.path.join(self._config.shm_dir, slab.name))
        self._slabs.clear()
        self._free.clear()
        self._in_flight.clear()


class BatchArena:
    """The slabs one batch is being built in: a bump allocator over one or more slabs.

    ``wait`` is called when no slab can be had but some are in flight; it returns True when
    a release may have arrived (try again) and False when the main process says none will
    come soon (give up: the batch is pickled instead). Not thread-safe.
    """

    def __init__(self, pool: SlabPool, wait: Callable[[], bool]):
        self._pool = pool
        self._wait = wait
        self._slabs: list[Slab] = []
        self._used = 0
        self.high_water_bytes = 0
        self.degraded = False

    def begin(self) -> None:
        """Start a new batch; slabs of a batch that was never sent become free again."""
        self.abort()

    def abort(self) -> None:
        self._pool.give_back([slab.id for slab in self._slabs])
        self._slabs = []
        self._used = 0
        self.degraded = False

    def place(self, nbytes: int) -> tuple[Slab, int] | None:
        """Room for ``nbytes`` in this batch's slabs: ``(slab, offset)``, or None (pickle it)."""
        if self._slabs:
            placed = self._fit(self._slabs[-1], nbytes)
            if placed is not None:
                return placed
            if self.high_water_bytes:  # a batch larger than one seen before: sizes vary
                self._pool.headroom = True
        if self.degraded:
            return None
        # A batch of a size not known yet grows geometrically (a slab as large as the batch
        # so far), so a batch of many tensors needs few slabs, never one per tensor.
        slab = self._acquire(max(nbytes, self.high_water_bytes - self._used, self._used))
        if slab is None:
            self.degraded = True
            return None
        self._slabs.append(slab)
        return self._fit(slab, nbytes)

    def _fit(self, slab: Slab, nbytes: int) -> tuple[Slab, int] | None:
        before = slab.cursor
        offset = slab.fit(nbytes)
        if offset is None:
            return None
        self._used += slab.cursor - before
        return slab, offset

    def _acquire(self, nbytes: int) -> Slab | None:
        pool = self._pool
        slab = pool.take(nbytes)
        while slab is None and pool.in_flight and self._wait():
            slab = pool.take(nbytes)
        return slab

    def allocate(self, numel: int, dtype: torch.dtype) -> torch.Tensor | None:
        """Collate's output allocator: a 1-D ``dtype`` tensor of ``numel`` inside a slab."""
        nbytes = numel * dtype.itemsize
        if nbytes <= self._pool.inline_max_bytes:
            return None
        placed = self.place(nbytes)
        if placed is None:
            return None
        slab, offset = placed
        return slab.tensor[offset : offset + nbytes].view(dtype)

    def locate(self, address: int, nbytes: int) -> tuple[int, int] | None:
        """``(slab_id, offset)`` if ``[address, address+nbytes)`` lies in this batch's slabs."""
        for slab in self._slabs:
            offset = address - slab.address
            if offset >= 0 and offset + nbytes <= slab.cursor:
                return slab.id, offset
        return None

    def finish(self, referenced: set[int]) -> list[int]:
        """The batch was sent; slabs it references go in flight, the rest are free again.

        Returns:
            The ids of the slabs now in flight.
        """
        sent = [slab.id for slab in self._slabs if slab.id in referenced]
        self._pool.sent(sent)
        self._pool.give_back([slab.id for slab in self._slabs if slab.id not in referenced])
        self.high_water_bytes = max(self.high_water_bytes, self._used)
        self._slabs = []
        self._used = 0
        self.degraded = False
        return sent
