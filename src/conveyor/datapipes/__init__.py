"""DataPipes: composable pipeline nodes (PyTorch RFC #49440, torch's ``datapipes``).

``conveyor.datapipes.iter`` and ``conveyor.datapipes.map`` hold the operations; this
module re-exports the base classes and the non-blocking protocol.
"""

from conveyor.datapipes import iter, map
from conveyor.datapipes.base import (
    Cursor,
    DataChunk,
    IterDataPipe,
    MapDataPipe,
    NotAvailable,
    StateDict,
    functional_datapipe,
)
from conveyor.datapipes.profiling import PipelineProfile, StageProfile, profile_pipeline

__all__ = [
    "Cursor",
    "DataChunk",
    "IterDataPipe",
    "MapDataPipe",
    "NotAvailable",
    "PipelineProfile",
    "StageProfile",
    "StateDict",
    "functional_datapipe",
    "iter",
    "map",
    "profile_pipeline",
]
