"""Shared-memory slabs: files in a tmpfs (``/dev/shm``), mapped with ``mmap``.

Why files and ``mmap`` rather than ``multiprocessing.shared_memory``: on Python 3.11 every
``SharedMemory`` (even one that only attaches) registers with the resource tracker, which
then unlinks or warns about segments it does not own; we also need ``posix_fallocate``
(so a full tmpfs raises ``ENOSPC`` instead of killing the process with ``SIGBUS`` on first
touch), ``O_EXCL`` names that carry the owning process id, and no file descriptor kept open:
each function here closes its own descriptor as soon as the mapping exists. Before Python
3.13, ``mmap`` keeps one duplicate descriptor per mapping (``trackfd=False`` drops it from
3.13 on), so a process holds at most one descriptor per slab, however many tensors its
batches have.

A mapping stays valid after its file is unlinked; memory returns to the system when the
last mapping of an unlinked file goes away. Never call ``mmap.close()`` on a slab that
tensors may still view (``torch.frombuffer`` does not pin the export): drop references.
"""

from __future__ import annotations

import errno
import mmap
import os
import re
import sys
from typing import Any

__all__ = [
    "ShmSpaceError",
    "attach_slab",
    "create_slab",
    "free_bytes",
    "loader_prefix",
    "process_prefix",
    "reclaim_stale",
    "slab_name",
    "sweep",
    "unlink_quietly",
]

NAME_PREFIX = "conveyor-"
_OWNER = re.compile(r"^conveyor-(\d+)-([0-9a-f]+)-")
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
# Python 3.13+: do not keep a duplicate descriptor per mapping.
_MMAP_KWARGS: dict[str, Any] = {"trackfd": False} if sys.version_info >= (3, 13) else {}
MIB = 1 << 20


class ShmSpaceError(OSError):
    """The shared-memory directory has no room for a slab of the size asked for."""


def _pid_namespace() -> int:
    """This process's PID namespace (a pid means nothing outside it), 0 if unknown."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def process_prefix(pid: int | None = None) -> str:
    """Prefix of every slab name owned by process ``pid`` (default: this one).

    ``conveyor-<pid>-<pid namespace>-``: with ``docker --ipc=host`` containers share
    /dev/shm with processes whose pids they cannot see; the namespace tells them apart.
    """
    return f"{NAME_PREFIX}{os.getpid() if pid is None else pid}-{_pid_namespace():x}-"


def loader_prefix() -> str:
    """A fresh prefix for one loader: ``conveyor-<pid>-<pid namespace>-<random token>-``.

    The token keeps two loaders of one process apart, so closing one never touches the
    other's slabs.
    """
    return f"{process_prefix()}{os.urandom(4).hex()}-"


def slab_name(prefix: str, worker_id: int, slab_id: int) -> str:
    """The file name of slab ``slab_id`` of worker ``worker_id``; main and worker agree on it."""
    return f"{prefix}{worker_id}-{slab_id}"


def free_bytes(shm_dir: str) -> tuple[int, int]:
    """``(available, total)`` bytes of the file system holding ``shm_dir``."""
    stat = os.statvfs(shm_dir)
    return stat.f_bavail * stat.f_frsize, stat.f_blocks * stat.f_frsize


def _reserve_bytes(total: int) -> int:
    # Leave room for everyone else using the tmpfs (torch, NCCL, other loaders).
    return min(64 * MIB, total // 10)


def create_slab(shm_dir: str, name: str, size: int) -> mmap.mmap:
    """Create ``shm_dir/name`` with ``size`` bytes reserved, map it, close the descriptor.

    The caller owns the file: it must unlink it (or leave that to the main process's sweep).

    Raises:
        ShmSpaceError: too little free space (checked with ``statvfs`` first, then enforced
            by ``posix_fallocate``); nothing is left behind.
        FileExistsError: the name is taken.
    """
    available, total = free_bytes(shm_dir)
    if size + _reserve_bytes(total) > available:
        raise ShmSpaceError(
            errno.ENOSPC,
            f"{shm_dir} has {available // MIB} MiB free of {total // MIB} MiB; a "
            f"{size / MIB:.1f} MiB slab would leave less than the reserve",
        )
    path = os.path.join(shm_dir, name)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        _reserve(fd, size, shm_dir)
        return mmap.mmap(fd, size, flags=mmap.MAP_SHARED | _POPULATE, **_MMAP_KWARGS)
    except BaseException:
        unlink_quietly(path)
        raise
    finally:
        os.close(fd)


def _reserve(fd: int, size: int, shm_dir: str) -> None:
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise ShmSpaceError(
                errno.ENOSPC, f"{shm_dir} ran out of space reserving {size / MIB:.1f} MiB"
            ) from exc
        raise


def attach_slab(path: str) -> mmap.mmap:
    """Map an existing slab read-write and close its descriptor (the file is not unlinked)."""
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        return mmap.mmap(fd, size, flags=mmap.MAP_SHARED | _POPULATE, **_MMAP_KWARGS)
    finally:
        os.close(fd)


def unlink_quietly(path: str) -> bool:
    """Unlink ``path``; False if it was already gone."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def sweep(shm_dir: str, prefix: str) -> int:
    """Unlink every entry of ``shm_dir`` whose name starts with ``prefix``; returns how many."""
    try:
        names = os.listdir(shm_dir)
    except FileNotFoundError:
        return 0
    return sum(
        unlink_quietly(os.path.join(shm_dir, name)) for name in names if name.startswith(prefix)
    )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, owned by another user
    return True


def reclaim_stale(shm_dir: str) -> list[str]:
    """Unlink slabs left by processes that died without cleaning up (``SIGKILL``).

    Only names ``conveyor-<pid>-<namespace>-...`` from this PID namespace whose ``pid`` no
    longer exists are touched.

    Returns:
        The names removed.
    """
    try:
        names = os.listdir(shm_dir)
    except FileNotFoundError:
        return []
    removed = []
    dead: dict[int, bool] = {}
    namespace = f"{_pid_namespace():x}"
    for name in names:
        match = _OWNER.match(name)
        if match is None or match.group(2) != namespace:
            continue
        pid = int(match.group(1))
        if pid not in dead:
            dead[pid] = not _pid_alive(pid)
        if dead[pid] and unlink_quietly(os.path.join(shm_dir, name)):
            removed.append(name)
    return removed
