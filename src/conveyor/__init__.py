"""conveyor: a drop-in replacement for ``torch.utils.data``.

``import conveyor`` gives the same public names as ``torch.utils.data``; the submodules
mirror torch's (``conveyor.sampler``, ``conveyor.dataset``, ...), so imports by path keep
working after replacing ``torch.utils.data`` with ``conveyor``.
"""

import gc as _gc
from typing import TYPE_CHECKING

# Importing makes only long-lived objects (classes, functions), so the collections it would
# set off scan the whole heap, torch's included, and free nothing: ~2.5 ms of `import
# conveyor`, which a fork-started script pays before its first batch. They are held off
# until the package is in.
_collecting = _gc.isenabled()
_gc.disable()
try:
    from conveyor.collate import default_collate, default_convert
    from conveyor.dataloader import DataLoader
    from conveyor.dataset import (
        ChainDataset,
        ConcatDataset,
        Dataset,
        IterableDataset,
        StackDataset,
        Subset,
        TensorDataset,
        random_split,
    )
    from conveyor.distributed import DistributedSampler
    from conveyor.engine.workers.worker_info import WorkerInfo, get_worker_info
    from conveyor.lazy_names import lazy_exports
    from conveyor.sampler import (
        BatchSampler,
        RandomSampler,
        Sampler,
        SequentialSampler,
        SubsetRandomSampler,
        WeightedRandomSampler,
    )
    from conveyor.string_table import StringTable
    from conveyor.torch_compat import DatasetKind as _DatasetKind
finally:
    if _collecting:
        _gc.enable()

if TYPE_CHECKING:
    from conveyor.datapipes import DataChunk, IterDataPipe, MapDataPipe, functional_datapipe
    from conveyor.datapipes._decorator import (
        argument_validation,
        guaranteed_datapipes_determinism,
        non_deterministic,
        runtime_validation,
        runtime_validation_disabled,
    )
    from conveyor.datapipes.dataframe import DFIterDataPipe
    from conveyor.datapipes.iter.shards import TarShards
    from conveyor.device import DeviceLoader, to_device
    from conveyor.engine.loop.autotune import AutotuneOptions
    from conveyor.engine.workers.sample_seeding import sample_generators
    from conveyor.global_shuffle import GlobalShuffleSampler
    from conveyor.mixture import Mixture
    from conveyor.sharded_stream import ShardedStream
    from conveyor.state.loader_state import merge_checkpoints

__version__ = "0.1.0"

__all__ = [
    "AutotuneOptions",
    "BatchSampler",
    "ChainDataset",
    "ConcatDataset",
    "DFIterDataPipe",
    "DataChunk",
    "DataLoader",
    "Dataset",
    "DeviceLoader",
    "DistributedSampler",
    "GlobalShuffleSampler",
    "IterDataPipe",
    "IterableDataset",
    "MapDataPipe",
    "Mixture",
    "RandomSampler",
    "Sampler",
    "SequentialSampler",
    "ShardedStream",
    "StackDataset",
    "StringTable",
    "Subset",
    "SubsetRandomSampler",
    "TarShards",
    "TensorDataset",
    "WeightedRandomSampler",
    "WorkerInfo",
    "_DatasetKind",
    "argument_validation",
    "default_collate",
    "default_convert",
    "functional_datapipe",
    "get_worker_info",
    "guaranteed_datapipes_determinism",
    "merge_checkpoints",
    "non_deterministic",
    "random_split",
    "runtime_validation",
    "runtime_validation_disabled",
    "sample_generators",
    "to_device",
]


# Imported on first use: most programs never build DataPipes, mix, shuffle globally, stream
# tar shards or use data frames, and these modules cost `import conveyor` time (S4: a fork
# loader's cold start includes it; torch's own names are imported with torch).
_LAZY = {
    "DataChunk": "conveyor.datapipes",
    "IterDataPipe": "conveyor.datapipes",
    "MapDataPipe": "conveyor.datapipes",
    "functional_datapipe": "conveyor.datapipes",
    "argument_validation": "conveyor.datapipes._decorator",
    "guaranteed_datapipes_determinism": "conveyor.datapipes._decorator",
    "non_deterministic": "conveyor.datapipes._decorator",
    "runtime_validation": "conveyor.datapipes._decorator",
    "runtime_validation_disabled": "conveyor.datapipes._decorator",
    "GlobalShuffleSampler": "conveyor.global_shuffle",
    "DFIterDataPipe": "conveyor.datapipes.dataframe",
    "Mixture": "conveyor.mixture",
    "ShardedStream": "conveyor.sharded_stream",
    "merge_checkpoints": "conveyor.state.loader_state",
    "TarShards": "conveyor.datapipes.iter.shards",
    "sample_generators": "conveyor.engine.workers.sample_seeding",
    "DeviceLoader": "conveyor.device",
    "to_device": "conveyor.device",
    "AutotuneOptions": "conveyor.engine.loop.autotune",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals(), __all__, submodules=True)
