"""Collate output buffers for loading in the calling process (``num_workers=0``), reused.

A fresh 38 MB batch costs a page fault per 4 KiB page (the kernel zeroes every page), which
holds a batch-256 image stack to ~1.3 GB/s against ~10 GB/s for a copy into warm memory
(docs/benchmarks.md, S1). `RecycledBuffers.allocate` is a collate output allocator
(`conveyor.collate.set_output_allocator`) that hands out buffers whose pages are already
mapped, the way worker processes reuse their shared-memory slabs.

A buffer is reused only once nothing refers to its data any more: every tensor handed out is
a view of a NumPy array made for that batch alone (the *token*), and a ``weakref.finalize``
on the token returns the buffer to the free list when the last view dies. Batches a user
keeps stay intact; a loop that drops each batch before the next one cycles two buffers.
Safe from any thread: the free list is a deque (atomic append and pop) and the finalizer
may run wherever the last view dies.
"""

from __future__ import annotations

import weakref
from collections import deque

import numpy as np
import torch

__all__ = ["RecycledBuffers"]

MIN_BYTES = 1 << 20  # smaller outputs come cheaply from the heap (no fresh pages)


class RecycledBuffers:
    """A free list of byte buffers for collate's big outputs.

    Args:
        min_bytes: Requests below this size are declined (the stack allocates normally).
        keep: Most free buffers kept; a released buffer beyond that is dropped.
    """

    def __init__(self, min_bytes: int = MIN_BYTES, keep: int = 4):
        self._min_bytes = min_bytes
        self._keep = keep
        self._free: deque[bytearray] = deque()

    def allocate(self, numel: int, dtype: torch.dtype) -> torch.Tensor | None:
        """A 1-D ``dtype`` tensor of ``numel`` elements in a reused buffer, or None."""
        nbytes = numel * dtype.itemsize
        if nbytes < self._min_bytes:
            return None
        backing = self._take(nbytes)
        token = np.frombuffer(backing, dtype=np.uint8)  # views of it keep it alive
        weakref.finalize(token, self._release, backing).atexit = False
        return torch.from_numpy(token[:nbytes]).view(dtype)

    @property
    def free_buffers(self) -> int:
        """Buffers waiting for reuse now (tests)."""
        return len(self._free)

    def _take(self, nbytes: int) -> bytearray:
        """A free buffer that fits without wasting over half of it, else a new one."""
        for _ in range(len(self._free)):
            try:
                backing = self._free.popleft()
            except IndexError:
                break
            if nbytes <= len(backing) <= 2 * nbytes:
                return backing
            self._release(backing)  # back at the end; another size may want it
        return bytearray(nbytes)

    def _release(self, backing: bytearray) -> None:
        if len(self._free) < self._keep:
            self._free.append(backing)
