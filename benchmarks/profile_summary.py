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
    ("wait: shard open (HEAD)", r"details \(fsspec/spec\.py.*sync \("),
    ("wait: ranged GET of the next block", r"_fetch_range.*sync \("),
    ("wait: read-ahead block", r"readahead\.py.*_wait"),
    ("wait: RangedReader's next range (network)", r"ranged\.py.*(sync|wait) \("),
    ("RangedReader bookkeeping", r"storage/ranged\.py"),
    ("s3fs/aiohttp/botocore in the event loop", r"aiohttp|aiobotocore|botocore|s3fs/"),
    ("tar parsing + sample grouping", r"formats/tar\.py|grouping\.py|iter/tar\.py"),
    ("open shard (fsspec open / info)", r"fsspec/spec\.py.*\bopen\b|_info|s3fs/core\.py.*open"),
    ("send batch to main (transport)", r"transport/|worker_loop\.py.*send|connection\.py"),
    ("collate", r"collate"),
    ("event loop idle", r"run_forever.*_run_once.*select"),
    ("idle: waiting for a task", r"receive \(conveyor/engine/worker_process\.py|poll|select"),
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
            # py-spy --subprocesses: "process A;process B;thread (tid): name;frame;..."
            frames = stack.split(";")
            processes = [f for f in frames if f.startswith("process ")]
            threads = [f for f in frames if f.startswith("thread ")]
            if not processes or not threads:
                continue
            pid = processes[-1].split(":", 1)[0]
            thread = threads[0].split(": ", 1)[-1]
            if "latency_proxy" in processes[-1]:
                role = "proxy"
            elif len(processes) > 1:
                role = "worker" if thread == "MainThread" else "worker thread"
            else:
                role = "main"
            key = f"{role} {pid} {thread}"
            category = categorise(stack)
            per_thread[key][category] += int(count)
            if role == "worker" and "idle" not in category:
                leaves[re.sub(r" \((.*/)?([^/]*):\d+\)", r" (\2)", frames[-1])] += int(count)
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
