"""torch's module path ``datapipes.iter.fileopener``:
``FileOpenerIterDataPipe`` is conveyor's `FileOpener`.
"""

from conveyor.datapipes.iter.files import FileOpener

__all__ = ["FileOpenerIterDataPipe", "FileOpener"]

FileOpenerIterDataPipe = FileOpener
