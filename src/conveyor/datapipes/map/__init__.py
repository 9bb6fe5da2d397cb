"""Map-style DataPipes (``conveyor.datapipes.map``, torch's ``datapipes.map``)."""

from conveyor.datapipes.base import MapDataPipe
from conveyor.datapipes.map.callable import Mapper
from conveyor.datapipes.map.combinatorics import Shuffler
from conveyor.datapipes.map.combining import Concater, Zipper
from conveyor.datapipes.map.converting import MapToIterConverter
from conveyor.datapipes.map.grouping import Batcher
from conveyor.datapipes.map.wrappers import SequenceWrapper

__all__ = [
    "Batcher",
    "Concater",
    "MapDataPipe",
    "MapToIterConverter",
    "Mapper",
    "SequenceWrapper",
    "Shuffler",
    "Zipper",
]
