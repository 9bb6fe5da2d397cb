"""Forking from the main process without handing its garbage to the child.

A forked child inherits every object of its parent, including cyclic garbage that the
parent's collector has not reached yet. When the child's collector frees that garbage, the
finalizers run *in the child*: a Ray ``ActorHandle`` or ``ObjectRef`` then calls into Ray's
C++ core, whose mutexes may have been held by one of the parent's threads at the fork (the
worker deadlocks) and whose sockets are the parent's (the child's RPCs reach the parent's
cluster as if the parent sent them, and Ray's driver aborts). Any finalizer that talks to
something outside the process (a connection pool, a file lock, a temporary file) does the
same kind of harm.

`garbage_kept_from_children` freezes the collector's generations around the fork
(``gc.freeze``): the child never collects what it inherited, the parent unfreezes at
once and collects its garbage itself. The child also never writes the collector's header of
an inherited object, so those pages stay shared (less copy-on-write in workers).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["garbage_kept_from_children"]


@contextlib.contextmanager
def garbage_kept_from_children() -> Iterator[None]:
    """Children forked inside this block never collect (or finalize) inherited objects.

    A no-op when the collector is off, or when objects are frozen already (the user's own
    ``gc.freeze``, which an ``unfreeze`` here would undo). Callers fork one loader at a
    time (``_SPAWNING``), so blocks never nest across conveyor's pools.
    """
    if not gc.isenabled() or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
