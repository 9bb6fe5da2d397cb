"""The machinery every DataPipe shares: cursors per pass, state, inputs, user functions.

A DataPipe is a *definition*: its constructor stores configuration and input pipes and does
no work. Pulling the first item creates a `Cursor`, the runtime state of one pass (epoch),
through ``_make_cursor(state)``; ``reset()`` drops it, so the next pull starts over.
Pickling or copying a pipe copies the definition only.

Protocol (RFC #49440):
- ``nonblocking_next()`` returns the next item, raises ``StopIteration`` at the end, or
  raises `NotAvailable` when an item is not ready yet (e.g. behind a channel to another
  thread or process). The exception carries a `Doorbell`; nothing is lost by raising it.
- ``iter(pipe)`` starts a new epoch (or resumes a state given to ``load_state_dict``) and
  returns a blocking iterator that waits on that doorbell whenever `NotAvailable` is
  raised. One iterator per pipe is valid at a time, as in torch; when it is dropped
  (``break``, ``del``) the run is closed, stopping any threads or processes below it.
- ``state_dict()`` / ``load_state_dict()``: versioned dicts nesting the inputs' states; a
  loaded state is resumed by the next pull (or ``iter()``) instead of a fresh start.

Subclasses written in torch's style (``__iter__`` as a generator) work unchanged: they are
pulled through their generator, and their state is the number of items yielded (restored by
replaying that many). Nodes of this package implement ``_make_cursor`` instead so that
`NotAvailable` can pass through them and their state needs no replay.

`IterNode` and `MapNode` are the bases of the public `IterDataPipe` and `MapDataPipe`
(`conveyor.datapipes.base`), which add the typed operations (``dp.map(f).batch(4)``).
Users add their own with ``IterDataPipe.register_datapipe_as_function(name, cls)`` as in
torch; those are found by a ``__getattr__`` that exists only at run time.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from conveyor.datapipes.cursor import (
    FRESH_STATE,
    Cursor,
    StateDict,
    check_version,
)
from conveyor.dataset import Dataset, IterableDataset
from conveyor.engine.offload.channel import NotAvailable
from conveyor.engine.workers.worker_info import get_worker_info
from conveyor.state.plain import NotPlainData, check_plain
from conveyor.state.plain_form import from_plain, register_plain_form, to_plain
from conveyor.torch_compat import (
    TorchDataChunk,
    TorchIterDataPipe,
    TorchMapDataPipe,
    torch_worker_info,
)

__all__ = [
    "AnyNode",
    "BlockingIterator",
    "DataChunk",
    "GeneratorCursor",
    "IterNode",
    "MapNode",
    "scan_inputs",
]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

_RUNTIME_ATTRS = ("_cursor", "_pending", "_parked", "_iterator_id")
_WAIT_SLICE_S = 1.0  # re-poll at least this often, in case a producer died without ringing


class DataChunk(TorchDataChunk[T]):
    """A batch: a list, as yielded by ``batch`` and ``groupby``. Same as torch's DataChunk,
    and a subclass of it (every method overridden: none of torch's code runs).

    Args:
        items: the items of the batch.
    """

    def __init__(self, items: Iterable[T] = ()) -> None:
        list.__init__(self, items)

    @property  # torch keeps a copy in an attribute: read-only here, always current
    def items(self) -> list[T]:  # type: ignore[override]
        """The batch's elements (torch compatibility)."""
        return list(self)

    def as_str(self, indent: str = "") -> str:
        """The batch rendered as ``[a, b, c]`` with a leading indent."""
        return indent + "[" + ", ".join(str(i) for i in self) + "]"

    def __iter__(self) -> Iterator[T]:
        return list.__iter__(self)

    def raw_iterator(self) -> Iterator[T]:
        """Iterate the elements."""
        return list.__iter__(self)


register_plain_form(DataChunk, "DataChunk", list, DataChunk)


class _Registry:
    """Functional names registered at run time (torch's API): ``dp.<name>(...)``.

    Each root class (IterDataPipe, MapDataPipe) owns one ``functions`` dict, shared by its
    subclasses; built-in operations are typed methods, so this serves user extensions.
    """

    functions: ClassVar[dict[str, Callable[..., Any]]]

    def __repr__(self) -> str:
        return type(self).__qualname__

    @classmethod
    def register_function(cls, function_name: str, function: Callable[..., Any]) -> None:
        """Make ``dp.<function_name>(...)`` call ``function(dp, ...)`` (torch's API)."""
        cls.functions[function_name] = function

    @classmethod
    def register_datapipe_as_function(cls, function_name: str, cls_to_register: type) -> None:
        """Make ``dp.<function_name>(...)`` build ``cls_to_register(dp, ...)`` (torch's API)."""
        _register(cls, function_name, cls_to_register)

    if not TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any:
            return _lookup(type(self), type(self).functions, self, name)


class IterNode(IterableDataset[T_co], _Registry):
    """The machinery of an iterable-style DataPipe (`IterDataPipe` adds the operations).

    State is explicit (``state_dict``), pulls may be non-blocking (``nonblocking_next``),
    and subclasses may implement ``_make_cursor`` instead of ``__iter__``. Not
    thread-safe: one consumer drives a pipe at a time.
    """

    functions: ClassVar[dict[str, Callable[..., Any]]] = {}
    restarts_each_pass: ClassVar[bool] = True  # its state is where a pass is, nothing more
    _iter_fn: ClassVar[Callable[[Any], Any] | None] = None
    _cursor: Cursor[T_co] | None = None
    _pending: StateDict | None = None
    _parked: StateDict | None = None
    _iterator_id: int = 0
    _number_of_samples_yielded: int = 0  # items the current iterator returned (torch's name)

    # ----- authoring hooks ------------------------------------------------------------
    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Adopt a torch-style ``__iter__``: it becomes the source of a generator cursor.

        ``iter(dp)`` then goes through the base class (reset, one valid iterator, closing
        on ``break``) for these subclasses too, as torch's metaclass hook does.
        """
        super().__init_subclass__(**kwargs)
        user_iter = cls.__dict__.get("__iter__")
        if user_iter is not None and "_make_cursor" not in cls.__dict__:
            cls._iter_fn = user_iter
            cls.__iter__ = IterNode.__iter__  # type: ignore[method-assign]
            cls._make_cursor = IterNode._make_cursor  # type: ignore[method-assign]

    def _make_cursor(self, state: StateDict | None) -> Cursor[T_co]:
        """Create the runtime of a pass: fresh when ``state`` is None, else resumed."""
        if type(self)._iter_fn is None:
            raise NotImplementedError(
                f"{type(self).__name__} must implement __iter__ (torch style) or _make_cursor"
            )
        return GeneratorCursor(self, state)

    # ----- iteration ------------------------------------------------------------------
    def __iter__(self) -> Iterator[T_co]:
        torch_info = torch_worker_info()
        if torch_info is not None and torch_info.dataset is self and get_worker_info() is None:
            # a worker of torch's own DataLoader iterates this graph: seed and shard it
            # (imported here: only then is it needed)
            from conveyor.datapipes.torch_loader import prepare_for_torch_worker

            prepare_for_torch_worker(self, torch_info)
        if self._pending is None:
            self._restart(None)
        else:
            self._drop_cursor()
        self._iterator_id += 1
        self._number_of_samples_yielded = 0
        return BlockingIterator(self, self._iterator_id)

    def nonblocking_next(self) -> T_co:
        """The next item; raises ``StopIteration`` at the end, `NotAvailable` if not ready."""
        cursor = self._cursor
        if cursor is None:
            cursor = self._active_cursor()
        return cursor.next()

    def _active_cursor(self) -> Cursor[T_co]:
        """The current run's cursor, created (fresh or from a loaded state) if needed."""
        cursor = self._cursor
        if cursor is None:
            state, self._pending, self._parked = self._pending, None, None
            cursor = self._cursor = self._make_cursor(state)
        return cursor

    def reset(self) -> None:
        """Start over: the next pull begins a new epoch (torch's ``reset``)."""
        self._restart(None)

    def close(self) -> None:
        """Release the current run's threads and processes; the next pull starts over."""
        self._drop_cursor()

    def _restart(self, state: Mapping[str, Any] | None) -> None:
        """Drop the run; the next pull starts fresh or, given ``state``, resumes from it."""
        self._drop_cursor()
        self._parked = None
        fresh = state is None or bool(state.get("fresh"))
        self._pending = None if fresh or state is None else dict(state)

    def _forget(self) -> None:
        """Drop runtime state *without* closing it (it belongs to another process)."""
        for key in _RUNTIME_ATTRS:
            self.__dict__.pop(key, None)

    def _drop_cursor(self) -> None:
        cursor, self._cursor = self._cursor, None
        if cursor is not None:
            cursor.close()

    def _park(self) -> None:
        """Close the run but remember its state for ``state_dict()``."""
        cursor = self._cursor
        if cursor is None:
            return
        try:
            self._parked = cursor.state()
        except Exception:
            self._parked = None
        self._drop_cursor()

    # ----- state ----------------------------------------------------------------------
    def state_dict(self) -> StateDict:
        """The state after the last item pulled (a fresh-start marker before the first).

        Plain data (`conveyor.state.plain`), ready for ``torch.save`` and
        ``torch.load(weights_only=True)``: items this graph holds (buffers, a batch being
        filled) are kept as they are, a `DataChunk` in a tagged form
        (`conveyor.state.plain_form`). Raises `TypeError` naming the key path when an item
        is anything else (`NotPlainData`): a checkpoint that could not be loaded is refused
        when taken. (A DataLoader still delivers the batches and raises at its own
        ``state_dict()``, naming this pipe, the worker and the path.)
        """
        try:
            return dict(to_plain(self._held_state()))
        except NotPlainData as error:
            owner = f"{type(self).__name__}.state_dict"
            raise NotPlainData(error.path, error.kind, error.why, owner) from None

    def _held_state(self) -> StateDict:
        """`state_dict` as the cursors hold it, items as they are: what a node reads of its
        inputs while building its own state (one conversion, at the top, for the whole)."""
        if self._cursor is not None:
            return self._cursor.state()
        for kept in (self._pending, self._parked):
            if kept is not None:
                return dict(kept)
        return dict(FRESH_STATE)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from ``state`` at the next pull or ``iter()`` (validated then).

        ``state`` is what `state_dict` returned: plain data, else `TypeError` naming where.
        """
        if not isinstance(state, Mapping) or "version" not in state:
            raise ValueError(f"{type(self).__name__}: a state dict with a 'version' key expected")
        try:
            check_plain(state)
        except NotPlainData as error:  # a checkpoint never holds objects: refused, not run
            raise TypeError(f"{type(self).__name__}.load_state_dict: {error}") from None
        self._restart(from_plain(state))  # tagged forms (a DataChunk) become items again

    # ----- positions (`conveyor.datapipes.positions`) ----------------------------------
    def can_reread(self) -> bool:
        """Whether items of this pipe can be read again from their position (``reread``),
        so a node buffering them checkpoints positions instead of items. Default: no."""
        return False

    def item_position(self) -> tuple[str, int] | None:
        """The position of the item the last pull returned (None if unknown)."""
        cursor = self._cursor
        return None if cursor is None else cursor.item_position()

    def reread(self, positions: Sequence[tuple[str, int]]) -> list[T_co]:
        """The items at ``positions``, in that order, read again (``can_reread()`` pipes)."""
        raise NotImplementedError(f"{type(self).__name__} cannot read items again")

    # ----- graph ----------------------------------------------------------------------
    def is_shardable(self) -> bool:
        """True for nodes that take ``apply_sharding`` (the RFC's ``is_shardable``)."""
        return False

    def is_separate_process(self) -> bool:
        """True for nodes that run their inputs in another process (RFC hint)."""
        return False

    def datapipe_inputs(self) -> list[Any]:
        """The pipes this one reads from (default: found among its attributes)."""
        return scan_inputs(vars(self))

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for key in _RUNTIME_ATTRS:
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


class MapNode(Dataset[T_co], _Registry):
    """The machinery of a map-style DataPipe (`MapDataPipe` adds the operations).

    Map-style nodes are random-access and keep no iteration state, so their state dict is
    just ``{"version": 1}``. ``nonblocking_get(index)`` is the RFC's non-blocking read.
    """

    functions: ClassVar[dict[str, Callable[..., Any]]] = {}

    def __getitem__(self, index: Any) -> T_co:
        raise NotImplementedError(f"{type(self).__name__} must implement __getitem__")

    def nonblocking_get(self, index: Any) -> T_co:
        """``self[index]``; may raise `NotAvailable` in subclasses that fetch remotely."""
        return self[index]

    def reset(self) -> None:
        """Nothing to reset for random-access pipes."""

    def state_dict(self) -> StateDict:
        """Map-style pipes are stateless: ``{"version": 1}``."""
        return {"version": 1}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Validate ``state`` (nothing to restore)."""
        check_version(state, 1, type(self).__name__)

    def datapipe_inputs(self) -> list[Any]:
        """The pipes this one reads from (default: found among its attributes)."""
        return scan_inputs(vars(self))


AnyNode = IterNode[Any] | MapNode[Any]


class GeneratorCursor(Cursor[T_co]):
    """Pulls a torch-style subclass through its ``__iter__`` generator; replays on restore."""

    def __init__(self, node: IterNode[T_co], state: StateDict | None) -> None:
        node.reset()  # torch calls the user's reset() before each __iter__
        iter_fn = type(node)._iter_fn
        assert iter_fn is not None
        produced = iter_fn(node)
        self._it: Iterator[T_co] = _NextCaller(node) if produced is node else iter(produced)
        self._yielded = 0
        if state is not None:
            check_version(state, 1, type(node).__name__)
            for _ in range(int(state["yielded"])):
                next(self._it)
                self._yielded += 1

    def next(self) -> T_co:
        value = next(self._it)
        self._yielded += 1
        return value

    def state(self) -> StateDict:
        return {"version": 1, "yielded": self._yielded}

    def close(self) -> None:
        # A generator was made for this pass alone: closing it runs its ``finally``
        # blocks now. Any other iterator ``__iter__`` returned may be one the pipe keeps
        # and hands out again (torch's test_iterdatapipe_singleton_new_object): closing
        # it would leave the next pass silently empty; it closes itself when dropped.
        if isinstance(self._it, types.GeneratorType):
            self._it.close()


class _NextCaller(Iterator[T_co]):
    """For subclasses whose ``__iter__`` returns ``self`` and that define ``__next__``."""

    def __init__(self, node: IterNode[T_co]) -> None:
        self._node = node

    def __next__(self) -> T_co:
        value: T_co = type(self._node).__next__(self._node)  # type: ignore[attr-defined]
        return value


class BlockingIterator(Iterator[T_co]):
    """What ``iter(pipe)`` returns: waits while the pipe says `NotAvailable`."""

    def __init__(self, pipe: IterNode[T_co], iterator_id: int) -> None:
        self._pipe: IterNode[T_co] | None = pipe
        self._id = iterator_id

    def __iter__(self) -> BlockingIterator[T_co]:
        return self

    def __next__(self) -> T_co:
        pipe = self._pipe
        if pipe is None:
            raise StopIteration
        if pipe._iterator_id != self._id:
            raise RuntimeError(
                "This iterator has been invalidated because another iterator has been created "
                f"from the same IterDataPipe: {pipe!r}. Use .fork() to read a pipe twice."
            )
        attempt = 0
        while True:
            try:
                item = pipe.nonblocking_next()
            except NotAvailable as pending:
                pending.wait(_WAIT_SLICE_S, attempt)
                attempt += 1
                continue
            pipe._number_of_samples_yielded += 1  # torch's count for this iterator
            return item

    def close(self) -> None:
        """Close the pipe's run (threads, processes) if this is still its iterator."""
        pipe, self._pipe = self._pipe, None
        if pipe is not None and pipe._iterator_id == self._id:
            pipe._park()

    def __del__(self) -> None:
        self.close()


def _register(owner: type, function_name: str, cls_to_register: type) -> None:
    registry: dict[str, Callable[..., Any]] = owner.functions  # type: ignore[attr-defined]
    if function_name in registry or hasattr(owner, function_name):
        raise Exception(
            f"Unable to add DataPipe function name {function_name} as it is already taken"
        )

    def build(source: Any, *args: Any, **kwargs: Any) -> Any:
        return cls_to_register(source, *args, **kwargs)

    build.__doc__ = cls_to_register.__doc__
    registry[function_name] = build


def _lookup(owner: type, registry: dict[str, Callable[..., Any]], obj: Any, name: str) -> Any:
    if name.startswith("__") or name not in registry:
        raise AttributeError(f"'{owner.__name__}' object has no attribute '{name}'")
    function = registry[name]
    bound = functools.partial(function, obj)
    bound.__doc__ = function.__doc__
    return bound


_PIPE_TYPES = (IterNode, MapNode, TorchIterDataPipe, TorchMapDataPipe)


def scan_inputs(attributes: Mapping[str, Any]) -> list[Any]:
    """The DataPipes (conveyor's or torch's) held in ``attributes``, directly or in lists,
    tuples, sets and dict values, each once, in attribute order."""
    found: list[Any] = []
    seen: set[int] = set()

    def visit(value: object, depth: int) -> None:
        if isinstance(value, _PIPE_TYPES):
            if id(value) not in seen:
                seen.add(id(value))
                found.append(value)
        elif depth < 3 and isinstance(value, list | tuple | set | frozenset):
            for element in value:
                visit(element, depth + 1)
        elif depth < 3 and isinstance(value, dict):
            for element in value.values():
                visit(element, depth + 1)

    for key, value in attributes.items():
        if key not in _RUNTIME_ATTRS:
            visit(value, 0)
    return found
