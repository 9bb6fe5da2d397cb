"""Callables for DataPipe tests, at module level so spawn workers can import them."""

from __future__ import annotations


def times_ten(x: int) -> int:
    return x * 10


def plus_hundred(x: int) -> int:
    return x + 100


def is_even(x: int) -> bool:
    return x % 2 == 0
