"""torch's module path ``datapipes.iter.streamreader``:
``StreamReaderIterDataPipe`` is conveyor's `StreamReader`.
"""

from conveyor.datapipes.iter.files import StreamReader

__all__ = ["StreamReaderIterDataPipe", "StreamReader"]

StreamReaderIterDataPipe = StreamReader
