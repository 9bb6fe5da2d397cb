"""Bytes of /dev/shm a process tree holds, counted per file (inode), for torch and conveyor alike.

torch unlinks its segments at once and passes descriptors; conveyor unlinks its slabs when the
main process maps them. Listing /dev/shm therefore sees neither, and the tmpfs's own counter
is shared with every other process on the machine. This module counts, for one process and
its descendants, every /dev/shm file they keep open or mapped (deleted or not), once per
inode, by its allocated blocks: what the tmpfs is really holding for them.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["shm_bytes_held"]

_SHM_PREFIX = "/dev/shm/"


def _descendants(pid: int) -> list[int]:
    """``pid`` and every live process below it (children of children included)."""
    found = [pid]
    index = 0
    while index < len(found):
        current = found[index]
        index += 1
        try:
            tasks = list(Path(f"/proc/{current}/task").iterdir())
        except OSError:  # the process has just exited
            continue
        for task in tasks:
            try:
                found += [int(c) for c in (task / "children").read_text().split()]
            except OSError:  # the thread has just exited
                continue
    return list(dict.fromkeys(found))


def _open_files(pid: int, held: dict[tuple[int, int], int]) -> None:
    fd_dir = Path(f"/proc/{pid}/fd")
    try:
        entries = list(fd_dir.iterdir())
    except OSError:
        return
    for entry in entries:
        try:
            if not os.readlink(entry).startswith(_SHM_PREFIX):
                continue
            info = os.stat(entry)  # follows the magic link: works for unlinked files too
        except OSError:
            continue
        held[(info.st_dev, info.st_ino)] = info.st_blocks * 512


def _mapped_files(pid: int, held: dict[tuple[int, int], int]) -> None:
    try:
        lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    except OSError:
        return
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or not fields[5].startswith(_SHM_PREFIX):
            continue
        start, end = (int(part, 16) for part in fields[0].split("-"))
        major, minor = (int(part, 16) for part in fields[3].split(":"))
        key = (os.makedev(major, minor), int(fields[4]))
        try:  # the file itself, if this kernel lets us see it; else the mapping's length
            info = os.stat(f"/proc/{pid}/map_files/{fields[0]}")
            size = info.st_blocks * 512
        except OSError:
            size = end - start + int(fields[2], 16)
        held[key] = max(held.get(key, 0), size)


def shm_bytes_held(pid: int | None = None) -> int:
    """Bytes of /dev/shm files that ``pid`` (default: this process) and its descendants hold."""
    held: dict[tuple[int, int], int] = {}
    for process in _descendants(os.getpid() if pid is None else pid):
        _open_files(process, held)
        _mapped_files(process, held)
    return sum(held.values())
