"""Checkpoint and resume: the Stateful protocol and the DataLoader's state dict."""

from conveyor.state.protocol import Stateful, has_state

__all__ = ["Stateful", "has_state"]
