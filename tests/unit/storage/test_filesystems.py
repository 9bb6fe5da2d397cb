"""Listing and opening: local paths natively, other schemes through fsspec (memory://)."""

from __future__ import annotations

import ast
import builtins
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest

import conveyor.storage
from conveyor.storage import (
    expand_braces,
    get_filesystem,
    is_local,
    list_files,
    open_url,
    resolve_urls,
    scheme_of,
)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for name in ("b.tar", "a.tar", "note.txt", "sub/c.tar", "sub/deeper/d.tar"):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(name.encode())
    return tmp_path


@pytest.fixture
def memory_tree() -> Iterator[str]:
    fs = fsspec.filesystem("memory")
    root = "memory://conveyor-test"
    for name in ("x/1.tar", "x/2.tar", "x/n.txt", "x/sub/3.tar"):
        fs.pipe(f"{root}/{name}", name.encode())
    yield root
    fs.rm(root, recursive=True)


def test_schemes() -> None:
    assert scheme_of("s3://b/k") == "s3" and scheme_of("HTTPS://h/x") == "https"
    assert scheme_of("/a/b") == "" and scheme_of("c:/x") == ""
    assert is_local("file:///tmp/x") and is_local("rel/path") and not is_local("gs://b/x")


def test_local_listing(tree: Path) -> None:
    root = str(tree)
    assert list_files(root, "*.tar") == [f"{root}/a.tar", f"{root}/b.tar"]
    assert list_files(root, ["*.txt", "a.*"]) == [f"{root}/a.tar", f"{root}/note.txt"]
    assert list_files(root, "*.tar", recursive=True) == [
        f"{root}/a.tar",
        f"{root}/b.tar",
        f"{root}/sub/c.tar",
        f"{root}/sub/deeper/d.tar",
    ]
    assert list_files(f"{root}/sub/*.tar") == [f"{root}/sub/c.tar"]
    assert list_files(f"{root}/a.tar") == [f"{root}/a.tar"]
    assert list_files(f"file://{root}", "a.tar") == [f"file://{root}/a.tar"]
    with pytest.raises(FileNotFoundError, match="does not exist"):
        list_files(f"{root}/nope")


def test_local_open(tree: Path) -> None:
    with open_url(str(tree / "a.tar")) as stream:
        assert stream.read() == b"a.tar"
    with open_url(f"file://{tree}/sub/c.tar") as stream:
        assert stream.read() == b"sub/c.tar"


def test_memory_filesystem(memory_tree: str) -> None:
    root = f"{memory_tree}/x"
    files = list_files(root, "*.tar")
    assert [f.rsplit("/", 1)[-1] for f in files] == ["1.tar", "2.tar"]
    assert all(f.startswith("memory://") for f in files)
    assert len(list_files(root, "*.tar", recursive=True)) == 3
    with open_url(files[0]) as stream:
        assert stream.read() == b"x/1.tar"
    assert len(resolve_urls(f"{root}/*.tar")) == 2
    assert get_filesystem(root) is get_filesystem(root)  # one instance per process


def test_patterns(tree: Path) -> None:
    assert expand_braces("s-{8..10}.tar") == ["s-8.tar", "s-9.tar", "s-10.tar"]
    assert expand_braces("s-{008..010}.tar") == ["s-008.tar", "s-009.tar", "s-010.tar"]
    assert expand_braces("{a,b}/{0..1}") == ["a/0", "a/1", "b/0", "b/1"]
    assert expand_braces("{3..1}") == ["3", "2", "1"]
    assert expand_braces("plain.tar") == ["plain.tar"]
    root = str(tree)
    resolved = resolve_urls([f"{root}/{{b,a}}.tar", f"{root}/sub/*.tar"])
    assert resolved == [f"{root}/b.tar", f"{root}/a.tar", f"{root}/sub/c.tar"]
    with pytest.raises(FileNotFoundError, match="no shard matches"):
        resolve_urls(f"{root}/*.zip")


def test_missing_fsspec_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_fsspec(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "fsspec" or name.startswith("fsspec."):
            raise ImportError("No module named 'fsspec'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_fsspec)
    monkeypatch.delitem(sys.modules, "fsspec", raising=False)
    with pytest.raises(ImportError, match=r"pip install conveyor\[remote\]"):
        get_filesystem("s3://bucket/key", {"anon": True, "unique": 1})
    assert get_filesystem("/local/path") is get_filesystem("file:///x")  # still fine


def test_storage_never_imports_torch() -> None:
    for path in Path(conveyor.storage.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not any(n == "torch" or n.startswith("torch.") for n in names), path


def test_a_synchronous_s3_driver_is_refused_with_what_to_install() -> None:
    """pip once resolved s3fs to 0.4.2 (synchronous) to please another package's pins:
    the error must name the driver and the fix, not ``no attribute 'loop'``."""
    from conveyor.storage.filesystems import RemoteFileSystem

    class S3FileSystem(fsspec.AbstractFileSystem):  # a synchronous driver, as s3fs 0.4 was
        protocol = "s3"

    remote = RemoteFileSystem(S3FileSystem(), "s3")
    with pytest.raises(ImportError, match=r"S3FileSystem from .* is not one.*conveyor\[remote\]"):
        remote._source("s3://bucket/shard.tar")


def test_s3_connection_pool_holds_the_widest_read_ahead_unless_the_user_sized_it() -> None:
    """botocore pools 10 connections: a widened window (8) plus the next shard's would queue
    for them, a round trip at a time, over a slow link."""
    from conveyor.storage import RemoteOptions
    from conveyor.storage.filesystems import _with_defaults

    options: dict[str, Any] = {"anon": True}
    _with_defaults("s3", options, RemoteOptions(read_ahead_max=12))
    assert options["config_kwargs"]["max_pool_connections"] == 2 * 12 + 4
    assert options["config_kwargs"]["retries"] == {"total_max_attempts": 1}  # ours, not boto's
    sized: dict[str, Any] = {"config_kwargs": {"max_pool_connections": 3}}
    _with_defaults("s3", sized, RemoteOptions())
    assert sized["config_kwargs"]["max_pool_connections"] == 3
