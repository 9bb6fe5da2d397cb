"""`Frozen`: the base of the loader's option records (immutable, compared and shown by field).

Why not ``@dataclass(frozen=True)``: a dataclass writes and compiles its methods while its
module is imported, 0.4-0.8 ms per class. The five option records cost 3 ms of
``import conveyor``, which a fork-started training script pays before its first batch.
Here the methods are written once, on this base; a record names its fields in
``__slots__``, takes them as ``__init__``'s parameters and, once checked, sets them all
with ``self._set(locals())``.
"""

from __future__ import annotations

from typing import Any, Self

__all__ = ["Frozen"]


class Frozen:
    """Fields set once in ``__init__``; ``replace`` builds a copy, running its checks again."""

    __slots__ = ()

    def _set(self, arguments: dict[str, Any]) -> None:
        """Set every field from ``__init__``'s ``locals()`` (its parameters are the fields)."""
        names: tuple[str, ...] = self.__slots__
        for name in names:
            object.__setattr__(self, name, arguments[name])

    def fields(self) -> dict[str, Any]:
        names: tuple[str, ...] = self.__slots__
        return {name: getattr(self, name) for name in names}

    def replace(self, **changes: Any) -> Self:
        values = self.fields()
        unknown = changes.keys() - values.keys()
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {sorted(unknown)[0]!r}")
        values.update(changes)
        return type(self)(**values)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot assign to field {name!r} of {type(self).__name__}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r} of {type(self).__name__}")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, Frozen)
        return self.fields() == other.fields()

    def __hash__(self) -> int:
        return hash(tuple(self.fields().values()))

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in self.fields().items())
        return f"{type(self).__name__}({shown})"

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuilt, (type(self), self.fields())


def _rebuilt(cls: type[Frozen], fields: dict[str, Any]) -> Frozen:
    return cls(**fields)
