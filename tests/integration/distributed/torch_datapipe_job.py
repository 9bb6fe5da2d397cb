"""Run under torchrun: torch's own DataPipe graph through conveyor's and torch's loaders.

argv: OUT. Every rank loads ``IterableWrapper(range(N)).shuffle().sharding_filter()``
(torch.utils.data.datapipes) for two epochs with each loader, with 0 and 2 workers, and,
the other way round, a conveyor graph through torch's loader with 2 workers. Rank 0
writes [{rank, runs: {name: [[epoch items], ...]}}].
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import torch
import torch.utils.data as torch_data
from process_group import process_group, write_gathered
from torch.utils.data.datapipes.iter import IterableWrapper

import conveyor
import conveyor.datapipes.iter as conveyor_iter

N = 64
LOADERS = (("torch", torch_data.DataLoader), ("conveyor", conveyor.DataLoader))


def torch_graph() -> Any:
    return IterableWrapper(range(N)).shuffle().sharding_filter()


def epochs(loader: Any) -> list[list[int]]:
    return [[int(item) for item in loader] for _ in range(2)]


def main() -> None:
    out_path = sys.argv[1]
    with process_group() as rank:
        write_gathered(out_path, {"rank": rank, "runs": load_each_way()})


def load_each_way() -> dict[str, list[list[int]]]:
    warnings.simplefilter("ignore")  # torch's DataPipes warn about deprecation
    runs: dict[str, list[list[int]]] = {}
    for num_workers in (0, 2):
        for name, loader_class in (
            ("torch", torch_data.DataLoader),
            ("conveyor", conveyor.DataLoader),
        ):
            loader = loader_class(
                torch_graph(),
                batch_size=None,
                num_workers=num_workers,
                # the same generator on every rank, as torch needs for its DataPipes
                generator=torch.Generator().manual_seed(5),
            )
            runs[f"{name}-{num_workers}"] = epochs(loader)
    conveyor_graph = conveyor_iter.IterableWrapper(range(N)).shuffle().sharding_filter()
    runs["conveyor-graph-in-torch-2"] = epochs(
        torch_data.DataLoader(
            conveyor_graph,
            batch_size=None,
            num_workers=2,
            generator=torch.Generator().manual_seed(5),
        )
    )
    return runs


if __name__ == "__main__":
    main()
