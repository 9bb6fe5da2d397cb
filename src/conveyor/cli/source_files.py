"""The files ``conveyor shards write`` packs: regular files inside the source tree, and only
those. A FIFO would block the reader forever, a device or socket is no sample, and a
symlink that points out of the tree would pack a file from elsewhere (``/etc/passwd`` in a
shard meant for publication); each is skipped, with one warning per kind, unless
``follow_external`` says to take links out of the tree. Files are opened without blocking
and checked again once open (``fstat``), so a file swapped for a FIFO in between is caught.
"""

from __future__ import annotations

import errno
import os
import stat
import warnings
from dataclasses import dataclass, field

__all__ = ["SourceFiles", "read_regular", "walk_source"]

_SHOWN = 3


@dataclass
class SourceFiles:
    """``files``: ``(path relative to the source, path to read)``; the rest was skipped."""

    files: list[tuple[str, str]] = field(default_factory=list)
    special: list[str] = field(default_factory=list)
    external_links: list[str] = field(default_factory=list)
    broken_links: list[str] = field(default_factory=list)

    def warn(self, source: str) -> None:
        """One warning per kind of file skipped, with a count and the first few."""
        kinds = [
            (self.special, "special file(s) (FIFO, socket, device: not regular files)"),
            (self.external_links, f"symlink(s) pointing outside {source!r} (pass "
             "--follow-external-symlinks to pack what they point to)"),
            (self.broken_links, "symlink(s) to nothing or to no regular file"),
        ]  # fmt: skip
        for skipped, what in kinds:
            if skipped:
                shown = ", ".join(repr(name) for name in skipped[:_SHOWN])
                more = f" and {len(skipped) - _SHOWN} more" if len(skipped) > _SHOWN else ""
                message = f"skipped {len(skipped)} {what}: {shown}{more}"
                warnings.warn(message, UserWarning, stacklevel=3)


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([path, root]) == root


def walk_source(source: str, follow_external: bool = False) -> SourceFiles:
    """Every regular file under ``source`` (symlinked directories are not entered)."""
    root = os.path.realpath(source)
    found = SourceFiles()
    for directory, _, names in os.walk(source):
        for name in sorted(names):
            path = os.path.join(directory, name)
            relative = os.path.relpath(path, source).replace(os.sep, "/")
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode):
                found.files.append((relative, path))
            elif not stat.S_ISLNK(info.st_mode):
                found.special.append(relative)
            else:
                _take_link(found, relative, path, root, follow_external)
    return found


def _take_link(
    found: SourceFiles, relative: str, path: str, root: str, follow_external: bool
) -> None:
    target = os.path.realpath(path)
    if not os.path.isfile(target):  # broken, a directory, or a link to a FIFO
        found.broken_links.append(relative)
    elif _inside(target, root) or follow_external:
        found.files.append((relative, target))
    else:
        found.external_links.append(relative)


def read_regular(path: str) -> bytes | None:
    """The bytes of ``path`` if it is (still) a regular file, else None. Opened without
    blocking and without following a link (``walk_source`` resolved those)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
    try:
        descriptor = os.open(path, flags)
    except OSError as error:
        if error.errno == errno.ELOOP:  # turned into a symlink since the walk
            return None
        raise
    with open(descriptor, "rb", closefd=True) as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        return handle.read()
