"""Tokenization in the workers: any callable over a batch of texts.

``Tokenizer(fn)`` calls ``fn(texts)`` once per batch of documents, in the worker that reads
them, and accepts what the usual tokenizers return: a list of id lists, Hugging Face
``tokenizers`` ``Encoding`` objects (``.ids``), or a ``transformers`` tokenizer's output
(``{"input_ids": [...]}``). `hf_tokenizer` wraps a ``tokenizers.Tokenizer`` (its
``encode_batch``, in Rust). ``bos_id`` / ``eos_id`` are added around every document when
given (leave them None when the tokenizer adds its own).
"""

from __future__ import annotations

import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from conveyor.text.documents import TextBatch, TokenBatch

__all__ = ["Tokenizer", "hf_tokenizer"]


@dataclass(frozen=True)
class Tokenizer:
    """How texts become token ids.

    Args:
        fn: ``fn(list_of_texts)`` -> one sequence of ids per text (see the module doc).
        bos_id: a token put before every document (None: none).
        eos_id: a token put after every document (None: none).
        batch_size: texts per call of ``fn``.
    """

    fn: Callable[[list[str]], Any]
    bos_id: int | None = None
    eos_id: int | None = None
    batch_size: int = 256

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise TypeError(f"Tokenizer fn must be callable, got {type(self.fn).__name__}")
        if self.batch_size < 1:
            raise ValueError(f"Tokenizer batch_size must be >= 1, got {self.batch_size}")

    def __call__(self, batch: TextBatch) -> TokenBatch:
        ids = _id_lists(self.fn(batch.texts), len(batch.texts))
        # one growing C array: several times faster than numpy.fromiter over a chain
        flat = array.array("q")
        lengths = array.array("q")
        bos, eos = self.bos_id, self.eos_id
        for document in ids:
            before = len(flat)
            if bos is not None:
                flat.append(bos)
            flat.extend(document)
            if eos is not None:
                flat.append(eos)
            lengths.append(len(flat) - before)
        offsets = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(np.frombuffer(lengths, dtype=np.int64), out=offsets[1:])
        tokens = np.frombuffer(flat, dtype=np.int64) if flat else np.zeros(0, np.int64)
        return TokenBatch(np.asarray(batch.numbers, dtype=np.int64), tokens, offsets)


def _id_lists(output: Any, expected: int) -> Sequence[Sequence[int]]:
    if isinstance(output, Mapping):
        output = output["input_ids"]
    listed = list(output)
    if len(listed) != expected:
        raise ValueError(
            f"the tokenizer returned {len(listed)} results for {expected} texts: it must "
            "return one sequence of token ids per text"
        )
    if listed and hasattr(listed[0], "ids"):
        return [encoding.ids for encoding in listed]
    return listed


class hf_tokenizer:
    """``fn`` for `Tokenizer` from a Hugging Face ``tokenizers.Tokenizer`` (fast, Rust).

    Picklable (spawn workers get a copy). In a worker process the tokenizer runs on that
    worker's core (``tokenizers`` turns its own thread pool off after a fork). Use
    `Tokenizer`'s ``bos_id``/``eos_id`` or ``add_special_tokens=True`` (the tokenizer's
    post-processor adds them), not both.
    """

    def __init__(self, tokenizer: Any, *, add_special_tokens: bool = False) -> None:
        self.tokenizer = tokenizer
        self.add_special_tokens = add_special_tokens

    def __call__(self, texts: list[str]) -> list[list[int]]:
        # encode_batch_fast (tokenizers >= 0.20): the same ids, without character offsets
        encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)
        encodings = encode(texts, add_special_tokens=self.add_special_tokens)
        return [encoding.ids for encoding in encodings]
