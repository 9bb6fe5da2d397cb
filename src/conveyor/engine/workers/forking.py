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
an inherited object, so those pages stay shared (less copy-on-write in workers). When the
user froze the heap already (``gc.freeze``, as the doctor advises) the parent cannot freeze
again without undoing theirs: the child then freezes what it inherited itself, first thing
after the fork (``os.register_at_fork``), before any of its code can trigger a collection.
That is what kept CUDA alive in workers: a ``torch.cuda.Event`` or CUDA tensor freed in a
forked child aborts it (``c10::cuda::ExchangeDevice``, SIGABRT).
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator

__all__ = ["garbage_kept_from_children"]

_children_freeze = False  # set while this process forks workers


def _freeze_in_child() -> None:
    if _children_freeze and gc.isenabled():
        gc.freeze()  # O(1): the generations are spliced, no object header is written


os.register_at_fork(after_in_child=_freeze_in_child)


@contextlib.contextmanager
def garbage_kept_from_children() -> Iterator[None]:
    """Children forked inside this block never collect (or finalize) inherited objects.

    A no-op when the collector is off, or when objects are frozen already (the user's own
    ``gc.freeze``, which an ``unfreeze`` here would undo). Callers fork one loader at a
    time (``_SPAWNING``), so blocks never nest across conveyor's pools.
    """
    global _children_freeze
    if not gc.isenabled():
        yield
        return
    ours = not gc.get_freeze_count()  # else the user's: the children freeze for themselves
    if ours:
        gc.freeze()
    _children_freeze = True
    try:
        yield
    finally:
        _children_freeze = False
        if ours:
            gc.unfreeze()
