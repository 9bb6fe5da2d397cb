"""Drop-in for ``torchdata.stateful_dataloader``: `StatefulDataLoader` and its samplers.

conveyor's own `DataLoader` already checkpoints exactly at any step, so
`StatefulDataLoader` is that loader with torchdata's constructor.
"""

from conveyor.state.protocol import Stateful
from conveyor.stateful_dataloader.loader import StatefulDataLoader

__all__ = ["Stateful", "StatefulDataLoader"]
