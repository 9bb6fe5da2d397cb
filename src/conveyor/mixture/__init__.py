"""Mixtures of named sources by a deterministic low-discrepancy schedule (docs/design/mixture.md).

``rates`` (weights as integer shares of a period), ``period`` (one period of the schedule,
within quota at every prefix), ``schedule`` (segments under weight changes; O(1) random
access by position), ``sources`` (reading sources by item number), ``placement`` (which
positions a worker of a rank produces), ``run`` (one iteration), ``state`` (checkpoints),
``mixture`` (the `Mixture` dataset).
"""

from conveyor.mixture.mixture import Mixture

__all__ = ["Mixture"]
