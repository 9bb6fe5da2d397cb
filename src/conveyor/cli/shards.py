"""``conveyor shards write SRC PATTERN`` and ``conveyor shards inspect URL...``."""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import warnings
from collections import Counter
from typing import Any

from conveyor.cli.parsing import print_help_instead
from conveyor.cli.source_files import read_regular, walk_source
from conveyor.formats.grouping import split_name
from conveyor.formats.reading import ShardSummary, summarize_shard
from conveyor.formats.writer import ShardWriter
from conveyor.storage import resolve_urls
from conveyor.storage.redaction import redact_url

__all__ = ["group_directory", "parse_size", "register"]

_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "ki": 2**10, "mi": 2**20, "gi": 2**30}


def parse_size(text: str) -> int:
    """``"100MB"``, ``"1.5GiB"``, ``"4096"`` -> bytes."""
    match = re.fullmatch(r"\s*([\d.]+)\s*([kmg]i?)?b?\s*", text.lower())
    if match is None:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 500MB, 1GiB)")
    return int(float(match.group(1)) * _UNITS[match.group(2) or ""])


def register(subparsers: Any) -> None:
    """Add ``shards`` with its ``write`` and ``inspect`` subcommands."""
    shards = subparsers.add_parser(
        "shards",
        help="write and inspect WebDataset tar shards",
        description="Write a directory of files as tar shards, or inspect shards.",
    )
    actions = shards.add_subparsers(dest="action", metavar="ACTION")
    print_help_instead(shards)
    write = actions.add_parser(
        "write",
        help="pack a directory of files into tar shards",
        description="Files sharing a basename (000123.jpg, 000123.cls) become one sample.",
    )
    write.add_argument("source", help="directory of files (searched recursively)")
    write.add_argument("pattern", help="output shard pattern, e.g. out/train-%%06d.tar")
    write.add_argument("--max-count", type=int, default=10_000, help="most samples in one shard")
    write.add_argument(
        "--max-size", type=parse_size, default="1GB",
        help="most bytes in one shard (500MB, 1.5GiB, 4096, ...)",
    )  # fmt: skip
    write.add_argument("--shuffle", action="store_true", help="shuffle samples first")
    write.add_argument(
        "--follow-external-symlinks", action="store_true",
        help="pack the files that symlinks pointing outside SOURCE name (skipped by default)",
    )  # fmt: skip
    write.add_argument("--seed", type=int, default=0, help="seed for --shuffle")
    write.set_defaults(func=run_write)
    inspect = actions.add_parser("inspect", help="count samples, keys, extensions, sizes")
    inspect.add_argument("urls", nargs="+", help="shard paths/URLs (braces and globs allowed)")
    inspect.add_argument("--json", action="store_true", help="one JSON object per shard")
    inspect.set_defaults(func=run_inspect)


def group_directory(
    source: str, follow_external_symlinks: bool = False
) -> list[tuple[str, dict[str, str]]]:
    """``[(key, {ext: path})]`` for the regular files under ``source``, sorted by key.

    FIFOs, sockets, devices, broken links and (unless ``follow_external_symlinks``) links
    out of ``source`` are skipped with a warning (`conveyor.cli.source_files`)."""
    if not os.path.isdir(source):
        raise ValueError(f"{source!r} is not a directory")
    found = walk_source(source, follow_external_symlinks)
    found.warn(source)
    samples: dict[str, dict[str, str]] = {}
    for relative, path in found.files:
        parts = split_name(relative)
        if parts is None:
            continue
        key, ext = parts
        if ext in samples.setdefault(key, {}):
            raise ValueError(f"two files give sample {key!r} extension {ext!r}")
        samples[key][ext] = path
    return sorted(samples.items())


def run_write(args: argparse.Namespace) -> int:
    samples = group_directory(args.source, args.follow_external_symlinks)
    if not samples:
        raise ValueError(f"no files with an extension under {args.source!r}")
    if args.shuffle:
        random.Random(args.seed).shuffle(samples)
    changed: list[str] = []
    with ShardWriter(args.pattern, max_count=args.max_count, max_bytes=args.max_size) as writer:
        for key, files in samples:
            sample: dict[str, Any] = {"__key__": key}
            for ext, path in files.items():
                data = read_regular(path)
                if data is None:  # no longer a regular file: leave the sample out whole
                    changed.append(path)
                    break
                sample[ext] = data
            else:
                writer.write(sample)
    if changed:
        warnings.warn(
            f"skipped {len(changed)} sample(s) whose files stopped being regular files "
            f"while writing: {', '.join(map(repr, changed[:3]))}",
            UserWarning,
            stacklevel=2,
        )
    print(f"wrote {writer.total} samples into {len(writer.shards)} shard(s):")
    for url in writer.shards:
        print(f"  {url}")
    return 0


def _print_summary(summary: ShardSummary) -> None:
    print(redact_url(summary.url))
    print(f"  samples {summary.samples}, members {summary.members}, {summary.data_bytes:,} bytes")
    for ext, count in sorted(summary.extension_counts.items()):
        size = summary.extension_bytes[ext]
        print(f"  .{ext:<10} {count:>8} files {size:>14,} bytes  mean {size / count:,.0f}")
    if summary.ignored_members:
        print(f"  {summary.ignored_members} member(s) without a sample key (ignored)")
    print(f"  first keys: {', '.join(summary.first_keys)}")


def run_inspect(args: argparse.Namespace) -> int:
    totals: Counter[str] = Counter()
    urls = resolve_urls(args.urls)
    for url in urls:
        summary = summarize_shard(url)
        totals.update(samples=summary.samples, members=summary.members)
        totals.update(data_bytes=summary.data_bytes)
        if args.json:
            print(json.dumps(summary.as_dict()))
        else:
            _print_summary(summary)
    if not args.json and len(urls) > 1:
        print(
            f"total: {len(urls)} shards, {totals['samples']} samples, "
            f"{totals['members']} members, {totals['data_bytes']:,} bytes"
        )
    return 0
