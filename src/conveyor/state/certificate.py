"""The data-order certificate: which samples an epoch delivered, as a multiset digest.

Every delivered sample's *identity* is hashed to 64 bits and the hashes are summed
(mod 2**64), with a count beside: a digest that does not depend on the order, changes
with any sample lost (its hash missing) or repeated (counted twice), and adds up across a
resume (the checkpoint carries the sum so far). An interrupted-and-resumed run whose
epoch digest equals the uninterrupted run's delivered the same samples, each as often.

Identities, chosen so that any topology gives the same one for the same sample:
- map-style: the index (`digest_indices`, NumPy for a whole batch);
- streams whose samples carry ``__key__`` (and ``__url__``: `TarShards`, WebDataset
  dicts): the pair, hashed with two CRC-32s (`key_identity`);
- a stream that says where its last sample came from (``identify_last()``:
  `ShardedStream`'s shard position and offset);
- any other stream: its consumer and the sample's index in that consumer's stream, which
  is the same only for the same split of work (such streams resume only on it anyway).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "Certificate",
    "digest_identities",
    "digest_indices",
    "digest_keyed",
    "key_identity",
    "position_identity",
]

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_M1, _M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_SMALL = 64  # batches up to this size are hashed in Python (NumPy's calls cost more)


def _mix(x: int) -> int:
    """SplitMix64's finalizer: a bijection of 64-bit ints that spreads every bit."""
    x = (x + _GOLDEN) & _MASK
    x = ((x ^ (x >> 30)) * _M1) & _MASK
    x = ((x ^ (x >> 27)) * _M2) & _MASK
    return x ^ (x >> 31)


def _mix_array(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    x = values.astype(np.uint64) + np.uint64(_GOLDEN)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(_M1)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(_M2)
    return x ^ (x >> np.uint64(31))


def digest_identities(identities: Iterable[int]) -> int:
    """The digest (sum of mixed hashes, mod 2**64) of 64-bit integer identities."""
    if isinstance(identities, list) and len(identities) > _SMALL:
        array = np.asarray(identities, dtype=np.uint64)
        return int(_mix_array(array).sum(dtype=np.uint64))
    total = 0
    for identity in identities:  # `_mix`, inlined: this runs for every sample
        x = (identity + _GOLDEN) & _MASK
        x = ((x ^ (x >> 30)) * _M1) & _MASK
        x = ((x ^ (x >> 27)) * _M2) & _MASK
        total += x ^ (x >> 31)
    return total & _MASK


def digest_indices(indices: Any) -> tuple[int, int]:
    """``(digest, count)`` of a map-style request: one index, or a list of them."""
    if type(indices) is int:
        return _mix(indices & _MASK), 1
    if len(indices) > _SMALL:
        try:
            array = np.asarray(indices, dtype=np.uint64)  # non-negative ints only
        except (TypeError, ValueError, OverflowError):
            array = np.asarray([_any_identity(i) for i in indices], dtype=np.uint64)
        return int(_mix_array(array).sum(dtype=np.uint64)), len(indices)
    total = 0
    for index in indices:
        identity = index if type(index) is int and index >= 0 else _any_identity(index)
        x = (identity + _GOLDEN) & _MASK
        x = ((x ^ (x >> 30)) * _M1) & _MASK
        x = ((x ^ (x >> 27)) * _M2) & _MASK
        total += x ^ (x >> 31)
    return total & _MASK, len(indices)


def digest_keyed(samples: Sequence[Any]) -> tuple[int, int] | None:
    """``(digest, count)`` of samples by ``__url__`` + ``__key__`` (two CRC-32s), or None
    if one has no key. One pass, no list: this runs for every sample of a stream."""
    total, last_url, high = 0, None, 0
    crc32 = zlib.crc32
    for sample in samples:
        if type(sample) is not dict and not isinstance(sample, Mapping):
            return None
        key = sample.get("__key__")
        if type(key) is not str:
            return None
        url = sample.get("__url__")
        if url is not last_url:
            last_url, high = url, _url_crc(url) << 32
        x = ((crc32(key.encode()) | high) + _GOLDEN) & _MASK
        x = ((x ^ (x >> 30)) * _M1) & _MASK
        x = ((x ^ (x >> 27)) * _M2) & _MASK
        total += x ^ (x >> 31)
    return total & _MASK, len(samples)


def _any_identity(value: Any) -> int:
    """An index that is no non-negative int (a dict's key): its repr, hashed."""
    raw = repr(value).encode()
    return zlib.crc32(raw) | (zlib.crc32(raw, 0x5BD1E995) << 32)


_URL_CRCS: dict[str, int] = {}  # a shard's URL is the same for all its samples


def _url_crc(url: Any) -> int:
    if not isinstance(url, str):
        return 0x5BD1E995
    crc = _URL_CRCS.get(url)
    if crc is None:
        if len(_URL_CRCS) > 4096:
            _URL_CRCS.clear()
        crc = _URL_CRCS[url] = zlib.crc32(url.encode())
    return crc


def key_identity(sample: Any) -> int | None:
    """A sample dict's ``__url__`` + ``__key__`` as 64 bits, or None if it has no key."""
    if type(sample) is not dict and not isinstance(sample, Mapping):
        return None
    key = sample.get("__key__")
    if type(key) is not str:
        return None
    return zlib.crc32(key.encode()) | (_url_crc(sample.get("__url__")) << 32)


def position_identity(consumer: int, index: int) -> int:
    """A stream sample known only by its consumer and its index in that consumer's stream."""
    return ((consumer & 0xFFFFF) << 44) | (index & ((1 << 44) - 1))


class Certificate(NamedTuple):
    """An epoch's digest so far and how many samples it covers."""

    digest: int = 0
    samples: int = 0

    def add(self, part: tuple[int, int]) -> Certificate:
        """With ``part`` = ``(digest, samples)`` of one more batch."""
        return Certificate((self.digest + part[0]) & _MASK, self.samples + part[1])

    @property
    def hex(self) -> str:
        return f"{self.digest:016x}"

    def state(self) -> dict[str, Any]:
        """Plain data for a checkpoint (the digest as hex: JSON keeps it exact)."""
        return {"digest": self.hex, "samples": self.samples}

    @classmethod
    def from_state(cls, state: Any) -> Certificate:
        """The certificate a checkpoint carries; ValueError naming the field if damaged."""
        if state is None:
            return cls()
        if not isinstance(state, Mapping) or set(state) != {"digest", "samples"}:
            raise ValueError("checkpoint field certificate: {'digest', 'samples'} expected")
        digest, count = state["digest"], state["samples"]
        if not isinstance(digest, str) or len(digest) != 16:
            raise ValueError("checkpoint field certificate.digest: 16 hex digits expected")
        try:
            value = int(digest, 16)
        except ValueError:
            raise ValueError("checkpoint field certificate.digest: not hex") from None
        if type(count) is not int or count < 0:
            raise ValueError("checkpoint field certificate.samples: a count >= 0 expected")
        return cls(value, count)
