"""torch's basichandlers path: the same payloads decoded, but shard content never unpickled."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import pytest
import torch
from torch.utils.data.datapipes.utils.decoder import basichandlers as torch_basichandlers

from conveyor.datapipes.utils.decoder import basichandlers


class _Marker:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[Path]]:
        return (Path.touch, (Path(self.path),))


@pytest.mark.parametrize(
    ("extension", "data"),
    [("txt", b"hello"), ("cls", b"7"), ("cls", b"x"), ("json", b'{"a": [1]}'), ("png", b"?")],
)
def test_plain_payloads_decode_as_torch_does(extension: str, data: bytes) -> None:
    assert basichandlers(extension, data) == torch_basichandlers(extension, data)


def test_pt_payload_loads_tensors() -> None:
    buffer = io.BytesIO()
    torch.save({"x": torch.arange(3)}, buffer)
    assert torch.equal(basichandlers("pt", buffer.getvalue())["x"], torch.arange(3))


@pytest.mark.parametrize("extension", ["pickle", "pyd"])
def test_pickle_payload_is_refused_and_runs_nothing(extension: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(ValueError, match="does not unpickle"):
        basichandlers(extension, pickle.dumps(_Marker(str(marker))))
    assert not marker.exists()


def test_pt_payload_that_runs_code_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    buffer = io.BytesIO()
    torch.save(_Marker(str(marker)), buffer)
    with pytest.raises(pickle.UnpicklingError):
        basichandlers("pt", buffer.getvalue())
    assert not marker.exists()
