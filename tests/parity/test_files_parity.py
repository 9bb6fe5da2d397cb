"""File and decoding DataPipes: the same items as torch's FileLister, FileOpener,
StreamReader and RoutedDecoder on the same files."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.utils.data.datapipes.iter as torch_iter
from PIL import Image

from conveyor.datapipes.iter import IterableWrapper
from conveyor.datapipes.iter.loading import FileLister, FileOpener, RoutedDecoder, StreamReader

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    files: dict[str, bytes] = {
        "b/2.txt": "två".encode(),
        "b/1.json": json.dumps({"k": [1, 2]}).encode(),
        "a.cls": b"7",
        "a.bin": b"\x00\x01",
        "deep/er/x.txt": b"x",
    }
    image = io.BytesIO()
    Image.fromarray(np.arange(48, dtype=np.uint8).reshape(4, 4, 3)).save(image, format="PNG")
    files["img.png"] = image.getvalue()
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    return tmp_path


def plain(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return (str(value.dtype), value.tolist())
    return value


def read_and_close(pair: tuple[str, Any]) -> tuple[str, Any]:
    path, stream = pair
    try:
        return path, stream.read()
    finally:
        stream.close()


@pytest.mark.parametrize("recursive", [False, True])
@pytest.mark.parametrize("masks", ["", "*.txt", ["*.txt", "*.cls"]])
def test_file_lister(tree: Path, recursive: bool, masks: Any) -> None:
    roots = [str(tree), str(tree / "b")]
    ours = list(FileLister(roots, masks, recursive=recursive))
    theirs = list(torch_iter.FileLister(roots, masks, recursive=recursive))
    assert ours == theirs


def test_opener_and_reader(tree: Path) -> None:
    paths = sorted(str(p) for p in tree.rglob("*") if p.is_file())
    ours = list(StreamReader(FileOpener(IterableWrapper(paths), mode="b"), chunk=3))
    theirs = list(
        torch_iter.StreamReader(torch_iter.FileOpener(torch_iter.IterableWrapper(paths), "b"), 3)
    )
    assert ours == theirs
    texts = [str(tree / "b/2.txt"), str(tree / "deep/er/x.txt")]
    assert [read_and_close(pair) for pair in FileOpener(IterableWrapper(texts))] == [
        read_and_close(pair) for pair in torch_iter.FileOpener(texts, mode="r")
    ]


def test_routed_decoder(tree: Path) -> None:
    paths = [str(tree / n) for n in ("b/2.txt", "b/1.json", "a.cls", "a.bin", "img.png")]
    ours = list(RoutedDecoder(FileOpener(IterableWrapper(paths), mode="b")))
    theirs = list(torch_iter.RoutedDecoder(torch_iter.FileOpener(paths, mode="b")))
    assert [(p, plain(v)) for p, v in ours] == [(p, plain(v)) for p, v in theirs]
    assert os.path.basename(ours[-1][0]) == "img.png"
