"""Settings applied across a DataPipe graph. Same as ``torch.utils.data.graph_settings``.

A re-export (torch's module path): the code is `conveyor.datapipes.settings`.
"""

from conveyor.datapipes.settings import (
    SHARDING_PRIORITIES,
    apply_random_seed,
    apply_sharding,
    apply_shuffle_settings,
    get_all_graph_pipes,
)

__all__ = [
    "SHARDING_PRIORITIES",
    "apply_random_seed",
    "apply_sharding",
    "apply_shuffle_settings",
    "get_all_graph_pipes",
]
