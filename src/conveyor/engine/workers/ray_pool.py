"""Ray actors as a worker pool: the loop of engine/workers/worker_loop.py in each actor.

Each logical worker (what the iterator deals tasks to) is served by one actor. Every
message becomes one actor call whose result is the replies the loop made for it; Ray runs
an actor's calls one at a time in the order sent, so prefetching is Ray's queue. The main
process waits on all outstanding calls at once (``ray.wait``).

A lost actor (killed, crashed, its node gone) costs no sample: its unanswered calls are
sent again, to a replacement actor with the same worker id while ``max_worker_restarts``
lasts and the cluster has room for one (a stream's replacement first replays the batches
its predecessor already answered), else, for map-style datasets, to the surviving actors.
The pool raises `WorkerDiedError`, naming the lost workers and nodes, only when no actor
can take them. Actors are spread over the nodes unless ``ray_remote_args`` chooses a
``scheduling_strategy`` (engine/workers/ray_workers.py), so that one lost node takes few.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import ray
import ray.exceptions

from conveyor.engine.workers.messages import Reply, StartEpoch, WorkerMessage
from conveyor.engine.workers.pool import WorkerDiedError
from conveyor.engine.workers.ray_payload import to_object_store
from conveyor.engine.workers.worker_kind import WorkerSetup
from conveyor.engine.workers.worker_loop import run_worker

__all__ = ["RayPool", "WorkerActor"]

Message = WorkerMessage  # Task, StartEpoch, DatasetControl or Tuning (no reply)
_WAIT_SLICE_S = 0.25  # longest wait in Ray's code before Python code runs again
_IDLE = "idle"  # the loop asks for its next message
_EXITED = "exited"  # the loop returned (its set-up failed, or it was told to stop)
_LOST = (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError)


class WorkerActor:
    """One worker loop in a thread of an actor's process, stepped one message at a time."""

    def __init__(self) -> None:
        self._inbox: queue.SimpleQueue[Message | None] = queue.SimpleQueue()
        self._outbox: queue.SimpleQueue[Reply | str] = queue.SimpleQueue()
        self._exited = False

    def start(self, setup: WorkerSetup, worker_id: int) -> tuple[str, int, list[Reply], int]:
        """Prepare the worker (seed, info, worker_init_fn); its node id, pid and replies."""
        threading.Thread(
            target=self._run, args=(setup, worker_id), name="conveyor-ray-worker", daemon=True
        ).start()
        replies, size = self._drain()
        return ray.get_runtime_context().get_node_id(), os.getpid(), replies, size

    def step(self, message: Message) -> tuple[list[Reply], int]:
        """Hand the loop one message; the replies it made (none for a task past a stream's
        end) and the bytes of their arrays."""
        if self._exited:
            return [], 0
        self._inbox.put(message)
        return self._drain()

    def stop(self) -> None:
        if not self._exited:
            self._inbox.put(None)

    def _run(self, setup: WorkerSetup, worker_id: int) -> None:
        try:
            run_worker(setup, worker_id, self._receive, self._outbox.put)
        finally:
            self._outbox.put(_EXITED)

    def _receive(self) -> Message | None:
        self._outbox.put(_IDLE)
        return self._inbox.get()

    def _drain(self) -> tuple[list[Reply], int]:
        replies: list[Reply] = []
        total = 0
        while True:
            item = self._outbox.get()
            if isinstance(item, str):
                self._exited = item == _EXITED
                return replies, total
            payload, size = to_object_store(item.payload)
            replies.append(item._replace(payload=payload))
            total += size


@dataclass
class _Call:
    """One message in flight to an actor, for logical worker ``worker_id``."""

    worker_id: int
    message: Message | None  # None: the actor's start
    replay: bool = False  # a stream's replay for a replacement: its replies are dropped


@dataclass
class _Actor:
    handle: Any
    worker_id: int  # the worker id its loop runs as (seed, get_worker_info)
    node_id: str = "?"
    calls: dict[Any, _Call] = field(default_factory=dict)  # ObjectRef -> call


