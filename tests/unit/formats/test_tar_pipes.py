"""Tar-shard DataPipe nodes: torch-style chains, TarShards, resume contract, lazy listing."""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from contracts.check_state_roundtrip import check_state_roundtrip
from conveyor.datapipes.iter import IterableWrapper
from conveyor.datapipes.iter.loading import (
    FileLister,
    FileOpener,
    RoutedDecoder,
    ShardLister,
    StreamReader,
    TarArchiveLoader,
    TarMemberPath,
    TarShards,
    WebDataset,
)
from conveyor.formats import read_members
from conveyor.graph_settings import apply_random_seed


def plain(item: Any) -> Any:
    """Comparable form: streams -> bytes, tensors -> lists, dicts/tuples recursively."""
    if isinstance(item, dict):
        return {key: plain(value) for key, value in item.items()}
    if isinstance(item, tuple | list):
        return type(item)(plain(value) for value in item)
    if isinstance(item, io.BytesIO):
        return item.getvalue()
    if isinstance(item, torch.Tensor | np.ndarray):
        return item.tolist()
    return item


def test_torch_style_chain(shards: list[str]) -> None:
    root = os.path.dirname(shards[0])
    members = FileLister(root, "*.tar").open_files(mode="b").load_from_tar()
    pairs = list(members)
    assert len(pairs) == 60
    path, stream = pairs[0]
    assert path == os.path.join(shards[0], "000000.jpg") and isinstance(path, TarMemberPath)
    assert (path.url, path.member) == (shards[0], "000000.jpg")
    assert isinstance(stream, io.BytesIO)
    samples = list(members.webdataset().decode(image="rgb8"))
    assert [s["__key__"] for s in samples] == [f"{i:06d}" for i in range(20)]
    first = samples[0]
    assert first["__url__"] == shards[0] and first["cls"] == 0 and first["txt"] == "#0"
    assert first["jpg"].shape == (16, 16, 3)


def test_routed_decode_on_pairs(shards: list[str]) -> None:
    pipe = FileOpener(IterableWrapper(shards[:1]), mode="b").load_from_tar().routed_decode()
    decoded = dict(pipe)
    image = decoded[os.path.join(shards[0], "000000.jpg")]
    assert image.dtype == torch.float32 and image.shape == (3, 16, 16)  # torch's default
    assert decoded[os.path.join(shards[0], "000001.cls")] == 1


def test_tar_shards(shards: list[str]) -> None:
    samples = list(TarShards(shards))
    assert [s["cls"] for s in samples] == list(range(20))
    assert samples[3]["jpg"].dtype == torch.uint8 and samples[3]["jpg"].shape == (3, 16, 16)
    raw = next(iter(TarShards(shards, decode=None)))
    assert isinstance(raw["jpg"], bytes) and raw["cls"] == b"0"


def test_brace_and_glob_patterns(shards: list[str]) -> None:
    root = os.path.dirname(shards[0])
    braces = list(ShardLister(os.path.join(root, "shard-{0001..0002}.tar")))
    assert braces == shards[1:3]
    assert list(ShardLister(os.path.join(root, "*.tar"))) == shards


def test_listing_is_lazy(tmp_path: Path) -> None:
    lister = FileLister(str(tmp_path), "*.txt")
    shards = ShardLister(str(tmp_path / "*.tar"))
    (tmp_path / "a.txt").write_text("a")
    (tmp_path / "b.tar").write_bytes(b"")
    assert list(lister) == [str(tmp_path / "a.txt")]
    assert list(shards) == [str(tmp_path / "b.tar")]


def seeded(pipe: Any) -> Any:
    return apply_random_seed(pipe, torch.Generator().manual_seed(7))


GRAPHS: dict[str, Callable[[list[str]], Any]] = {
    "FileLister": lambda s: FileLister(IterableWrapper([os.path.dirname(s[0])] * 2), "*.tar"),
    "StreamReader": lambda s: StreamReader(FileOpener(IterableWrapper(s), mode="b"), chunk=4000),
    "TarArchiveLoader": lambda s: TarArchiveLoader(FileOpener(IterableWrapper(s), mode="b")),
    "WebDataset": lambda s: WebDataset(
        TarArchiveLoader(FileOpener(IterableWrapper(s), mode="b"), stream=False)
    ),
    "RoutedDecoder": lambda s: RoutedDecoder(
        WebDataset(TarArchiveLoader(FileOpener(IterableWrapper(s), mode="b"))), image="rgb8"
    ),
    "ShardLister": lambda s: seeded(ShardLister(s * 3, shuffle=True)),
    "TarShards": lambda s: seeded(TarShards(s, shuffle=True, shuffle_buffer=4)),
    "TarShards-seed": lambda s: TarShards(s, shuffle=True, seed=3, shuffle_buffer=1),
}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_state_roundtrip(name: str, shards: list[str]) -> None:
    expected = check_state_roundtrip(lambda: GRAPHS[name](shards), normalize=plain)
    assert expected


def test_shuffled_tar_shards_cover_everything(shards: list[str]) -> None:
    first = [s["cls"] for s in seeded(TarShards(shards, shuffle=True, shuffle_buffer=4))]
    assert sorted(first) == list(range(20)) and first != list(range(20))
    again = [s["cls"] for s in seeded(TarShards(shards, shuffle=True, shuffle_buffer=4))]
    assert again == first


def test_resume_seeks_instead_of_replaying(shards: list[str]) -> None:
    """After resuming in shard 0, corrupting shard 0's first header must not matter."""
    pipe = TarShards(shards, decode=None)
    it = iter(pipe)
    for _ in range(3):
        next(it)
    state = pipe.state_dict()
    del it
    pipe.close()
    with open(shards[0], "r+b") as archive:
        archive.write(b"\xff" * 100)  # the first member's header is garbage now
    resumed = TarShards(shards, decode=None)
    resumed.load_state_dict(state)
    assert [s["cls"] for s in resumed] == [str(i).encode() for i in range(3, 20)]


def test_member_offsets_are_saved(shards: list[str]) -> None:
    loader = TarArchiveLoader(FileOpener(IterableWrapper(shards), mode="b"), stream=False)
    it = iter(loader)
    for _ in range(4):
        next(it)
    state = loader.state_dict()
    with open(shards[0], "rb") as archive:
        fourth = list(read_members(archive, shards[0]))[3]
    assert state["position"] == fourth.end
    loader.close()


def test_file_opener_modes(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    path.write_text("héllo")
    ((_, text),) = list(FileOpener(IterableWrapper([str(path)]), encoding="utf-8"))
    assert text.read() == "héllo"
    text.close()
    with pytest.raises(ValueError, match="Invalid mode"):
        FileOpener(IterableWrapper([str(path)]), mode="w")
    with pytest.raises(ValueError, match="encoding"):
        FileOpener(IterableWrapper([str(path)]), mode="b", encoding="utf-8")
    chunks = list(StreamReader(FileOpener(IterableWrapper([str(path)]), mode="b"), chunk=2))
    assert b"".join(chunk for _, chunk in chunks) == "héllo".encode()


def test_lengths() -> None:
    assert len(FileLister(".", length=3)) == 3
    with pytest.raises(TypeError, match="valid length"):
        len(FileLister("."))
