"""Batches delivered on the device: ``conveyor.to_device(loader, "cuda", depth=2)``.

A wrapper rather than a DataLoader argument: it keeps ``DataLoader``'s signature torch's
(frameworks rebuild loaders from it and move batches themselves), it wraps any loader
(``DataLoader``, ``StatefulDataLoader``, a DataPipe), and it is used where the device is
known, next to the training loop. The copies run in `conveyor.engine.loop.device_prefetch`.
Guide: docs/guide/gpu.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch

from conveyor.engine.loop.device_prefetch import DevicePrefetcher, EpochProgress, transfer_for

__all__ = ["DeviceLoader", "to_device"]


class DeviceLoader:
    """Iterates ``loader``'s batches on ``device``, their copies started ``depth`` ahead.

    Args:
        loader: Any iterable of batches; with ``state_dict``/``load_state_dict`` (conveyor's
            loaders) the wrapper is checkpointable too.
        device: ``"cuda"``, ``"cuda:1"``, a ``torch.device``, or ``"cpu"`` (the same
            prefetching without streams: CPU-only runs and tests).
        depth: How many batches are copied ahead of the one in use (0: none). With CUDA the
            copies run on a side stream and overlap the training step; 2 is plenty when the
            loader keeps up.
        non_blocking: Asynchronous copies (they need pinned host memory, which
            ``pin_memory=True`` gives; pageable batches are copied synchronously, with one
            warning).

    Each batch's tensors (in dicts, lists, tuples, namedtuples, dataclasses, and objects
    with a ``to()`` method) arrive on ``device``, safe to use on the current stream. The
    wrapper starts no thread: batches are pulled from the loader in the caller's thread.

    ``state_dict()`` counts only batches delivered by the wrapper: batches it has pulled
    from the loader and not yet delivered are not, so resuming yields exactly the batches
    the training loop has not seen.

    Raises:
        RuntimeError: ``device`` is CUDA and CUDA is not available (the message says what
            to do instead).
        ValueError: ``depth`` is negative, or ``device`` is neither CUDA nor the CPU.
    """

    def __init__(
        self,
        loader: Iterable[Any],
        device: str | int | torch.device = "cuda",
        depth: int = 2,
        non_blocking: bool = True,
    ) -> None:
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 0:
            raise ValueError(f"depth should be an int >= 0, but got depth={depth!r}")
        self.loader = loader
        self.depth = depth
        self._transfer = transfer_for(device, non_blocking)
        self.device = self._transfer.device
        self._epoch_start: Any = None  # the loader's state when the current epoch began
        self._progress: EpochProgress | None = None  # of the current (or last) epoch

    def __iter__(self) -> Iterator[Any]:
        source = iter(self.loader)
        self._epoch_start = self._loader_state()  # nothing delivered in this epoch yet
        self._progress = EpochProgress()
        return DevicePrefetcher(
            source,
            self._transfer,
            self.depth,
            self._loader_state if self._stateful else None,
            self._progress,
        )

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    @property
    def _stateful(self) -> bool:
        return callable(getattr(self.loader, "state_dict", None))

    def _loader_state(self) -> Any:
        return self.loader.state_dict() if self._stateful else None  # type: ignore[attr-defined]

    def state_dict(self) -> Any:
        """The wrapped loader's state after the last batch this wrapper delivered.

        Raises:
            TypeError: the wrapped loader has no ``state_dict``.
        """
        if not self._stateful:
            raise TypeError(f"{type(self.loader).__name__} has no state_dict() to checkpoint")
        progress = self._progress
        if progress is None or progress.finished:
            return self._loader_state()
        return progress.state if progress.delivered else self._epoch_start

    def load_state_dict(self, state_dict: Any) -> None:
        """``loader.load_state_dict(state_dict)``: the next ``iter()`` resumes from it."""
        if not callable(getattr(self.loader, "load_state_dict", None)):
            raise TypeError(f"{type(self.loader).__name__} has no load_state_dict()")
        self._progress = None
        self.loader.load_state_dict(state_dict)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> Any:
        """The wrapped loader's attributes (``dataset``, ``batch_size``, ``sampler``, ...)."""
        if name.startswith("__") or name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __repr__(self) -> str:
        return f"DeviceLoader({self.loader!r}, device={str(self.device)!r}, depth={self.depth})"


def to_device(
    loader: Iterable[Any],
    device: str | int | torch.device = "cuda",
    *,
    depth: int = 2,
    non_blocking: bool = True,
) -> DeviceLoader:
    """``loader``'s batches delivered on ``device``, copied ``depth`` batches ahead on a side
    stream: ``for batch in conveyor.to_device(loader, "cuda"): ...``.

    Args:
        loader: Any iterable of batches (conveyor's loaders are checkpointable through it).
        device: ``"cuda"``, ``"cuda:N"``, a ``torch.device``, or ``"cpu"``.
        depth: Batches copied ahead of the one in use.
        non_blocking: Asynchronous copies (from pinned memory: ``pin_memory=True``).

    Returns:
        A `DeviceLoader` (iterable, ``len()``, ``state_dict()``/``load_state_dict()``).
    """
    return DeviceLoader(loader, device, depth, non_blocking)
