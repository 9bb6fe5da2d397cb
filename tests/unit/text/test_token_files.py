"""Token files: the writer's layout (Megatron's MMIDIDX index), reading documents back,
files without an index (nanoGPT's flat stream, split at a separator), units of work."""

from __future__ import annotations

import itertools
import struct
from pathlib import Path

import numpy as np
import pytest
from text_data import documents, token_file

from conveyor.formats.errors import ErrorPolicy
from conveyor.text import TokenFiles, TokenFileWriter, read_index
from conveyor.text.token_files import INDEX_HEADER


def read_all(source: TokenFiles) -> list[list[int]]:
    docs = []
    for unit in source.units():
        for batch in source.read(unit, 0, ErrorPolicy()):
            for i in range(len(batch)):
                docs.append(batch.tokens[batch.offsets[i] : batch.offsets[i + 1]].tolist())
    return docs


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32])
def test_writer_round_trip_and_index_layout(tmp_path: Path, dtype: type) -> None:
    docs = documents(50, seed=1, vocab=60000)
    prefix = token_file(tmp_path / "corpus", docs, dtype)
    data = (tmp_path / "corpus.idx").read_bytes()
    assert data[:9] == INDEX_HEADER
    version, code, sequences, document_count = struct.unpack("<QBQQ", data[9:34])
    assert (version, sequences, document_count) == (1, 50, 51)
    assert code == (8 if dtype is np.uint16 else 4)  # Megatron's uint16 / int32 codes
    _, starts, lengths = read_index(prefix + ".idx")
    assert lengths.tolist() == [len(d) for d in docs]
    assert starts.tolist() == np.concatenate(([0], np.cumsum(lengths)[:-1])).tolist()
    flat = np.fromfile(prefix + ".bin", dtype=np.dtype(dtype))
    assert flat.tolist() == np.concatenate(docs).tolist()
    assert read_all(TokenFiles(prefix, unit_tokens=100)) == [d.tolist() for d in docs]


def test_units_hold_whole_documents_of_at_least_unit_tokens(tmp_path: Path) -> None:
    docs = documents(200, seed=2)
    prefix = token_file(tmp_path / "c", docs)
    units = TokenFiles(prefix, unit_tokens=500).units()
    assert units[0].first == 0 and units[-1].stop == 200
    assert all(a.stop == b.first for a, b in itertools.pairwise(units))
    assert all((u.tokens or 0) >= 500 for u in units[:-1])
    assert sum(u.tokens or 0 for u in units) == sum(len(d) for d in docs)


def test_reading_from_a_document_inside_a_unit(tmp_path: Path) -> None:
    docs = documents(100, seed=3)
    source = TokenFiles(token_file(tmp_path / "c", docs), unit_tokens=400)
    unit = source.units()[1]
    batch = next(source.read(unit, 3, ErrorPolicy()))
    assert int(batch.numbers[0]) == 3
    first = batch.tokens[batch.offsets[0] : batch.offsets[1]]
    assert first.tolist() == docs[unit.first + 3].tolist()


def test_flat_file_split_at_a_separator(tmp_path: Path) -> None:
    eot = 0
    docs = [np.append(d, eot) for d in documents(30, seed=4)]
    prefix = token_file(tmp_path / "flat", docs)
    (tmp_path / "flat.idx").unlink()  # nanoGPT writes no index
    source = TokenFiles(prefix, separator=eot, unit_tokens=10**9)
    assert read_all(source) == [d.tolist() for d in docs]
    whole = TokenFiles(prefix, unit_tokens=10**9)  # no separator: one stream
    assert read_all(whole) == [np.concatenate(docs).tolist()]


def test_writer_refuses_ids_that_do_not_fit(tmp_path: Path) -> None:
    with (
        TokenFileWriter(str(tmp_path / "x"), np.uint16) as writer,
        pytest.raises(ValueError, match="uint32"),
    ):
        writer.add([1, 70000])
    with pytest.raises(ValueError, match="uint16 or uint32"):
        TokenFileWriter(str(tmp_path / "y"), np.int64)


def test_a_broken_index_is_a_clear_error(tmp_path: Path) -> None:
    prefix = token_file(tmp_path / "c", documents(5))
    (tmp_path / "c.idx").write_bytes(b"garbage" * 10)
    with pytest.raises(ValueError, match="MMIDIDX"):
        TokenFiles(prefix).units()
