"""torch's module path ``datapipes.iter.filelister``:
``FileListerIterDataPipe`` is conveyor's `FileLister`.
"""

from conveyor.datapipes.iter.files import FileLister

__all__ = ["FileListerIterDataPipe", "FileLister"]

FileListerIterDataPipe = FileLister
