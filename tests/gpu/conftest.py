"""GPU tests: marked ``gpu``, skipped where CUDA is not available (tests/conftest.py).

On the device machine: ``bash scripts/gpu_check.sh`` (README, "Contributing"). CUDA is set
up once for the session before any test, so the leak guard's baseline holds the driver's
file descriptors and threads, and a test is charged only with what it leaves itself.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _cuda_ready() -> Iterator[None]:
    """CUDA's context, a stream, an event, pinned memory and nvJPEG, made before the tests."""
    if not torch.cuda.is_available():
        yield
        return
    x = torch.ones(1 << 20, pin_memory=True)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        x.to("cuda", non_blocking=True)
    stream.record_event().synchronize()
    torch.cuda.cudart()
    try:
        import io

        from PIL import Image
        from torchvision.io import decode_jpeg

        buffer = io.BytesIO()
        Image.new("RGB", (16, 16)).save(buffer, "JPEG")
        encoded = torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)
        decode_jpeg([encoded], device="cuda")
    except Exception:
        pass  # the decode tests say what is missing
    torch.cuda.synchronize()
    yield
