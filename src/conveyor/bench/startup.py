"""S4: seconds from constructing a loader to its first batch, each in a fresh Python process.

The child imports torch and the loader first (not timed), then times construction,
``iter()`` and the first ``next()`` over ``range(1024)`` in batches of 8. ``thread`` runs
conveyor's thread workers against torch's fork, its fastest start.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

from conveyor.bench.harness import BenchSettings, Comparison, compare

__all__ = ["CONTEXTS", "first_batch_s", "run_s4"]

CONTEXTS = ("fork", "forkserver", "spawn", "thread")
CHILD_TIMEOUT_S = 300

_CHILD = """
import json, sys, time
import torch
torch.set_num_threads(1)
loader, workers, context = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if loader == "conveyor":
    from conveyor import DataLoader
else:
    DataLoader = torch.utils.data.DataLoader  # the reference; import torch loaded it
kwargs = {"worker_type": "thread"} if context == "thread" else {"multiprocessing_context": context}
start = time.perf_counter()
iterator = iter(DataLoader(range(1024), batch_size=8, num_workers=workers, **kwargs))
next(iterator)
print(json.dumps(time.perf_counter() - start), flush=True)
del iterator
"""


def first_batch_s(loader: str, workers: int, context: str) -> float:
    """Run one fresh interpreter and return its time to the first batch."""
    if context not in CONTEXTS:
        raise ValueError(f"S4 context must be one of {CONTEXTS}, got {context!r}")
    env = dict(os.environ)
    source_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [source_root, env.get("PYTHONPATH")]))
    command = [sys.executable, "-c", _CHILD, loader, str(workers), context]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, env=env, check=False
    )
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"S4 {loader} {context}: child exited {done.returncode}: {tail[0]}")
    seconds: float = json.loads(done.stdout.split()[-1])
    return seconds


def run_s4(settings: BenchSettings) -> Iterator[Comparison]:
    """S4: first-batch seconds per start method at the largest ``num_workers``."""
    workers = max(settings.num_workers)
    if workers == 0:
        return  # no workers, nothing to start
    reps = 1 if settings.quick else settings.reps
    for context in settings.contexts:
        theirs = "fork" if context == "thread" else context

        def measure(loader: str, context: str = context, theirs: str = theirs) -> float:
            return first_batch_s(loader, workers, context if loader == "conveyor" else theirs)

        suffix = " (torch fork)" if context == "thread" else ""
        yield compare(
            f"S4 {context} nw{workers}{suffix}",
            "s",
            measure,
            reps,
            higher_is_better=False,
            params={"scenario_id": "s4", "num_workers": workers, "context": context},
        )
