"""Sharding: the ``sharding_filter`` node and torch's ``SHARDING_PRIORITIES``."""

from __future__ import annotations

from collections.abc import Mapping, Sized
from enum import IntEnum
from typing import TypeVar

from conveyor.datapipes.base import Cursor, IterDataPipe, SourceCursor, StateDict, as_iter_pipe
from conveyor.datapipes.functional import register_op

__all__ = ["SHARDING_PRIORITIES", "ShardingFilter", "ShardingFilterIterDataPipe"]

T = TypeVar("T")


class SHARDING_PRIORITIES(IntEnum):
    """Sharding groups; same values as torch's, so either enum may be passed.

    DEFAULT cannot be mixed with the others. DISTRIBUTED (ranks) and MULTIPROCESSING
    (workers) combine: with ``(world, rank)`` and ``(workers, worker_id)`` applied, the
    node is shard ``rank * workers + worker_id`` of ``world * workers``.
    """

    DEFAULT = 1
    DISTRIBUTED = 2
    MULTIPROCESSING = 3


def check_shard(num_of_instances: int, instance_id: int) -> None:
    """The arguments of every node's ``apply_sharding``: a valid slot of a valid count."""
    if num_of_instances < 1:
        raise ValueError(f"num_of_instances({num_of_instances}) should be at least 1")
    if not 0 <= instance_id < num_of_instances:
        raise ValueError(
            f"instance_id({instance_id}) should be smaller than "
            f"num_of_instances({num_of_instances}) and not negative"
        )


def combine_groups(
    groups: Mapping[int, tuple[int, int]], only: int | None = None
) -> tuple[int, int]:
    """``(num_of_instances, instance_id)`` of the combined sharding groups (``only``: one).

    Higher-priority groups split first: shard ``i`` of group A and ``j`` of group B make
    shard ``i * size_B + j`` (as torch combines them).
    """
    total, index = 1, 0
    for key in sorted(groups, reverse=True):
        if only is None or key == only:
            size, position = groups[key]
            index += total * position
            total *= size
    return total, index


class ShardingFilter(IterDataPipe[T]):
    """Keeps every n-th item once sharded (functional name: ``sharding_filter``).

    Same as torch's ShardingFilter: ``apply_sharding(n, i, group)`` (usually through
    `conveyor.graph_settings.apply_sharding`) makes it keep the items whose position ``p``
    in its input has ``p % n == i``; groups combine as described in
    `SHARDING_PRIORITIES`. ``sharding_group_filter`` limits it to one group. Settings are
    read when a pass starts.
    """

    def __init__(
        self, source_datapipe: IterDataPipe[T], sharding_group_filter: int | None = None
    ) -> None:
        self.source_datapipe = as_iter_pipe(source_datapipe, type(self).__name__)
        self.sharding_group_filter = sharding_group_filter
        self.groups: dict[int, tuple[int, int]] = {}
        self.num_of_instances = 1
        self.instance_id = 0

    def is_shardable(self) -> bool:
        return True

    def apply_sharding(
        self,
        num_of_instances: int,
        instance_id: int,
        sharding_group: int = SHARDING_PRIORITIES.DEFAULT,
    ) -> None:
        """Make this node shard ``instance_id`` of ``num_of_instances`` within a group."""
        check_shard(num_of_instances, instance_id)
        default = SHARDING_PRIORITIES.DEFAULT
        if sharding_group == default:
            mixed = bool(self.groups) and default not in self.groups
        else:
            mixed = default in self.groups
        if mixed:
            raise RuntimeError("ShardingFilter cannot mix DEFAULT and non DEFAULT groups")
        self.groups[int(sharding_group)] = (num_of_instances, instance_id)
        self._combine_groups()

    def _combine_groups(self) -> None:
        self.num_of_instances, self.instance_id = combine_groups(
            self.groups, self.sharding_group_filter
        )

    def _make_cursor(self, state: StateDict | None) -> Cursor[T]:
        return _ShardingCursor(self, state)

    def __len__(self) -> int:
        if isinstance(self.source_datapipe, Sized):
            size = len(self.source_datapipe)
            extra = 1 if self.instance_id < size % self.num_of_instances else 0
            return size // self.num_of_instances + extra
        raise TypeError(f"{type(self).__name__} instance doesn't have valid length")


class _ShardingCursor(SourceCursor[T]):
    def __init__(self, node: ShardingFilter[T], state: StateDict | None) -> None:
        super().__init__(node.source_datapipe, state, "ShardingFilter")
        self._shards = node.num_of_instances
        self._shard = node.instance_id
        self._position = int(state["position"]) if state else 0

    def next(self) -> T:
        while True:
            value: T = self.source.nonblocking_next()
            position = self._position
            self._position += 1
            if position % self._shards == self._shard:
                return value

    def extra_state(self) -> StateDict:
        return {"position": self._position}


# torch's class name at torch's module path (``torch.utils.data.datapipes...``).
ShardingFilterIterDataPipe = ShardingFilter
register_op("iter.sharding_filter", ShardingFilter)
