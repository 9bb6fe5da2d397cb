"""DataPipes: composable pipeline nodes (PyTorch RFC #49440, torch's ``datapipes``).

``conveyor.datapipes.iter`` and ``conveyor.datapipes.map`` hold the operations; this
module re-exports the base classes and the non-blocking protocol. The operations and the
profiler are imported on first use (``conveyor.datapipes.iter``, a typed method such as
``dp.map(f)``, or an attribute of this module): the loader needs only the base classes, and
the operations pull in formats and storage (``import conveyor`` time, S4).
"""

from typing import TYPE_CHECKING

from conveyor.datapipes.base import (
    Cursor,
    DataChunk,
    IterDataPipe,
    MapDataPipe,
    NotAvailable,
    StateDict,
    functional_datapipe,
)
from conveyor.lazy_names import lazy_exports

if TYPE_CHECKING:
    from conveyor.datapipes import iter, map
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

_LAZY = {
    "iter": "conveyor.datapipes.iter",
    "map": "conveyor.datapipes.map",
    "PipelineProfile": "conveyor.datapipes.profiling",
    "StageProfile": "conveyor.datapipes.profiling",
    "profile_pipeline": "conveyor.datapipes.profiling",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals(), __all__)
