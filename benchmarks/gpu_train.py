#!/usr/bin/env python
"""A training loop fed by each loader: GPU utilisation, images/s, images/s per busy CPU core.

ResNet-50 (torchvision, ``--model resnet50``) or a ViT (timm, ``--model vit``), bf16
autocast, channels-last, SGD, batch ``--batch-size`` (256), on synthetic ImageNet-size JPEG
tar shards (500x375, quality 90). Every pipeline delivers uint8 [B, 3, 224, 224] images
(RandomResizedCrop(224) + horizontal flip) and int labels on the GPU; the step normalises
them. Pipelines (each over its ``--*-workers`` list; the best worker count is reported):

  model-only     the batch already on the GPU: the GPU's own ceiling, its utilisation
  conveyor-gpu   TarShards(decode=GpuCropDecoder.registry()) in workers (header, box,
                 grouping), pin_memory=True, conveyor.to_device, nvJPEG decode + crop
  conveyor-cpu   TarShards(decode=RandomResizedCropDecoder(224).registry()) in workers
                 (crop-aware CPU decode), pin_memory=True, conveyor.to_device
  torch-pil      torch.utils.data.DataLoader over the files, Pillow decode + torchvision's
                 RandomResizedCrop/flip written out (benchmarks/s3_imagenet.py),
                 pin_memory=True, ``.cuda(non_blocking=True)``
  torch-tv       the same with torchvision.io.decode_jpeg + transforms.v2 (if torchvision)

For each: steady-state images/s over ``--steps`` steps after ``--warm``, the GPU's
utilisation (NVML, sampled every 50 ms over those steps), busy cores (CPU seconds of the
whole process tree / wall seconds) and images/s per busy core. Targets (issue 29): GPU
utilisation >= 95 % where the data path allows; images/s per busy core vs torch at its best
``num_workers`` (4-14).

    python benchmarks/gpu_train.py --model resnet50          # on a GPU machine
    python benchmarks/gpu_train.py --smoke                   # the code paths on the CPU
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
import torch.utils.data as tud

import conveyor
from conveyor.vision import GpuCropDecoder, RandomResizedCropDecoder
from gpu_common import GpuBusy, TreeCpu, corpus, emit, machine, pick_device, rates, write_shards

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255


def make_model(name: str, device: torch.device) -> torch.nn.Module:
    if name == "tiny":
        model: torch.nn.Module = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, stride=4), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 1000),
        )  # fmt: skip
    elif name == "resnet50":
        import torchvision

        model = torchvision.models.resnet50(weights=None)
    else:
        import timm

        model = timm.create_model("vit_base_patch16_224", pretrained=False)
    return model.to(device, memory_format=torch.channels_last)


class Trainer:
    def __init__(self, model: torch.nn.Module, device: torch.device) -> None:
        self.model = model
        self.device = device
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        self.mean, self.std = MEAN.to(device), STD.to(device)

    def step(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        x = ((images.float() - self.mean) / self.std).contiguous(memory_format=torch.channels_last)
        with torch.autocast(self.device.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(self.model(x), labels % 1000)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


# ------------------------------------------------------------------------- pipelines
# Each returns an iterator of (uint8 images, labels) on the device.
def model_only(spec: Any) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    images = torch.randint(0, 255, (spec.batch_size, 3, 224, 224), dtype=torch.uint8,
                           device=spec.device)  # fmt: skip
    labels = torch.arange(spec.batch_size, device=spec.device)
    while True:
        yield images, labels


def conveyor_gpu(spec: Any) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    decoder = GpuCropDecoder(RandomResizedCropDecoder(224), spec.device, on_error="skip")
    loader = conveyor.DataLoader(
        conveyor.TarShards(spec.shards * spec.passes, decode=decoder.registry()),
        batch_size=spec.batch_size, num_workers=spec.workers,
        pin_memory=spec.device.type == "cuda", persistent_workers=False,
    )  # fmt: skip
    for batch in conveyor.to_device(loader, spec.device, depth=2):
        decoded = decoder.decode_batch(batch)
        yield decoded["jpg"], decoded["cls"]


def conveyor_cpu(spec: Any) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    op = RandomResizedCropDecoder(224)
    loader = conveyor.DataLoader(
        conveyor.TarShards(spec.shards * spec.passes, decode=op.registry()),
        batch_size=spec.batch_size, num_workers=spec.workers,
        pin_memory=spec.device.type == "cuda",
    )  # fmt: skip
    for batch in conveyor.to_device(loader, spec.device, depth=2):
        yield batch["jpg"], batch["cls"]


def _torch_loader(spec: Any, transform: Callable[[bytes], Any]) -> Iterator[Any]:
    from s3_imagenet import FileSamples

    loader = tud.DataLoader(
        FileSamples(spec.files * spec.passes, spec.labels * spec.passes, transform),
        batch_size=spec.batch_size, shuffle=True, num_workers=spec.workers,
        pin_memory=spec.device.type == "cuda", persistent_workers=False,
    )  # fmt: skip
    for images, labels in loader:
        pixels = torch.as_tensor(images)
        yield pixels.to(spec.device, non_blocking=True), labels.to(spec.device, non_blocking=True)


def torch_pil(spec: Any) -> Iterator[Any]:
    from s3_imagenet import pil_random_resized_crop

    return _torch_loader(spec, pil_random_resized_crop)


class TorchvisionTransform:
    def __init__(self) -> None:
        from torchvision.transforms import v2

        self.transform = v2.Compose([v2.RandomResizedCrop(224, antialias=True),
                                     v2.RandomHorizontalFlip()])  # fmt: skip

    def __call__(self, data: bytes) -> torch.Tensor:
        from torchvision.io import ImageReadMode, decode_jpeg

        encoded = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        return self.transform(decode_jpeg(encoded, mode=ImageReadMode.RGB))  # type: ignore[no-any-return]


def torch_tv(spec: Any) -> Iterator[Any]:
    return _torch_loader(spec, TorchvisionTransform())


PIPELINES: dict[str, Callable[[Any], Iterator[Any]]] = {
    "model-only": model_only,
    "conveyor-gpu": conveyor_gpu,
    "conveyor-cpu": conveyor_cpu,
    "torch-pil": torch_pil,
    "torch-tv": torch_tv,
}


def measure(name: str, spec: Any, trainer: Trainer) -> dict[str, Any]:
    batches = PIPELINES[name](spec)
    for _ in range(spec.warm):
        trainer.step(*next(batches))
    if spec.device.type == "cuda":
        torch.cuda.synchronize()
    cpu = TreeCpu()
    with GpuBusy() as busy:
        cpu.start()
        start = time.perf_counter()
        images = 0
        for _ in range(spec.steps):
            batch = next(batches)
            trainer.step(*batch)
            images += batch[0].shape[0]
        if spec.device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        cpu_s = cpu.seconds()
    del batches
    gc.collect()
    return {**rates(images, seconds, cpu_s), "gpu_util": busy.percent}


def write_files(root: Path, blobs: list[bytes]) -> list[str]:
    root.mkdir(parents=True, exist_ok=True)
    files = []
    for i, blob in enumerate(blobs):
        path = root / f"{i:07d}.jpg"
        if not path.exists():
            path.write_bytes(blob)
        files.append(str(path))
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", default="resnet50", choices=["resnet50", "vit", "tiny"])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--images", type=int, default=6144)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warm", type=int, default=5)
    parser.add_argument(
        "--pipelines", default="model-only,conveyor-gpu,conveyor-cpu,torch-pil,torch-tv"
    )
    parser.add_argument("--conveyor-workers", default="4,8,14")
    parser.add_argument("--torch-workers", default="4,6,8,10,12,14")
    parser.add_argument("--out", help="append JSON lines here")
    parser.add_argument("--smoke", action="store_true", help="tiny, on the CPU: does it run?")
    args = parser.parse_args()
    if args.smoke:
        args.model, args.batch_size, args.images, args.steps, args.warm = "tiny", 4, 32, 2, 1
        args.conveyor_workers = args.torch_workers = "1"
        args.pipelines = "model-only,conveyor-gpu,conveyor-cpu,torch-pil"
    device = pick_device(args.smoke)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    size = (96, 72) if args.smoke else (500, 375)
    blobs = corpus(args.images, size, odd_fraction=0.0)
    root = Path(os.environ.get("BENCH_DATA_DIR", tempfile.gettempdir())) / f"gpu_train-{size[0]}"
    steps_needed = (args.warm + args.steps + 2) * args.batch_size
    spec = argparse.Namespace(
        device=device, batch_size=args.batch_size, steps=args.steps, warm=args.warm,
        shards=write_shards(root / "shards", blobs, per_shard=512),
        files=write_files(root / "files", blobs), labels=list(range(len(blobs))),
        passes=-(-steps_needed // len(blobs)) + 1, workers=0,
    )  # fmt: skip
    trainer = Trainer(make_model(args.model, device), device)
    emit({"benchmark": "gpu_train", "machine": machine(), "args": vars(args)}, args.out)
    for name in args.pipelines.split(","):
        if name == "torch-tv" and not _has_torchvision():
            continue
        counts = {"model-only": "0"}.get(name) or (
            args.conveyor_workers if name.startswith("conveyor") else args.torch_workers
        )
        for workers in (int(n) for n in counts.split(",")):
            spec.workers = workers
            emit({"pipeline": name, "workers": workers, **measure(name, spec, trainer)}, args.out)
    emit({"load_after": os.getloadavg()}, args.out)


def _has_torchvision() -> bool:
    try:
        import torchvision.io  # noqa: F401
    except Exception:
        return False
    return True


if __name__ == "__main__":
    main()
