#!/usr/bin/env python
"""S7 object storage over a network with latency: conveyor against the object-store peers.

SeaweedFS (S3 API) on 127.0.0.1 behind our latency proxy (tests/integration/latency_proxy.py:
round trip, handshake, TCP-like window, optional bandwidth cap), one proxy per RTT. The same
3x224x224 JPEG samples in each library's own layout (benchmarks/s7_data.py). Pipelines,
batch 64, 2 workers, interleaved repetitions (pipelines and RTTs rotate), medians:

  conveyor         TarShards from s3:// (s3fs) -> decode + crop in the workers; read-ahead
                   on (the default: 4 ranged GETs in flight per shard, next shard started)
  conveyor-bytes   the same without decoding: raw JPEG bytes (the I/O path alone)
  conveyor-seq     conveyor with RemoteOptions(read_ahead=0): one request at a time
  conveyor-seq-bytes  the same without decoding
  conveyor-ra8, conveyor-ra8-bytes  read_ahead=8: eight ranged GETs in flight per shard
  wds              webdataset.WebDataset over http:// shard URLs (curl) + torch DataLoader
  wds-bytes        the same without decoding
  s3torch          s3torchconnector S3IterableDataset (sharded over workers) -> tar -> decode
  litdata          litdata StreamingDataset (its chunks) + StreamingDataLoader
  streaming        MosaicML Streaming StreamingDataset (MDS shards) + torch DataLoader

Every run starts cold: a new loader, new connections, empty local caches (LitData and
Streaming download whole chunks to a local cache first; that cache is emptied before each
run). Reported per pipeline and RTT: steady img/s and MB/s (JPEG bytes), img/s of the whole
run, first batch seconds, CPU seconds per GB of JPEG bytes (user + system of this process
and all its descendants, SeaweedFS and the proxies excluded), and ratios: against
the same pipeline at 0 ms and against the best peer at the same RTT.

Run with the venv of make-s7-venv.sh:
    ~/.cache/conveyor-s7/bin/python benchmarks/s7_object_store.py --reps 3
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import signal
import statistics
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import torch
import torch.utils.data as torch_data

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "integration"))  # latency_proxy, remote_servers

from latency_proxy import LinkSettings, ProxyProcess  # noqa: E402  (tests/integration)

import s7_data  # noqa: E402
from conveyor.dataloader import DataLoader  # noqa: E402
from conveyor.datapipes.iter import TarShards  # noqa: E402
from conveyor.storage import RemoteOptions  # noqa: E402
from s3_decode import decode_crop  # noqa: E402

BUCKET = s7_data.BUCKET


@dataclass
class Spec:
    """One run: where the data is, through which proxy, and what to deliver."""

    endpoint: str  # the proxy, http://127.0.0.1:PORT
    options: dict[str, Any]  # s3fs storage options through the proxy
    layout: s7_data.Layout
    decode: bool
    batch_size: int
    num_workers: int
    cache: str  # an empty directory for libraries that cache chunks locally


# ----------------------------------------------------------------------------- samples


def to_pair(jpg: bytes, cls: Any, decode: bool) -> tuple[Any, int]:
    return (decode_crop(jpg) if decode else jpg), int(cls)


class TarPair:
    """Picklable conveyor sample dict -> (image or bytes, label)."""

    def __init__(self, decode: bool) -> None:
        self.decode = decode

    def __call__(self, sample: dict[str, Any]) -> tuple[Any, int]:
        return to_pair(sample["jpg"], sample["cls"], self.decode)


def tar_pairs(stream: Any, decode: bool) -> Iterator[tuple[Any, int]]:
    """(image or bytes, label) pairs of a WebDataset tar read as a stream (for s3torch)."""
    sample: dict[str, bytes] = {}
    key = None
    with tarfile.open(fileobj=stream, mode="r|") as archive:
        for member in archive:
            stem, _, ext = member.name.partition(".")
            if stem != key and sample:
                yield to_pair(sample["jpg"], sample["cls"], decode)
                sample = {}
            key = stem
            handle = archive.extractfile(member)
            if handle is not None:
                sample[ext] = handle.read()
    if sample:
        yield to_pair(sample["jpg"], sample["cls"], decode)


# ----------------------------------------------------------------------------- pipelines


def _conveyor_tars(spec: Spec, remote: RemoteOptions | None = None) -> Iterable[Any]:
    urls = [f"s3://{BUCKET}/{key}" for key in spec.layout.shards]
    pipe = TarShards(urls, decode=None, storage_options=spec.options, remote=remote)
    return DataLoader(
        pipe.map(TarPair(spec.decode)), batch_size=spec.batch_size, num_workers=spec.num_workers
    )


def p_conveyor(spec: Spec) -> Iterable[Any]:
    return _conveyor_tars(spec)


def p_conveyor_sequential(spec: Spec) -> Iterable[Any]:
    """conveyor with read-ahead off: one ranged GET at a time, as the reader needs bytes."""
    return _conveyor_tars(spec, RemoteOptions(read_ahead=0))


def p_conveyor_ahead8(spec: Spec) -> Iterable[Any]:
    """conveyor with a deeper window from the start: eight ranged GETs per shard (64 MiB)."""
    return _conveyor_tars(spec, RemoteOptions(read_ahead=8))


def _wds_pair(decode: bool) -> Callable[[dict[str, Any]], tuple[Any, int]]:
    return lambda sample: to_pair(sample["jpg"], sample["cls"].decode(), decode)


def p_wds(spec: Spec) -> Iterable[Any]:
    import webdataset as wds

    urls = [f"{spec.endpoint}/{BUCKET}/{key}" for key in spec.layout.shards]
    dataset = (
        wds.WebDataset(urls, shardshuffle=False, empty_check=False)
        .map(_wds_pair(spec.decode))
        .batched(spec.batch_size, partial=True)
    )
    return torch_data.DataLoader(dataset, batch_size=None, num_workers=spec.num_workers)


class S3TorchTar(torch_data.IterableDataset[tuple[Any, int]]):
    def __init__(self, objects: Any, decode: bool) -> None:
        self.objects, self.decode = objects, decode

    def __iter__(self) -> Iterator[tuple[Any, int]]:
        for reader in self.objects:  # one S3Reader per shard; sharded over the workers
            yield from tar_pairs(reader, self.decode)


def p_s3torch(spec: Spec) -> Iterable[Any]:
    from s3torchconnector import S3ClientConfig, S3IterableDataset

    objects = S3IterableDataset.from_objects(
        [f"s3://{BUCKET}/{key}" for key in spec.layout.shards],
        region="us-east-1",
        endpoint=spec.endpoint,
        s3client_config=S3ClientConfig(force_path_style=True),
        enable_sharding=True,
    )
    return torch_data.DataLoader(
        S3TorchTar(objects, spec.decode),
        batch_size=spec.batch_size,
        num_workers=spec.num_workers,
    )


def p_litdata(spec: Spec) -> Iterable[Any]:
    from litdata import StreamingDataLoader, StreamingDataset
    from litdata.streaming import downloader

    # LitData fetches chunks with obstore, which refuses plain http:// unless told; LitData
    # offers no setting for it (real S3 is https), so add it to its client options.
    downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = "true"

    class Decoded(StreamingDataset):  # type: ignore[misc]
        def __getitem__(self, index: Any) -> tuple[Any, int]:
            item = super().__getitem__(index)
            return to_pair(item["jpg"], item["cls"], spec.decode)

    options = {
        "endpoint_url": spec.endpoint,
        "aws_access_key_id": s7_data.Store.KEY,
        "aws_secret_access_key": s7_data.Store.SECRET,
        "region_name": "us-east-1",
    }
    dataset = Decoded(f"s3://{BUCKET}/litdata", cache_dir=spec.cache, storage_options=options)
    return StreamingDataLoader(dataset, batch_size=spec.batch_size, num_workers=spec.num_workers)


def p_streaming(spec: Spec) -> Iterable[Any]:
    s7_data.stub_torchvision()
    from streaming import StreamingDataset

    class Decoded(StreamingDataset):  # type: ignore[misc]
        def __getitem__(self, index: int) -> tuple[Any, int]:
            item = super().__getitem__(index)
            return to_pair(item["jpg"], item["cls"], spec.decode)

    os.environ["S3_ENDPOINT_URL"] = spec.endpoint
    dataset = Decoded(
        remote=f"s3://{BUCKET}/mds",
        local=spec.cache,
        batch_size=spec.batch_size,
        shuffle=False,
    )
    return torch_data.DataLoader(dataset, batch_size=spec.batch_size, num_workers=spec.num_workers)


PIPELINES: dict[str, tuple[Callable[[Spec], Iterable[Any]], bool]] = {
    "conveyor": (p_conveyor, True),
    "conveyor-bytes": (p_conveyor, False),
    "conveyor-seq": (p_conveyor_sequential, True),
    "conveyor-seq-bytes": (p_conveyor_sequential, False),
    "conveyor-ra8": (p_conveyor_ahead8, True),
    "conveyor-ra8-bytes": (p_conveyor_ahead8, False),
    "wds": (p_wds, True),
    "wds-bytes": (p_wds, False),
    "s3torch": (p_s3torch, True),
    "litdata": (p_litdata, True),
    "streaming": (p_streaming, True),
}
PEERS_DECODE = ("wds", "s3torch", "litdata", "streaming")

# ----------------------------------------------------------------------------- measuring


class CpuMeter:
    """CPU seconds of this process and its descendants, some processes (servers) excluded.

    Reaped descendants count through RUSAGE_CHILDREN (a worker's own reaped children, such
    as WebDataset's curl, are included in it); live ones through psutil.
    """

    def __init__(self, excluded: set[int]) -> None:
        self.excluded = excluded

    def __call__(self) -> float:
        total = 0.0
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
            usage = resource.getrusage(who)
            total += usage.ru_utime + usage.ru_stime
        for child in psutil.Process().children(recursive=True):
            if child.pid in self.excluded:
                continue
            try:
                times = child.cpu_times()
                total += times.user + times.system
            except psutil.Error:
                pass
        return total


class RunTimeout(Exception):
    pass


def _alarm(*_: object) -> None:
    raise RunTimeout("run took longer than --run-timeout")


def run_once(
    build: Callable[[Spec], Iterable[Any]], spec: Spec, want: int, warm: int, cpu: CpuMeter
) -> dict[str, float]:
    """Stream ``want`` samples; time the steady window after ``warm`` batches."""
    gc.collect()
    cpu0 = cpu()
    start = time.perf_counter()
    iterator = iter(build(spec))
    seen = batches = 0
    first = warm_t = warm_n = 0.0
    for batches, (images, labels) in enumerate(iterator, start=1):
        if batches == 1:
            first = time.perf_counter() - start
        if spec.decode:
            assert tuple(images.shape[1:]) == (3, 224, 224), images.shape
        else:
            assert isinstance(images[0], bytes | bytearray | memoryview), type(images[0])
        seen += len(labels)
        if batches == warm:
            warm_t, warm_n = time.perf_counter(), seen
        if seen >= want:
            break
    end = time.perf_counter()
    del iterator
    gc.collect()
    used = cpu() - cpu0
    if seen < want:
        raise RuntimeError(f"delivered {seen} samples, expected {want}")
    gigabytes = seen * spec.layout.mean_jpeg_bytes / 1e9
    return {
        "samples": seen,
        "img_s": (seen - warm_n) / (end - warm_t),
        "run_img_s": seen / (end - start),
        "first_batch_s": first,
        "cpu_s_per_gb": used / gigabytes,
    }


# ----------------------------------------------------------------------------- report


def med(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def paired(a: list[float | None], b: list[float | None]) -> float | None:
    return med(x / y for x, y in zip(a, b, strict=True) if x is not None and y)


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def report(
    results: dict[tuple[str, float], list[dict[str, Any]]],
    names: list[str],
    rtts: list[float],
    mean_bytes: float,
) -> str:
    def series(name: str, rtt: float, field: str) -> list[float | None]:
        return [r.get(field) for r in results[(name, rtt)]]

    rows = [
        "| pipeline | RTT ms | img/s | MB/s | whole-run img/s | first batch s | CPU s/GB "
        "| x own 0 ms | x best peer |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for rtt in rtts:
        peers = [p for p in PEERS_DECODE if p in names]
        for name in names:
            ips = series(name, rtt, "img_s")
            errors = [r["error"] for r in results[(name, rtt)] if "error" in r]
            if med(ips) is None:
                rows.append(f"| {name} | {rtt:g} | error: {errors[0][:120] if errors else '?'} |")
                continue
            own0 = paired(ips, series(name, 0.0, "img_s")) if 0.0 in rtts else None
            best = None
            if name.startswith("conveyor"):
                # bytes variants against the one peer that has one; decode against all
                candidates = (
                    [p for p in ("wds-bytes",) if p in names] if name.endswith("-bytes") else peers
                )
                per_rep = [
                    max((v for p in candidates if (v := series(p, rtt, "img_s")[i])), default=None)
                    for i in range(len(ips))
                ]
                best = paired(ips, per_rep)
            rows.append(
                f"| {name} | {rtt:g} | {med(ips):,.0f} | {med(ips) * mean_bytes / 1e6:,.1f} | "  # type: ignore[operator]
                f"{med(series(name, rtt, 'run_img_s')):,.0f} | "
                f"{med(series(name, rtt, 'first_batch_s')):.2f} | "
                f"{med(series(name, rtt, 'cpu_s_per_gb')):.1f} | "
                f"{_ratio(own0)} | {_ratio(best)} |"
                + (f" ({len(errors)} errors)" if errors else "")
            )
    return "\n".join(rows)


# ----------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipelines", default=",".join(PIPELINES))
    parser.add_argument("--rtts", default="0,25,100", help="round-trip times in ms")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--shard-mb", type=int, default=100)
    parser.add_argument("--files", type=int, default=2000, help="single objects uploaded")
    parser.add_argument("--samples", type=int, default=0, help="per run (0: every sample)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--warm-batches", type=int, default=4)
    parser.add_argument("--window", type=int, default=LinkSettings.window, help="bytes")
    parser.add_argument("--bandwidth", type=float, default=None, help="bytes/s, shared link")
    parser.add_argument("--run-timeout", type=int, default=300)
    parser.add_argument(
        "--weed-dir", default=str(s7_data.DATA_DIR / "weed"), help="SeaweedFS's data (reused)"
    )
    parser.add_argument("--out", help="append the per-run JSON lines to this file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    names = args.pipelines.split(",")
    unknown = set(names) - set(PIPELINES)
    if unknown:
        raise SystemExit(f"unknown pipelines {sorted(unknown)}; choose from {list(PIPELINES)}")
    rtts = [float(x) for x in args.rtts.split(",")]
    root, layout = s7_data.build(args.shards, args.shard_mb, args.files)
    want = args.samples or layout.samples
    os.environ.setdefault("AWS_ACCESS_KEY_ID", s7_data.Store.KEY)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", s7_data.Store.SECRET)
    os.environ.setdefault("AWS_REGION", "us-east-1")
    signal.signal(signal.SIGALRM, _alarm)
    results: dict[tuple[str, float], list[dict[str, Any]]] = {
        (n, r): [] for n in names for r in rtts
    }
    with s7_data.Store(Path(args.weed_dir)) as store:
        store.upload(root, layout)
        proxies = {
            rtt: ProxyProcess(
                store.host,
                LinkSettings(
                    rtt=rtt / 1000, window=args.window, bandwidth=args.bandwidth, shared=True
                ),
            )
            for rtt in rtts
        }
        cpu = CpuMeter({store.process.pid, *(p.pid for p in proxies.values())})
        header = {
            "scenario": "S7",
            "loadavg_start": os.getloadavg(),
            "samples_per_run": want,
            "mean_jpeg_bytes": round(layout.mean_jpeg_bytes),
            "shards": len(layout.shards),
            "window": args.window,
            "bandwidth": args.bandwidth,
        }
        print(json.dumps(header), flush=True)
        configs = [(n, r) for r in rtts for n in names]
        try:
            for rep in range(args.reps):
                shift = rep % len(configs)
                order = configs[shift:] + configs[:shift]
                for name, rtt in order if rep % 2 == 0 else reversed(order):
                    build, decode = PIPELINES[name]
                    cache = tempfile.mkdtemp(prefix="s7-cache-")
                    spec = Spec(
                        endpoint=proxies[rtt].endpoint,
                        options=store.options(proxies[rtt].endpoint),
                        layout=layout,
                        decode=decode,
                        batch_size=args.batch_size,
                        num_workers=args.num_workers,
                        cache=cache,
                    )
                    signal.alarm(args.run_timeout)
                    try:
                        result: dict[str, Any] = run_once(build, spec, want, args.warm_batches, cpu)
                    except Exception as error:
                        result = {"error": f"{type(error).__name__}: {error}"[-1500:]}
                    finally:
                        signal.alarm(0)
                        shutil.rmtree(cache, ignore_errors=True)
                    result.update(pipeline=name, rtt_ms=rtt, rep=rep, load=os.getloadavg()[0])
                    results[(name, rtt)].append(result)
                    line = json.dumps(result)
                    print(line, flush=True)
                    if args.out:
                        with open(args.out, "a") as handle:
                            handle.write(line + "\n")
        finally:
            for proxy in proxies.values():
                proxy.close()
    print(f"\nload average at the end: {os.getloadavg()}")
    print(report(results, names, rtts, layout.mean_jpeg_bytes))


if __name__ == "__main__":
    main()
