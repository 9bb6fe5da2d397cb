"""torch's module path ``datapipes.dataframe``: capture operations on a DataFrame, replay them.

`CaptureDataFrame` records what is done to it (column reads, arithmetic, column writes)
and ``apply_ops(df)`` replays the record on a real DataFrame. pandas is needed only when a
real DataFrame is made (`dataframe_wrapper`); conveyor does not depend on it.
"""

from conveyor.datapipes.dataframe import dataframe_wrapper
from conveyor.datapipes.dataframe.capture import CaptureDataFrame, DFIterDataPipe

__all__ = ["CaptureDataFrame", "DFIterDataPipe", "dataframe_wrapper"]
