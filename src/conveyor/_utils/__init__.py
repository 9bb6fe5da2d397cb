"""torch's private ``torch.utils.data._utils`` path, served for code that reaches into it.

Tests and frameworks import ``_utils.collate``, ``_utils.worker`` and
``MP_STATUS_CHECK_INTERVAL`` from torch; after switching imports they find conveyor's.
"""

import sys

from conveyor._utils import collate, worker

IS_WINDOWS = sys.platform == "win32"
MP_STATUS_CHECK_INTERVAL = 5.0
"""torch's interval (seconds) between liveness checks of workers; conveyor notices a dead
worker through its pipe at once, but code written against torch reads the constant."""
HAS_NUMPY = True  # numpy is a dependency of conveyor

__all__ = ["HAS_NUMPY", "IS_WINDOWS", "MP_STATUS_CHECK_INTERVAL", "collate", "worker"]
