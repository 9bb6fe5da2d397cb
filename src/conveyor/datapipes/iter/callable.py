"""Operations that call a user function on every item: ``map``, ``flatmap``, ``collate``."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sized
from typing import Any, TypeVar

from conveyor.datapipes.base import Cursor, IterDataPipe, SourceCursor, StateDict, as_iter_pipe
from conveyor.datapipes.functional import register_op
from conveyor.datapipes.iter.columns import call_on_columns, validate_input_col
from conveyor.datapipes.utils.common import _check_unpickable_fn

__all__ = ["Collator", "CollatorIterDataPipe", "FlatMapper", "Mapper", "MapperIterDataPipe"]

T = TypeVar("T")


class Mapper(IterDataPipe[Any]):
    """Applies ``fn`` to every item (functional name: ``map``). Same as torch's Mapper.

    ``input_col`` selects what ``fn`` receives (see `conveyor.datapipes.iter.columns`);
    ``output_col`` says where the result goes: None replaces ``input_col`` (the first of
    several, the others are removed), ``-1`` appends, a key/index sets it. Tuples are
    rebuilt; lists and dicts are updated in place, as in torch.
    """

    def __init__(
        self,
        datapipe: IterDataPipe[Any],
        fn: Callable[..., Any],
        input_col: Any = None,
        output_col: Any = None,
    ) -> None:
        self.datapipe = as_iter_pipe(datapipe, type(self).__name__)
        _check_unpickable_fn(fn)
        self.fn = fn
        if input_col is None and output_col is not None:
            raise ValueError("`output_col` must be None when `input_col` is None.")
        if isinstance(output_col, list | tuple):
            if len(output_col) > 1:
                raise ValueError("`output_col` must be a single-element list or tuple")
            output_col = output_col[0]
        self.input_col = input_col
        self.output_col = output_col
        validate_input_col(fn, input_col)

    def _apply(self, data: Any) -> Any:
        result = call_on_columns(self.fn, data, self.input_col)
        if self.input_col is None:
            return result
        is_tuple = isinstance(data, tuple)
        target = list(data) if is_tuple else data
        if self.output_col is None:
            if isinstance(self.input_col, list | tuple):
                target[self.input_col[0]] = result
                for col in sorted(self.input_col[1:], reverse=True):
                    del target[col]
            else:
                target[self.input_col] = result
        elif self.output_col == -1:
            target.append(result)
        else:
            target[self.output_col] = result
        return tuple(target) if is_tuple else target

    def _make_cursor(self, state: StateDict | None) -> Cursor[Any]:
        return _MapperCursor(self, state)

    def __len__(self) -> int:
        if isinstance(self.datapipe, Sized):
            return len(self.datapipe)
        raise TypeError(f"{type(self).__name__} instance doesn't have valid length")


class _MapperCursor(SourceCursor[Any]):
    def __init__(self, node: Mapper, state: StateDict | None) -> None:
        super().__init__(node.datapipe, state, type(node).__name__)
        self._apply = node._apply

    def next(self) -> Any:
        return self._apply(self.source.nonblocking_next())


class Collator(Mapper):
    """Collates every item, usually a batch (functional name: ``collate``).

    Same as torch's Collator; the default ``conversion`` is
    `conveyor.collate.default_collate`, and ``collate_fn`` wins when both are given.
    torch's dict-of-columns ``conversion`` (for TorchArrow DataFrames) is not supported.
    """

    def __init__(
        self,
        datapipe: IterDataPipe[Any],
        conversion: Callable[[Any], Any] | None = None,
        collate_fn: Callable[[Any], Any] | None = None,
    ) -> None:
        fn = collate_fn if collate_fn is not None else conversion
        if fn is None:
            from conveyor.collate import default_collate

            fn = default_collate
        if not callable(fn):
            raise TypeError(
                "Collator: `conversion` must be callable (dict conversions for DataFrames "
                "are not supported); pass a collate function"
            )
        super().__init__(datapipe, fn=fn)


class FlatMapper(IterDataPipe[Any]):
    """Applies ``fn`` and yields each element of the iterable it returns (``flatmap``).

    Same as torchdata's FlatMapper: ``fn=None`` flattens the items themselves; ``input_col``
    selects what ``fn`` receives, as in ``map``.
    """

    def __init__(
        self,
        datapipe: IterDataPipe[Any],
        fn: Callable[..., Iterable[Any]] | None = None,
        input_col: Any = None,
    ) -> None:
        self.datapipe = as_iter_pipe(datapipe, type(self).__name__)
        self.fn = fn
        self.input_col = input_col
        if fn is not None:
            validate_input_col(fn, input_col)
        elif input_col is not None:
            raise ValueError("FlatMapper: `input_col` needs a `fn`")

    def _expand(self, data: Any) -> Iterable[Any]:
        if self.fn is None:
            expanded: Iterable[Any] = data
            return expanded
        return call_on_columns(self.fn, data, self.input_col)  # type: ignore[no-any-return]

    def _make_cursor(self, state: StateDict | None) -> Cursor[Any]:
        return _FlatMapperCursor(self, state)


class _FlatMapperCursor(SourceCursor[Any]):
    def __init__(self, node: FlatMapper, state: StateDict | None) -> None:
        super().__init__(node.datapipe, state, type(node).__name__)
        self._expand = node._expand
        self._pending: deque[Any] = deque(state["pending"] if state else ())

    def next(self) -> Any:
        while not self._pending:
            self._pending.extend(self._expand(self.source.nonblocking_next()))
        return self._pending.popleft()

    def extra_state(self) -> StateDict:
        return {"pending": list(self._pending)}


# torch's class name at torch's module path (``torch.utils.data.datapipes...``).
MapperIterDataPipe = Mapper
CollatorIterDataPipe = Collator
register_op("iter.map", Mapper)
register_op("iter.flatmap", FlatMapper)
register_op("iter.collate", Collator)
