"""WebDataset layout rules: keys, extensions, consecutive grouping, metadata files."""

from __future__ import annotations

import io
import tarfile
from typing import Any

import pytest

from conveyor.formats import SampleError, group_samples, iter_samples, split_name


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("000123.jpg", ("000123", "jpg")),
        ("000123.JPG", ("000123", "jpg")),
        ("000123.seg.png", ("000123", "seg.png")),
        ("train/000123.cls", ("train/000123", "cls")),
        ("dir.v2/000123.jpg", ("dir.v2/000123", "jpg")),
        ("./000123.jpg", ("./000123", "jpg")),
        ("abc.", ("abc", "")),
        ("README", None),
        (".hidden", None),
        ("dir/.hidden.txt", None),
        ("__meta__", None),
        ("__index__.json", ("__index__", "json")),
    ],
)
def test_split_name(name: str, expected: tuple[str, str] | None) -> None:
    assert split_name(name) == expected


def triples(names: list[str], url: str = "u.tar") -> list[tuple[str, str, Any]]:
    return [(url, name, name.encode()) for name in names]


def test_consecutive_members_form_samples() -> None:
    samples = list(group_samples(triples(["1.jpg", "1.cls", "README", "2.jpg", "2.cls", "1.txt"])))
    assert samples == [
        {"__key__": "1", "__url__": "u.tar", "jpg": b"1.jpg", "cls": b"1.cls"},
        {"__key__": "2", "__url__": "u.tar", "jpg": b"2.jpg", "cls": b"2.cls"},
        {"__key__": "1", "__url__": "u.tar", "txt": b"1.txt"},  # not consecutive: new sample
    ]


def test_samples_never_span_shards() -> None:
    samples = list(group_samples(triples(["1.jpg"], "a.tar") + triples(["1.cls"], "b.tar")))
    assert [(s["__url__"], sorted(s)) for s in samples] == [
        ("a.tar", ["__key__", "__url__", "jpg"]),
        ("b.tar", ["__key__", "__url__", "cls"]),
    ]


def test_duplicate_extension_is_an_error() -> None:
    with pytest.raises(SampleError, match="duplicate") as caught:
        list(group_samples(triples(["1.jpg", "1.JPG"])))
    assert (caught.value.url, caught.value.key) == ("u.tar", "1")


# The WebDataset library leaves its tar file for the garbage collector to close.
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_webdataset_library_parity(tmp_path: Any) -> None:
    """Same samples as the WebDataset library's own grouping, when it is installed."""
    import webdataset as wds

    path = tmp_path / "s.tar"
    names = ["a/1.jpg", "a/1.seg.png", "a/1.cls", "README", "a/2.jpg", "b/2.jpg", "3.TXT"]
    with tarfile.open(path, "w") as archive:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = len(name)
            archive.addfile(info, io.BytesIO(name.encode()))
    ours = list(iter_samples(str(path)))
    theirs = list(wds.WebDataset(str(path), shardshuffle=False, empty_check=False))
    assert [{k: v for k, v in s.items() if k != "__local_path__"} for s in theirs] == ours
