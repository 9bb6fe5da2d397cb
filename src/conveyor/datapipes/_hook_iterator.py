"""torch's module path ``datapipes._hook_iterator``: the snapshot states of a DataPipe."""

from enum import Enum

__all__ = ["_SnapshotState"]


class _SnapshotState(Enum):
    """Where a DataPipe is relative to a snapshot restoration (torch's values)."""

    NotStarted = 0
    Restored = 1
    Iterating = 2
