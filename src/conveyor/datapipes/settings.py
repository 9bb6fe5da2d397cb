"""Settings applied across a DataPipe graph (published as `conveyor.graph_settings`).

The loader calls these before iterating: ``apply_sharding`` tells every sharding node its
shard, ``apply_shuffle_settings`` turns shuffling on or off, ``apply_random_seed`` gives
every random node (anything with ``set_seed``) a seed drawn from a generator.

They work on torch's DataPipes too (a user's ``torch.utils.data.datapipes`` graph given to
`conveyor.DataLoader`): the walk is conveyor's, and the only torch code that runs is the
user's pipes' own ``apply_sharding`` / ``set_shuffle`` / ``set_seed`` methods. Methods are
looked up on the class, never through torch's ``IterDataPipe.__getattr__`` hook.
"""

from __future__ import annotations

import inspect
import types
import warnings
from typing import TYPE_CHECKING

from conveyor.datapipes.base import IterDataPipe
from conveyor.datapipes.graph import DataPipe, DataPipeGraph, list_dps, traverse_dps
from conveyor.datapipes.iter.sharding import SHARDING_PRIORITIES
from conveyor.torch_compat import TorchIterDataPipe

if TYPE_CHECKING:
    import torch

__all__ = [
    "SHARDING_PRIORITIES",
    "apply_random_seed",
    "apply_sharding",
    "apply_shuffle_settings",
    "get_all_graph_pipes",
    "has_sharding",
    "sharding_nodes",
]


def get_all_graph_pipes(graph: DataPipeGraph) -> list[DataPipe]:
    """Every pipe of ``graph`` once, depth-first (torch's name for `list_dps`)."""
    return list_dps(graph)


def _has_method(datapipe: object, name: str) -> bool:
    """``datapipe.name`` would be a bound method (torch's test), found without calling any
    ``__getattr__`` hook: a plain function of its class, or a method stored on it."""
    found = inspect.getattr_static(datapipe, name, None)
    return isinstance(found, types.FunctionType | types.MethodType)


def _is_sharding_datapipe(datapipe: DataPipe) -> bool:
    shardable = isinstance(datapipe, IterDataPipe) and datapipe.is_shardable()
    return shardable or _has_method(datapipe, "apply_sharding")


def sharding_nodes(pipes: list[DataPipe]) -> list[DataPipe]:
    """The pipes among ``pipes`` that take a shard (``apply_sharding``)."""
    return [dp for dp in pipes if _is_sharding_datapipe(dp)]


def has_sharding(datapipe: DataPipe) -> bool:
    """Whether any node of the graph takes a shard (otherwise every consumer reads it all)."""
    return bool(sharding_nodes(list_dps(traverse_dps(datapipe))))


def apply_sharding(
    datapipe: DataPipe,
    num_of_instances: int,
    instance_id: int,
    sharding_group: int = SHARDING_PRIORITIES.DEFAULT,
) -> DataPipe:
    """Tell every shardable node its shard: ``apply_sharding(n, id, group)``.

    Same as torch: a `RuntimeError` if two shardable nodes lie on one path (sharding twice
    loses data); nodes whose ``apply_sharding`` takes two arguments get two. Returns
    ``datapipe``.
    """

    def visit(graph: DataPipeGraph, applied: DataPipe | None) -> None:
        for datapipe_, inputs in graph.values():
            here = applied
            if _is_sharding_datapipe(datapipe_):
                if applied is not None:
                    raise RuntimeError(
                        "Sharding twice on a single pipeline is likely unintended and will "
                        f"cause data loss. Sharding already applied to {applied} while trying "
                        f"to apply to {datapipe_}"
                    )
                method = datapipe_.apply_sharding  # type: ignore[union-attr]
                if len(inspect.signature(method).parameters) < 3:
                    method(num_of_instances, instance_id)
                else:
                    method(num_of_instances, instance_id, sharding_group=sharding_group)
                here = datapipe_
            visit(inputs, here)

    visit(traverse_dps(datapipe), None)
    return datapipe


def _is_shuffle_datapipe(datapipe: DataPipe) -> bool:
    return _has_method(datapipe, "set_shuffle") and _has_method(datapipe, "set_seed")


def apply_shuffle_settings(datapipe: DataPipe, shuffle: bool | None = None) -> DataPipe:
    """Call ``set_shuffle(shuffle)`` on every shuffling node; None changes nothing.

    Same as torch: with ``shuffle=True`` and no shuffling node, a ``shuffle()`` is appended
    (with a warning) and the new end of the graph is returned.
    """
    if shuffle is None:
        return datapipe
    shufflers = [dp for dp in list_dps(traverse_dps(datapipe)) if _is_shuffle_datapipe(dp)]
    if not shufflers and shuffle:
        if not isinstance(datapipe, IterDataPipe | TorchIterDataPipe):
            raise TypeError("shuffle=True needs an IterDataPipe (or a shuffle node in the graph)")
        warnings.warn(
            "`shuffle=True` was set, but the datapipe does not contain a `Shuffler`. Adding "
            "one at the end. Be aware that the default buffer size might not be sufficient "
            "for your task.",
            stacklevel=2,
        )
        datapipe = datapipe.shuffle()
        shufflers = [datapipe]
    for shuffler in shufflers:
        shuffler.set_shuffle(shuffle)  # type: ignore[union-attr]
    return datapipe


def apply_random_seed(datapipe: DataPipe, rng: torch.Generator) -> DataPipe:
    """Give every node with ``set_seed`` its own seed drawn from ``rng``.

    Draws exactly as torch does (one int64 per node, in depth-first order), so the same
    generator state seeds the same nodes identically. Returns ``datapipe``.
    """
    import torch

    for pipe in list_dps(traverse_dps(datapipe)):
        if _has_method(pipe, "set_seed"):
            seed = int(torch.empty((), dtype=torch.int64).random_(generator=rng).item())
            pipe.set_seed(seed)  # type: ignore[union-attr]
    return datapipe
