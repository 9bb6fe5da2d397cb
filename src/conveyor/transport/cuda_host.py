"""Page-locking host memory with CUDA where it already lies (``cudaHostRegister``).

A registered range is *pinned*: tensors viewing it report ``is_pinned()``, so
``Tensor.pin_memory()`` returns them as they are and ``.to("cuda", non_blocking=True)`` copies
straight from them by DMA. conveyor registers the shared-memory slabs its worker processes
collate into (`conveyor.transport.pinned_slabs`), so a batch never passes through a second,
pinned copy. This module is the CUDA side only: a `HostRegistrar` protocol (so bookkeeping is
tested without a GPU) and its implementation over ``torch.cuda.cudart()``.

A registrar also makes *fences*: an event recorded on the current CUDA stream of the calling
thread. Registered memory has no caching allocator watching it (torch's pinned memory does:
it records an event for each asynchronous copy from a block and reuses the block only after
it), so before a worker may overwrite a released slab the main process waits for a fence
recorded when the slab's last view died: every copy the user enqueued from it by then, on
that stream, has finished.
"""

from __future__ import annotations

import contextlib
import os
from typing import Protocol

import torch

__all__ = [
    "ENV_REGISTER_SLABS",
    "CudaHostRegistrar",
    "Fence",
    "HostRegisterError",
    "HostRegistrar",
    "cuda_registrar",
]

ENV_REGISTER_SLABS = "CONVEYOR_REGISTER_SLABS"
"""``0`` turns registration off: ``pin_memory=True`` then copies each batch into pinned
memory in the pin thread, as torch does (for comparisons, or a driver that misbehaves)."""

_PORTABLE = 1  # cudaHostRegisterPortable: pinned for every CUDA context, not only the current


class HostRegisterError(RuntimeError):
    """CUDA refused to register (page-lock) a host range."""


class Fence(Protocol):
    """A point in a device stream's work: complete once everything enqueued before it is."""

    def query(self) -> bool:
        """True once complete; never blocks."""

    def synchronize(self) -> None:
        """Block until complete."""


class HostRegistrar(Protocol):
    """Registers host ranges with a device runtime; thread-safe."""

    def register(self, address: int, nbytes: int) -> None:
        """Page-lock ``[address, address + nbytes)``; `HostRegisterError` if refused."""

    def unregister(self, address: int) -> None:
        """Undo `register` of the range starting at ``address`` (never raises)."""

    def fence(self) -> Fence | None:
        """A fence on the calling thread's current stream (None: nothing to wait for)."""


class CudaHostRegistrar:
    """`HostRegistrar` over the CUDA runtime that torch loaded (``torch.cuda.cudart()``).

    Ranges are registered *portable*: pinned for every device of the process. A fence is a
    ``torch.cuda.Event`` recorded on the calling thread's current stream of its current device
    (where ``tensor.to("cuda", non_blocking=True)`` enqueues its copy).
    """

    def register(self, address: int, nbytes: int) -> None:
        cudart = torch.cuda.cudart()  # type: ignore[no-untyped-call]  # initialises CUDA here
        code = int(cudart.cudaHostRegister(address, nbytes, _PORTABLE))
        if code != 0:
            # The runtime also keeps this as the thread's "last error" (torch does not expose
            # cudaGetLastError to clear it); registration is not tried again after a failure,
            # and the thread that registers (the pin thread) launches no kernels.
            raise HostRegisterError(
                f"cudaHostRegister of {nbytes} bytes at {address:#x} failed: "
                f"{_error_name(cudart, code)} ({code})"
            )

    def unregister(self, address: int) -> None:
        # CUDA already torn down (interpreter exit): nothing left to undo
        with contextlib.suppress(Exception):
            torch.cuda.cudart().cudaHostUnregister(address)  # type: ignore[no-untyped-call]

    def fence(self) -> Fence | None:
        event = torch.cuda.Event()  # type: ignore[no-untyped-call]
        event.record(torch.cuda.current_stream())
        return event


def _error_name(cudart: object, code: int) -> str:
    try:
        return str(cudart.cudaGetErrorString(cudart.cudaError(code)))  # type: ignore[attr-defined]
    except Exception:
        return "unknown CUDA error"


def cuda_registrar() -> CudaHostRegistrar | None:
    """The registrar for a loader whose ``pin_memory=True`` pins (call only once pinning was
    found possible), or None where registration does not apply: no CUDA, another
    accelerator, or ``CONVEYOR_REGISTER_SLABS=0``. Does not initialise CUDA."""
    if os.environ.get(ENV_REGISTER_SLABS, "").strip() == "0":
        return None
    if not torch.cuda.is_available():
        return None
    accelerator = torch.accelerator.current_accelerator()
    if accelerator is None or accelerator.type != "cuda":
        return None
    return CudaHostRegistrar()
