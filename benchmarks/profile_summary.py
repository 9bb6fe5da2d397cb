#!/usr/bin/env python
"""Where a loader's time goes, from a py-spy profile of the whole process tree.

Record with idle stacks included (a worker waiting on the network is what S7 is about):

    py-spy record --subprocesses --idle --threads -r 100 -f raw -o prof.txt -- \\
        python benchmarks/s7_object_store.py --pipelines conveyor --rtts 100 --reps 1

then ``python benchmarks/profile_summary.py prof.txt``: for each process and thread, the
share of its samples in each category below (the first rule that matches a stack wins,
so order matters), plus the hottest leaf frames of the DataLoader workers.
"""

from __future__ import annotations

import argparse
import collections
import re

# (category, pattern searched in the ';'-joined stack); first match wins
CATEGORIES: list[tuple[str, str]] = [
    ("decode (PIL)", r"decode_crop|PIL/"),
    ("wait: fsspec sync (network round trips)", r"fsspec/asyn\.py.*\bsync\b"),
    ("wait: read-ahead block", r"readahead\.py.*_wait"),
    ("s3fs/aiohttp/botocore in the event loop", r"aiohttp|aiobotocore|botocore|s3fs/"),
    ("tar parsing + sample grouping", r"formats/tar\.py|grouping\.py|iter/tar\.py"),
    ("open shard (fsspec open / info)", r"fsspec/spec\.py.*\bopen\b|_info|s3fs/core\.py.*open"),
    ("send batch to main (transport)", r"transport/|worker_loop\.py.*send|connection\.py"),
    ("collate", r"collate"),
    ("idle: waiting for a task", r"worker_loop\.py.*(recv|poll|wait)|process_pool|select"),
    ("event loop idle", r"asyncio/base_events\.py.*_run_once|selectors\.py"),
]


def categorise(stack: str) -> str:
    for name, pattern in CATEGORIES:
        if re.search(pattern, stack):
            return name
    return "other"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", help="py-spy record -f raw output")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    per_thread: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    leaves: collections.Counter[str] = collections.Counter()
    with open(args.profile) as handle:
        for line in handle:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack:
                continue
            frames = stack.split(";")
            process = frames[0]
            thread = frames[1] if len(frames) > 1 and frames[1].startswith("thread") else ""
            role = "main"
            if "latency_proxy" in process:
                role = "proxy"
            elif "worker" in stack and ("worker_process" in stack or "_worker_loop" in stack):
                role = "worker"
            key = f"{role} {process[:60]} {thread[:40]}"
            category = categorise(stack)
            per_thread[key][category] += int(count)
            if role == "worker" and "idle" not in category:
                leaves[re.sub(r"\s*\(.*?\)", "", frames[-1])] += int(count)
    for key, counter in sorted(per_thread.items(), key=lambda kv: -sum(kv[1].values())):
        total = sum(counter.values())
        if total < 20:
            continue
        print(f"\n{key}: {total} samples")
        for category, count in counter.most_common():
            print(f"  {100 * count / total:5.1f} %  {category}")
    print("\nhottest leaves in workers (non-idle):")
    total = sum(leaves.values()) or 1
    for leaf, count in leaves.most_common(args.top):
        print(f"  {100 * count / total:5.1f} %  {leaf}")


if __name__ == "__main__":
    main()
