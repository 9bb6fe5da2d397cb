"""Datasets whose samples are global positions the loader splits (`conveyor.Mixture`).

Such a dataset declares ``positions_split_by_loader = True`` and offers:

- ``configure(*, worker_id, num_workers, rank, world_size, batch_size)``: in each consumer
  before ``iter()``; batch ``j`` of rank ``r``'s worker ``w`` covers the global batch
  ``(j * num_workers + w) * world_size + r``, so the loader's in-order output is the
  positions in order, whatever the topology.
- ``state_at(position)``: the checkpoint of the whole run at a global position (any
  topology resumes it, so the loader stores it as an ``elastic`` state).
- ``begin_loader_epoch(next_free, resumed)``: in the main process as an epoch with workers
  starts; ``next_free()`` is the first position no worker has been asked for yet.
- ``control_version``, ``control()`` and ``apply_control(payload)``: a change made in the
  main process between steps (``Mixture.set_weights``) that the workers follow from the
  next task they receive.

This module computes positions; the messages themselves are sent by the loaders.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["PlacedRun", "has_control", "is_placed", "place"]


def is_placed(dataset: Any) -> bool:
    return getattr(type(dataset), "positions_split_by_loader", False) is True


def has_control(dataset: Any) -> bool:
    """A dataset whose main-process changes reach the workers (``control_version``,
    ``control()``, ``apply_control``): placed ones, and streams such as `PackedText`
    whose ``set_weights`` each worker follows from the next task it receives."""
    return isinstance(getattr(dataset, "control_version", None), int) and callable(
        getattr(dataset, "apply_control", None)
    )


def place(
    dataset: Any, worker_id: int, num_workers: int, world: tuple[int, int], batch_size: int
) -> None:
    """Tell one consumer which positions are its own."""
    world_size, rank = world
    dataset.configure(
        worker_id=worker_id,
        num_workers=max(1, num_workers),
        rank=rank,
        world_size=world_size,
        batch_size=batch_size,
    )


class PlacedRun(NamedTuple):
    """Where a loader's epoch over a placed dataset is, in global positions.

    ``start``: the position the epoch began at (0, or a checkpoint's); ``yielded_at_start``:
    the batches counted as delivered then. Ranks advance in step, so after ``yielded``
    batches a rank's checkpoint is the position every rank reached.
    """

    start: int
    yielded_at_start: int
    batch_size: int
    world_size: int

    def position(self, yielded: int, ahead: int = 0) -> int:
        """The global position after ``yielded`` batches (and ``ahead`` more)."""
        steps = yielded - self.yielded_at_start + ahead
        return self.start + steps * self.batch_size * self.world_size
