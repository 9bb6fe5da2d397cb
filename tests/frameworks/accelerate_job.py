"""An accelerate job on conveyor loaders; run as a script, alone or under torchrun.

    python accelerate_job.py OUT            # one process
    torchrun --nproc_per_node=2 accelerate_job.py OUT

Each process writes OUT-rank<r>.json: the samples it received, the class of the loader
accelerate built, conveyor's stats() of it, and what skip_first_batches delivered.
"""

from __future__ import annotations

import json
import sys
from typing import Any

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
    record = {
        "world": accelerator.num_processes,
        "seen": seen,
        "after_skip": skipped,
        "base": f"{type(base).__module__}.{type(base).__name__}",
        "stats_samples": base.stats().samples,
    }
    with open(f"{out}-rank{accelerator.process_index}.json", "w") as file:
        json.dump(record, file)
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main(sys.argv[1])
