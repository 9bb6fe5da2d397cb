"""The small vocabulary spoken between the loader and its workers: named, typed, cheap.

To a worker: `Task`, `StartEpoch` (persistent workers) or ``None`` (stop).
From a worker: one `Reply` per task (and one per `StartEpoch`); a fetched batch's reply
carries a `BatchInfo`.

Process workers' pipes carry `Task` and `Reply` in a *wire* form (`task_to_wire`,
`reply_to_wire` and back): pickling a NamedTuple saves its class by name, ~4 us against
~0.4 us for the same fields as a plain tuple, paid on both sides of every batch (S2). A
wire task is a list, so it is never mistaken for the slab transport's own messages (plain
tuples, see `conveyor.transport.protocol`), which never reach the worker loop or the
iterator.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from conveyor.formats.skips import SkipRecord
from conveyor.stats.requests import RequestCounts

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
    "Tuning",
    "reply_from_wire",
    "reply_to_wire",
    "task_from_wire",
    "task_to_wire",
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
    epoch: int = 0  # the loader's epoch number


class DatasetControl(NamedTuple):
    """A change made in the main process to a placed dataset (`conveyor.engine.resume.placed`),
    e.g. ``Mixture.set_weights``: the worker applies it before its next task; no answer."""

    payload: Any


class Tuning(NamedTuple):
    """Autotune's settings for the worker's process (`conveyor.engine.loop.autotune`):
    the read-ahead window of its remote readers, from their next request on; no answer."""

    read_ahead: int  # blocks (`conveyor.storage.read_window`); 0: the readers' own
    max_bytes: int | None = None  # the most each reader holds ahead for it; None: no limit


# What a worker's inbox carries (None: stop)
WorkerMessage = Task | StartEpoch | DatasetControl | Tuning

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
    stream_state: Any  # the dataset's state after it, packed (transport/state_wire.py)
    skips: Skips  # samples dropped by on_error="skip"
    stages: Any  # cumulative per-stage timings (profile_stages=True), or None
    samples: int = 0  # samples in the batch
    digest: tuple[int, int] | None = None  # (digest, count) of its samples' identities
    requests: RequestCounts | None = None  # remote requests made since the last reply
    cpu_s: float = 0.0  # CPU time of the worker's thread while fetching (busy_s - cpu_s: I/O)
    collate_s: float = 0.0  # of busy_s, time inside collate_fn


class Reply(NamedTuple):
    """A worker's answer to one `Task` (or to `StartEpoch`, with `NO_TASK`)."""

    task_id: int
    status: int
    payload: Any = None
    info: BatchInfo | None = None


def task_to_wire(task: Task) -> list[Any]:
    """`Task` as pickled onto a worker's pipe: a list (cheap, and unlike any control tuple)."""
    return [task.task_id, task.request]


def task_from_wire(message: Any) -> Any:
    """The `Task` a wire list stands for; any other message is returned as it is."""
    return Task(message[0], message[1]) if type(message) is list else message


def reply_to_wire(reply: Reply) -> tuple[Any, ...]:
    """`Reply` (and its `BatchInfo`) as plain tuples, for a process pipe."""
    info = reply.info
    return (reply.task_id, reply.status, reply.payload, None if info is None else tuple(info))


def reply_from_wire(wire: tuple[Any, ...]) -> Reply:
    """The `Reply` that `reply_to_wire` made."""
    task_id, status, payload, info = wire
    return Reply(task_id, status, payload, None if info is None else BatchInfo(*info))
