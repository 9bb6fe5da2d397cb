"""RandomResizedCropDecoder / CenterCropDecoder against Pillow + torchvision's semantics.

The oracle is what a torchvision pipeline does on a PIL image: ``Image.open(...)
.convert("RGB")`` (optionally ``ImageOps.exif_transpose``), ``crop(box)``,
``resize(size, BILINEAR)``, horizontal flip. Fast and full paths must crop the same boxes
for the same seed; outputs are compared by PSNR (the fast path resizes with torch and may
decode at a reduced IDCT scale, so it is close, not bit-equal).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw, ImageOps

from conveyor.vision import CenterCropDecoder, CropBox, RandomResizedCropDecoder
from conveyor.vision import decoders as decoders_module

BACKENDS = ["simplejpeg", "pillow"]


def photo(width: int, height: int, seed: int = 0) -> Image.Image:
    """Smooth gradients, soft shapes, mild noise: compresses and resamples like a photo."""
    rng = np.random.default_rng(seed)
    rows = np.linspace(0, 1, height)[:, None, None]
    cols = np.linspace(0, 1, width)[None, :, None]
    base = rng.uniform(30, 220, 3) * (1 - rows) + rng.uniform(30, 220, 3) * cols * rows
    image = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(12):
        x, y = rng.uniform(0, width), rng.uniform(0, height)
        r = rng.uniform(5, max(width, height) / 4)
        draw.ellipse(
            (x - r, y - r, x + r, y + r), fill=tuple(int(v) for v in rng.uniform(0, 255, 3))
        )
    pixels = np.asarray(image).astype(np.float64) + rng.normal(0, 3, (height, width, 3))
    # texture a few pixels across (foliage, fabric): what sub-pixel errors show up on
    grain = rng.normal(0, 1, (height // 3 + 1, width // 3 + 1)).astype(np.float32)
    grain = np.asarray(
        Image.fromarray(grain, mode="F").resize((width, height), Image.Resampling.BICUBIC)
    )
    pixels += 18 * grain[..., None]
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def encode(image: Image.Image, kind: str = "JPEG", **options: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, kind, **options)
    return buffer.getvalue()


def reference(data: bytes, box: CropBox, flip: bool, size: int, exif: bool = False) -> np.ndarray:
    image = Image.open(io.BytesIO(data))
    if exif:
        image = ImageOps.exif_transpose(image)
    image = image.convert("RGB").crop(
        (box.left, box.top, box.left + box.width, box.top + box.height)
    )
    image = image.resize((size, size), Image.Resampling.BILINEAR)
    if flip:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return np.asarray(image)


def psnr(tensor: torch.Tensor, expected: np.ndarray) -> float:
    got = tensor.permute(1, 2, 0).numpy().astype(np.float64)
    error = float(np.mean((got - expected.astype(np.float64)) ** 2))
    return 99.0 if error == 0 else 10 * float(np.log10(255.0**2 / error))


@pytest.fixture
def boxes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[CropBox]]:
    """Every box the decoders draw, in order."""
    drawn: list[CropBox] = []
    original = decoders_module.random_resized_crop_box

    def record(*args: Any, **kwargs: Any) -> CropBox:
        box = original(*args, **kwargs)
        drawn.append(box)
        return box

    monkeypatch.setattr(decoders_module, "random_resized_crop_box", record)
    yield drawn


@pytest.fixture(scope="module")
def big() -> bytes:
    return encode(photo(500, 375, seed=1), quality=90)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fast_and_full_paths_crop_the_same_boxes(
    big: bytes, boxes: list[CropBox], backend: str
) -> None:
    outputs = {}
    for fast in (True, False):
        decoder = RandomResizedCropDecoder(
            64, generator=torch.Generator().manual_seed(11), fast=fast, backend=backend
        )
        outputs[fast] = [decoder(big) for _ in range(40)]
        if fast:
            assert decoder.paths["fast 1/2"] > 0 and decoder.paths["fast 1/4"] > 0
        else:
            assert set(decoder.paths) == {"full decode: fast=False"}
    assert boxes[:40] == boxes[40:]
    for fast_out, full_out in zip(outputs[True], outputs[False], strict=True):
        assert psnr(fast_out, full_out.permute(1, 2, 0).numpy()) > 30


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("size", "floor"), [(224, 45.0), (64, 40.0)])
def test_output_matches_the_pillow_reference_at_the_same_box(
    big: bytes, backend: str, size: int, floor: float
) -> None:
    decoder = RandomResizedCropDecoder(
        size, generator=torch.Generator().manual_seed(3), backend=backend
    )
    values = []
    for _ in range(30):
        source = decoder._open(big)
        box, flip = decoder.draw(*source.shown_size)
        values.append(psnr(decoder.render(source, box, flip), reference(big, box, flip, size)))
    assert np.median(values) >= floor and min(values) >= floor - 4, values


def test_flip_probability_and_draw_order() -> None:
    data = encode(photo(60, 40))
    never = RandomResizedCropDecoder(24, flip=0.0, generator=torch.Generator().manual_seed(0))
    always = RandomResizedCropDecoder(24, flip=1.0, generator=torch.Generator().manual_seed(0))
    assert torch.equal(never(data).flip(-1), always(data))
    # each flip is drawn after its box, from the same generator, as torchvision's transforms do
    generator = torch.Generator().manual_seed(9)
    decoder = RandomResizedCropDecoder(24, generator=generator)
    drawn = [decoder.draw(40, 60) for _ in range(30)]
    replay = torch.Generator().manual_seed(9)
    from conveyor.vision import random_resized_crop_box

    expected = []
    for _ in range(30):
        box = random_resized_crop_box(40, 60, generator=replay)
        expected.append((box, torch.rand(1, generator=replay).item() < 0.5))
    assert drawn == expected and 5 < sum(flip for _, flip in drawn) < 25


# ----------------------------------------------------------------------------- fallbacks


def _paths_and_psnr(data: bytes, exif: bool = False, **options: Any) -> tuple[set[str], float]:
    decoder = RandomResizedCropDecoder(
        48, generator=torch.Generator().manual_seed(4), exif_transpose=exif, **options
    )
    worst = 99.0
    for _ in range(6):
        source = decoder._open(data)
        box, flip = decoder.draw(*source.shown_size)
        worst = min(
            worst, psnr(decoder.render(source, box, flip), reference(data, box, flip, 48, exif))
        )
    return set(decoder.paths), worst


@pytest.mark.parametrize(
    ("name", "make", "expected"),
    [
        ("progressive", lambda im: encode(im, progressive=True), "fast 1/"),
        ("grayscale", lambda im: encode(im.convert("L")), "fast 1/"),
        ("cmyk", lambda im: encode(im.convert("CMYK")), "full decode: 4-component JPEG"),
        ("png", lambda im: encode(im, "PNG"), "full decode: PNG image"),
        ("webp", lambda im: encode(im, "WEBP", lossless=True), "full decode: WEBP image"),
        ("rgba png", lambda im: encode(im.convert("RGBA"), "PNG"), "full decode: PNG image"),
    ],
)
def test_formats_the_fast_path_does_not_take_fall_back_to_a_full_decode(
    name: str, make: Any, expected: str
) -> None:
    data = make(photo(200, 150, seed=2))
    paths, worst = _paths_and_psnr(data)
    assert all(path.startswith(expected) for path in paths), paths
    assert worst >= 40, name


def test_data_the_fast_decoder_refuses_is_decoded_by_pillow() -> None:
    good = encode(photo(120, 90))
    sos = good.index(b"\xff\xda")
    odd = good[:sos] + b"\x00\x00\x00" + good[sos:]  # extraneous bytes: libjpeg warns
    Image.open(io.BytesIO(odd)).load()  # Pillow decodes it, as the reference would
    paths, worst = _paths_and_psnr(odd, backend="simplejpeg")
    assert paths == {"full decode: the fast decoder refused the data"} and worst >= 40


@pytest.mark.parametrize("orientation", range(1, 9))
@pytest.mark.parametrize("exif", [True, False])
def test_exif_orientation_as_pillow_exif_transpose(orientation: int, exif: bool) -> None:
    tags = Image.Exif()
    tags[0x0112] = orientation
    data = encode(photo(90, 60, seed=orientation), exif=tags)
    paths, worst = _paths_and_psnr(data, exif=exif)
    assert worst >= 40 and all(path.startswith("fast") for path in paths)
    decoder = RandomResizedCropDecoder(16, exif_transpose=exif)
    shown = decoder._open(data).shown_size
    assert shown == ((90, 60) if exif and orientation >= 5 else (60, 90))


def test_exif_orientation_of_a_png() -> None:
    tags = Image.Exif()
    tags[0x0112] = 6
    data = encode(photo(90, 60), "PNG", exif=tags)
    paths, worst = _paths_and_psnr(data, exif=True)
    assert paths == {"full decode: PNG image"} and worst >= 40


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2],  # truncated inside the scan
        lambda data: data[:40],  # truncated inside the header
        lambda data: b"\xff\xd8\xff" + bytes(200),  # no markers after SOI
        lambda data: b"not an image at all",
    ],
)
def test_corrupt_images_raise(fast: bool, damage: Any) -> None:
    data = damage(encode(photo(120, 90)))
    decoder = RandomResizedCropDecoder(32, fast=fast)
    with pytest.raises((ValueError, OSError)):
        decoder(data)


# ----------------------------------------------------------------------------- output


def test_float_output_with_mean_and_std() -> None:
    data = encode(photo(80, 60))
    uint8 = RandomResizedCropDecoder(32, generator=torch.Generator().manual_seed(1))(data)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    normalised = RandomResizedCropDecoder(
        32, dtype=torch.float32, mean=mean, std=std, generator=torch.Generator().manual_seed(1)
    )(data)
    expected = (uint8.float() / 255 - torch.tensor(mean).view(3, 1, 1)) / torch.tensor(std).view(
        3, 1, 1
    )
    assert normalised.dtype == torch.float32
    torch.testing.assert_close(normalised, expected, rtol=1e-5, atol=1e-5)
    plain = RandomResizedCropDecoder(
        32, dtype=torch.float64, generator=torch.Generator().manual_seed(1)
    )
    torch.testing.assert_close(plain(data), uint8.double() / 255)


def test_output_into_a_slot_of_a_batch() -> None:
    data = encode(photo(80, 60))
    batch = torch.zeros(3, 3, 20, 24, dtype=torch.uint8)
    decoder = RandomResizedCropDecoder((20, 24), generator=torch.Generator().manual_seed(2))
    result = decoder(data, out=batch[1])
    assert result.data_ptr() == batch[1].data_ptr() and batch[1].any()
    assert not batch[0].any() and not batch[2].any()
    again = RandomResizedCropDecoder((20, 24), generator=torch.Generator().manual_seed(2))(data)
    assert torch.equal(again, batch[1])


def test_accepts_paths_streams_and_buffers(tmp_path: Path) -> None:
    data = encode(photo(80, 60))
    path = tmp_path / "a.jpg"
    path.write_bytes(data)
    outputs = []
    for given in (data, bytearray(data), memoryview(data), str(path), path, io.BytesIO(data)):
        decoder = RandomResizedCropDecoder(16, generator=torch.Generator().manual_seed(0))
        outputs.append(decoder(given))
    assert all(torch.equal(outputs[0], other) for other in outputs[1:])
    with pytest.raises(TypeError, match="encoded image bytes"):
        RandomResizedCropDecoder(16)(12345)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"size": 0}, "size"),
        ({"size": (1, 2, 3)}, "size"),
        ({"scale": (0.5, 0.1)}, "scale and ratio"),
        ({"ratio": (0.0, 1.0)}, "scale and ratio"),
        ({"flip": 1.5}, "flip"),
        ({"dtype": torch.int32}, "dtype"),
        ({"mean": (0.5,) * 3}, "mean and std"),
        ({"mean": (0.5,) * 3, "std": (0.5,) * 3}, "mean and std"),  # uint8 output
        ({"backend": "turbo"}, "backend"),
    ],
)
def test_bad_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RandomResizedCropDecoder(**kwargs)


# ----------------------------------------------------------------------------- evaluation


@pytest.mark.parametrize(
    ("size", "resize_to", "path"), [(224, 256, "fast 1/1"), (40, 48, "fast 1/4")]
)
@pytest.mark.parametrize("backend", BACKENDS)
def test_center_crop_matches_resize_then_center_crop(
    big: bytes, size: int, resize_to: int, path: str, backend: str
) -> None:
    decoder = CenterCropDecoder(size, resize_to, backend=backend)
    out = decoder(big)
    assert tuple(out.shape) == (3, size, size) and set(decoder.paths) == {path}
    image = Image.open(io.BytesIO(big)).convert("RGB")  # torchvision: Resize then CenterCrop
    new_w = int(resize_to * image.width / image.height)
    resized = image.resize((new_w, resize_to), Image.Resampling.BILINEAR)
    top, left = round((resize_to - size) / 2), round((new_w - size) / 2)
    expected = np.asarray(resized)[top : top + size, left : left + size]
    assert psnr(out, expected) >= 35
    assert torch.equal(
        out, CenterCropDecoder(size, resize_to, backend=backend)(big)
    )  # deterministic
    full = CenterCropDecoder(size, resize_to, fast=False)(big)
    assert psnr(full, expected) >= 45


def test_registry_decodes_every_image_extension() -> None:
    decoder = RandomResizedCropDecoder(16)
    registry = decoder.registry()
    for extension in ("jpg", "jpeg", "png", "webp", "seg.png"):
        assert registry.decoder_for(extension) is decoder
    assert registry.decoder_for("cls") is not None and registry.decoder_for("bin") is None


def test_pickles_with_its_settings() -> None:
    import pickle

    decoder = RandomResizedCropDecoder(32, scale=(0.5, 1.0), flip=0.0, exif_transpose=True)
    copy = pickle.loads(pickle.dumps(decoder))
    assert (copy.size, copy.scale, copy.flip, copy.exif_transpose) == (
        (32, 32),
        (0.5, 1.0),
        0.0,
        True,
    )
