"""JSONL (plain, gzip, zstd), Parquet (projection, row groups, token lists) and Hugging
Face datasets as document sources; tokenizers in `Tokenizer`; bad data named by file and
row, raised or counted."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conveyor.formats.errors import ErrorPolicy, SampleError
from conveyor.formats.skips import drain_skips
from conveyor.text import HFDocuments, JsonlDocuments, ParquetDocuments, TextBatch, Tokenizer
from conveyor.text.documents import TokenBatch

TEXTS = [f"document number {i} " + "word " * (i % 7) for i in range(40)]


def docs(source, start: int = 0, errors: ErrorPolicy | None = None) -> list[tuple[int, object]]:
    out = []
    for unit in source.units():
        for batch in source.read(unit, start, errors or ErrorPolicy()):
            if isinstance(batch, TextBatch):
                out += list(zip(batch.numbers, batch.texts, strict=True))
            else:
                for i in range(len(batch)):
                    chunk = batch.tokens[batch.offsets[i] : batch.offsets[i + 1]].tolist()
                    out.append((int(batch.numbers[i]), chunk))
    return out


def write_jsonl(path: Path, lines: list[str]) -> str:
    data = ("\n".join(lines) + "\n").encode()
    if path.suffix == ".gz":
        data = gzip.compress(data)
    elif path.suffix == ".zst":
        import zstandard

        data = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(data)
    return str(path)


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".jsonl.zst"])
def test_jsonl_plain_and_compressed(tmp_path: Path, suffix: str) -> None:
    url = write_jsonl(tmp_path / f"a{suffix}", [json.dumps({"text": t, "id": 1}) for t in TEXTS])
    source = JsonlDocuments(url, batch_size=8, unit_bytes=10**9)
    assert docs(source) == list(enumerate(TEXTS))
    assert docs(source, start=33) == list(enumerate(TEXTS))[33:]


def test_jsonl_bad_lines_raise_with_file_and_line(tmp_path: Path) -> None:
    url = write_jsonl(tmp_path / "bad.jsonl", [json.dumps({"text": "ok"}), "{not json"])
    with pytest.raises(SampleError, match=r"not JSON.*bad.jsonl.*line 1"):
        docs(JsonlDocuments(url))


def test_jsonl_truncated_archive_keeps_what_was_read_and_counts_the_rest(tmp_path: Path) -> None:
    url = write_jsonl(tmp_path / "cut.jsonl.gz", [json.dumps({"text": t}) for t in TEXTS * 2000])
    data = Path(url).read_bytes()
    Path(url).write_bytes(data[: len(data) // 2])
    with pytest.raises(SampleError, match=r"cannot read on.*cut.jsonl.gz"):
        docs(JsonlDocuments(url))
    drain_skips()
    got = docs(JsonlDocuments(url), errors=ErrorPolicy("skip"))
    assert 0 < len(got) < len(TEXTS) * 2000
    assert [t for _, t in got] == (TEXTS * 2000)[: len(got)]
    [record] = drain_skips()
    assert record.url == url and record.estimated


def test_jsonl_bad_lines_skipped_and_counted(tmp_path: Path) -> None:
    lines = [
        json.dumps({"text": "a"}),
        "{not json",
        json.dumps({"body": "no text field"}),
        json.dumps({"text": ""}),
        "",
        json.dumps({"text": "b"}),
    ]
    url = write_jsonl(tmp_path / "mixed.jsonl", lines)
    drain_skips()
    policy = ErrorPolicy("skip")
    assert docs(JsonlDocuments(url), errors=policy) == [(0, "a"), (5, "b")]
    records = drain_skips()
    assert [(r.keys, r.samples) for r in records] == [
        (("line 1",), 1),
        (("line 2",), 1),
        (("line 3",), 1),
    ]
    assert all(r.url == url for r in records)
    assert "empty document" in records[2].reason


def write_parquet(path: Path, rows_per_group: int = 7, texts: list[str] = TEXTS) -> str:
    table = pa.table(
        {"id": list(range(len(texts))), "text": texts, "other": ["x" * 50] * len(texts)}
    )
    pq.write_table(table, path, row_group_size=rows_per_group)
    return str(path)


def test_parquet_row_groups_are_units_and_resume_inside_one(tmp_path: Path) -> None:
    url = write_parquet(tmp_path / "a.parquet")
    source = ParquetDocuments([url, url], batch_size=5)
    units = source.units()
    assert [(u.first, u.stop) for u in units[:6]] == [(a, min(a + 7, 40)) for a in range(0, 42, 7)]
    assert len(units) == 12
    assert [t for _, t in docs(source)] == TEXTS + TEXTS
    got = [
        (n, t)
        for b in source.read(units[2], 2, ErrorPolicy())
        for n, t in zip(b.numbers, b.texts, strict=True)
    ]
    assert got == [(n - 14, TEXTS[n]) for n in range(16, 21)]  # numbered within the group


def test_jsonl_byte_ranges_give_every_line_once(tmp_path: Path) -> None:
    url = write_jsonl(tmp_path / "big.jsonl", [json.dumps({"text": t}) for t in TEXTS])
    for unit_bytes in (1, 37, 100, 10**6):
        source = JsonlDocuments(url, unit_bytes=unit_bytes, batch_size=3)
        assert [t for _, t in docs(source)] == TEXTS
    source = JsonlDocuments(url, unit_bytes=300)
    unit = source.units()[1]
    whole = [t for b in source.read(unit, 0, ErrorPolicy()) for t in b.texts]
    assert [t for b in source.read(unit, 2, ErrorPolicy()) for t in b.texts] == whole[2:]


def test_parquet_reads_only_the_text_column(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = write_parquet(tmp_path / "a.parquet")
    asked: list[object] = []
    original = pq.ParquetFile.read_row_group

    def spy(self, i, columns=None, **kwargs):  # type: ignore[no-untyped-def]
        asked.append(columns)
        return original(self, i, columns=columns, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", spy)
    docs(ParquetDocuments(url))
    assert asked and all(c == ["text"] for c in asked)


def test_parquet_token_lists_are_used_as_they_are(tmp_path: Path) -> None:
    ids = [[1, 2, 3], [4], [], [5, 6]]
    pq.write_table(pa.table({"ids": ids}), tmp_path / "t.parquet")
    drain_skips()
    got = docs(
        ParquetDocuments(str(tmp_path / "t.parquet"), column="ids"), errors=ErrorPolicy("skip")
    )
    assert got == [(0, [1, 2, 3]), (1, [4]), (3, [5, 6])]
    assert [r.keys for r in drain_skips()] == [("row 2",)]


def test_parquet_missing_column_and_corrupt_file(tmp_path: Path) -> None:
    url = write_parquet(tmp_path / "a.parquet")
    with pytest.raises(SampleError, match="no column 'body'"):
        docs(ParquetDocuments(url, column="body"))
    drain_skips()
    assert docs(ParquetDocuments(url, column="body"), errors=ErrorPolicy("skip")) == []
    records = drain_skips()  # one per row group, its rows counted
    assert sum(r.samples for r in records) == len(TEXTS) and {r.url for r in records} == {url}
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1" + b"\x00" * 100)
    with pytest.raises(SampleError, match=r"not a readable Parquet file.*broken"):
        docs(ParquetDocuments(str(broken)))


def test_parquet_corrupt_row_group_is_counted_with_its_rows(tmp_path: Path) -> None:
    url = write_parquet(tmp_path / "a.parquet", rows_per_group=10)
    meta = pq.ParquetFile(url).metadata
    column = meta.row_group(1).column(1)  # the text column of the second group
    start = column.dictionary_page_offset or column.data_page_offset
    data = bytearray(Path(url).read_bytes())
    data[start + 10 : start + column.total_compressed_size - 10] = b"\xff" * (
        column.total_compressed_size - 20
    )
    Path(url).write_bytes(bytes(data))
    with pytest.raises(SampleError, match="row group 1 does not decode"):
        docs(ParquetDocuments(url))
    drain_skips()
    got = docs(ParquetDocuments(url), errors=ErrorPolicy("skip"))
    assert [t for _, t in got] == TEXTS[:10] + TEXTS[20:]
    [record] = drain_skips()
    assert (record.samples, record.keys) == (10, ("rows 10-19",))


def test_hf_dataset_ranges_and_token_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datasets
    import tqdm

    monkeypatch.setattr(tqdm.tqdm, "monitor_interval", 0)  # no process-wide monitor thread
    datasets.disable_progress_bars()

    dataset = datasets.Dataset.from_dict({"text": TEXTS, "ids": [[i, i + 1] for i in range(40)]})
    dataset.save_to_disk(str(tmp_path / "ds"))
    loaded = datasets.load_from_disk(str(tmp_path / "ds"))
    source = HFDocuments(loaded, unit_rows=16, batch_size=5)
    assert [(u.first, u.stop) for u in source.units()] == [(0, 16), (16, 32), (32, 40)]
    got = docs(source)
    assert [t for _, t in got] == TEXTS
    unit = source.units()[1]
    first = next(source.read(unit, 4, ErrorPolicy()))
    assert isinstance(first, TextBatch) and first.numbers[0] == 4 and first.texts[0] == TEXTS[20]
    import pickle

    # memory-mapped: a worker receives the Arrow files' paths, not the table
    assert len(pickle.dumps(source)) < len(pickle.dumps(HFDocuments(dataset, unit_rows=16))) / 2
    tokens = HFDocuments(loaded, column="ids", unit_rows=100)
    assert [t for _, t in docs(tokens)] == [[i, i + 1] for i in range(40)]
    with pytest.raises(ValueError, match="no column"):
        HFDocuments(loaded, column="body")


def test_tokenizer_adds_bos_and_eos_and_accepts_common_outputs() -> None:
    batch = TextBatch([3, 5], ["ab", "c"])
    plain = Tokenizer(lambda texts: [[ord(c) for c in t] for t in texts], bos_id=1, eos_id=2)(batch)
    assert isinstance(plain, TokenBatch)
    assert plain.tokens.tolist() == [1, 97, 98, 2, 1, 99, 2]
    assert plain.offsets.tolist() == [0, 4, 7] and plain.numbers.tolist() == [3, 5]
    as_dict = Tokenizer(lambda texts: {"input_ids": [[7] * len(t) for t in texts]})(batch)
    assert as_dict.tokens.tolist() == [7, 7, 7]
    with pytest.raises(ValueError, match="one sequence of token ids per text"):
        Tokenizer(lambda texts: [[1]])(batch)


def test_hf_tokenizers_fast_tokenizer() -> None:
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import models, pre_tokenizers, trainers

    from conveyor.text import hf_tokenizer

    tok = HFTokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(
        TEXTS, trainers.BpeTrainer(vocab_size=200, special_tokens=["[UNK]", "<s>", "</s>"])
    )
    fn = hf_tokenizer(tok)
    out = Tokenizer(fn, eos_id=tok.token_to_id("</s>"))(TextBatch([0, 1], TEXTS[:2]))
    assert out.tokens[: out.offsets[1] - 1].tolist() == tok.encode(TEXTS[0]).ids
    assert int(out.tokens[out.offsets[1] - 1]) == tok.token_to_id("</s>")
    import pickle

    assert pickle.loads(pickle.dumps(fn))(["document"]) == [tok.encode("document").ids]
