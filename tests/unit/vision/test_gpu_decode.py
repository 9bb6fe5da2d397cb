"""GpuCropDecoder on the CPU device: planning, grouping, routing, fallbacks, output.

``device="cpu"`` runs the decoder's own code with Pillow as the batched decoder, so its
output must equal the CPU decoder's full path (``fast=False``: Pillow decode, the same box,
torch's uint8 resize) bit for bit, for the same generator. A fake batched decoder that
refuses some images stands for nvJPEG's failures. tests/gpu runs the same on CUDA.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from conveyor.collate import default_collate
from conveyor.formats import BadSampleWarning
from conveyor.vision import (
    CenterCropDecoder,
    GpuCropDecoder,
    JpegBatch,
    JpegPlanner,
    RandomResizedCropDecoder,
)
from conveyor.vision.device_crop import orient_chw, resize_uint8
from conveyor.vision.gpu_decode import pillow_batch_decoder
from conveyor.vision.orientation import orient


def photo(width: int, height: int, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    ramp = np.linspace(0, 200, width)[None, :, None] * rng.uniform(0.3, 1, 3)
    pixels = np.broadcast_to(ramp, (height, width, 3)) + rng.normal(0, 12, (height, width, 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def encode(image: Image.Image, kind: str = "JPEG", **options: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, kind, **options)
    return buffer.getvalue()


def with_orientation(seed: int, orientation: int) -> bytes:
    tags = Image.Exif()
    tags[0x0112] = orientation
    return encode(photo(120, 80, seed), quality=90, exif=tags)


ODD = {
    "progressive": lambda i: encode(photo(96, 72, i), quality=90, progressive=True),
    "cmyk": lambda i: encode(photo(96, 72, i).convert("CMYK"), quality=90),
    "png": lambda i: encode(photo(96, 72, i), "PNG"),
    "grey": lambda i: encode(photo(96, 72, i).convert("L"), quality=90),
    "no eoi": lambda i: encode(photo(96, 72, i), quality=90)[:-2],
}


def _batch(blobs: list[bytes], op: Any, seed: int = 3) -> JpegBatch:
    """What a worker sends: each image planned with ``op``'s draws, then collated."""
    planner = JpegPlanner(op)
    op.generator = torch.Generator().manual_seed(seed) if hasattr(op, "generator") else None
    batch = default_collate([{"jpg": planner(blob), "cls": i} for i, blob in enumerate(blobs)])
    assert isinstance(batch["jpg"], JpegBatch) and batch["cls"].tolist() == list(range(len(blobs)))
    return batch["jpg"]  # type: ignore[no-any-return]


def _cpu_outputs(blobs: list[bytes], op: Any, seed: int = 3) -> torch.Tensor:
    if hasattr(op, "generator"):
        op.generator = torch.Generator().manual_seed(seed)
    return torch.stack([op(blob) for blob in blobs])


def test_planned_jpegs_collate_while_the_registry_keeps_torchs_keys() -> None:
    import torch.utils.data._utils.collate as torch_collate

    from conveyor.collate import default_collate_fn_map

    # conveyor.vision is imported: its type is collated, but not by an entry in the registry
    # users see (tests/parity compares its keys with torch's, in order)
    assert list(default_collate_fn_map) == list(torch_collate.default_collate_fn_map)
    planner = JpegPlanner(RandomResizedCropDecoder(32))
    blob = encode(photo(64, 48, 1), quality=90)
    assert isinstance(default_collate([planner(blob), planner(blob)]), JpegBatch)


