"""Walking a DataPipe graph. Same as ``torch.utils.data.graph``.

A re-export (torch's module path): the code is `conveyor.datapipes.graph`.
"""

from conveyor.datapipes.graph import DataPipe, DataPipeGraph, list_dps, traverse_dps

__all__ = ["DataPipe", "DataPipeGraph", "list_dps", "traverse_dps"]
