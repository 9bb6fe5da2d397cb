"""Throttles heard across a job's processes: the last throttle time of each host.

Each process keeps its own limit and pace per host (`host_limits`, `host_pace`), so with
process workers every worker used to learn of a throttling store only from its own 429s:
after one worker was throttled, the others went on asking at full speed, block by block,
and paid the throttles themselves (S7 at scale: 1.3-1.5x the requests a shard needs, against
1.0x with thread workers, which share one limit). A throttle is noted on this board, and a
process that reads a newer one than it knew cuts its own pace once and asks larger ranges,
as if it had been throttled itself.

Which processes share a board:

- a process and the workers it forks: an anonymous shared mapping, made when this module
  is first imported (in the loader's process, before workers fork);
- the ranks of a ``torchrun`` job on one machine (separate process trees, which started
  their first windows within the same fraction of a second and each paid its own burst of
  throttles): a file of this user's (``<tempdir>/conveyor-<uid>/throttles``, 1 KiB, made
  once and reused by every job), in which the job's slots are keyed by its
  ``TORCHELASTIC_RUN_ID``; the ranks' forked workers share it too. Where the file cannot be
  made safely (a folder of someone else's, a read-only disk) the anonymous board is used.

Workers started by ``spawn`` outside ``torchrun`` make their own board (nothing shared).

One slot per (job, host) hash (64 slots): the hash and the time (``time.monotonic()``, the
machine's clock since boot, the same in every process) of its last throttle. Reads and
writes are not atomic across processes; a torn or colliding slot, or one left by a boot
before, can only make a process miss a throttle or slow down once for nothing, never read
wrong data: a time in the future is no throttle.
"""

from __future__ import annotations

import mmap
import os
import stat
import struct
import tempfile
import time
import zlib

__all__ = ["BOARD_FILE_NAME", "forget_all", "last_throttle", "note_throttle"]

BOARD_FILE_NAME = "throttles"
_SLOTS = 64
_SLOT = struct.Struct("<Qd")  # the key's hash + 1 (0: empty), the time of its last throttle
_SIZE = _SLOTS * _SLOT.size
_RUN_ID = "TORCHELASTIC_RUN_ID"  # set by torchrun, the same for every rank of a job


def _board_file() -> str:
    """This user's board file, in a folder only this user can write (made if need be)."""
    folder = os.path.join(tempfile.gettempdir(), f"conveyor-{os.getuid()}")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    found = os.lstat(folder)
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o022:
        raise PermissionError(f"{folder} is not a folder of this user's alone")
    return os.path.join(folder, BOARD_FILE_NAME)


def _job_board() -> mmap.mmap:
    """The board shared by the ranks of this torchrun job (a mapped file)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    descriptor = os.open(_board_file(), flags, 0o600)
    try:
        if os.fstat(descriptor).st_size < _SIZE:
            os.ftruncate(descriptor, _SIZE)  # zeros: empty slots (two ranks may both do it)
        return mmap.mmap(descriptor, _SIZE)
    finally:
        os.close(descriptor)  # the mapping keeps the file


def _open_board() -> tuple[mmap.mmap, str]:
    """The board and the job's key prefix ("" for a process tree's own board)."""
    run_id = os.environ.get(_RUN_ID)
    if run_id:
        try:
            return _job_board(), f"{run_id}\0"
        except (OSError, ValueError):
            pass
    return mmap.mmap(-1, _SIZE), ""  # MAP_SHARED: forked children share it


_board, _job = _open_board()


def _place(host: str) -> tuple[int, int]:
    key = zlib.crc32(f"{_job}{host}".encode()) + 1
    return key, (key % _SLOTS) * _SLOT.size


def note_throttle(host: str) -> float:
    """``host`` throttled a request now; returns the time noted."""
    key, offset = _place(host)
    now = time.monotonic()
    _SLOT.pack_into(_board, offset, key, now)
    return now


def last_throttle(host: str) -> float | None:
    """When a process of this job last heard ``host`` throttle (None: never)."""
    key, offset = _place(host)
    stored, when = _SLOT.unpack_from(_board, offset)
    if stored != key or not 0.0 <= when <= time.monotonic():
        return None  # another key's slot, or a time of an earlier boot
    return float(when)


def forget_all() -> None:
    """Clear the board (benchmarks: each run starts as a fresh job would)."""
    _board[:] = bytes(_SIZE)