def test_the_planner_draws_what_the_cpu_decoder_draws_and_routes_odd_images() -> None:
    blobs = [encode(photo(120, 90, i), quality=90) for i in range(3)]
    blobs += [make(9) for make in ODD.values()]
    op = RandomResizedCropDecoder(32)
    jpegs = _batch(blobs, op)
    drawn = []
    op.generator = torch.Generator().manual_seed(3)
    for blob in blobs:
        source = op._open(blob)
        drawn.append(op.draw(*source.shown_size))
    planned = [jpegs.plan(i) for i in range(len(blobs))]
    assert [(p.box, p.flip) for p in planned] == drawn
    assert [p.data for p in planned] == blobs  # the bytes crossed intact
    assert list(jpegs.routes) == [
        "",
        "",
        "",
        "progressive JPEG",
        "4-component JPEG (CMYK/YCCK)",
        "PNG image",
        "",  # grey: nvJPEG decodes it to RGB
        "no end-of-image marker (truncated?)",
    ]


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_output_equals_the_cpu_decoders_full_path(dtype: torch.dtype) -> None:
    blobs = [encode(photo(160, 120, i), quality=90) for i in range(6)]
    blobs += [make(i) for i, make in enumerate(ODD.values()) if make is not ODD["no eoi"]]
    kwargs: dict[str, Any] = {"dtype": dtype}
    if dtype != torch.uint8:
        kwargs.update(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    op = RandomResizedCropDecoder(48, fast=False, **kwargs)
    decoder = GpuCropDecoder(op, "cpu")
    images = decoder(_batch(blobs, op))
    expected = _cpu_outputs(blobs, RandomResizedCropDecoder(48, fast=False, **kwargs))
    assert images.dtype == dtype and images.shape == (len(blobs), 3, 48, 48)
    assert torch.equal(images, expected)
    assert decoder.paths["gpu"] == 7  # six photos and the grey one
    assert decoder.paths["cpu: progressive JPEG"] == 1 and decoder.paths["cpu: PNG image"] == 1


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientations_match_the_cpu_decoder(orientation: int) -> None:
    blobs = [with_orientation(seed, orientation) for seed in range(4)]
    op = RandomResizedCropDecoder((40, 24), fast=False, exif_transpose=True)
    images = GpuCropDecoder(op, "cpu")(_batch(blobs, op, seed=orientation))
    expected = _cpu_outputs(
        blobs, RandomResizedCropDecoder((40, 24), fast=False, exif_transpose=True), seed=orientation
    )
    assert torch.equal(images, expected)


def test_center_crop_matches_the_cpu_decoder() -> None:
    blobs = [encode(photo(150 + 10 * i, 100, i), quality=90) for i in range(4)]
    blobs.append(with_orientation(5, 6))
    op = CenterCropDecoder(32, resize_to=40, fast=False, exif_transpose=True)
    images = GpuCropDecoder(op, "cpu")(_batch(blobs, op))
    assert torch.equal(images, torch.stack([op(blob) for blob in blobs]))


def test_a_refused_image_is_found_by_halving_and_decoded_on_the_cpu() -> None:
    blobs = [encode(photo(80, 60, i), quality=90) for i in range(16)]
    calls: list[int] = []
    refused = blobs[11]

    def picky(encoded: list[torch.Tensor], device: torch.device) -> Sequence[torch.Tensor]:
        calls.append(len(encoded))
        if any(t.numpy().tobytes() == refused for t in encoded):
            raise RuntimeError("nvjpeg: bitstream not supported (pretend)")
        return pillow_batch_decoder(encoded, device)

    op = RandomResizedCropDecoder(24, fast=False)
    decoder = GpuCropDecoder(op, "cpu", backend=picky)
    images = decoder(_batch(blobs, op))
    assert torch.equal(images, _cpu_outputs(blobs, RandomResizedCropDecoder(24, fast=False)))
    assert decoder.paths == {"gpu": 15, "cpu: the GPU decoder refused it": 1}
    assert len(calls) <= 1 + 2 * 4  # one batched call, then halving down to the one image


def _corrupt(seed: int) -> bytes:
    good = encode(photo(80, 60, seed), quality=90)
    return good[: len(good) // 2]  # cut inside the scan: routed to the CPU, which refuses it


def test_an_image_nobody_decodes_raises_naming_it() -> None:
    blobs = [encode(photo(80, 60, i), quality=90) for i in range(4)]
    blobs[2] = _corrupt(2)
    op = RandomResizedCropDecoder(24)
    with pytest.raises(ValueError, match="image 2"):
        GpuCropDecoder(op, "cpu")(_batch(blobs, op))


def test_skipped_images_are_dropped_with_their_labels_and_reported() -> None:
    blobs = [encode(photo(80, 60, i), quality=90) for i in range(6)]
    blobs[1], blobs[4] = _corrupt(1), _corrupt(4)
    op = RandomResizedCropDecoder(24, fast=False)
    planner = JpegPlanner(op)
    op.generator = torch.Generator().manual_seed(3)
    samples = [
        {"__key__": f"k{i}", "jpg": planner(blob), "cls": i, "pair": (i, -i)}
        for i, blob in enumerate(blobs)
    ]
    batch = default_collate(samples)
    decoder = GpuCropDecoder(op, "cpu", on_error="skip")
    with pytest.warns(BadSampleWarning, match=r"skipped 2 image\(s\).*k1, k4"):
        out = decoder.decode_batch(batch)
    assert out["cls"].tolist() == [0, 2, 3, 5] and out["__key__"] == ["k0", "k2", "k3", "k5"]
    assert [t.tolist() for t in out["pair"]] == [[0, 2, 3, 5], [0, -2, -3, -5]]
    expected = _cpu_outputs(
        blobs[:1] + blobs[2:4] + blobs[5:], RandomResizedCropDecoder(24, fast=False)
    )
    assert out["jpg"].shape == (4, 3, 24, 24)
    assert torch.equal(out["jpg"][0], expected[0])  # boxes stay with their images
    assert decoder.skipped == 2 and decoder.skipped_keys == ["k1", "k4"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clean = decoder.decode_batch(default_collate(samples[:1]))  # nothing to report
    assert clean["jpg"].shape == (1, 3, 24, 24)


def test_a_tuple_batch_and_a_bare_jpeg_batch() -> None:
    blobs = [encode(photo(80, 60, i), quality=90) for i in range(3)]
    op = RandomResizedCropDecoder(16)
    planner = JpegPlanner(op)
    images, labels = GpuCropDecoder(op, "cpu").decode_batch(
        default_collate([(planner(blob), i) for i, blob in enumerate(blobs)])
    )
    assert images.shape == (3, 3, 16, 16) and labels.tolist() == [0, 1, 2]
    jpegs = default_collate([planner(blob) for blob in blobs])
    assert GpuCropDecoder(op, "cpu").decode_batch(jpegs).shape == (3, 3, 16, 16)
    assert jpegs.to("cuda") is jpegs and jpegs.pin_memory() is jpegs  # bytes stay on the host
    with pytest.raises(TypeError, match="no JpegBatch"):
        GpuCropDecoder(op, "cpu").decode_batch({"x": 1})


def test_arguments() -> None:
    op = RandomResizedCropDecoder(16)
    with pytest.raises(ValueError, match="on_error"):
        GpuCropDecoder(op, "cpu", on_error="ignore")
    with pytest.raises(ValueError, match="backend"):
        GpuCropDecoder(op, "cpu", backend="nvjpeg")
    try:
        import torchvision.io  # noqa: F401
    except Exception:
        with pytest.raises(ImportError, match="torchvision"):
            GpuCropDecoder(op, "cuda")


# ------------------------------------------------------------------ device geometry
@pytest.mark.parametrize("orientation", range(1, 9))
def test_orient_chw_is_pillows_exif_transpose(orientation: int) -> None:
    pixels = np.arange(5 * 7 * 3, dtype=np.uint8).reshape(5, 7, 3)
    expected = orient(pixels, orientation)
    got = orient_chw(torch.from_numpy(pixels).permute(2, 0, 1), orientation)
    assert np.array_equal(got.permute(1, 2, 0).numpy(), expected)


def test_the_float_resize_used_off_the_cpu_is_within_one_level_of_the_uint8_one() -> None:
    image = torch.from_numpy(np.array(photo(97, 61, 4))).permute(2, 0, 1)
    exact = resize_uint8(image, (24, 40))
    float_path = (
        torch.nn.functional.interpolate(
            image.unsqueeze(0).float(), size=(24, 40), mode="bilinear", antialias=True
        )[0]
        .round_()
        .clamp_(0, 255)
        .to(torch.uint8)
    )
    assert (exact.int() - float_path.int()).abs().max() <= 1
