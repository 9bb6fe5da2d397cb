"""Fast spawn/forkserver start-up: one clean process imports and unpickles once, then forks.

torch starts every spawn/forkserver worker as a fresh interpreter: each one imports
torch and unpickles the dataset, and a non-persistent loader pays that again every
epoch. Here the user's context starts one *zygote* per DataLoader; it unpickles the
worker set-up once and forks the workers of each epoch. The zygote is single-threaded
and was started clean, so its forks are as safe as spawned processes (no inherited
threads, locks or CUDA state from the main process).

The zygote is a fresh interpreter that conveyor starts itself (for spawn and forkserver
alike) when the loader is built, so that it imports torch and conveyor while the user
builds the model. It runs none of the user's code then: the main module (the user's
script, needed to unpickle classes defined there) is imported only at the first ``iter()``,
as spawn/forkserver workers started then would, through multiprocessing's own
``spawn.prepare``. A script that starts loading at its top level, outside
``if __name__ == "__main__":``, would start loading again there: the zygote refuses, and the
main process raises a `RuntimeError` that names the guard (torch's workers die with
Python's bootstrapping error instead). Before it forks an epoch's workers the zygote takes
the main process's environment variables, ``sys.path`` and working directory as they are
at that ``iter()``, as torch's workers, started then, would.

The zygote reaps its workers (through pidfds) and reports each exit code on the epoch's
status pipe; the main process watches the workers through pidfds of its own, so a dead
worker is noticed at once, exactly as with directly started processes. The worker
set-up is re-pickled at every epoch and re-sent only when its bytes changed, so dataset
mutations between epochs are seen exactly as with torch. Shared record tables in it
(engine/shared_records.py) travel as file descriptors beside the pickle: its size, and
the zygote's start, do not grow with them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import pickle
import signal
import subprocess
import sys
import threading
import traceback
import weakref
from collections.abc import Callable
from multiprocessing import connection, reduction, spawn
from multiprocessing.context import BaseContext
from typing import Any

from conveyor.engine.seeding import EpochSeeds
from conveyor.engine.shutdown import stop_processes
from conveyor.engine.worker_kind import WorkerSetup
from conveyor.transport.fd_pickle import dumps_with_fds, loads_with_fds

JOIN_TIMEOUT_S = 1.0  # how long to wait for an exit report or the zygote's own exit
_SETUP, _FORK, _ENVIRONMENT = "setup", "fork", "environment"
_NO_SEEDS = EpochSeeds(0)  # the cached set-up is the same for every epoch's seeds
_importing_main = False  # set in the zygote while it runs the user's main module

UNGUARDED_MAIN = (
    "this script starts DataLoader workers at its top level, and spawn/forkserver start-up "
    "runs that top level again to import the script's code (here in conveyor's zygote, "
    "while importing {main}): an attempt has been made to start a new process before the "
    "current process has finished its bootstrapping phase. Put the code that iterates the "
    'loader under `if __name__ == "__main__":` (see "Safe importing of main module" in '
    "Python's multiprocessing documentation), or use multiprocessing_context='fork'."
)


def importing_main() -> bool:
    """True in a zygote while it runs the user's main module: no worker may start then."""
    return _importing_main


class UnguardedMainError(RuntimeError):
    """Raised in the zygote when the main module it imports starts loading."""


@dataclasses.dataclass(frozen=True)
class _PassedConnection:
    """Stands for a Connection whose descriptor follows the request (``send_handle``).

    Passing descriptors ourselves avoids multiprocessing's resource-sharer thread.
    """

    index: int
    readable: bool
    writable: bool


@dataclasses.dataclass(frozen=True)
class SetupRef:
    """Stands for the zygote's cached `WorkerSetup` in a worker's arguments."""

    seeds: EpochSeeds


# ------------------------------------------------------------------ zygote side
def _connections(args: tuple[Any, ...]) -> list[connection.Connection]:
    return [a for a in args if isinstance(a, connection.Connection)]


