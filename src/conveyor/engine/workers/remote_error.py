"""Carry an exception raised in a worker back to the main process, type and traceback intact."""

from __future__ import annotations

import sys
import traceback
from typing import NoReturn


class RemoteTraceback(Exception):
    """Holds a worker's formatted traceback; chained as the ``__cause__`` of the re-raise."""

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


class RemoteError:
    """A picklable capture of the exception being handled, made in a worker.

    ``reraise()`` raises an exception of the original type whose message carries the
    worker's traceback ("Caught ValueError in DataLoader worker process 0."), as torch
    does. Exceptions whose constructor needs more than a message are re-raised as
    ``RuntimeError`` carrying the same text; ``KeyError`` keeps its message readable.
    """

    def __init__(self, where: str):
        exc_type, exc, _ = sys.exc_info()
        if exc_type is None or exc is None:
            raise RuntimeError("RemoteError must be created while handling an exception")
        self.exc_type: type[BaseException] = exc_type
        self.where = where
        self.text = "".join(traceback.format_exception(exc_type, exc, exc.__traceback__))

    def message(self) -> str:
        # torch's wording: "Original " + the formatted traceback, whose first line is
        # already "Traceback (most recent call last):" (once, not twice)
        return f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.text}"

    def reraise(self) -> NoReturn:
        msg = self.message()
        if self.exc_type is KeyError:
            # KeyError repr()s its message, which would mangle the multi-line traceback.
            msg = KeyErrorMessage(msg)
        try:
            exc = self.exc_type(msg)
        except Exception:
            raise RuntimeError(msg) from None
        raise exc


class KeyErrorMessage(str):
    """A str whose repr is itself, so ``KeyError(msg)`` prints the traceback unquoted."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str(self)
