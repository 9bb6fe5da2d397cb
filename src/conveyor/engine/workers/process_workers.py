"""Worker processes (torch's kind): the `WorkerKind` strategy over `ProcessPool`.

Each worker seeds the process-wide ``random``/torch/NumPy generators, owns its dataset
replica by being a process, and publishes `get_worker_info` process-wide. Under
spawn/forkserver one zygote per loader forks each epoch's workers (engine/workers/zygote.py);
batches are pinned by a background thread (engine/workers/pin_thread.py). Large lists of plain
records reach the workers as shared tables (engine/workers/shared_records.py), built when the
loader is.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import warnings
from multiprocessing.context import BaseContext
from typing import TYPE_CHECKING, Any

import torch

from conveyor.engine.workers.pin_thread import PinningPool
from conveyor.engine.workers.pool import WorkerPool
from conveyor.engine.workers.process_pool import ProcessPool
from conveyor.engine.workers.seeding import seed_process_rngs
from conveyor.engine.workers.shared_records import RecordSharing
from conveyor.engine.workers.worker_info import WorkerInfo, install_process_worker_info
from conveyor.engine.workers.worker_kind import Pin, WorkerOptions, WorkerSetup
from conveyor.string_table import warn_copy_on_read
from conveyor.transport.cuda_host import cuda_registrar

if TYPE_CHECKING:
    from conveyor.engine.workers.zygote import Zygote

__all__ = ["ProcessWorkers", "warn_if_cuda_before_fork", "warn_if_too_many_workers"]

# The warnings below point at the user's line: DataLoader(...) or iter(loader).
_STACKLEVEL = 5


def warn_if_too_many_workers(num_workers: int, stacklevel: int = _STACKLEVEL) -> None:
    """torch's warning when more worker processes are asked for than CPUs are usable."""
    try:
        suggested: int | None = len(os.sched_getaffinity(0))
    except AttributeError:
        suggested = os.cpu_count()
    if suggested is not None and num_workers <= suggested:
        return
    detail = (
        f"Our suggested max number of worker in current system is {suggested}, which is "
        "smaller than what this DataLoader is going to create."
        if suggested is not None
        else "DataLoader is not able to compute a suggested max number of worker."
    )
    warnings.warn(
        f"This DataLoader will create {num_workers} worker processes in total. "
        f"{detail} Please be aware that excessive worker creation might get DataLoader "
        "running slow or even freeze, lower the worker number to avoid potential "
        "slowness/freeze if necessary.",
        UserWarning,
        stacklevel=stacklevel,
    )


def warn_if_cuda_before_fork(context: BaseContext | None, stacklevel: int = _STACKLEVEL) -> None:
    """Forked workers cannot use CUDA once the parent initialised it: say so up front."""
    method = (context or multiprocessing.get_context()).get_start_method()
    if method == "fork" and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        warnings.warn(
            "CUDA is initialised in this process and the DataLoader's workers will be forked: "
            "any CUDA call in a worker fails ('Cannot re-initialize CUDA in forked "
            "subprocess'). Keep CUDA out of the dataset, or pass "
            "multiprocessing_context='spawn' (conveyor starts spawn workers from one zygote, "
            "so it stays fast).",
            UserWarning,
            stacklevel=stacklevel,
        )


