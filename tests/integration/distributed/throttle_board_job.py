"""Rank 1 hears a host throttle; rank 0 (a separate process tree) and a worker it forks
read the throttle from the job's board. argv: OUT HOST."""

from __future__ import annotations

import multiprocessing
import sys

import torch.distributed as dist
from process_group import process_group, write_gathered

from conveyor.storage.shared_throttles import last_throttle, note_throttle


def _heard_in_a_worker(host: str, answer: multiprocessing.SimpleQueue[bool]) -> None:
    answer.put(last_throttle(host) is not None)


def main() -> None:
    out, host = sys.argv[1:3]
    with process_group() as rank:
        before = last_throttle(host) is not None
        dist.barrier()
        if rank == 1:
            note_throttle(host)
        dist.barrier()
        answer: multiprocessing.SimpleQueue[bool] = multiprocessing.get_context(
            "fork"
        ).SimpleQueue()
        worker = multiprocessing.get_context("fork").Process(
            target=_heard_in_a_worker, args=(host, answer)
        )
        worker.start()
        worker.join(timeout=60)
        record = {"rank": rank, "before": before, "heard": last_throttle(host) is not None,
                  "worker_heard": answer.get() if worker.exitcode == 0 else None}  # fmt: skip
        write_gathered(out, record)


if __name__ == "__main__":
    main()
