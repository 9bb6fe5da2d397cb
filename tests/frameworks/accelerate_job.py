"""An accelerate job on conveyor loaders; run as a script, alone or under torchrun.

    python accelerate_job.py OUT            # one process
    torchrun --nproc_per_node=2 accelerate_job.py OUT

Each process writes OUT-rank<r>.json: the samples it received, the class of the loader
accelerate built, conveyor's stats() of it, what skip_first_batches delivered, and the
epoch as delivered across save_state / load_state.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch
from accelerate import Accelerator, skip_first_batches

import conveyor
import conveyor.integrations

conveyor.integrations.use_conveyor_in_accelerate()


def main(out: str) -> None:
    accelerator = Accelerator(cpu=True)
    loader = conveyor.DataLoader(list(range(64)), batch_size=4, shuffle=False, num_workers=2)
    prepared: Any = accelerator.prepare(loader)
    seen = [int(x) for batch in prepared for x in batch]
    skipped = [int(x) for batch in skip_first_batches(prepared, 2) for x in batch]
    base = prepared.base_dataloader
    stats_samples = base.stats().samples  # of the whole epoch above, before the resume below
    resumed = _save_load_and_skip(accelerator, prepared, f"{out}-state")  # one dir, all ranks
    record = {
        "world": accelerator.num_processes,
        "seen": seen,
        "after_skip": skipped,
        "resumed": resumed,
        "base": f"{type(base).__module__}.{type(base).__name__}",
        "stats_samples": stats_samples,
    }
    with open(f"{out}-rank{accelerator.process_index}.json", "w") as file:
        json.dump(record, file)
    accelerator.wait_for_everyone()
    accelerator.end_training()


def _save_load_and_skip(accelerator: Accelerator, prepared: Any, where: str) -> list[int]:
    """accelerate's documented resume: save_state mid-epoch (model, optimizer and the
    prepared loader registered with it), load_state, skip_first_batches the steps done."""
    model, optimizer = accelerator.prepare(
        torch.nn.Linear(1, 1), torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1)
    )
    del model, optimizer
    head: list[int] = []
    for step, batch in enumerate(prepared):
        head += [int(x) for x in batch]
        if step == 2:
            accelerator.save_state(where)
            break
    accelerator.wait_for_everyone()  # rank 0 writes the model's file the others read
    accelerator.load_state(where)
    return head + [int(x) for batch in skip_first_batches(prepared, 3) for x in batch]


if __name__ == "__main__":
    main(sys.argv[1])
