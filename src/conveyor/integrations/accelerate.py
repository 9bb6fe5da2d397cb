"""accelerate: make ``Accelerator.prepare`` and ``skip_first_batches`` build conveyor loaders.

accelerate wraps a prepared loader around a new one it creates with the name
``DataLoader`` of its module ``accelerate.data_loader`` (torch's class). Pointing that name
at `conveyor.DataLoader` (a subclass of torch's, so every ``isinstance`` check accelerate
makes still holds) keeps conveyor's engine, workers and ``stats()`` under accelerate:

    import conveyor.integrations
    conveyor.integrations.use_conveyor_in_accelerate()
    accelerator = Accelerator()
    loader = accelerator.prepare(conveyor.DataLoader(dataset, batch_size=32, num_workers=4))

It changes accelerate's module for the whole process (call it once, before ``prepare``);
loaders built with ``use_stateful_dataloader=True`` still use torchdata's class.
"""

from __future__ import annotations

from typing import Any

__all__ = ["use_conveyor_in_accelerate"]


def use_conveyor_in_accelerate() -> None:
    """Have accelerate build `conveyor.DataLoader`s where it would build torch's."""
    try:
        import accelerate.data_loader as accelerate_data_loader  # type: ignore[import-untyped, unused-ignore]
    except ImportError as error:
        raise ImportError(
            "use_conveyor_in_accelerate needs accelerate (pip install accelerate)"
        ) from error
    from conveyor.dataloader import DataLoader

    module: Any = accelerate_data_loader
    module.DataLoader = DataLoader
