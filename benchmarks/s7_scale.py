#!/usr/bin/env python
"""S7 at scale: a throttling store, a heavy latency tail, one listing, many workers and ranks.

The S7 data (benchmarks/s7_data.py) in SeaweedFS, read through the latency proxy
(tests/integration/latency_proxy.py) with whole-request rules on top
(tests/integration/request_shaping.py). Scenarios (``--scenario``):

  throttle  the proxy admits ``--rps`` GETs a second (a shared token bucket) and answers the
            rest ``429`` with ``Retry-After: 1`` (``--throttle-status 503``: S3's SlowDown,
            no Retry-After); each pipeline also runs on the same link without the limit.
            Reported: MB/s, the ratio to the un-throttled run capped at the rate the limit
            allows (``rps * block`` for conveyor, whose requests are 8 MiB blocks; a peer
            that GETs whole shards is barely limited), requests per shard against the
            minimum, throttles.
  tail      1 % of requests reach the store ``slow-factor`` x RTT late (20x); conveyor with
            hedging (default) and without (``RemoteOptions(hedge_budget=0)``), and peers.
            Reported: batch waits p50 / p99 (the consumer's time inside next()), hedges,
            and for the ``files-*`` pipelines each batch's fetch time p50 / p99 (the data
            path's own latency: the sum of its GETs, timed in the worker; a consumer's
            wait is ~0 at the median whenever prefetching keeps ahead, so it cannot give
            the p99 / p50 ratio of the issue's target), and each run's full garbage
            collections (a pause stops every thread worker at once); ``--gc-freeze`` freezes
            the objects alive before each run, so that those collections are short.
  listing   a glob (``s3://s7-bench/wds/shard-*.tar``) read by 8 workers: LIST requests
            per job and the first batch.
  ranks     the throttle and tail links with 2 ranks x 4 process workers under torchrun
            (benchmarks/s7_rank_job.py): every sample once across ranks, MB/s, requests.

Every pipeline delivers ``(key, JPEG bytes)`` (no decode: the I/O path) so that every run
checks that each sample came exactly once. Pipelines, links and reps are interleaved.
Requests are counted at the proxy (its log), GETs per shard by object key.

    ~/.cache/conveyor-s7/bin/python benchmarks/s7_scale.py --scenario throttle --reps 3
"""

from __future__ import annotations

import argparse
import collections
import gc
import importlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.utils.data as torch_data

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "integration"))

from latency_proxy import LinkSettings, ProxyProcess  # noqa: E402  (tests/integration)

import s7_data  # noqa: E402
from conveyor.dataloader import DataLoader  # noqa: E402
from conveyor.datapipes.iter import TarShards  # noqa: E402
from conveyor.storage import DEFAULT_BLOCK_BYTES, RemoteOptions, host_limits, read_window  # noqa: E402

BUCKET = s7_data.BUCKET


@dataclass
class Spec:
    endpoint: str
    options: dict[str, Any]
    layout: s7_data.Layout
    num_workers: int
    batch_size: int = 64
    files_batch: int = 8


@dataclass
class Run:
    """What one run measured (and the conveyor loader's own request counts, if any)."""

    keys: list[str] = field(default_factory=list)
    nbytes: int = 0
    first_batch_s: float = 0.0
    iter_s: float = 0.0
    steady_s: float = 0.0
    steady_bytes: int = 0
    waits: list[float] = field(default_factory=list)
    fetches: list[float] = field(default_factory=list)  # files-*: each batch's GET time
    requests: dict[str, int] = field(default_factory=dict)


def key_bytes(sample: dict[str, Any]) -> tuple[str, bytes]:
    return str(sample["__key__"]), bytes(sample["jpg"])


def _conveyor(
    spec: Spec,
    worker_type: str = "process",
    remote: RemoteOptions | None = None,
    glob: bool = False,
) -> Any:
    urls: Any = [f"s3://{BUCKET}/{key}" for key in spec.layout.shards]
    if glob:
        urls = f"s3://{BUCKET}/wds/shard-*.tar"
    pipe = TarShards(urls, decode=None, storage_options=spec.options, remote=remote)
    return DataLoader(
        pipe.map(key_bytes),
        batch_size=spec.batch_size,
        num_workers=spec.num_workers,
        worker_type=worker_type,
    )


def p_conveyor(spec: Spec) -> Any:
    return _conveyor(spec)


def p_conveyor_thread(spec: Spec) -> Any:
    return _conveyor(spec, "thread")


