"""torch's module path ``datapipes.map.utils``:
``SequenceWrapperMapDataPipe`` is conveyor's `SequenceWrapper`.
"""

from conveyor.datapipes.map.wrappers import SequenceWrapper

__all__ = ["SequenceWrapperMapDataPipe", "SequenceWrapper"]

SequenceWrapperMapDataPipe = SequenceWrapper