def _fork_one(target: Callable[..., None], args: tuple[Any, ...], close_in_child: list[Any]) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 0
    try:
        for item in close_in_child:
            if isinstance(item, int):
                os.close(item)
            else:
                item.close()
        target(*args)
    except BaseException:
        traceback.print_exc()  # a failure of conveyor's own bootstrap: say why
        code = 1
    finally:
        os._exit(code)


class _Epoch:
    """The zygote's record of one epoch's workers: pidfds and the status pipe."""

    def __init__(self, status: connection.Connection):
        self.status = status
        self.pidfds: dict[int, tuple[int, int]] = {}  # pidfd -> (worker index, pid)

    def report_exit(self, pidfd: int) -> None:
        index, pid = self.pidfds.pop(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        with contextlib.suppress(OSError):
            self.status.send((index, pid, os.waitstatus_to_exitcode(status)))
        if not self.pidfds:
            self.status.close()


def zygote_boot(fd: int) -> None:
    """The zygote interpreter's entry point: ``fd`` is its end of the control pipe."""
    zygote_main(connection.Connection(fd))


def zygote_main(control: connection.Connection) -> None:
    """Entry point of the zygote process (a fresh interpreter started by `Zygote`).

    Importing this module imported torch and conveyor, so every fork inherits them. The
    zygote ends when the control pipe reaches EOF (the DataLoader closed it, or died).
    """
    import torch

    from conveyor.engine.worker_process import exit_with_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_with_parent(os.getppid())
    torch.set_num_threads(1)  # no intra-op thread pool may exist when we fork
    state = _ZygoteState()
    epochs: list[_Epoch] = []
    while True:
        live = {fd: e for e in epochs for fd in e.pidfds}
        for item in connection.wait([control, *live]):
            if isinstance(item, int):
                live[item].report_exit(item)
                continue
            try:
                message = control.recv()
            except (EOFError, OSError):
                message = None
            if message is None:
                _kill_all(epochs)
                return
            if message[0] == _ENVIRONMENT:
                _adopt_environment(*message[1])
            elif message[0] == _SETUP:  # shared tables' descriptors follow the pickle
                fds = [reduction.recv_handle(control) for _ in range(message[3])]
                state.take_setup(message[1], message[2], fds)
            elif message[0] == _FORK:
                _answer_fork(control, state, message[1], epochs)
        epochs = [e for e in epochs if e.pidfds]


class _ZygoteState:
    """The zygote's cached worker set-up, or why it has none."""

    def __init__(self) -> None:
        self.setup: WorkerSetup | None = None
        self.error: str | None = None
        self.prepared = False

    def take_setup(
        self, blob: bytes, preparation: dict[str, Any] | None, table_fds: list[int]
    ) -> None:
        """Import the main module first (once), then unpickle the set-up (its shared tables
        from ``table_fds``); keep any error."""
        global _importing_main
        try:
            if preparation is not None and not self.prepared:
                self.prepared = True
                _importing_main = True
                try:
                    spawn.prepare(preparation)
                except BaseException:
                    _close_quietly(table_fds)  # loads_with_fds closes them otherwise
                    raise
                finally:
                    _importing_main = False
            self.setup = loads_with_fds(blob, table_fds)
            self.error = None
        except UnguardedMainError as error:
            self.setup, self.error = None, _with_script_lines(error, preparation or {})
        except BaseException:
            self.setup, self.error = None, traceback.format_exc()


def _close_quietly(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _with_script_lines(error: BaseException, preparation: dict[str, Any]) -> str:
    """The error's message and the lines of the user's script it came through."""
    script = preparation.get("init_main_from_path")
    frames = traceback.extract_tb(error.__traceback__)
    lines = [frame for frame in frames if script is None or frame.filename == script]
    return f"{error}\n\nwhere the script started it:\n{''.join(traceback.format_list(lines))}"


def _answer_fork(
    control: connection.Connection, state: _ZygoteState, request: bytes, epochs: list[_Epoch]
) -> None:
    """Fork an epoch's workers and send their pids, or send why not (a str)."""
    if state.setup is None:
        count, _ = pickle.loads(request)
        for _ in range(count + 1):  # the status pipe and the workers' pipes: not needed
            os.close(reduction.recv_handle(control))
        control.send(state.error or "no worker set-up was received")
        return
    try:
        epoch = _fork_epoch(control, state.setup, request, epochs)
    except Exception:
        control.send(traceback.format_exc())
        return
    epochs.append(epoch)
    control.send([pid for _, pid in epoch.pidfds.values()])


def _adopt_environment(environ: dict[str, str], path: list[str], cwd: str) -> None:
    """The main process's environment, import path and working directory as of ``iter()``:
    what torch's spawn workers, started then, would have had (the zygote started earlier)."""
    os.environ.clear()
    os.environ.update(environ)
    sys.path[:] = path
    with contextlib.suppress(OSError):
        os.chdir(cwd)


def _receive_connections(control: connection.Connection, args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(
        connection.Connection(reduction.recv_handle(control), a.readable, a.writable)
        if isinstance(a, _PassedConnection)
        else a
        for a in args
    )


def _fork_epoch(
    control: connection.Connection, setup: WorkerSetup, request: bytes, epochs: list[_Epoch]
) -> _Epoch:
    _, jobs = pickle.loads(request)
    status = connection.Connection(reduction.recv_handle(control), readable=False)
    jobs = [(target, _receive_connections(control, args)) for target, args in jobs]
    epoch = _Epoch(status)
    inherited: list[Any] = [control, status] + [e.status for e in epochs]
    inherited += [fd for e in epochs for fd in e.pidfds]
    for index, (target, raw_args) in enumerate(jobs):
        args = tuple(
            setup._replace(seeds=a.seeds) if isinstance(a, SetupRef) else a for a in raw_args
        )
        later = [c for _, other in jobs[index + 1 :] for c in _connections(other)]
        pid = _fork_one(target, args, inherited + later + list(epoch.pidfds))
        for conn in _connections(args):
            conn.close()
        epoch.pidfds[os.pidfd_open(pid)] = (index, pid)
    return epoch


def _kill_all(epochs: list[_Epoch]) -> None:
    for epoch in epochs:
        for pidfd, (_, pid) in list(epoch.pidfds.items()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            os.close(pidfd)


# -------------------------------------------------------------------- main side
class ZygoteWorker:
    """A worker forked by the zygote, with the parts of `multiprocessing.Process` we use."""

    def __init__(self, pid: int, index: int, status: _StatusReader):
        self.pid = pid
        self._index = index
        self._status = status
        self.sentinel = os.pidfd_open(pid)

    @property
    def exitcode(self) -> int | None:
        return self._status.exitcode(self._index)

    def join(self, timeout: float | None = None) -> None:
        if connection.wait([self.sentinel], timeout):
            self._status.read_until(self._index, JOIN_TIMEOUT_S)

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def _signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self.sentinel, signum)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.sentinel)
        self._status.close()


class _StatusReader:
    """Exit codes of one epoch's workers, as reported by the zygote."""

    def __init__(self, conn: connection.Connection, count: int):
        self._conn = conn
        self._codes: dict[int, int] = {}
        self._open = count

    def exitcode(self, index: int) -> int | None:
        self.read_until(index, 0.0)
        return self._codes.get(index)

    def read_until(self, index: int, timeout_s: float) -> None:
        while index not in self._codes and not self._conn.closed:
            try:
                if not self._conn.poll(timeout_s):
                    return
                worker, _, code = self._conn.recv()
            except (EOFError, OSError):
                return
            self._codes[worker] = code

    def close(self) -> None:
        self._open -= 1
        if self._open == 0:
            self._conn.close()


class Zygote:
    """Main-process handle of one zygote; owned by a DataLoader, shared by its epochs."""

    def __init__(self, context: BaseContext):
        self._context = context
        self.start_method = context.get_start_method()
        self._lock = threading.Lock()
        self._setup_digest = b""
        self._environment_digest = b""
        self._preparation_sent = False
        self._control, child_end = context.Pipe(duplex=True)
        try:
            self._process = _Interpreter(child_end.fileno())
        finally:
            child_end.close()
        self._finalizer = weakref.finalize(self, _stop_zygote, self._control, self._process)

    def _preparation(self) -> dict[str, Any] | None:
        """What a spawn child is told to set up (main module, ``sys.path``, cwd, ...):
        sent with the first set-up only, so the zygote runs the user's script at the first
        ``iter()``, never for a loader that is only built."""
        if self._preparation_sent:
            return None
        self._preparation_sent = True
        data: dict[str, Any] = spawn.get_preparation_data("conveyor-zygote")
        data["authkey"] = bytes(data["authkey"])  # pickled only while spawning otherwise
        return data

    def start_workers(
        self, setup: WorkerSetup, jobs: list[tuple[Callable[..., None], tuple[Any, ...]]]
    ) -> list[ZygoteWorker]:
        """Fork one worker per ``(target, args)``; a `SetupRef` in args becomes ``setup``.

        Connections in ``args`` travel to the zygote and are closed here by the caller.
        """
        # shared record tables travel as descriptors: the blob stays small, whatever their size
        blob, table_fds = dumps_with_fds(setup._replace(seeds=_NO_SEEDS))
        digest = hashlib.blake2b(blob, digest_size=16).digest()
        status_r, status_w = self._context.Pipe(duplex=False)
        handles: list[int] = []
        plain_jobs = []
        for target, args in jobs:
            plain_args = []
            for a in args:
                if isinstance(a, connection.Connection):
                    plain_args.append(_PassedConnection(len(handles), a.readable, a.writable))
                    handles.append(a.fileno())
                else:
                    plain_args.append(a)
            plain_jobs.append((target, tuple(plain_args)))
        request = pickle.dumps((len(handles), plain_jobs), protocol=pickle.HIGHEST_PROTOCOL)
        pid = self._process.pid
        # what a worker started now would inherit (the zygote may have started long ago)
        environment = (dict(os.environ), list(sys.path), os.getcwd())
        environment_digest = hashlib.blake2b(pickle.dumps(environment), digest_size=16).digest()
        with self._lock:
            if environment_digest != self._environment_digest:
                self._control.send((_ENVIRONMENT, environment))
                self._environment_digest = environment_digest
            if digest != self._setup_digest:
                self._control.send((_SETUP, blob, self._preparation(), len(table_fds)))
                for fd in table_fds:
                    reduction.send_handle(self._control, fd, pid)
                self._setup_digest = digest
            self._control.send((_FORK, request))
            reduction.send_handle(self._control, status_w.fileno(), pid)
            for handle in handles:
                reduction.send_handle(self._control, handle, pid)
            pids = self._control.recv()
        status_w.close()
        if isinstance(pids, str):
            raise RuntimeError(f"the DataLoader's zygote could not start workers: {pids}")
        status = _StatusReader(status_r, len(jobs))
        return [ZygoteWorker(pid, i, status) for i, pid in enumerate(pids)]

    def close(self) -> None:
        self._finalizer()


class _Interpreter:
    """The zygote's interpreter, started directly (not through multiprocessing, whose spawn
    and forkserver children run the user's main module before anything else), with the
    parts of `multiprocessing.Process` that `stop_processes` uses."""

    def __init__(self, control_fd: int) -> None:
        command = spawn.get_command_line()  # the executable and interpreter flags spawn uses
        prefix = command[: command.index("-c")] if "-c" in command else [spawn.get_executable()]
        code = (
            f"import sys; sys.path[:] = {sys.path!r}; "
            f"from conveyor.engine.zygote import zygote_boot; zygote_boot({control_fd})"
        )
        self._popen = subprocess.Popen([*prefix, "-c", code], pass_fds=(control_fd,))
        self.pid = self._popen.pid

    @property
    def exitcode(self) -> int | None:
        return self._popen.poll()

    def join(self, timeout: float | None = None) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._popen.wait(timeout)

    def terminate(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self._popen.terminate()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self._popen.kill()

    def close(self) -> None:
        pass


def _stop_zygote(control: connection.Connection, process: Any) -> None:
    with contextlib.suppress(OSError):
        control.send(None)
    stop_processes([process], JOIN_TIMEOUT_S)
    control.close()
    process.close()