class ProcessWorkers:
    """Worker processes; keeps the loader's zygote (spawn/forkserver) across epochs."""

    name = "process"
    private_copies = False

    def __init__(self) -> None:
        self._zygote: Zygote | None = None
        # zygotes of an earlier start method: their workers may still serve a live iterator
        self._retired: list[Zygote] = []
        self._warned = False
        self._records = RecordSharing()

    def __reduce__(self) -> tuple[type[ProcessWorkers], tuple[()]]:
        return (ProcessWorkers, ())  # a worker gets the strategy, not the zygote

    @property
    def shared_record_paths(self) -> tuple[str, ...]:
        """Attribute paths of the dataset the workers last read from shared tables."""
        return self._records.last_shared

    # ----- in the main process
    def check_count(self, num_workers: int) -> None:
        if num_workers:
            warn_if_too_many_workers(num_workers)

    def check_start(self, dataset: Any, options: WorkerOptions) -> None:
        self.check_count(options.num_workers)
        if not self._warned:
            self._warned = True
            shared = self._records.last_shared if options.share_records else ()
            warn_copy_on_read(dataset, stacklevel=_STACKLEVEL, shared=shared)
            warn_if_cuda_before_fork(options.multiprocessing_context)

    def warm_up(self, options: WorkerOptions, dataset: Any = None) -> None:
        """spawn/forkserver: start the zygote now, so that its interpreter imports torch
        while the user builds the model; the first ``iter()`` then sends the set-up (and
        the zygote imports the user's main module then). Not inside a zygote that is
        importing the main module (a loader built at a script's top level: torch starts
        nothing there either). A failure here is left for ``iter()`` to raise. Large plain
        lists of ``dataset`` become shared tables now too: ``iter()`` then only checks that
        they did not change."""
        if options.num_workers == 0 or _zygote_importing_main():
            return
        if options.share_records and dataset is not None:
            with contextlib.suppress(Exception):
                self._records.worker_view(dataset)
        with contextlib.suppress(Exception):
            self._zygote_for(options.context)

    def _zygote_for(self, context: BaseContext) -> Zygote | None:
        """The loader's zygote for this start method (a new one if the method changed)."""
        if context.get_start_method() not in ("spawn", "forkserver"):
            return None
        zygote = self._zygote
        if zygote is not None and zygote.start_method == context.get_start_method():
            return zygote
        from conveyor.engine.workers.zygote import Zygote  # only these start methods need it

        if zygote is not None:
            self._retired.append(zygote)  # closed with the loader, not under its workers
        self._zygote = Zygote(context)
        return self._zygote

    def start_pool(self, setup: WorkerSetup, pin: Pin | None) -> tuple[WorkerPool, Pin | None]:
        if _zygote_importing_main():
            from conveyor.engine.workers.zygote import UNGUARDED_MAIN, UnguardedMainError

            main = getattr(sys.modules.get("__mp_main__"), "__file__", "the main module")
            raise UnguardedMainError(UNGUARDED_MAIN.format(main=main))
        context = setup.workers.context
        if setup.workers.share_records and setup.prepare_graph is None:  # not a DataPipe graph
            view = self._records.worker_view(setup.fetch.dataset).dataset
            setup = setup._replace(fetch=setup.fetch._replace(dataset=view))
        # pin_memory=True on CUDA: the slabs themselves become pinned memory, so the pin
        # thread's pin function finds the batch pinned already and copies nothing
        registrar = cuda_registrar() if pin is not None else None
        pool = ProcessPool(setup, context, zygote=self._zygote_for(context), registrar=registrar)
        if pin is None:
            return pool, None
        return PinningPool(pool, pin), None  # pinned in a background thread

    def close(self) -> None:
        zygotes = [*self._retired, *([self._zygote] if self._zygote is not None else [])]
        self._zygote, self._retired = None, []
        for zygote in zygotes:
            zygote.close()
        self._records.close()

    # ----- in a worker
    def seed(self, base_seed: int, worker_id: int) -> int:
        return seed_process_rngs(base_seed, worker_id)

    def own_dataset(self, dataset: Any) -> Any:
        return dataset  # a process has its own copy already

    def publish(self, info: WorkerInfo) -> None:
        install_process_worker_info(info)


def _zygote_importing_main() -> bool:
    """Whether this process is a zygote running the user's main module (the zygote module
    is loaded in every zygote; elsewhere it need not be imported to say no)."""
    zygote = sys.modules.get("conveyor.engine.workers.zygote")
    return zygote is not None and bool(zygote.importing_main())
