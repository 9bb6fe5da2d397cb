"""Text sources over S3 (the tests' SeaweedFS): token files read by byte ranges (index
included), gzip JSONL and Parquet row groups through conveyor's storage layer, giving the
same rows as the local copies, with process workers."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from remote_servers import S3Server

from conveyor import DataLoader
from conveyor.text import (
    JsonlDocuments,
    PackedText,
    Packing,
    ParquetDocuments,
    TokenFiles,
    TokenFileWriter,
)

pytestmark = pytest.mark.timeout(180)
TEXTS = [f"remote document {i} " + "x" * (i % 17) for i in range(120)]


def chars(texts: list[str]) -> list[list[int]]:
    return [[ord(c) for c in text] for text in texts]


def upload(s3: S3Server, local: Path, key: str) -> str:
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **s3.storage_options)
    url = f"s3://conveyor-test/text/{key}"
    fs.put(str(local), url)
    release = getattr(type(fs), "close_session", None)
    if release is not None and getattr(fs, "_s3creator", None) is not None:
        release(fs.loop, fs._s3creator)
    return url


def rows(dataset: PackedText, workers: int) -> list[list[int]]:
    loader = DataLoader(dataset, batch_size=3, num_workers=workers)
    return sorted(r for batch in loader for r in batch["input_ids"].tolist())


def test_text_sources_over_s3_give_the_local_rows(s3_server: S3Server, tmp_path: Path) -> None:
    options: dict[str, Any] = s3_server.storage_options
    rng = np.random.default_rng(0)
    with TokenFileWriter(str(tmp_path / "tok")) as writer:
        for _ in range(80):
            writer.add(rng.integers(1, 5000, int(rng.integers(1, 50))))
    (tmp_path / "docs.jsonl.gz").write_bytes(
        gzip.compress("".join(json.dumps({"text": t}) + "\n" for t in TEXTS).encode())
    )
    pq.write_table(pa.table({"text": TEXTS}), tmp_path / "docs.parquet", row_group_size=25)
    remote = {name: upload(s3_server, tmp_path / name, name)
              for name in ("tok.bin", "tok.idx", "docs.jsonl.gz", "docs.parquet")}  # fmt: skip

    packing = Packing(16, boundaries=False)

    def token_files(prefix: str, **kwargs: Any) -> PackedText:
        return PackedText(TokenFiles(prefix, unit_tokens=300, **kwargs), packing)

    local_tokens = rows(token_files(str(tmp_path / "tok")), 0)
    assert rows(token_files(remote["tok.bin"], storage_options=options), 2) == local_tokens

    def texts(source: Any) -> PackedText:
        return PackedText(source, packing, tokenizer=chars)

    local_jsonl = rows(texts(JsonlDocuments(str(tmp_path / "docs.jsonl.gz"))), 0)
    remote_jsonl = JsonlDocuments(remote["docs.jsonl.gz"], storage_options=options)
    assert rows(texts(remote_jsonl), 2) == local_jsonl
    remote_parquet = ParquetDocuments(remote["docs.parquet"], storage_options=options)
    assert len(remote_parquet.units()) == 5  # footer read once: one unit per row group
    assert rows(texts(remote_parquet), 2) == rows(
        texts(ParquetDocuments(str(tmp_path / "docs.parquet"))), 0
    )
