"""torch's module path ``datapipes.utils.common``: `StreamWrapper` and small helpers."""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["StreamWrapper"]


class StreamWrapper:
    """Wraps a file-like object; closes it when the wrapper is closed or collected.

    Same as torch's: attribute access is delegated to the wrapped object, ``dir()`` shows
    both, pickling pickles the wrapped object (so an unpicklable file fails exactly as the
    file would), and ``repr`` is ``StreamWrapper<...>``.
    """

    def __init__(self, file_obj: Any, parent_stream: StreamWrapper | None = None, name: Any = None):
        self.file_obj = file_obj
        self.child_counter = 0
        self.parent_stream = parent_stream
        self.close_on_last_child = False
        self.name = name
        self.closed = False
        if parent_stream is not None:
            parent_stream.child_counter += 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["file_obj"], name)

    def close(self, *args: Any, **kwargs: Any) -> None:
        """Close the wrapped object (once); a parent waiting on its last child closes too."""
        if self.closed:
            return
        parent = self.parent_stream
        if parent is not None:
            parent.child_counter -= 1
            if not parent.child_counter and parent.close_on_last_child:
                parent.close()
        close = getattr(self.file_obj, "close", None)
        if close is not None:
            close(*args, **kwargs)
        self.closed = True

    def autoclose(self) -> None:
        """Close now if no child stream is open, else when the last child closes."""
        if not self.child_counter:
            self.close()
        else:
            self.close_on_last_child = True

    def __dir__(self) -> list[str]:
        return sorted({*self.__dict__, *type(self).__dict__, *dir(self.file_obj)})

    def __del__(self) -> None:
        if not self.__dict__.get("closed", True):
            self.close()

    def __iter__(self) -> Iterator[Any]:
        yield from self.file_obj

    def __next__(self) -> Any:
        return next(self.file_obj)

    def __repr__(self) -> str:
        if self.name is None:
            return f"StreamWrapper<{self.file_obj!r}>"
        return f"StreamWrapper<{self.name},{self.file_obj!r}>"

    def __getstate__(self) -> Any:
        return self.file_obj

    def __setstate__(self, file_obj: Any) -> None:
        self.file_obj = file_obj
        self.child_counter = 0
        self.parent_stream = None
        self.close_on_last_child = False
        self.name = None
        self.closed = False


def _is_local_fn(fn: Callable[..., Any]) -> bool:
    code = getattr(fn, "__code__", None)
    return code is not None and bool(code.co_flags & inspect.CO_NESTED)


def _check_unpickable_fn(fn: Callable[..., Any]) -> None:
    """Warn, as torch does, when a DataPipe is given a function pickle cannot carry."""
    if not callable(fn):
        raise TypeError(f"A callable function is expected, but {type(fn)} is provided.")
    while isinstance(fn, functools.partial):
        fn = fn.func
    if getattr(fn, "__name__", None) == "<lambda>":
        warnings.warn(
            "Lambda function is not supported by pickle, please use regular python function "
            "or functools.partial instead.",
            stacklevel=3,
        )
    elif _is_local_fn(fn):
        warnings.warn(
            "Local function is not supported by pickle, please use regular python function "
            "or functools.partial instead.",
            stacklevel=3,
        )
