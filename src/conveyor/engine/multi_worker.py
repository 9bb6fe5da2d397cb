"""Loading with worker processes or threads: dispatch, reorder, end-of-stream, reset.

Tasks go round-robin to live workers, at most ``prefetch_factor * num_workers`` at a
time. Results come back through the pool and leave through a result buffer (in
sampler order, or ready-first). See docs/design/shutdown.md for how workers end.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import Any

from conveyor.engine import messages as msg
from conveyor.engine.base_iterator import LoaderIterator
from conveyor.engine.pin_thread import PinningPool
from conveyor.engine.plan import LoadPlan, WorkerOptions
from conveyor.engine.pool import WorkerDiedError, WorkerPool
from conveyor.engine.process_pool import ProcessPool
from conveyor.engine.remote_error import RemoteError
from conveyor.engine.reorder import EMPTY, InOrderBuffer, make_buffer
from conveyor.engine.thread_pool import ThreadPool
from conveyor.engine.worker_loop import WorkerSetup
from conveyor.engine.zygote import Zygote
from conveyor.state.loader_state import (
    DeliveryLog,
    LoaderStateDict,
    Resume,
    StreamResume,
    stream_resume_for,
)

_SKIPPED: Any = object()  # a task whose every sample on_error="skip" dropped


def uses_zygote(options: WorkerOptions) -> bool:
    """spawn/forkserver workers are forked from a per-loader zygote (engine/zygote.py)."""
    if options.worker_type == "thread":
        return False
    context = options.multiprocessing_context or multiprocessing.get_context()
    return context.get_start_method() in ("spawn", "forkserver")


def _make_pool(setup: WorkerSetup, options: WorkerOptions, zygote: Zygote | None) -> WorkerPool:
    if options.worker_type == "thread":
        return ThreadPool(setup, options.num_workers)
    context = options.multiprocessing_context or multiprocessing.get_context()
    return ProcessPool(
        setup,
        options.num_workers,
        context,
        options.slab_options,
        options.prefetch_factor,
        zygote=zygote,
    )


class MultiWorkerIterator(LoaderIterator):
    """One epoch of multi-worker loading; with persistent workers, every epoch."""

    def __init__(
        self,
        plan: LoadPlan,
        len_hint: Callable[[], int | None],
        resume: Resume | None = None,
        zygote: Zygote | None = None,
    ):
        super().__init__(plan, len_hint, resume)
        self._zygote = zygote
        streams = stream_resume_for(plan, resume)
        assert plan.workers is not None
        self._options = plan.workers
        self._setup = WorkerSetup(
            dataset=plan.dataset,
            iterable_style=plan.iterable_style,
            auto_collation=plan.auto_collation,
            collate_fn=plan.collate_fn,
            drop_last=plan.drop_last,
            base_seed=self._base_seed,
            num_workers=self._options.num_workers,
            worker_init_fn=self._options.worker_init_fn,
            worker_type=self._options.worker_type,
            graph_hook=plan.graph_hook,
            shared_seed=self._shared_seed,
            batch_size=self._samples_per_batch,
            skip_bad_samples=plan.skip_bad_samples,
            stage_timers=plan.stage_timers,
            stream_states=streams.states if streams else None,
            stream_skips=streams.skips if streams else None,
        )
        self._pool: WorkerPool | None = None
        self._next_task_id = 0
        self._start_epoch(first=True, streams=streams)

    # ----------------------------------------------------------------- epochs
    def _start_epoch(
        self,
        first: bool,
        shared_seed: int | None = None,
        streams: StreamResume | None = None,
    ) -> None:
        num_workers = self._options.num_workers
        self._buffer = make_buffer(self._options.in_order)
        self._owner: dict[int, int] = {}  # outstanding task id -> worker id
        self._task_position: dict[int, int] = {}  # dispatched, not yet delivered
        self._delivery = DeliveryLog(num_workers, self._num_yielded, self._skip)
        self._active = [True] * num_workers
        self._cursor = 0  # round-robin: the worker considered next
        self._task_worker: dict[int, int] = {}  # dispatched, not yet delivered or forgotten
        if streams is not None:
            self._active = list(streams.active)
            self._delivery.states = list(streams.states)
            self._delivery.counts = list(streams.counts)
            self._cursor = streams.next_worker
        self._sampler_done = False
        self._bytes_at_epoch_start = getattr(self._pool, "bytes_received", 0)
        if self._pool is None:
            self._pool = self._with_pin_thread(_make_pool(self._setup, self._options, self._zygote))
        elif not first:
            self._resume_workers(shared_seed)
        self._fill()

    def _with_pin_thread(self, pool: WorkerPool) -> WorkerPool:
        """Process workers: pin in a background thread (thread workers pin in ``_unwrap``)."""
        if self._pin is None or not isinstance(pool, ProcessPool):
            return pool
        pin, self._pin = self._pin, None
        return PinningPool(pool, pin)

    def _resume_workers(self, shared_seed: int | None) -> None:
        """Tell persistent workers a new epoch starts; drop whatever the last one left."""
        pool = self._require_pool()
        for worker_id in range(self._options.num_workers):
            pool.send(worker_id, (msg.RESUME, shared_seed))
        waiting = self._options.num_workers
        while waiting:
            for _, (_, status, payload, _) in pool.receive(None):
                if status == msg.RESUMED:
                    waiting -= 1
                elif status == msg.INIT_ERROR:
                    payload.reraise()

    def reset(self) -> None:
        """Start the next epoch on the same workers (``persistent_workers=True``)."""
        self._reset()
        try:
            self._start_epoch(first=False, shared_seed=self._shared_seed)
        except BaseException:
            self.close()
            raise

    # --------------------------------------------------------------- dispatch
    def _fill(self) -> None:
        # prefetch_factor=0 would dispatch nothing and hang (it does in torch): keep one task.
        limit = max(1, self._options.prefetch_factor * self._options.num_workers)
        while len(self._owner) < limit and self._dispatch_one():
            pass

    def _dispatch_one(self) -> bool:
        if self._sampler_done:
            return False
        worker_id = self._next_active_worker()
        if worker_id is None:
            return False
        try:
            position, request = self._next_request()
        except StopIteration:
            self._sampler_done = True
            return False
        task_id = self._next_task_id
        self._next_task_id += 1
        self._require_pool().send(worker_id, (msg.TASK, task_id, request))
        self._owner[task_id] = worker_id
        self._task_worker[task_id] = worker_id
        self._task_position[task_id] = position
        self._buffer.expect(task_id)
        return True

    def _next_active_worker(self, advance: bool = True) -> int | None:
        num_workers = self._options.num_workers
        for step in range(num_workers):
            worker_id = (self._cursor + step) % num_workers
            if self._active[worker_id]:
                if advance:
                    self._cursor = (worker_id + 1) % num_workers
                return worker_id
        return None

    # ---------------------------------------------------------------- results
    def _next_data(self) -> Any:
        try:
            return self._take_next()
        except (KeyboardInterrupt, WorkerDiedError):
            self.close()
            raise

    def _take_next(self) -> Any:
        result = self._buffer.pop()
        if result is EMPTY and self._owner:
            self._handle_all(self._require_pool().receive(0.0))  # already arrived?
            result = self._buffer.pop()
        ready, in_flight = result is not EMPTY, len(self._owner)
        while True:
            if result is not EMPTY:
                self._fill()
                data = self._unwrap(result)
                if data is not _SKIPPED:
                    self.clock.queue_seen(ready, in_flight)
                    return data
                result = self._buffer.pop()
                continue
            if len(self._buffer) == 0 and not self._fill_possible():
                if not self._options.persistent_workers:
                    self.close()
                raise StopIteration
            self._collect()
            result = self._buffer.pop()

    def _fill_possible(self) -> bool:
        self._fill()
        return len(self._buffer) > 0

    def _collect(self) -> None:
        timeout = self._options.timeout_s or None
        ready = self._require_pool().receive(timeout)
        if not ready and timeout is not None:
            raise RuntimeError(f"DataLoader timed out after {self._options.timeout_s} seconds")
        self._handle_all(ready)

    def _handle_all(self, ready: list[tuple[int, Any]]) -> None:
        for worker_id, (task_id, status, payload, info) in ready:
            self._handle(worker_id, task_id, status, payload, info)
        if ready:
            received = getattr(self._pool, "bytes_received", 0)
            self.clock.bytes_moved = received - self._bytes_at_epoch_start

    def _handle(self, worker_id: int, task_id: int, status: int, payload: Any, info: Any) -> None:
        if status == msg.INIT_ERROR:
            self.close()
            payload.reraise()
        if task_id not in self._owner:
            return  # a late answer to a task of an abandoned epoch
        del self._owner[task_id]
        if status == msg.END:
            self._task_position.pop(task_id, None)
            self._retire(worker_id, task_id)
            return
        if info is not None:
            self.clock.worker_did(worker_id, info[0])
            self._record_skips(info[2])
            if info[3] is not None:
                self.clock.worker_stages[worker_id] = info[3]
        position = self._task_position.pop(task_id)
        self._buffer.put(task_id, (status, payload, task_id, position, info))

    def _retire(self, worker_id: int, end_task_id: int) -> None:
        """The worker's stream is exhausted: forget its queued tasks, stop sending it more."""
        self._active[worker_id] = False
        orphans = [t for t, w in self._owner.items() if w == worker_id]
        for task_id in orphans:
            del self._owner[task_id]
            self._task_position.pop(task_id, None)
        for task_id in (end_task_id, *orphans):
            self._task_worker.pop(task_id, None)
        self._buffer.forget([end_task_id, *orphans])
        if not self._options.persistent_workers:
            self._require_pool().retire(worker_id)

    def _unwrap(self, result: tuple[int, Any, int, int, Any]) -> Any:
        status, payload, task_id, position, info = result
        worker_id = self._task_worker.pop(task_id)
        self._delivery.delivered(worker_id, position, None if info is None else info[1])
        if status == msg.ERROR:
            assert isinstance(payload, RemoteError)
            payload.reraise()
        if status == msg.SKIPPED:
            return _SKIPPED
        if self._pin is not None:
            payload = self._pin(payload)
        return payload

    def state_dict(self) -> LoaderStateDict:
        state = super().state_dict()
        delivery = self._delivery
        if self._plan.iterable_style:
            state["workers"] = {
                "num_workers": self._options.num_workers,
                "states": list(delivery.states),
                "counts": list(delivery.counts),
                # a worker whose end was seen still counts until its last batch is delivered
                "active": [
                    active or worker_id in self._task_worker.values()
                    for worker_id, active in enumerate(self._active)
                ],
                "next_worker": self._next_worker_to_deliver(),
            }
        elif not self._options.in_order:
            state["yielded"] = delivery.watermark
            state["delivered_ahead"] = sorted(delivery.ahead)
        return state

    def _next_worker_to_deliver(self) -> int:
        """The worker whose batch comes next in delivery order (in_order round-robin)."""
        head = self._buffer.head() if isinstance(self._buffer, InOrderBuffer) else None
        if head is not None and head in self._task_worker:
            return self._task_worker[head]
        worker_id = self._next_active_worker(advance=False)
        return 0 if worker_id is None else worker_id

    def _end_epoch_early(self) -> None:
        if not self._options.persistent_workers:
            self.close()

    # --------------------------------------------------------------- shutdown
    def _require_pool(self) -> WorkerPool:
        if self._pool is None:
            raise RuntimeError("the DataLoader's workers were shut down; start a new epoch")
        return self._pool

    def close(self) -> None:
        """End every worker now. Idempotent; also run on garbage collection."""
        pool = getattr(self, "_pool", None)
        self._pool = None
        if pool is not None:
            pool.close()

    def __del__(self) -> None:
        self.close()
