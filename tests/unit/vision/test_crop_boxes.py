"""RandomResizedCrop's box: torchvision's algorithm, checked by distribution and exactly.

The reference below is the algorithm as torchvision documents it, drawn from NumPy in
float64 (an independent implementation): over 100k draws each, a two-sample chi-square
test finds no difference in the box's width, height and position; the same test rejects a
sampler that draws the aspect ratio uniformly instead of log-uniformly (it has power).
Where torchvision imports, the boxes must be its boxes for the same seed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import numpy as np
import pytest
import torch

from conveyor.vision import CropBox, random_resized_crop_box, resized_center_crop

Sampler = Callable[[int, int], tuple[int, int, int, int]]


def reference_sampler(rng: np.random.Generator, log_uniform: bool = True) -> Sampler:
    def draw(height: int, width: int) -> tuple[int, int, int, int]:
        area = height * width
        low, high = (math.log(3 / 4), math.log(4 / 3)) if log_uniform else (3 / 4, 4 / 3)
        for _ in range(10):
            target = area * rng.uniform(0.08, 1.0)
            aspect = math.exp(rng.uniform(low, high)) if log_uniform else rng.uniform(low, high)
            w = round(math.sqrt(target * aspect))
            h = round(math.sqrt(target / aspect))
            if 0 < w <= width and 0 < h <= height:
                return (
                    int(rng.integers(0, height - h + 1)),
                    int(rng.integers(0, width - w + 1)),
                    h,
                    w,
                )
        return 0, 0, height, width  # never reached at these sizes

    return draw


def features(boxes: np.ndarray) -> dict[str, np.ndarray]:
    """Binned features of (top, left, height, width) boxes of a 375x500 image."""
    top, left, h, w = boxes.T
    return {
        "width": np.digitize(w, np.linspace(0, 500, 26)),
        "height": np.digitize(h, np.linspace(0, 375, 26)),
        "aspect": np.digitize(np.log(w / h), np.linspace(-0.35, 0.35, 21)),
        "top": np.digitize((top + 0.5) / (375 - h + 1), np.linspace(0, 1, 11)),
        "left": np.digitize((left + 0.5) / (500 - w + 1), np.linspace(0, 1, 11)),
    }


def chi2_rejects(a: np.ndarray, b: np.ndarray) -> bool:
    """Two-sample chi-square homogeneity test (equal sizes) at p = 1e-4."""
    bins = np.union1d(a, b)
    ca = np.array([(a == v).sum() for v in bins], dtype=float)
    cb = np.array([(b == v).sum() for v in bins], dtype=float)
    keep = ca + cb >= 10
    stat = float(np.sum((ca[keep] - cb[keep]) ** 2 / (ca[keep] + cb[keep])))
    df = int(keep.sum()) - 1
    z = 3.719  # one-sided 1e-4 normal quantile; Wilson-Hilferty for the chi-square quantile
    critical = df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3
    return stat > critical


DRAWS = 100_000


@pytest.fixture(scope="module")
def conveyor_boxes() -> np.ndarray:
    generator = torch.Generator().manual_seed(1234)
    return np.array([random_resized_crop_box(375, 500, generator=generator) for _ in range(DRAWS)])


@pytest.mark.timeout(300)
def test_box_distribution_matches_the_reference_algorithm(conveyor_boxes: np.ndarray) -> None:
    draw = reference_sampler(np.random.default_rng(99))
    reference = np.array([draw(375, 500) for _ in range(DRAWS)])
    ours, theirs = features(conveyor_boxes), features(reference)
    rejected = [name for name in ours if chi2_rejects(ours[name], theirs[name])]
    assert rejected == []


@pytest.mark.timeout(300)
def test_the_distribution_test_rejects_a_wrong_aspect_draw(conveyor_boxes: np.ndarray) -> None:
    draw = reference_sampler(np.random.default_rng(99), log_uniform=False)
    wrong = np.array([draw(375, 500) for _ in range(DRAWS)])
    assert chi2_rejects(features(conveyor_boxes)["aspect"], features(wrong)["aspect"])


def _torchvision_get_params() -> Callable[..., tuple[int, int, int, int]]:
    try:  # PyPI's torchvision does not load beside torch 2.13.0 CPU: it raises, not ImportError
        from torchvision.transforms import RandomResizedCrop
    except Exception as error:
        pytest.skip(f"torchvision does not import here: {error}")
    return RandomResizedCrop.get_params  # type: ignore[no-any-return]


def test_boxes_are_torchvisions_for_the_same_seed() -> None:
    get_params = _torchvision_get_params()
    rnd = random.Random(0)
    for _ in range(500):
        height, width = rnd.randint(1, 900), rnd.randint(1, 900)
        scale = rnd.choice([(0.08, 1.0), (0.9, 1.0)])
        ratio = rnd.choice([(3 / 4, 4 / 3), (2.0, 3.0)])
        seed = rnd.randrange(2**31)
        torch.manual_seed(seed)
        expected = get_params(torch.empty(3, height, width), scale, ratio)
        generator = torch.Generator().manual_seed(seed)
        assert tuple(random_resized_crop_box(height, width, scale, ratio, generator)) == expected


def test_default_generator_is_torchs_global_one() -> None:
    torch.manual_seed(5)
    first = [random_resized_crop_box(300, 200) for _ in range(20)]
    torch.manual_seed(5)
    assert [random_resized_crop_box(300, 200) for _ in range(20)] == first
    generator = torch.Generator().manual_seed(5)
    assert [random_resized_crop_box(300, 200, generator=generator) for _ in range(20)] == first


@pytest.mark.parametrize(
    ("height", "width", "ratio", "expected"),
    [
        (100, 1000, (3 / 4, 4 / 3), CropBox(0, 433, 100, 133)),  # too wide: clamp to max ratio
        (1000, 100, (3 / 4, 4 / 3), CropBox(433, 0, 133, 100)),  # too tall: min ratio
        (50, 60, (3.0, 4.0), CropBox(15, 0, 20, 60)),  # no try can fit: fall back
    ],
)
def test_center_fallback_after_ten_misses(
    height: int, width: int, ratio: tuple[float, float], expected: CropBox
) -> None:
    generator = torch.Generator().manual_seed(0)
    boxes = {random_resized_crop_box(height, width, (1.0, 1.0), ratio, generator) for _ in range(5)}
    assert boxes == {expected}


def test_every_box_fits_the_image() -> None:
    generator = torch.Generator().manual_seed(3)
    for height, width in [(1, 1), (1, 500), (7, 3), (375, 500), (2000, 31)]:
        for _ in range(200):
            top, left, h, w = random_resized_crop_box(height, width, generator=generator)
            assert h > 0 and w > 0 and top >= 0 and left >= 0
            assert top + h <= height and left + w <= width


@pytest.mark.parametrize(
    ("height", "width", "resized", "crop"),
    [
        (375, 500, (256, 341), CropBox(16, 58, 224, 224)),
        (500, 375, (341, 256), CropBox(58, 16, 224, 224)),
        (256, 256, (256, 256), CropBox(16, 16, 224, 224)),
    ],
)
def test_resized_center_crop_geometry(
    height: int, width: int, resized: tuple[int, int], crop: CropBox
) -> None:
    plan = resized_center_crop(height, width, (224, 224), 256)
    assert plan.resized == resized and plan.crop == crop


def test_center_crop_larger_than_the_resized_image_raises() -> None:
    with pytest.raises(ValueError, match="larger than the resized image"):
        resized_center_crop(100, 100, (300, 300), 256)