def p_conveyor_nohedge(spec: Spec) -> Any:
    return _conveyor(spec, remote=RemoteOptions(hedge_budget=0.0))


def p_conveyor_glob(spec: Spec) -> Any:
    return _conveyor(spec, glob=True)


def p_conveyor_glob_thread(spec: Spec) -> Any:
    return _conveyor(spec, "thread", glob=True)


def p_wds(spec: Spec) -> Any:
    import webdataset as wds

    urls = [f"{spec.endpoint}/{BUCKET}/{key}" for key in spec.layout.shards]
    dataset = (
        wds.WebDataset(urls, shardshuffle=False, empty_check=False)
        .map(lambda s: (s["__key__"], s["jpg"]))
        .batched(spec.batch_size, partial=True)
    )
    return torch_data.DataLoader(dataset, batch_size=None, num_workers=spec.num_workers)


class S3TorchKeys(torch_data.IterableDataset[tuple[str, bytes]]):
    def __init__(self, objects: Any) -> None:
        self.objects = objects

    def __iter__(self) -> Iterator[tuple[str, bytes]]:
        import tarfile

        for reader in self.objects:
            with tarfile.open(fileobj=reader, mode="r|") as archive:
                for member in archive:
                    stem, _, ext = member.name.partition(".")
                    handle = archive.extractfile(member)
                    if ext == "jpg" and handle is not None:
                        yield stem, handle.read()


def p_s3torch(spec: Spec) -> Any:
    from s3torchconnector import S3ClientConfig, S3IterableDataset

    objects = S3IterableDataset.from_objects(
        [f"s3://{BUCKET}/{key}" for key in spec.layout.shards],
        region="us-east-1",
        endpoint=spec.endpoint,
        s3client_config=S3ClientConfig(force_path_style=True),
        enable_sharding=True,
    )
    return torch_data.DataLoader(
        S3TorchKeys(objects), batch_size=spec.batch_size, num_workers=spec.num_workers
    )


class Files(torch_data.Dataset[tuple[str, bytes, float]]):
    """The S7 single objects (``files/``), one GET each: random access, where every batch
    waits for its requests (the tail scenario's own layout). ``remote=None``: boto3, as a
    user's own Dataset would read them."""

    def __init__(self, spec: Spec, remote: RemoteOptions | None, use_boto3: bool = False):
        self.keys = spec.layout.files
        self.options = spec.options
        self.endpoint = spec.endpoint
        self.remote = remote
        self.use_boto3 = use_boto3
        self._client: Any = None

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, index: int) -> tuple[str, bytes, float]:
        """(key, bytes, seconds the GET took): a batch's fetch time is its items' sum."""
        started = time.perf_counter()
        key, body = self._get(self.keys[index])
        return key, body, time.perf_counter() - started

    def _get(self, key: str) -> tuple[str, bytes]:
        if self.use_boto3:
            if self._client is None:
                import boto3

                self._client = boto3.client(
                    "s3", endpoint_url=self.endpoint, region_name="us-east-1",
                    aws_access_key_id=s7_data.Store.KEY, aws_secret_access_key=s7_data.Store.SECRET,
                )  # fmt: skip
            body = self._client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
            return key, body
        from conveyor.storage import open_url

        with open_url(f"s3://{BUCKET}/{key}", self.options, remote=self.remote) as stream:
            return key, stream.read()


def _files(spec: Spec, remote: RemoteOptions | None) -> Any:
    return DataLoader(
        Files(spec, remote),
        batch_size=spec.files_batch,
        num_workers=spec.num_workers,
        worker_type="thread",
    )


def p_files(spec: Spec) -> Any:
    return _files(spec, RemoteOptions())


def p_files_nohedge(spec: Spec) -> Any:
    return _files(spec, RemoteOptions(hedge_budget=0.0))


def p_files_boto3(spec: Spec) -> Any:
    dataset = Files(spec, None, use_boto3=True)
    return torch_data.DataLoader(dataset, batch_size=spec.files_batch, num_workers=spec.num_workers)


PIPELINES: dict[str, Callable[[Spec], Any]] = {
    "files-conveyor": p_files,
    "files-conveyor-nohedge": p_files_nohedge,
    "files-boto3": p_files_boto3,
    "conveyor": p_conveyor,
    "conveyor-thread": p_conveyor_thread,
    "conveyor-nohedge": p_conveyor_nohedge,
    "conveyor-glob": p_conveyor_glob,
    "conveyor-glob-thread": p_conveyor_glob_thread,
    "wds": p_wds,
    "s3torch": p_s3torch,
}


