"""Loading with workers of any kind: dispatch, reorder, end-of-stream, reset.

Tasks go round-robin to live workers, at most ``prefetch_factor * num_workers`` at a
time. Replies come back through the pool and leave through a result buffer (in sampler
order, or ready-first); one `InFlight` ledger per epoch knows every task between dispatch
and delivery. The worker kind (processes, threads, ...) is the options' strategy; this
module never asks which one it is. See docs/design/shutdown.md for how workers end.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from typing import Any

from conveyor.engine.loop.autotune import Tuner
from conveyor.engine.loop.base_iterator import LoaderIterator
from conveyor.engine.loop.in_flight import InFlight, RoundRobin
from conveyor.engine.loop.plan import LoadPlan
from conveyor.engine.loop.reorder import EMPTY, InOrderBuffer, make_buffer
from conveyor.engine.resume.placed import has_control
from conveyor.engine.resume.progress import Deliveries, IndexProgress, PlacedProgress
from conveyor.engine.workers import messages as msg
from conveyor.engine.workers.messages import DatasetControl, Reply, StartEpoch, Task, Tuning
from conveyor.engine.workers.pool import WorkerDiedError, WorkerPool
from conveyor.engine.workers.remote_error import RemoteError
from conveyor.engine.workers.seeding import EpochSeeds
from conveyor.engine.workers.worker_kind import WorkerSetup
from conveyor.state.loader_state import DeliveryLog, LoaderStateDict, Resume, StreamResume
from conveyor.torch_compat import TorchMultiProcessingLoaderIter
from conveyor.transport.state_wire import PackedState, unpack_state

__all__ = ["MultiWorkerIterator"]

_SKIPPED: Any = object()  # a task whose every sample on_error="skip" dropped


class MultiWorkerIterator(LoaderIterator, TorchMultiProcessingLoaderIter):
    """One epoch of multi-worker loading; with persistent workers, every epoch.

    A subclass of torch's ``_MultiProcessingDataLoaderIter`` (for ``isinstance``; none of
    its code runs): its queue-level methods have no counterpart here and raise.
    """

    def __init__(
        self, plan: LoadPlan, len_hint: Callable[[], int | None], resume: Resume | None = None
    ):
        super().__init__(plan, len_hint, resume)
        self._resume_state = resume.state if resume is not None else None
        self._control_sent = 0
        self._controlled = False
        self._worker_options = workers = self._options.workers
        streams = self._progress.worker_resume(resume, workers.num_workers, self.world)
        shipping = self._progress.shipping(
            self._options.snapshot_every_n_steps, workers.num_workers
        )
        self._setup = WorkerSetup(
            fetch=self._options.fetch_spec(),
            workers=workers,
            seeds=EpochSeeds(self._base_seed, self._shared_seed),
            prepare_graph=plan.hooks.prepare_graph,
            stage_timers=plan.hooks.stage_timers,
            streams=streams,
            world=self.world,
            state_every=shipping.every,
            state_at_end=shipping.at_end,
            epoch=plan.epoch,
        )
        self._pool: WorkerPool | None = None
        self._worker_handles: list[Any] = []
        self._owner_pid = os.getpid()
        self._next_task_id = 0
        self._tuner = self._make_tuner()
        self._start_epoch(first=True, streams=streams)

    def _make_tuner(self) -> Tuner | None:
        """Autotune's controller, kept across persistent epochs; None when off (or for a
        placed dataset, whose positions count on a fixed number of tasks in flight)."""
        options = self._options.autotune
        if options is None or isinstance(self._progress, PlacedProgress):
            return None
        workers = self._worker_options
        # which worker fetches an index changes nothing delivered; a stream's worker does
        tunable = type(self._progress) is IndexProgress
        return Tuner(options, workers.num_workers, workers.prefetch_factor or 1, tunable)

    # ----------------------------------------------------------------- epochs
    def _start_epoch(self, first: bool, streams: StreamResume | None = None) -> None:
        num_workers = self._worker_options.num_workers
        self._buffer = make_buffer(self._worker_options.in_order)
        self._in_flight = InFlight()
        self._delivery = DeliveryLog(num_workers, self._num_yielded, self._skip)
        self._dealer = RoundRobin(num_workers)
        if streams is not None:
            self._dealer = RoundRobin(num_workers, list(streams.active), streams.next_worker)
            self._delivery.states = list(streams.states)
            self._delivery.counts = list(streams.counts)
        if self._tuner is not None:
            self._tuner.new_epoch()
            self._dealer.open = self._tuner.active
        self._sampler_done = False
        self._begin_placed_epoch(streams is not None)
        self._bytes_at_epoch_start = 0 if self._pool is None else self._pool.bytes_received
        if self._pool is None:
            self._pool, self._pin = self._worker_options.kind.start_pool(self._setup, self._pin)
            self._worker_handles = list(getattr(self._pool, "handles", []))
        elif not first:
            self._resume_workers()
        self._fill()

    def _begin_placed_epoch(self, resumed: bool) -> None:
        """A placed dataset (`conveyor.engine.resume.placed`) in the main process keeps time:
        where its run starts, and which positions no worker has been asked for yet."""
        placed = self._placed_run
        dataset = self._data.dataset
        self._controlled = placed is not None or has_control(dataset)
        if placed is None:
            if self._controlled:  # a stream that takes changes (PackedText.set_weights)
                self._control_sent = dataset.control_version
            return
        saved = self._resume_state.get("elastic") if resumed and self._resume_state else None
        ahead = self._worker_options.tasks_in_flight  # tasks sent beyond what was delivered
        me = weakref.ref(self)  # the user's dataset must not keep this iterator alive

        def next_free() -> int | None:
            iterator = me()
            return None if iterator is None else placed.position(iterator._num_yielded, ahead)

        dataset.begin_loader_epoch(next_free, saved)
        self._control_sent = dataset.control_version

    def _send_dataset_control(self) -> None:
        """The main process changed the placed dataset (set_weights): every worker follows
        before its next task, so the change applies from a position none was asked for."""
        dataset = self._data.dataset
        if dataset.control_version == self._control_sent:
            return
        self._control_sent = dataset.control_version
        payload = DatasetControl(dataset.control())
        pool = self._require_pool()
        for worker_id, active in enumerate(self._dealer.active):
            if active:
                pool.send(worker_id, payload)

    def _resume_workers(self) -> None:
        """Tell persistent workers a new epoch starts; drop whatever the last one left."""
        pool = self._require_pool()
        for worker_id in range(self._worker_options.num_workers):
            pool.send(worker_id, StartEpoch(self._shared_seed, self.epoch))
        waiting = self._worker_options.num_workers
        while waiting:
            for _, reply in pool.receive(None):
                if reply.status == msg.RESUMED:
                    waiting -= 1
                elif reply.status == msg.INIT_ERROR:
                    reply.payload.reraise()

    def reset(self, epoch: int | None = None) -> None:
        """Start epoch ``epoch`` (default: the next) on the same workers
        (``persistent_workers=True``)."""
        super().reset(epoch)
        try:
            self._start_epoch(first=False)
        except BaseException:
            self.close()
            raise

    # --------------------------------------------------------------- dispatch
    def _fill(self) -> None:
        limit = self._tasks_in_flight()
        while self._in_flight.outstanding < limit and self._dispatch_one():
            pass

    def _tasks_in_flight(self) -> int:
        tuner = self._tuner
        return self._worker_options.tasks_in_flight if tuner is None else tuner.tasks_in_flight

    def _autotune(self) -> None:
        """A batch is delivered: the tuner may change the workers taking tasks, the depth or
        the remote read-ahead."""
        decision = self._tuner.observe(self.clock) if self._tuner is not None else None
        if decision is None:
            return
        last = self.clock.decisions[-1].read_ahead if self.clock.decisions else 0
        if decision.read_ahead != last:
            self._send_read_ahead(decision.read_ahead)
        self._dealer.open = decision.active_workers
        self.clock.decisions.append(decision)

    def _send_read_ahead(self, blocks: int) -> None:
        """To every started worker (a parked one may take tasks later), with each reader's
        share of the memory budget: a worker reads its current object and opens the next."""
        pool, workers = self._require_pool(), self._worker_options.num_workers
        options = self._options.autotune
        budget = None if options is None else options.memory_budget_bytes
        share = None if budget is None else budget // (2 * workers)
        for worker_id in range(workers):
            pool.send(worker_id, Tuning(blocks, share))

    def _dispatch_one(self) -> bool:
        if self._sampler_done:
            return False
        if self._controlled:
            self._send_dataset_control()
        if self._worker_options.in_order:
            worker_id = self._dealer.next()
        else:
            worker_id = self._dealer.next_with_room(self._has_room)
        if worker_id is None:
            return False
        try:
            position, request = self._next_request()
        except StopIteration:
            self._sampler_done = True
            return False
        task_id = self._next_task_id
        self._next_task_id += 1
        self._require_pool().send(worker_id, Task(task_id, request))
        self._in_flight.dispatch(task_id, worker_id, position)
        self._buffer.expect(task_id)
        return True

    def _has_room(self, worker_id: int) -> bool:
        """torch's ready-first rule: a worker holds at most its share of the task budget."""
        active = self._dealer.taking or 1
        return self._in_flight.load(worker_id) < self._tasks_in_flight() // active

    # ---------------------------------------------------------------- results
    def _next_data(self) -> Any:
        try:
            return self._take_next()
        except (KeyboardInterrupt, WorkerDiedError):
            self.close()
            raise

    def _take_next(self) -> Any:
        result = self._buffer.pop()
        if result is EMPTY and self._in_flight.awaited:
            self._handle_all(self._require_pool().receive(0.0))  # already arrived?
            result = self._buffer.pop()
        ready, in_flight = result is not EMPTY, self._in_flight.awaited
        held = 0 if ready else self._buffer.held  # ready results behind the awaited one
        while True:
            if result is not EMPTY:
                data = self._unwrap(result)
                if data is not _SKIPPED:
                    self.clock.queue_seen(ready, in_flight, held)
                    if self._tuner is not None:
                        self._autotune()
                    return data
                result = self._buffer.pop()
                continue
            if len(self._buffer) == 0 and not self._fill_possible():
                if not self._worker_options.persistent_workers:
                    self.close()
                raise StopIteration
            self._collect()
            result = self._buffer.pop()

    def _fill_possible(self) -> bool:
        self._fill()
        return len(self._buffer) > 0

    def _collect(self) -> None:
        timeout = self._worker_options.timeout_s or None
        ready = self._require_pool().receive(timeout)
        if not ready and timeout is not None:
            self.close(grace=False)  # a worker is stuck (or stopped): end it now, not at exit
            seconds = self._worker_options.timeout_s  # as the user gave it, as torch says it
            raise RuntimeError(f"DataLoader timed out after {seconds} seconds")
        self._handle_all(ready)

    def _handle_all(self, ready: list[tuple[int, Reply]]) -> None:
        for worker_id, reply in ready:
            self._handle(worker_id, reply)
        if ready and self._pool is not None:
            self.clock.bytes_moved = self._pool.bytes_received - self._bytes_at_epoch_start

    def _handle(self, worker_id: int, reply: Reply) -> None:
        if reply.status == msg.INIT_ERROR:
            self.close()
            reply.payload.reraise()
        if self._in_flight.answer(reply.task_id) is None:
            return  # a late answer to a task of an abandoned epoch
        info = reply.info
        if info is not None:
            self.clock.worker_did(worker_id, info.busy_s, info.cpu_s, info.collate_s)
            if info.requests:
                self.clock.requests += info.requests
            self._record_skips(info.skips)
            if info.stages is not None:
                self.clock.worker_stages[worker_id] = info.stages
        if reply.status == msg.END:
            self._delivery.ended(worker_id, None if info is None else info.stream_state)
            self._retire(worker_id, reply.task_id)
            return
        self._buffer.put(reply.task_id, reply)

    def _retire(self, worker_id: int, end_task_id: int) -> None:
        """The worker's stream is exhausted: forget its queued tasks, stop sending it more."""
        self._dealer.retire(worker_id)
        self._in_flight.drop(end_task_id)
        orphans = self._in_flight.orphan(worker_id, after=end_task_id)
        self._buffer.forget([end_task_id, *orphans])
        if not self._worker_options.persistent_workers:
            self._require_pool().retire(worker_id)

    def _unwrap(self, reply: Reply) -> Any:
        ticket = self._in_flight.deliver(reply.task_id)
        state = None if reply.info is None else reply.info.stream_state
        self._delivery.delivered(ticket.worker_id, ticket.position, state)
        self._fill()  # its slot is free: the next task goes out before the result (torch's order)
        if reply.status == msg.ERROR:
            assert isinstance(reply.payload, RemoteError)
            reply.payload.reraise()
        if reply.status == msg.SKIPPED:
            return _SKIPPED
        info = reply.info
        self._batch_samples = info.samples if info is not None else 0
        self._batch_digest = info.digest if info is not None else None
        if self._pin is not None:
            return self._pin(reply.payload)
        return reply.payload

    def _epoch_state(self) -> LoaderStateDict:
        state = super()._epoch_state()
        delivery = self._delivery
        deliveries = Deliveries(
            log=delivery,
            states=self._unpacked_states(delivery.states),
            num_workers=self._worker_options.num_workers,
            # a worker whose end was seen still counts until its last batch is delivered
            active=[
                active or self._in_flight.holds(worker_id)
                for worker_id, active in enumerate(self._dealer.active)
            ],
            next_worker=self._next_worker_to_deliver(),
            in_order=self._worker_options.in_order,
        )
        state.update(self._progress.delivered(deliveries))  # type: ignore[typeddict-item]
        return state

    def _reuses_base_seed(self) -> bool:
        return self._worker_options.persistent_workers

    def _stream_end(self) -> dict[str, Any] | None:
        if not self._worker_options.persistent_workers:
            return None  # the next epoch's workers start from the dataset as built, again
        final = self._unpacked_states(self._delivery.final_states())
        workers = self._progress.workers_at_end(final, self._data.dataset)
        return None if workers is None else {"workers": workers}

    @staticmethod
    def _unpacked_states(states: list[Any]) -> list[Any]:
        """The workers' states as plain data (each a fresh copy: the caller may change it)."""
        return [unpack_state(s) if isinstance(s, PackedState) else s for s in states]

    def _next_worker_to_deliver(self) -> int:
        """The worker whose batch comes next in delivery order (in_order round-robin)."""
        head = self._buffer.head() if isinstance(self._buffer, InOrderBuffer) else None
        owner = None if head is None else self._in_flight.worker_of(head)
        if owner is not None:
            return owner
        worker_id = self._dealer.next(advance=False)
        return 0 if worker_id is None else worker_id

    def _end_epoch_early(self) -> None:
        if not self._worker_options.persistent_workers:
            self.close()

    # ------------------------------------------------- torch's private surface
    @property
    def _workers(self) -> list[Any]:
        """torch's ``_workers``: views with ``pid``, ``is_alive()``, ``join()``, ``exitcode``."""
        return self._worker_handles

    @property
    def _pin_memory_thread(self) -> Any:
        """torch's ``_pin_memory_thread`` (``None`` without pinning)."""
        return getattr(self._pool, "thread", None)

    def _shutdown_workers(self) -> None:
        """torch's name for `close`."""
        self.close()

    def _mark_worker_as_unavailable(self, worker_id: int, shutdown: bool = False) -> None:
        """torch's: stop sending tasks to one worker (here: stop the worker)."""
        self._require_pool().retire(worker_id)

    def _try_get_data(self, timeout: float = 0) -> Any:
        raise _torch_queue_method("_try_get_data")

    def _get_data(self) -> Any:
        raise _torch_queue_method("_get_data")

    def _try_put_index(self) -> None:
        raise _torch_queue_method("_try_put_index")

    def _process_data(self, data: Any, worker_idx: int | None = None) -> Any:
        raise _torch_queue_method("_process_data")

    @staticmethod
    def _clean_up_persistent_workers_atexit(*_: Any) -> None:
        """torch's at-exit hook; conveyor's pools end their workers at exit themselves."""

    def _register_persistent_workers_atexit(self) -> None:
        """See `_clean_up_persistent_workers_atexit`: nothing to register."""

    # --------------------------------------------------------------- shutdown
    def _require_pool(self) -> WorkerPool:
        if self._pool is None:
            raise RuntimeError("the DataLoader's workers were shut down; start a new epoch")
        return self._pool

    def close(self, grace: bool = True) -> None:
        """End every worker now (``grace``: see `WorkerPool.close`). Idempotent; also run on
        garbage collection.

        Inert in a process forked from the owner (a later loader's worker inherits this
        iterator): there the workers, pipes and slabs are the parent's, never to be
        touched, so the copy is only forgotten.
        """
        pool = getattr(self, "_pool", None)
        self._pool = None
        if pool is not None and os.getpid() == getattr(self, "_owner_pid", None):
            pool.close(grace)

    def __del__(self) -> None:
        super().__del__()
        self.close()


def _torch_queue_method(name: str) -> NotImplementedError:
    return NotImplementedError(
        f"{name} is a step of torch's queue-based worker loop, which conveyor's engine does "
        "not have: use next(iterator)."
    )