class RayPool:
    """Owns the actors of one iterator; `close()` kills them all."""

    def __init__(self, setup: WorkerSetup, remote_args: dict[str, Any], max_restarts: int):
        if not ray.is_initialized():
            ray.init()  # honours RAY_ADDRESS
        self._setup = setup
        self._setup_ref: Any = ray.put(setup)
        self._actor_class: Any = ray.remote(WorkerActor).options(**remote_args)
        self._demand = _actor_demand(remote_args)
        self._no_room = False
        self._restarts_left = max_restarts
        self._streams = setup.fetch.iterable_style
        num_workers = setup.workers.num_workers
        self._actors = [self._start_actor(worker_id) for worker_id in range(num_workers)]
        self._serving: list[_Actor | None] = list(self._actors)  # logical worker -> actor
        self._history: list[list[Message]] = [[] for _ in range(num_workers)]  # streams
        self._ready: deque[tuple[int, Reply]] = deque()
        self._lost: list[str] = []
        self.resent = 0  # calls sent again after their actor was lost
        self._bytes = 0
        self._owner_pid = os.getpid()
        self._closed = False

    # ------------------------------------------------------------------ actors
    def _start_actor(self, worker_id: int) -> _Actor:
        actor = _Actor(self._actor_class.remote(), worker_id)
        ref = actor.handle.start.remote(self._setup_ref, worker_id)
        actor.calls[ref] = _Call(worker_id, None)
        return actor

    def _call(self, actor: _Actor, worker_id: int, message: Message, replay: bool = False) -> None:
        ref = actor.handle.step.remote(message)
        actor.calls[ref] = _Call(worker_id, message, replay)

    def send(self, worker_id: int, message: WorkerMessage) -> None:
        actor = self._serving[worker_id]
        if actor is None:
            raise WorkerDiedError(self._lost_message())
        if self._streams:
            if isinstance(message, StartEpoch):
                self._history[worker_id] = []
            self._history[worker_id].append(message)
        self._call(actor, worker_id, message)

    # ----------------------------------------------------------------- replies
    def receive(self, timeout_s: float | None) -> list[tuple[int, Reply]]:
        refs = [ref for actor in self._actors for ref in actor.calls]
        if not self._ready and refs:
            done = self._wait_for_one(refs, timeout_s)
            if done:
                done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            for ref in done:
                self._take(ref)
        ready = list(self._ready)
        self._ready.clear()
        return ready

    def _wait_for_one(self, refs: list[Any], timeout_s: float | None) -> list[Any]:
        """``ray.wait`` in slices: a wait inside Ray's C++ code takes no signal, so Ctrl-C
        and test timeouts would hang behind an actor whose death Ray never reports."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            left = _WAIT_SLICE_S if deadline is None else deadline - time.monotonic()
            done, _ = ray.wait(refs, num_returns=1, timeout=max(0.0, min(_WAIT_SLICE_S, left)))
            if done or (deadline is not None and time.monotonic() >= deadline):
                return list(done)

    def _take(self, ref: Any) -> None:
        actor = next((a for a in self._actors if ref in a.calls), None)
        if actor is None:
            return  # its actor was lost or retired while this call was answered
        call = actor.calls.pop(ref)
        try:
            answer = ray.get(ref)
        except _LOST as error:
            actor.calls[ref] = call
            self._replace(actor, error)
            return
        if call.message is None:
            actor.node_id, _, replies, size = answer
        else:
            replies, size = answer
        self._bytes += size
        if not call.replay:
            self._ready.extend((call.worker_id, reply) for reply in replies)

    # -------------------------------------------------------------- lost actors
    def _replace(self, lost: _Actor, error: BaseException) -> None:
        """Send a lost actor's unanswered calls to a replacement or to the survivors."""
        self._actors.remove(lost)
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        self._lost.append(f"worker {lost.worker_id} on node {lost.node_id} ({reason})")
        calls = list(lost.calls.values())
        served = sorted({call.worker_id for call in calls} | self._served_by(lost))
        if self._restarts_left > 0 and self._cluster_has_room():
            self._restarts_left -= 1
            self._restart(lost, served, calls)
            return
        if self._streams or not self._actors:
            for worker_id in served:
                self._serving[worker_id] = None
            raise WorkerDiedError(self._lost_message())
        for turn, worker_id in enumerate(served):
            self._serving[worker_id] = self._actors[(lost.worker_id + turn) % len(self._actors)]
        for call in calls:
            target = self._serving[call.worker_id]
            if call.message is not None and target is not None:
                self._call(target, call.worker_id, call.message)
                self.resent += 1

    def _restart(self, lost: _Actor, served: list[int], calls: list[_Call]) -> None:
        actor = self._start_actor(lost.worker_id)
        self._actors.append(actor)
        for worker_id in served:
            self._serving[worker_id] = actor
        if self._streams:
            unanswered = {id(call.message) for call in calls}
            for message in self._history[lost.worker_id]:
                replay = id(message) not in unanswered
                self._call(actor, lost.worker_id, message, replay=replay)
                self.resent += not replay
            return
        for call in calls:
            if call.message is not None:
                self._call(actor, call.worker_id, call.message)
                self.resent += 1

    def _cluster_has_room(self) -> bool:
        """Whether the cluster has the resources of one more actor free now (a replacement
        it cannot place would wait forever). Ray's cluster-wide sums: a demand split over
        two nodes' remainders would pass, which whole-CPU demands never are."""
        available: dict[str, float] = ray.available_resources()  # type: ignore[no-untyped-call]
        room = all(available.get(name, 0.0) >= amount for name, amount in self._demand.items())
        self._no_room = self._no_room or not room
        return room

    def _served_by(self, actor: _Actor) -> set[int]:
        return {worker_id for worker_id, a in enumerate(self._serving) if a is actor}

    def _lost_message(self) -> str:
        why = (
            "the cluster had no room for a replacement"
            if self._no_room
            else ("max_worker_restarts spent")
        )
        return (
            f"DataLoader's ray workers were lost and no worker is left to take their tasks "
            f"({why}; a stream's worker cannot move to another): {'; '.join(self._lost)}"
        )

    # -------------------------------------------------------------- lifecycle
    def retire(self, worker_id: int) -> None:
        """The worker's stream ended: stop its loop (its actor ends with the pool)."""
        actor = self._serving[worker_id]
        if actor is not None and self._served_by(actor) == {worker_id}:
            actor.handle.stop.remote()

    @property
    def bytes_received(self) -> int:
        """Bytes of the arrays and tensors the actors returned through the object store."""
        return self._bytes

    @property
    def lost_workers(self) -> list[str]:
        """The workers lost so far (worker id, node, Ray's reason), oldest first."""
        return list(self._lost)

    def close(self, grace: bool = True) -> None:
        """Kill every actor now (Ray frees their objects; ``grace`` changes nothing) and drop
        every Ray handle and reference this pool holds. Idempotent.

        Dropping them here, not whenever the collector reaches this pool, keeps Ray objects
        out of garbage that a forked process could inherit (see engine/workers/forking.py).
        """
        if self._closed:
            return
        self._closed = True
        if os.getpid() != self._owner_pid:
            return  # a forked copy: the actors are the parent's, never to be touched
        actors, self._actors = self._actors, []
        if ray.is_initialized():
            for actor in actors:
                ray.kill(actor.handle, no_restart=True)
        for actor in actors:
            actor.calls.clear()
            actor.handle = None
        self._serving = [None] * len(self._serving)
        self._ready.clear()
        self._history = [[] for _ in self._history]
        self._setup_ref = None
        self._actor_class = None


def _actor_demand(remote_args: dict[str, Any]) -> dict[str, float]:
    """The resources one actor asks Ray for (an actor needs 1 CPU to be placed unless
    ``num_cpus`` says otherwise)."""
    demand = {"CPU": float(remote_args.get("num_cpus", 1))}
    if remote_args.get("num_gpus"):
        demand["GPU"] = float(remote_args["num_gpus"])
    if remote_args.get("memory"):
        demand["memory"] = float(remote_args["memory"])
    for name, amount in (remote_args.get("resources") or {}).items():
        demand[str(name)] = float(amount)
    return {name: amount for name, amount in demand.items() if amount > 0}
