"""Where a sample's time goes, for advice the counters cannot give.

The counters say the workers are busy on a CPU, not with what. For a map-style dataset
the doctor fetches a few samples in this process under ``cProfile`` and looks for one
pattern it has a named fix for: Pillow decoding whole JPEGs that a crop or resize then
shrinks (``conveyor.vision``'s crop-aware decoders decode at the IDCT scale the crop
needs: docs/guide/decode-at-size.md). A decode already drafted to a smaller scale, or
conveyor's own decoders, are not flagged.
"""

from __future__ import annotations

import cProfile
import pstats
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["FULL_DECODE_SHARE", "Hotspots", "profile_samples"]

FULL_DECODE_SHARE = 0.3  # of a sample's time in full-size decoding: worth decoding smaller
SAMPLES = 3
BUDGET_S = 2.0
_SHRINKS = {"crop", "resize", "resized_crop", "center_crop", "thumbnail", "reduce"}


@dataclass(frozen=True)
class Hotspots:
    """A few samples fetched in this process: seconds each, and what of it is known."""

    sample_s: float
    full_decode_s: float  # Pillow decoding images at their stored size
    shrunk: bool  # then cropped or resized

    @property
    def full_decode_share(self) -> float:
        return self.full_decode_s / self.sample_s if self.sample_s > 0 else 0.0

    @property
    def wants_crop_aware_decode(self) -> bool:
        return self.shrunk and self.full_decode_share >= FULL_DECODE_SHARE


def profile_samples(dataset: Any) -> Hotspots | None:
    """Profile a few samples of a map-style ``dataset`` (None for other data)."""
    try:
        size = len(dataset)
        getitem = dataset.__getitem__
    except (TypeError, AttributeError, NotImplementedError):
        return None
    profile = cProfile.Profile()
    fetched, started = 0, time.perf_counter()
    for index in range(min(SAMPLES, size)):
        profile.enable()
        try:
            getitem(index)
        except Exception:  # the doctor's look must not fail the user's run
            return None
        finally:
            profile.disable()
        fetched += 1
        if time.perf_counter() - started > BUDGET_S:
            break
    if not fetched:
        return None
    return _read(pstats.Stats(profile), (time.perf_counter() - started) / fetched, fetched)


def _read(stats: pstats.Stats, sample_s: float, fetched: int) -> Hotspots:
    entries: dict[tuple[str, int, str], tuple[Any, ...]] = stats.stats  # type: ignore[attr-defined]
    decode_s, shrunk, drafted = 0.0, False, False
    for (filename, _, name), (_, _, _, cumulative, _) in entries.items():
        path = filename.replace("\\", "/")
        if "conveyor/vision" in path:
            drafted = True  # conveyor's crop-aware decoders already
        if "PIL/" in path or path.startswith("<"):
            if name == "draft" or "decode_scaled" in name:
                drafted = True
            if path.endswith("PIL/ImageFile.py") and name == "load":
                decode_s += cumulative
        if name in _SHRINKS or name.endswith(("crop", "resize")):
            shrunk = True
    if drafted:
        decode_s = 0.0
    return Hotspots(sample_s, decode_s / fetched, shrunk)
