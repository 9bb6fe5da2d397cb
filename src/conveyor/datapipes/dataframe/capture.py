"""Recording and replaying DataFrame operations (torch's ``CaptureDataFrame``)."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from conveyor.datapipes.base import IterDataPipe

__all__ = ["CaptureDataFrame", "DFIterDataPipe"]


class DFIterDataPipe(IterDataPipe[Any]):
    """An IterDataPipe whose items are DataFrames (torch's marker class)."""

    def _is_dfpipe(self) -> bool:
        return True


class _Expression:
    """A value computed from the captured frame: evaluated against a real one on replay."""

    _evaluate: Callable[[Any], Any]

    def __init__(self, evaluate: Callable[[Any], Any]) -> None:
        self.__dict__["_evaluate"] = evaluate

    def evaluate(self, frame: Any) -> Any:
        return self._evaluate(frame)

    def _binary(self, other: Any, op: Callable[[Any, Any], Any], swap: bool = False) -> _Expression:
        def evaluate(frame: Any) -> Any:
            left, right = self.evaluate(frame), _value(other, frame)
            return op(right, left) if swap else op(left, right)

        return _Expression(evaluate)

    if not TYPE_CHECKING:  # type checkers keep seeing the real attributes

        def __getattr__(self, name: str) -> _Expression:
            if name.startswith("__"):
                raise AttributeError(name)
            return _Expression(lambda frame: getattr(self.evaluate(frame), name))

    def __getitem__(self, key: Any) -> _Expression:
        return _Expression(lambda frame: self.evaluate(frame)[_value(key, frame)])

    def __add__(self, other: Any) -> _Expression:
        return self._binary(other, operator.add)

    def __radd__(self, other: Any) -> _Expression:
        return self._binary(other, operator.add, swap=True)

    def __sub__(self, other: Any) -> _Expression:
        return self._binary(other, operator.sub)

    def __rsub__(self, other: Any) -> _Expression:
        return self._binary(other, operator.sub, swap=True)

    def __mul__(self, other: Any) -> _Expression:
        return self._binary(other, operator.mul)

    def __rmul__(self, other: Any) -> _Expression:
        return self._binary(other, operator.mul, swap=True)

    def __truediv__(self, other: Any) -> _Expression:
        return self._binary(other, operator.truediv)

    def __gt__(self, other: Any) -> _Expression:
        return self._binary(other, operator.gt)

    def __lt__(self, other: Any) -> _Expression:
        return self._binary(other, operator.lt)


def _value(value: Any, frame: Any) -> Any:
    return value.evaluate(frame) if isinstance(value, _Expression) else value


class CaptureDataFrame(_Expression):
    """Stands for a DataFrame: what is done to it is recorded, and ``apply_ops(df)`` does
    it to ``df`` (same use as torch's)."""

    def __init__(self) -> None:
        super().__init__(lambda frame: frame)
        self.__dict__["_ops"] = []
        self._ops: list[tuple[Any, Any]]

    def __setitem__(self, key: Any, value: Any) -> None:
        self._ops.append((key, value))

    def __setattr__(self, name: str, value: Any) -> None:
        self._ops.append((name, value))

    def apply_ops(self, frame: Any) -> Any:
        """Replay the recorded column writes on ``frame``; returns it."""
        for key, value in self._ops:
            frame[key] = _value(value, frame)
        return frame
