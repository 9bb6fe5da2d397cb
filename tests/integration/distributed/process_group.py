"""What every torchrun job here does around its work: join the gloo group from torchrun's
environment, gather one record per rank to rank 0's output file, leave the group."""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator
from contextlib import contextmanager

import torch.distributed as dist


@contextmanager
def process_group() -> Iterator[int]:
    """Init the gloo group (rank, world size and rendezvous from torchrun's env) and yield
    this rank; on a clean exit wait for every rank, then destroy the group."""
    dist.init_process_group("gloo")
    try:
        yield dist.get_rank()
        dist.barrier()  # rank 0 has written the output before any rank leaves
    finally:
        dist.destroy_process_group()


def write_gathered(out_path: str, record: object, *, pickled: bool = False) -> None:
    """All-gather every rank's ``record``; rank 0 writes the list (JSON, or a pickle for
    records that JSON cannot hold, such as checkpoints with int keys)."""
    gathered: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, record)
    if dist.get_rank() != 0:
        return
    if pickled:
        with open(out_path, "wb") as fh:
            pickle.dump(gathered, fh)
    else:
        with open(out_path, "w") as fh:
            json.dump(gathered, fh)
