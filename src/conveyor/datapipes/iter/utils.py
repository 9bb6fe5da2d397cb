"""torch's module path ``datapipes.iter.utils``:
``IterableWrapperIterDataPipe`` is conveyor's `IterableWrapper`.
"""

from conveyor.datapipes.iter.wrappers import IterableWrapper

__all__ = ["IterableWrapperIterDataPipe", "IterableWrapper"]

IterableWrapperIterDataPipe = IterableWrapper
