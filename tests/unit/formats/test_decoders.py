"""Decoders by extension: built-ins, image specs, user decoders, safety of .pt."""

from __future__ import annotations

import io
import json
import pickle

import numpy as np
import pytest
import torch
from PIL import Image

from conveyor.formats import IMAGE_SPECS, DecoderRegistry, decode_image, register_decoder


def png_bytes(mode: str = "RGB", size: tuple[int, int] = (5, 4)) -> bytes:
    channels = {"RGB": 3, "RGBA": 4, "L": 1}[mode]
    pixels = np.arange(size[0] * size[1] * channels, dtype=np.uint8)
    shape = (size[1], size[0], channels) if channels > 1 else (size[1], size[0])
    buffer = io.BytesIO()
    Image.fromarray(pixels.reshape(shape), mode=mode).save(buffer, format="PNG")
    return buffer.getvalue()


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def pt_bytes(value: object) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def test_builtin_decoders() -> None:
    registry = DecoderRegistry()
    array = np.arange(6, dtype=np.int16).reshape(2, 3)
    sample = {
        "__key__": "k",
        "__url__": "u",
        "txt": "héllo".encode(),
        "cls": b" 7\n",
        "idx": b"12",
        "json": json.dumps({"a": [1, 2]}).encode(),
        "npy": npy_bytes(array),
        "pt": pt_bytes({"w": torch.ones(2)}),
        "bin": b"\x00raw",
    }
    out = registry.decode_sample(sample)
    assert out["__key__"] == "k" and out["txt"] == "héllo" and out["cls"] == 7
    assert out["idx"] == 12 and out["json"] == {"a": [1, 2]} and out["bin"] == b"\x00raw"
    assert np.array_equal(out["npy"], array) and out["npy"].dtype == np.int16
    assert torch.equal(out["pt"]["w"], torch.ones(2))


@pytest.mark.parametrize("spec", sorted(IMAGE_SPECS))
def test_image_specs(spec: str) -> None:
    kind, mode, scaled = IMAGE_SPECS[spec]
    value = decode_image(png_bytes("RGB"), spec)
    if kind == "pil":
        assert isinstance(value, Image.Image)
        assert value.mode == (mode or "RGB") and value.size == (5, 4)
        return
    channels = {"L": 1, "RGB": 3, "RGBA": 4}[mode or "RGB"]
    if kind == "numpy":
        assert isinstance(value, np.ndarray) and value.flags.writeable
        assert value.shape == ((4, 5) if channels == 1 else (4, 5, channels))
    else:
        assert isinstance(value, torch.Tensor) and value.is_contiguous()
        assert tuple(value.shape) == (channels, 4, 5)
    expected_dtype = {"numpy": (np.float32, np.uint8), "torch": (torch.float32, torch.uint8)}
    assert value.dtype == expected_dtype[kind][0 if scaled else 1]


def test_image_values_match_pillow() -> None:
    data = png_bytes("RGB")
    hwc = np.array(Image.open(io.BytesIO(data)))
    assert torch.equal(decode_image(data, "torchrgb8"), torch.from_numpy(hwc).permute(2, 0, 1))
    assert torch.allclose(decode_image(data, "torch"), decode_image(data, "torchrgb8") / 255.0)


def test_multi_part_extensions_and_user_decoders() -> None:
    registry = DecoderRegistry("rgb8", {"seg.png": lambda data: "segmentation", "BIN": len})
    assert registry.decode_value("seg.png", png_bytes()) == "segmentation"
    assert registry.decode_value("mask.png", png_bytes()).shape == (4, 5, 3)
    assert registry.decode_value("bin", b"abc") == 3
    registry.register(["cls"], lambda data: "custom")
    assert registry.decode_value("cls", b"1") == "custom"
    assert DecoderRegistry(image=None).decode_value("jpg", b"keep") == b"keep"
    assert DecoderRegistry(defaults=False).decode_value("cls", b"1") == b"1"


def test_register_decoder_affects_new_registries() -> None:
    register_decoder("conveyortestext", len)
    assert DecoderRegistry().decode_value("conveyortestext", b"abcd") == 4


def test_streams_are_read_and_closed() -> None:
    stream = io.BytesIO(b"5")
    assert DecoderRegistry().decode_value("cls", stream) == 5
    assert stream.closed


def test_pt_refuses_pickled_code() -> None:
    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (print, ("pwned",))

    with pytest.raises(pickle.UnpicklingError):
        DecoderRegistry().decode_value("pt", pt_bytes(Evil()))


def test_unknown_image_spec() -> None:
    with pytest.raises(ValueError, match="unknown image spec"):
        DecoderRegistry("torchrgb16")


def test_registry_pickles() -> None:
    registry = pickle.loads(pickle.dumps(DecoderRegistry("rgb8", {"x": int})))
    assert registry.decode_value("x", b"4") == 4
