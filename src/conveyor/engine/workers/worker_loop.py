"""The loop every worker runs, whatever its kind (process, thread, ...).

It knows nothing about pipes or queues: the pool hands it ``receive`` (blocks; returns
``None`` when the worker must stop) and ``send``. What differs between kinds (seeding,
the dataset replica, where `get_worker_info` looks) is asked of ``setup.kind``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from conveyor.engine.resume.placed import is_placed, place
from conveyor.engine.resume.progress import StateCadence
from conveyor.engine.workers import messages as msg
from conveyor.engine.workers.fetch import BatchSkipped, IterableFetcher, MapFetcher, make_fetcher
from conveyor.engine.workers.messages import (
    BatchInfo,
    DatasetControl,
    Reply,
    StartEpoch,
    Task,
    Tuning,
    WorkerMessage,
)
from conveyor.engine.workers.remote_error import RemoteError
from conveyor.engine.workers.request_deltas import take_request_counts
from conveyor.engine.workers.seeding import numpy_seed_state
from conveyor.engine.workers.worker_info import WorkerInfo, WorkerRandom
from conveyor.engine.workers.worker_kind import WorkerSetup
from conveyor.formats.skips import skip_sink
from conveyor.state.plain import RefusedState
from conveyor.transport.state_wire import pack_state

__all__ = ["run_worker"]

Fetcher = MapFetcher | IterableFetcher


def _prepare(setup: WorkerSetup, worker_id: int) -> Any:
    """Seed, publish worker info, shard graphs, run worker_init_fn. Returns the dataset."""
    kind, workers, seeds = setup.kind, setup.workers, setup.seeds
    seed = kind.seed(seeds.base_seed, worker_id)
    dataset = kind.own_dataset(setup.fetch.dataset)
    dataset = _prepared_graph(setup, dataset, worker_id, seeds.shared_seed)
    if is_placed(dataset):
        place(dataset, worker_id, workers.num_workers, setup.world, setup.fetch.samples_per_request)
    rng = WorkerRandom.seeded(seed, numpy_seed_state(seeds.base_seed, worker_id))
    info = WorkerInfo(worker_id, workers.num_workers, seed, dataset, rng, worker_type=kind.name)
    kind.publish(info)
    if workers.worker_init_fn is not None:
        workers.worker_init_fn(worker_id)
    return dataset


def _prepared_graph(setup: WorkerSetup, dataset: Any, worker_id: int, seed: int | None) -> Any:
    if setup.prepare_graph is None:
        return dataset
    return setup.prepare_graph(dataset, worker_id, setup.workers.num_workers, seed)


class _Timers:
    """profile_stages=True: the stage timers of the worker's current graph."""

    def __init__(self, setup: WorkerSetup, dataset: Any) -> None:
        self._make = setup.stage_timers
        self._timers = self._install(dataset)

    def _install(self, dataset: Any) -> Any:
        if self._make is None:
            return None
        timers = self._make(dataset)
        timers.install()
        return timers

    def renew(self, dataset: Any) -> None:
        """A new epoch's graph (a thread worker's is a new copy): time it instead."""
        if self._timers is not None:
            self._timers = self._install(dataset)

    def snapshot(self) -> Any:
        return None if self._timers is None else self._timers.snapshot()


def run_worker(
    setup: WorkerSetup,
    worker_id: int,
    receive: Callable[[], WorkerMessage | None],
    send: Callable[[Reply], None],
) -> None:
    """Serve tasks until told to stop. Never raises for errors in user code."""
    where = f"in DataLoader worker {setup.kind.name} {worker_id}"
    try:
        dataset = _prepare(setup, worker_id)
        fetcher = make_fetcher(setup.fetch, dataset, setup.epoch)
        ended = _resume_stream(setup, worker_id, fetcher)
    except Exception:
        send(Reply(msg.NO_TASK, msg.INIT_ERROR, RemoteError(where)))
        return
    # the dataset's state follows batches as the progress strategy says (engine/resume/progress.py)
    cadence = StateCadence(setup.state_at_end, setup.state_every)
    timers = _Timers(setup, dataset)
    cpu = CpuMeter()
    tuned = False  # autotune set this process's read-ahead (thread workers: the loader's)
    while (message := receive()) is not None:
        if isinstance(message, DatasetControl):
            dataset.apply_control(message.payload)  # before the next task, as promised
            continue
        if isinstance(message, Tuning):
            _set_read_ahead(message.read_ahead, message.max_bytes)
            tuned = True
            continue
        if isinstance(message, StartEpoch):
            if setup.prepare_graph is not None:
                dataset = _prepared_graph(
                    setup, setup.fetch.dataset, worker_id, message.shared_seed
                )
            fetcher = make_fetcher(setup.fetch, dataset, message.epoch)
            ended = False
            cadence.restart()
            timers.renew(dataset)
            send(Reply(msg.NO_TASK, msg.RESUMED))
            continue
        if ended:
            continue  # tasks queued before the main process learnt of the end get no answer
        reply = _answer(message, fetcher, cadence, timers, where, cpu)
        ended = reply.status == msg.END
        send(reply)
    if tuned:
        _set_read_ahead(0)  # the next loader of this process starts from the readers' own


