"""Checkpoint and resume: the Stateful protocol, plain-data states, the DataLoader's state."""

from conveyor.state.legacy import unpickle_legacy_checkpoint
from conveyor.state.protocol import Stateful, has_state

__all__ = ["Stateful", "has_state", "unpickle_legacy_checkpoint"]
