"""The small vocabulary spoken between the main process and its workers.

Messages are plain tuples (cheap to pickle); these constants name their fields.
To a worker: ``(TASK, task_id, request)``, ``(RESUME, shared_seed)`` or ``None`` (stop).
From a worker: ``(task_id, status, payload, info)``; ``info`` is ``None`` or, for a
fetched batch, ``(busy_s, stream_state, skips, stages)``: ``stream_state`` is the pickled
``dataset.state_dict()`` after the batch (iterable-style datasets that have one) and
``skips`` the ``(index, error)`` pairs that ``on_error="skip"`` dropped; ``stages`` the
worker's cumulative per-stage timings (``profile_stages=True``) or None.

Process workers' pipes also carry the slab transport's own messages, which never reach the
worker loop or the iterator: ``(RELEASE, slab_ids)`` and ``(OVERFLOW, seq)`` to a worker,
and framed results with stall requests from it (see `conveyor.transport.protocol`).
"""

from __future__ import annotations

from conveyor.transport import protocol

TASK = 0
RESUME = 1
RELEASE = protocol.RELEASE  # the slab transport's, handled by the pool and `WorkerEnd`
OVERFLOW = protocol.OVERFLOW

OK = 0  # payload: the fetched (collated) data
ERROR = 1  # payload: RemoteError from the dataset/collate code
END = 2  # the worker's iterable-style stream is exhausted; payload None
RESUMED = 3  # acknowledges RESUME; payload None
INIT_ERROR = 4  # worker set-up (unpickling, worker_init_fn) failed; payload RemoteError
SKIPPED = 5  # on_error="skip" dropped every sample of the task; payload None

NO_TASK = -1  # task id of messages that answer no task
