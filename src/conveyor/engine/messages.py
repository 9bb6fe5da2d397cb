"""The small vocabulary spoken between the loader and its workers: named, typed, cheap.

To a worker: `Task`, `StartEpoch` (persistent workers) or ``None`` (stop).
From a worker: one `Reply` per task (and one per `StartEpoch`); a fetched batch's reply
carries a `BatchInfo`.

NamedTuples pickle about as cheaply as plain tuples and are read by name. Process
workers' pipes also carry the slab transport's own messages (plain tuples, see
`conveyor.transport.protocol`), which never reach the worker loop or the iterator.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from conveyor.formats.skips import SkipRecord

__all__ = [
    "END",
    "ERROR",
    "INIT_ERROR",
    "NO_TASK",
    "OK",
    "RESUMED",
    "SKIPPED",
    "BatchInfo",
    "Reply",
    "Skips",
    "StartEpoch",
    "Task",
]

Skips = tuple[SkipRecord, ...]
"""``(index, "ErrorType: message")`` of the samples that ``on_error="skip"`` dropped."""


class Task(NamedTuple):
    """Fetch ``request`` (an index, a list of indices, or a stream's batch size)."""

    task_id: int
    request: Any


class StartEpoch(NamedTuple):
    """Persistent workers: a new epoch starts with this shared seed; answer `RESUMED`."""

    shared_seed: int | None


# Reply.status values
OK = 0  # payload: the fetched (collated) data
ERROR = 1  # payload: RemoteError from the dataset/collate code
END = 2  # the worker's iterable-style stream is exhausted; payload None
RESUMED = 3  # acknowledges StartEpoch; payload None
INIT_ERROR = 4  # worker set-up (unpickling, worker_init_fn) failed; payload RemoteError
SKIPPED = 5  # on_error="skip" dropped every sample of the task; payload None

NO_TASK = -1  # task id of replies that answer no task


class BatchInfo(NamedTuple):
    """What a worker says about a task beside its data."""

    busy_s: float  # time spent fetching
    stream_state: bytes | None  # pickled ``dataset.state_dict()`` after it (stateful streams)
    skips: Skips  # samples dropped by on_error="skip"
    stages: Any  # cumulative per-stage timings (profile_stages=True), or None
    samples: int = 0  # samples in the batch


class Reply(NamedTuple):
    """A worker's answer to one `Task` (or to `StartEpoch`, with `NO_TASK`)."""

    task_id: int
    status: int
    payload: Any = None
    info: BatchInfo | None = None