def _batch(batch: Any) -> tuple[list[str], int, float | None]:
    keys, jpgs, *timed = batch
    fetch = float(sum(float(t) for t in timed[0])) if timed else None
    return [str(k) for k in keys], sum(len(j) for j in jpgs), fetch


def run_once(loader: Any, warm: int) -> Run:
    run = Run()
    start = time.perf_counter()
    iterator = iter(loader)
    run.iter_s = time.perf_counter() - start  # the loader's own start (workers, listing)
    steady_from = 0.0
    asked = time.perf_counter()
    for index, batch in enumerate(iterator, start=1):
        got = time.perf_counter()
        keys, nbytes, fetch = _batch(batch)
        run.keys += keys
        run.nbytes += nbytes
        if fetch is not None and index > warm:
            run.fetches.append(fetch)
        if index == 1:
            run.first_batch_s = got - start
        if index == warm:
            steady_from, run.steady_bytes = got, -run.nbytes
        elif index > warm:
            run.waits.append(got - asked)
        asked = time.perf_counter()
    end = time.perf_counter()
    run.steady_bytes += run.nbytes
    run.steady_s = end - steady_from
    stats = getattr(loader, "stats", None)
    if stats is not None:
        counts = stats().requests
        run.requests = {
            k: getattr(counts, k)
            for k in ("requests", "throttled", "hedged", "hedge_wins", "listings")
        }
    del iterator
    return run


# ----------------------------------------------------------------------------- the proxy log


