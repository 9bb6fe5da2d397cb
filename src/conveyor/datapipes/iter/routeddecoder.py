"""torch's module path ``datapipes.iter.routeddecoder``:
``RoutedDecoderIterDataPipe`` is conveyor's `RoutedDecoder`.
"""

from conveyor.datapipes.iter.decoding import RoutedDecoder

__all__ = ["RoutedDecoderIterDataPipe", "RoutedDecoder"]

RoutedDecoderIterDataPipe = RoutedDecoder
