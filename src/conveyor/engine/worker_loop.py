"""The loop every worker runs, in a process or in a thread.

It knows nothing about pipes or queues: the pool hands it ``receive`` (blocks; returns
``None`` when the worker must stop) and ``send``.
"""

from __future__ import annotations

import copy
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from conveyor.engine import messages as msg
from conveyor.engine.fetch import BatchSkipped, IterableFetcher, MapFetcher, make_fetcher
from conveyor.engine.remote_error import RemoteError
from conveyor.engine.seeding import numpy_seed_state, seed_process_rngs
from conveyor.engine.worker_info import WorkerInfo, WorkerRandom, install_worker_info
from conveyor.state.protocol import has_state


@dataclass(frozen=True)
class WorkerSetup:
    """Everything a worker needs, pickled once for all workers under spawn/forkserver."""

    dataset: Any
    iterable_style: bool
    auto_collation: bool
    collate_fn: Callable[[Any], Any]
    drop_last: bool
    base_seed: int
    num_workers: int
    worker_init_fn: Callable[[int], None] | None
    worker_type: str
    batch_size: int = 1  # iterable-style requests: samples per batch (auto-collation)
    skip_bad_samples: bool = False
    stage_timers: Callable[[Any], Any] | None = None
    graph_hook: Callable[[Any, int, int, int | None], Any] | None = None
    shared_seed: int | None = None
    # Resuming a checkpoint of a stream: per worker, the pickled dataset state to load, or
    # (datasets without state) how many of its batches to read and drop first.
    stream_states: tuple[bytes | None, ...] | None = None
    stream_skips: tuple[int, ...] | None = None


def _where(setup: WorkerSetup, worker_id: int) -> str:
    kind = "thread" if setup.worker_type == "thread" else "process"
    return f"in DataLoader worker {kind} {worker_id}"


def _own_copy(dataset: Any) -> Any:
    """A thread worker's replica: a shallow copy, as a process worker has its own object.

    Attributes set per worker (the ``worker_init_fn`` pattern of torch's docs) stay per
    worker; the data the attributes point to (arrays, lists) is shared, not copied.
    """
    try:
        return copy.copy(dataset)
    except Exception:
        return dataset


def _prepare(setup: WorkerSetup, worker_id: int) -> tuple[Any, int]:
    """Seed, publish worker info, shard graphs, run worker_init_fn. Returns (dataset, seed)."""
    if setup.worker_type == "thread":
        seed = setup.base_seed + worker_id  # global RNGs are shared: see docs/design/shutdown.md
    else:
        seed = seed_process_rngs(setup.base_seed, worker_id)
    dataset = _own_copy(setup.dataset) if setup.worker_type == "thread" else setup.dataset
    if setup.graph_hook is not None:
        dataset = setup.graph_hook(dataset, worker_id, setup.num_workers, setup.shared_seed)
    rng = WorkerRandom.seeded(seed, numpy_seed_state(setup.base_seed, worker_id))
    install_worker_info(
        WorkerInfo(worker_id, setup.num_workers, seed, dataset, setup.worker_type, rng)
    )
    if setup.worker_init_fn is not None:
        setup.worker_init_fn(worker_id)
    return dataset, seed


def _fetcher(setup: WorkerSetup, dataset: Any) -> MapFetcher | IterableFetcher:
    return make_fetcher(
        setup.iterable_style,
        dataset,
        setup.auto_collation,
        setup.collate_fn,
        setup.drop_last,
        setup.skip_bad_samples,
    )


def run_worker(
    setup: WorkerSetup,
    worker_id: int,
    receive: Callable[[], Any],
    send: Callable[[Any], None],
) -> None:
    """Serve tasks until told to stop. Never raises for errors in user code."""
    where = _where(setup, worker_id)
    try:
        dataset, _ = _prepare(setup, worker_id)
        fetcher = _fetcher(setup, dataset)
        ended = _resume_stream(setup, worker_id, dataset, fetcher)
    except Exception:
        send((msg.NO_TASK, msg.INIT_ERROR, RemoteError(where), None))
        return
    stateful = setup.iterable_style and has_state(dataset)
    timers = setup.stage_timers(dataset) if setup.stage_timers is not None else None
    if timers is not None:
        timers.install()
    clock = time.perf_counter
    while (message := receive()) is not None:
        if message[0] == msg.RESUME:
            if setup.graph_hook is not None:
                dataset = setup.graph_hook(setup.dataset, worker_id, setup.num_workers, message[1])
            fetcher = _fetcher(setup, dataset)
            ended = False
            if timers is not None and setup.stage_timers is not None:
                timers = setup.stage_timers(dataset)  # a thread worker's graph is a new copy
                timers.install()
            send((msg.NO_TASK, msg.RESUMED, None, None))
            continue
        _, task_id, request = message
        if ended:
            continue  # tasks queued before the main process learnt of the end get no answer
        started = clock()
        try:
            data = fetcher.fetch(request)
            state = pickle.dumps(dataset.state_dict()) if stateful else None
            stages = timers.snapshot() if timers is not None else None
            info = (clock() - started, state, fetcher.take_skips(), stages)
            send((task_id, msg.OK, data, info))
        except BatchSkipped:
            info = (clock() - started, None, fetcher.take_skips(), None)
            send((task_id, msg.SKIPPED, None, info))
        except StopIteration:
            if not setup.iterable_style:
                send((task_id, msg.ERROR, RemoteError(where), None))
                continue
            ended = True
            send((task_id, msg.END, None, None))
        except Exception:
            send((task_id, msg.ERROR, RemoteError(where), None))


def _resume_stream(
    setup: WorkerSetup, worker_id: int, dataset: Any, fetcher: MapFetcher | IterableFetcher
) -> bool:
    """Put this worker's stream where the checkpoint left it; True if it had ended."""
    if setup.stream_states is not None:
        state = setup.stream_states[worker_id]
        if state is not None and has_state(dataset):
            dataset.load_state_dict(pickle.loads(state))
    if setup.stream_skips is not None:
        for _ in range(setup.stream_skips[worker_id]):
            try:
                fetcher.fetch([None] * setup.batch_size if setup.auto_collation else None)
            except StopIteration:
                return True
    return False
