"""Slabs registered as pinned memory in the main process (``pin_memory=True`` on CUDA).

`MainEnd` asks `PinnedSlabs.root` for a slab when it first maps it: a NumPy array over the
whole mapping, page-locked by a `HostRegistrar`. Each batch's token is then made over that
root through a memoryview (`token_over`), so a view of the batch keeps its token, the token
keeps the root, and the root alone keeps the mapping. Hence, in this order:

1. a batch's last view dies: its token's finalizer records a *fence* (`PinnedSlabs.fence`)
   and queues the release, which `MainEnd` sends only once the fence is complete (copies the
   user enqueued from the slab are done before its worker may overwrite it);
2. the main end drops the slab (retired by its worker, or the loader closed) and its last
   token is gone: the root's finalizer waits for the slab's last fence, then unregisters;
3. only then does the root drop the mapping (NumPy clears an array's weak references
   before it releases its base), and the memory is unmapped.

If a registration fails, `PinnedSlabs` warns once and registers nothing more; batches are
then copied into pinned memory by the pin thread, as without registration.
"""

from __future__ import annotations

import contextlib
import mmap
import warnings
import weakref
from typing import Any

import numpy as np

from conveyor.transport.cuda_host import ENV_REGISTER_SLABS, Fence, HostRegistrar

__all__ = ["HostRegisterWarning", "PinnedSlabs", "SlabRegistration", "token_over"]


class HostRegisterWarning(UserWarning):
    """Shared-memory slabs could not be registered as pinned memory; pinning copies instead."""


class SlabRegistration:
    """One registered slab: its range, and the fence of its latest release."""

    __slots__ = ("address", "fence", "nbytes")

    def __init__(self, address: int, nbytes: int) -> None:
        self.address = address
        self.nbytes = nbytes
        self.fence: Fence | None = None


def token_over(root: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """A fresh array over ``root`` for one batch: views made from it keep *it* alive (its
    base is a memoryview, not an array, so NumPy does not collapse their base to ``root``)."""
    return np.frombuffer(root.data, dtype=np.uint8)


class PinnedSlabs:
    """Registrations of one loader's slabs in the main process.

    ``root`` runs in the thread that decodes batches; ``fence`` in whichever thread drops a
    batch's last view; the unregistering finalizers in whichever thread drops a root's last
    reference. Counters are for tests and stats.
    """

    def __init__(self, registrar: HostRegistrar) -> None:
        self._registrar = registrar
        self.failure: str | None = None
        self.registered = 0  # slabs registered so far
        self.unregistered = 0  # ... and unregistered again
        self.registered_bytes = 0

    @property
    def active(self) -> bool:
        """False once a registration failed (no more are tried)."""
        return self.failure is None

    def root(self, mapping: mmap.mmap) -> tuple[np.ndarray[Any, Any], SlabRegistration | None]:
        """The root array of a newly mapped slab, registered if possible.

        The caller keeps the root, never ``mapping``: the root's death unregisters the slab
        and then unmaps it.
        """
        array = np.frombuffer(mapping, dtype=np.uint8)
        if self.failure is not None or array.nbytes == 0:
            return array, None
        address = int(array.__array_interface__["data"][0])
        try:
            self._registrar.register(address, array.nbytes)
        except Exception as exc:
            self.failure = str(exc)
            warnings.warn(
                f"conveyor: could not register shared-memory slabs as pinned memory ({exc}); "
                "pin_memory=True copies each batch into pinned memory instead (as torch "
                f"does). {ENV_REGISTER_SLABS}=0 turns registration off without this warning.",
                HostRegisterWarning,
                stacklevel=2,
            )
            return array, None
        registration = SlabRegistration(address, array.nbytes)
        self.registered += 1
        self.registered_bytes += array.nbytes
        finalizer = weakref.finalize(array, _unregister, self._registrar, registration, self)
        finalizer.atexit = False  # at exit CUDA may be gone; the process's end frees it all
        return array, registration

    def fence(self, registration: SlabRegistration | None) -> Fence | None:
        """A fence for a release of ``registration``'s slab (None: release at once)."""
        if registration is None:
            return None
        try:
            fence = self._registrar.fence()
        except Exception:  # a broken device: nothing can copy from the slab any more
            fence = None
        registration.fence = fence
        return fence


def _unregister(registrar: HostRegistrar, registration: SlabRegistration, owner: Any) -> None:
    """The root is dying (its mapping still exists): finish copies from it, unregister."""
    fence = registration.fence
    if fence is not None:
        with contextlib.suppress(Exception):  # a broken device: nothing copies any more
            fence.synchronize()
    registrar.unregister(registration.address)
    owner.unregistered += 1
    owner.registered_bytes -= registration.nbytes