class ProxyLog:
    """The requests a proxy logged since the last look (one JSON line each)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seen = 0

    def take(self) -> list[dict[str, Any]]:
        lines = self.path.read_text().splitlines() if self.path.exists() else []
        new, self.seen = lines[self.seen :], len(lines)
        return [json.loads(line) for line in new]


def request_summary(records: list[dict[str, Any]], layout: s7_data.Layout) -> dict[str, Any]:
    per_shard: collections.Counter[str] = collections.Counter()
    later: collections.Counter[str] = collections.Counter()  # after the first 2 s (start-up)
    started = min((r["t"] for r in records), default=0.0)
    for r in records:
        for key in layout.shards:
            if r["target"].split("?", 1)[0].endswith(key) and r["method"] == "GET":
                per_shard[key] += 1
                if r["t"] >= started + 2.0:
                    later["gets"] += 1
                    later["throttled"] += r["done"] == "throttled"
    lists = sum("list-type=" in r["target"] or "prefix=" in r["target"] for r in records)
    timeline = [  # when each request came, relative to the first, and what was done
        (round(r["t"] - started, 3), r["method"], r["target"].rsplit("/", 1)[-1][:40], r["done"])
        for r in records
    ]
    return {
        "timeline": timeline,
        "gets_per_shard": [per_shard[key] for key in layout.shards],
        "throttled": sum(r["done"] == "throttled" for r in records),
        "after_2s": dict(later),
        "slow": sum(r["done"] == "slow" for r in records),
        "lists": lists,
    }


# ----------------------------------------------------------------------------- scenarios


def links_for(args: argparse.Namespace, log_dir: Path) -> dict[str, LinkSettings]:
    rtt = args.rtt / 1000
    plain = {"rtt": rtt, "window": args.window}
    if args.scenario in ("throttle", "ranks"):
        throttled = LinkSettings(
            **plain,
            requests_per_s=args.rps,
            throttle_status=args.throttle_status,
            retry_after="none" if args.throttle_status == 503 else "seconds",
            log=str(log_dir / "throttled.jsonl"),
        )
        links = {
            "open": LinkSettings(**plain, log=str(log_dir / "open.jsonl")),
            "throttled": throttled,
        }
        if args.scenario == "throttle":
            return links
    tail = LinkSettings(
        **plain,
        slow_fraction=args.slow_fraction,
        slow_s=(args.slow_factor - 1) * rtt,
        seed=args.seed,
        log=str(log_dir / "tail.jsonl"),
    )
    if args.scenario == "tail":
        return {"tail": tail}
    if args.scenario == "listing":
        return {"open": LinkSettings(**plain, log=str(log_dir / "open.jsonl"))}
    return {**links, "tail": tail}


def expected_keys(layout: s7_data.Layout) -> int:
    return layout.samples


def summarise(
    results: dict[tuple[str, str], list[dict[str, Any]]],
    args: argparse.Namespace,
    layout: s7_data.Layout,
) -> str:
    def med(values: Iterable[float]) -> float:
        kept = list(values)
        return statistics.median(kept) if kept else float("nan")

    block_mb = DEFAULT_BLOCK_BYTES / 1e6
    shard_bytes = statistics.mean(args.shard_sizes)
    shard_mb = shard_bytes / 1e6
    rows = [
        "| pipeline | link | MB/s | x open | x capped | first batch s | wait p50 ms | wait p99 ms "
        "| p99/p50 | GETs/shard (min) | throttled | after 2 s | hedged | LIST | exactly once |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (name, link), runs in sorted(results.items()):
        good = [r for r in runs if "error" not in r]
        if not good:
            rows.append(f"| {name} | {link} | error: {runs[0].get('error', '?')[:100]} |")
            continue
        mbs = med(r["mb_s"] for r in good)
        open_runs = [r for r in results.get((name, "open"), []) if "error" not in r]
        x_open = mbs / med(r["mb_s"] for r in open_runs) if open_runs and link != "open" else 1.0
        conveyor = name.startswith("conveyor")
        cap = args.rps * block_mb if conveyor else args.rps * shard_mb
        capped = (
            mbs / min(med(r["mb_s"] for r in open_runs), cap)
            if open_runs and link == "throttled"
            else float("nan")
        )
        waits = [w for r in good for w in r["waits"]]
        p50 = statistics.quantiles(waits, n=100)[49] * 1e3 if len(waits) > 2 else float("nan")
        p99 = statistics.quantiles(waits, n=100)[98] * 1e3 if len(waits) > 2 else float("nan")
        minimum = statistics.mean(-(-size // DEFAULT_BLOCK_BYTES) for size in args.shard_sizes)
        minimum = minimum if conveyor else 1
        gets = med(statistics.mean(r["requests_seen"]["gets_per_shard"]) for r in good)
        rows.append(
            f"| {name} | {link} | {mbs:,.1f} | {x_open:.2f} | {capped:.2f} | "
            f"{med(r['first_batch_s'] for r in good):.2f} | {p50:.1f} | {p99:.1f} | "
            f"{p99 / p50:.1f} | {gets:.1f} ({minimum:.1f}) | "
            f"{med(r['requests_seen']['throttled'] for r in good):.0f} | "
            f"{_steady_share(good)} | "
            f"{med(r.get('conveyor', {}).get('hedged', 0) for r in good):.0f} | "
            f"{med(r['requests_seen']['lists'] for r in good):.0f} | "
            f"{all(r['exactly_once'] for r in good)} |"
        )
    return "\n".join(rows)


def fetch_summary(results: dict[tuple[str, str], list[dict[str, Any]]]) -> str:
    """Each batch's fetch time (files-* pipelines), pooled over the reps: p50, p99, ratio,
    and the GETs hedging added."""
    rows = [
        "| pipeline | link | batches | fetch p50 ms | fetch p99 ms | p99/p50 | hedged (won) "
        "| extra GETs | exactly once | load | full GCs (max ms) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (name, link), runs in sorted(results.items()):
        fetches = [f for r in runs if "error" not in r for f in r.get("fetches", [])]
        if len(fetches) < 100:
            continue
        cuts = statistics.quantiles(fetches, n=100)
        conveyor = [r.get("conveyor", {}) for r in runs if "error" not in r]
        hedged = sum(c.get("hedged", 0) for c in conveyor)
        won = sum(c.get("hedge_wins", 0) for c in conveyor)
        sent = sum(c.get("requests", 0) for c in conveyor)
        extra = f"{100 * hedged / (sent - hedged):.1f} %" if sent > hedged else "-"
        good = [r for r in runs if "error" not in r]
        loads = [r["load"] for r in good]
        pauses = [p for r in good for p in r.get("gc_pauses", [])]
        rows.append(
            f"| {name} | {link} | {len(fetches)} | {cuts[49] * 1e3:.1f} | {cuts[98] * 1e3:.1f} "
            f"| {cuts[98] / cuts[49]:.1f} | {hedged} ({won}) | {extra} "
            f"| {len(good) == len(runs) and all(r['exactly_once'] for r in good)} "
            f"| {min(loads):.1f}-{max(loads):.1f} "
            f"| {len(pauses)} ({max(pauses, default=0.0) * 1e3:.0f}) |"
        )
    return "\n".join(rows) if len(rows) > 2 else ""


def _steady_share(runs: list[dict[str, Any]]) -> str:
    """Throttled / GETs after the first 2 s of the runs (start-up excluded), summed."""
    later = [r["requests_seen"].get("after_2s", {}) for r in runs]
    gets = sum(x.get("gets", 0) for x in later)
    throttled = sum(x.get("throttled", 0) for x in later)
    return f"{throttled}/{gets}"


class FullCollections:
    """The full (generation 2) garbage collections during a run and how long each paused the
    process: every thread worker stops for it, so each in-flight batch is that much later."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self._started = 0.0

    def __enter__(self) -> FullCollections:
        gc.callbacks.append(self._note)
        return self

    def __exit__(self, *_: object) -> None:
        gc.callbacks.remove(self._note)

    def _note(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses.append(time.perf_counter() - self._started)


def one_run(
    name: str, spec: Spec, warm: int, layout: s7_data.Layout, log: ProxyLog, gc_freeze: bool
) -> dict[str, Any]:
    log.take()
    # each run starts as a fresh process would: nothing learnt about the host yet (a later
    # epoch in the same process keeps its learnt pace and window, and is throttled less):
    # the limits, the windows (a thread-worker run taught this process the host's objects
    # are large, and forked workers then sent their first window at once), the throttles
    # heard by sibling processes
    host_limits._limits.clear()
    read_window._windows.clear()
    board = getattr(importlib.import_module("conveyor.storage"), "shared_throttles", None)
    if board is not None and hasattr(board, "forget_all"):
        board.forget_all()
    elif board is not None:  # an older build (--compare)
        board._board[:] = bytes(len(board._board))
    if gc_freeze:  # what a training script may do: a full collection then skips the
        gc.collect()  # objects alive before the loop (torch's, botocore's models, ...)
        gc.freeze()
    with FullCollections() as collections_seen:
        run = run_once(PIPELINES[name](spec), warm)
    seen = request_summary(log.take(), layout)
    counts = collections.Counter(run.keys)
    expected = len(layout.files) if name.startswith("files") else layout.samples
    return {
        "samples": len(run.keys),
        "exactly_once": len(counts) == expected and max(counts.values()) == 1,
        "mb_s": run.steady_bytes / run.steady_s / 1e6,
        "first_batch_s": run.first_batch_s,
        "iter_s": run.iter_s,
        "waits": run.waits,
        "fetches": run.fetches,
        "requests_seen": seen,
        "conveyor": run.requests,
        "gc_pauses": collections_seen.pauses,
    }


def _alarm(*_: object) -> None:
    raise TimeoutError("run took longer than --run-timeout")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scenario", choices=("throttle", "tail", "listing", "ranks"), required=True
    )
    parser.add_argument("--pipelines", default="conveyor,conveyor-thread,wds")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--links", help="only these of the scenario's links (open,throttled,tail)")
    parser.add_argument("--rtt", type=float, default=25.0, help="ms")
    parser.add_argument("--window", type=int, default=LinkSettings.window)
    parser.add_argument("--rps", type=float, default=10.0, help="GETs a second the store admits")
    parser.add_argument("--throttle-status", type=int, default=429, choices=(429, 503))
    parser.add_argument("--slow-fraction", type=float, default=0.01)
    parser.add_argument("--slow-factor", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--shard-mb", type=int, default=100)
    parser.add_argument("--num-workers", type=int, default=8)
    parser.add_argument("--files-batch", type=int, default=8, help="files-* pipelines' batch")
    parser.add_argument(
        "--warm-batches", type=int, default=None,
        help="batches left out of the steady figures (default 4; for --scenario tail one per "
        "worker if more: each worker's first batch opens its connections, not the tail)",
    )  # fmt: skip
    parser.add_argument("--run-timeout", type=int, default=300)
    parser.add_argument("--weed-dir", default=str(s7_data.DATA_DIR / "weed"))
    parser.add_argument("--out", help="append the per-run JSON lines to this file")
    parser.add_argument(
        "--gc-freeze", action="store_true",
        help="gc.freeze() before each run, so that a full garbage collection does not walk "
        "the objects alive before it (its pause otherwise stops every thread worker)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.warm_batches is None:
        args.warm_batches = max(4, args.num_workers) if args.scenario == "tail" else 4
    torch.set_num_threads(1)
    names = args.pipelines.split(",")
    root, layout = s7_data.build(args.shards, args.shard_mb, 2000)
    args.shard_sizes = [(root / key).stat().st_size for key in layout.shards]
    for name, value in (
        ("AWS_ACCESS_KEY_ID", s7_data.Store.KEY),
        ("AWS_SECRET_ACCESS_KEY", s7_data.Store.SECRET),
        ("AWS_REGION", "us-east-1"),
    ):
        os.environ.setdefault(name, value)
    log_dir = Path(tempfile.mkdtemp(prefix="s7-scale-"))
    signal.signal(signal.SIGALRM, _alarm)
    results: dict[tuple[str, str], list[dict[str, Any]]] = collections.defaultdict(list)
    with s7_data.Store(Path(args.weed_dir)) as store:
        store.upload(root, layout)
        links = links_for(args, log_dir)
        if args.links:
            links = {name: links[name] for name in args.links.split(",")}
        proxies = {name: ProxyProcess(store.host, settings) for name, settings in links.items()}
        logs = {name: ProxyLog(Path(str(settings.log))) for name, settings in links.items()}
        print(json.dumps({"scenario": args.scenario, "loadavg_start": os.getloadavg(),
                          "links": {k: str(v) for k, v in links.items()}}), flush=True)  # fmt: skip
        configs = [(n, link) for link in links for n in names]
        try:
            for rep in range(args.reps):
                order = configs[rep % len(configs) :] + configs[: rep % len(configs)]
                for name, link in order if rep % 2 == 0 else reversed(order):
                    if args.scenario == "ranks":
                        result = rank_run(name, proxies[link], store, args, layout, logs[link])
                    else:
                        endpoint = proxies[link].endpoint
                        spec = Spec(endpoint, store.options(endpoint), layout, args.num_workers,
                                    files_batch=args.files_batch)  # fmt: skip
                        signal.alarm(args.run_timeout)
                        try:
                            result = one_run(
                                name, spec, args.warm_batches, layout, logs[link], args.gc_freeze
                            )
                        except Exception as error:
                            result = {"error": f"{type(error).__name__}: {error}"[-800:]}
                        finally:
                            signal.alarm(0)
                    result.update(pipeline=name, link=link, rep=rep, load=os.getloadavg()[0])
                    results[(name, link)].append(result)
                    shown = {k: v for k, v in result.items() if k not in ("waits", "fetches")}
                    shown["requests_seen"] = {
                        k: v for k, v in result.get("requests_seen", {}).items() if k != "timeline"
                    }
                    line = json.dumps(shown)
                    print(line, flush=True)
                    if args.out:
                        with open(args.out, "a") as handle:
                            handle.write(json.dumps(result) + "\n")
        finally:
            for proxy in proxies.values():
                proxy.close()
            shutil.rmtree(log_dir, ignore_errors=True)
    print(f"\nload average at the end: {os.getloadavg()}")
    print(summarise(results, args, layout))
    print(fetch_summary(results))


def rank_run(
    name: str,
    proxy: ProxyProcess,
    store: Any,
    args: argparse.Namespace,
    layout: s7_data.Layout,
    log: ProxyLog,
) -> dict[str, Any]:
    """2 ranks x 4 process workers under torchrun; rank 0 reports for both."""
    log.take()
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "ranks.json"
        command = [
            sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
            "--master_addr=127.0.0.1", f"--master_port={_free_port()}",
            f"--rdzv-id=s7-{uuid.uuid4().hex}",  # a fresh job: no throttles heard before
            str(HERE / "s7_rank_job.py"), str(out), proxy.endpoint, name,
            json.dumps(layout.shards), "4",
        ]  # fmt: skip
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=args.run_timeout, check=False
        )
        if done.returncode != 0:
            return {"error": (done.stderr or done.stdout)[-800:]}
        ranks = json.loads(out.read_text())
    keys = [k for r in ranks for k in r["keys"]]
    counts = collections.Counter(keys)
    # steady state, as in one_run: from the first rank's 4th batch to the last rank's end
    seconds = max(r["end_at"] for r in ranks) - min(r["warm_at"] for r in ranks)
    return {
        "samples": len(keys),
        "exactly_once": len(counts) == layout.samples and max(counts.values()) == 1,
        "mb_s": sum(r["steady_bytes"] for r in ranks) / seconds / 1e6,
        "first_batch_s": max(r["first_batch_s"] for r in ranks),
        "iter_s": max(r["iter_s"] for r in ranks),
        "waits": [w for r in ranks for w in r["waits"]],
        "requests_seen": request_summary(log.take(), layout),
        "conveyor": {},
    }


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


if __name__ == "__main__":
    main()
