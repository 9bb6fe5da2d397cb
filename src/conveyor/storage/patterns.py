"""Shard URL patterns: brace ranges (``shard-{000..099}.tar``), alternatives, and globs."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from conveyor.storage.filesystems import get_filesystem, has_glob
from conveyor.storage.options import RemoteOptions
from conveyor.storage.redaction import redact_url

__all__ = ["expand_braces", "resolve_urls"]

_BRACE = re.compile(r"\{([^{}]*)\}")
_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)$")


def _alternatives(body: str) -> list[str]:
    match = _RANGE.match(body)
    if match is None:
        return body.split(",")
    first, last = match.group(1), match.group(2)
    width = len(first) if first.lstrip("-").startswith("0") else 0
    low, high = int(first), int(last)
    step = 1 if high >= low else -1
    return [str(value).zfill(width) for value in range(low, high + step, step)]


def expand_braces(pattern: str) -> list[str]:
    """Expand ``{a..b}`` (zero padding kept) and ``{x,y}`` left to right, as WebDataset does.

    >>> expand_braces("s-{08..10}.tar")
    ['s-08.tar', 's-09.tar', 's-10.tar']
    """
    match = _BRACE.search(pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    expanded: list[str] = []
    for choice in _alternatives(match.group(1)):
        expanded.extend(expand_braces(head + choice + tail))
    return expanded


def resolve_urls(
    urls: str | Iterable[str],
    storage_options: Mapping[str, Any] | None = None,
    remote: RemoteOptions | None = None,
) -> list[str]:
    """The concrete shard URLs: braces expanded, globs listed (sorted), order kept.

    Raises FileNotFoundError when a glob matches nothing (an empty dataset is a mistake).
    """
    entries = [urls] if isinstance(urls, str) else list(urls)
    resolved: list[str] = []
    for entry in entries:
        for url in expand_braces(str(entry)):
            if not has_glob(url):
                resolved.append(url)
                continue
            matches = get_filesystem(url, storage_options, remote).glob(url)
            if not matches:
                raise FileNotFoundError(f"no shard matches {redact_url(url)!r}")
            resolved.extend(matches)
    return resolved
