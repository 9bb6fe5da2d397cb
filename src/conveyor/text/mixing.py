"""Which source each row of one consumer comes from: the mixture's period, in rows.

The period is `conveyor.mixture.period`'s (every prefix within one row of each source's
share, so every window of ``L`` rows within two), restarted at each change: a
`set_weights`, or a source that ran out (it leaves; the others keep their proportions).
The state is three small fields, whatever the history: the position since the last
change, the weights wanted, and the sources that ran out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from conveyor.mixture.period import Period, period_for
from conveyor.mixture.rates import Rates, decode_shares, encode_shares, rates_from_shares

__all__ = ["RowMix"]


class RowMix:
    """The schedule of one consumer's rows over its sources."""

    def __init__(self, rates: Rates, saved: Mapping[str, Any] | None = None) -> None:
        self._wanted = rates
        self._out: set[int] = set()
        self.position = 0  # rows since the last change
        if saved is not None:
            self._wanted = rates_from_shares(decode_shares(saved["wanted"]))
            self._out = {int(source) for source in saved["out"]}
            self.position = int(saved["position"])
        self._period: Period | None = None
        self._reset_period()

    def _reset_period(self) -> None:
        shares = [0 if i in self._out else q for i, q in enumerate(self._wanted.shares)]
        self._period = period_for(rates_from_shares(shares).shares) if any(shares) else None

    def next_source(self) -> int | None:
        """The source of the next row; None when every source with a share ran out."""
        if self._period is None:
            return None
        return int(self._period.sources[self.position % self._period.length])

    def advance(self) -> None:
        self.position += 1

    def exhausted(self, source: int) -> None:
        """``source`` has no rows left: the others share its place from here on."""
        self._out.add(source)
        self.position = 0
        self._reset_period()

    def follow(self, rates: Rates) -> None:
        """New weights from the next row on."""
        if len(rates.shares) != len(self._wanted.shares):
            raise ValueError("weights for another number of sources")
        self._wanted = rates
        self.position = 0
        self._reset_period()

    def state(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "wanted": encode_shares(self._wanted.shares),
            "out": sorted(self._out),
        }