def _set_read_ahead(blocks: int, max_bytes: int | None = None) -> None:
    """Autotune's read-ahead for this process's remote readers. Sent only after remote
    requests were counted, so `conveyor.storage` is imported already (never for local data)."""
    from conveyor.storage.read_window import set_read_ahead_floor

    set_read_ahead_floor(blocks, max_bytes)


class CpuMeter:
    """This worker's CPU time, read at most every `READ_EVERY_S` of wall time: a CPU clock
    read is a system call (about 1 us, against 0.1 us for ``perf_counter``), too dear for
    every tiny batch. The CPU spent since the last read (tasks, and sending their replies)
    goes with the task that ends past the interval, so the totals stay right."""

    READ_EVERY_S = 0.005
    __slots__ = ("_cpu", "_wall")

    def __init__(self) -> None:
        self._wall, self._cpu = time.perf_counter(), time.thread_time()

    def spent(self, now: float) -> float:
        if now - self._wall < self.READ_EVERY_S:
            return 0.0
        cpu = time.thread_time()
        spent, self._wall, self._cpu = cpu - self._cpu, now, cpu
        return spent


def _answer(
    task: Task,
    fetcher: Fetcher,
    cadence: StateCadence,
    timers: _Timers,
    where: str,
    cpu: CpuMeter,
) -> Reply:
    """Fetch one task; the dataset's state goes with it when ``cadence`` says so."""
    started = time.perf_counter()
    collate = fetcher.collate_timer
    collate_started = 0.0 if collate is None else collate.total_s
    try:
        capture = cadence.now()
        with skip_sink().forwarded():  # the main process warns once for the whole loader
            data = fetcher.fetch(task.request, capture)
        state = _packed(fetcher.captured) if capture else None
        stages = timers.snapshot()
        ended = time.perf_counter()
        requests = take_request_counts()
        info = BatchInfo(
            ended - started,
            state,
            fetcher.take_skips(),
            stages,
            fetcher.last_count,
            fetcher.last_digest,
            requests,
            cpu.spent(ended),
            0.0 if collate is None else collate.total_s - collate_started,
        )
        return Reply(task.task_id, msg.OK, data, info)
    except BatchSkipped:
        info = BatchInfo(time.perf_counter() - started, None, fetcher.take_skips(), None)
        return Reply(task.task_id, msg.SKIPPED, None, info)
    except StopIteration:
        # what the stream skipped before it ended still reaches the main process's ledger
        # a stream's state after its end goes with END: a dataset may count its epochs
        state = _packed(fetcher.state()) if cadence.stateful else None
        info = BatchInfo(time.perf_counter() - started, state, fetcher.take_skips(), None)
        info = info._replace(requests=take_request_counts())
        if isinstance(fetcher, IterableFetcher):
            return Reply(task.task_id, msg.END, None, info)
        return Reply(task.task_id, msg.ERROR, RemoteError(where), info)
    except Exception:
        info = BatchInfo(time.perf_counter() - started, None, fetcher.take_skips(), None)
        return Reply(task.task_id, msg.ERROR, RemoteError(where), info)


def _packed(captured: Any) -> Any:
    """The dataset's state, packed for the trip (`conveyor.transport.state_wire`): the main
    process unpacks it only for a checkpoint, and checks there that it is plain data.
    A `RefusedState` (a DataPipe refused an item it holds) goes as it is; one is made if
    the state cannot even be packed."""
    if captured is None or isinstance(captured, RefusedState):
        return captured
    try:
        return pack_state(captured)
    except Exception as error:  # an object pickle cannot carry: not plain data either
        return RefusedState((), type(captured).__name__, f"cannot be copied: {error}")


def _resume_stream(setup: WorkerSetup, worker_id: int, fetcher: Fetcher) -> bool:
    """Put this worker's stream where the checkpoint left it; True if it had ended."""
    streams = setup.streams
    if streams is None:
        return False
    state = streams.states[worker_id]
    if state is not None:
        fetcher.restore(state)  # plain data, checked by load_state_dict in the main process
    for _ in range(streams.skips[worker_id]):
        try:
            fetcher.fetch(setup.fetch.replay_request)
        except StopIteration:
            return True
    return False
