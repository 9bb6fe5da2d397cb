"""Language-model data: text and token sources, tokenization in workers, packing, mixtures.

`PackedText` is the dataset: documents of named sources (`ParquetDocuments`,
`JsonlDocuments`, `TokenFiles`, `HFDocuments`), tokenized by a `Tokenizer` in the workers,
packed into rows of ``seq_len`` tokens (`Packing`: concatenate-and-split or best-fit),
mixed by weights in tokens, and resumed exactly on any ranks x workers. `TokenFileWriter`
writes token files; `collate_packed` batches rows for variable-length attention. Guide:
docs/language-models.md.
"""

from conveyor.text.documents import DocumentSource, TextBatch, TokenBatch, Unit
from conveyor.text.hf import HFDocuments
from conveyor.text.jsonl import JsonlDocuments
from conveyor.text.layout import IGNORE_INDEX, Packing
from conveyor.text.parquet import ParquetDocuments
from conveyor.text.rows import build_row, collate_packed
from conveyor.text.stream import PackedText
from conveyor.text.token_files import TokenFiles, TokenFileWriter, read_index
from conveyor.text.tokenize import Tokenizer, hf_tokenizer

__all__ = [
    "IGNORE_INDEX",
    "DocumentSource",
    "HFDocuments",
    "JsonlDocuments",
    "PackedText",
    "Packing",
    "ParquetDocuments",
    "TextBatch",
    "TokenBatch",
    "TokenFileWriter",
    "TokenFiles",
    "Tokenizer",
    "Unit",
    "build_row",
    "collate_packed",
    "hf_tokenizer",
    "read_index",
]
