"""Secrets in URLs never shown: errors (with their whole chain), warnings, the skip ledger,
stats. Real servers on 127.0.0.1: SeaweedFS's own presigned GET URLs (read as HTTP), and
the tests' HTTP server reached with ``user:password@`` in the URL."""

from __future__ import annotations

import dataclasses
import traceback
import urllib.parse
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from remote_servers import BUCKET, Fault, FaultyServer, S3Server, ShardSet, refusing_url
from test_remote_faults import FAST

from conveyor import DataLoader
from conveyor.datapipes.iter.loading import TarShards
from conveyor.formats import BadSampleWarning, SampleError
from conveyor.formats.skips import drain_skips
from conveyor.storage import RemoteOptions, open_url

pytestmark = pytest.mark.timeout(120)

PASSWORD = "Pa55-w0rd-never-shown"


@pytest.fixture
def faulty(shard_set: ShardSet, fsspec_loop: None) -> Iterator[FaultyServer]:
    server = FaultyServer(shard_set.root)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(autouse=True)
def _empty_sink() -> Iterator[None]:
    drain_skips()
    yield
    drain_skips()


def presigned(s3_server: S3Server, key: str) -> str:
    """A presigned GET URL made by boto for SeaweedFS (``X-Amz-Signature`` and all)."""
    import s3fs

    options = {**s3_server.storage_options, "config_kwargs": {"signature_version": "s3v4"}}
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
    try:
        return str(fs.url(f"{BUCKET}/{key}", expires=3600))
    finally:
        if getattr(fs, "_s3creator", None) is not None:
            type(fs).close_session(fs.loop, fs._s3creator)


def secrets_of(url: str) -> list[str]:
    """The secret parts of ``url``, as written and URL-decoded."""
    parsed = urllib.parse.urlsplit(url)
    found = [parsed.password] if parsed.password else []
    for name, value in urllib.parse.parse_qsl(parsed.query):
        if name in ("X-Amz-Signature", "X-Amz-Credential", "X-Amz-Security-Token", "Signature"):
            found.append(value)
    return [form for secret in found for form in {secret, urllib.parse.quote(secret, safe="")}]


def shown(error: BaseException) -> str:
    """What a crash would print: the exception and its whole chain."""
    return "".join(traceback.format_exception(error))


def assert_no_secret(text: str, urls: list[str]) -> None:
    for url in urls:
        for secret in secrets_of(url):
            assert secret not in text, f"{secret!r} shown in: {text}"


def run_skipping(urls: list[str], num_workers: int, remote: RemoteOptions) -> tuple[str, Any]:
    """A skip-mode epoch: the warning text (main process) and the loader's stats."""
    pipe = TarShards(urls, decode=None, on_error="skip", remote=remote)
    loader = DataLoader(pipe, batch_size=4, num_workers=num_workers)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        list(loader)
    messages = [str(w.message) for w in caught if issubclass(w.category, BadSampleWarning)]
    assert messages, "the lost shard was not reported"
    return " ".join(messages), loader.stats()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_presigned_urls_are_read_and_their_signatures_never_shown(
    s3_server: S3Server, shard_set: ShardSet, num_workers: int
) -> None:
    urls = [presigned(s3_server, f"shards/part-{i:03d}.tar") for i in range(2)]
    missing = presigned(s3_server, "shards/no-such-shard.tar")
    assert "X-Amz-Signature=" in missing and secrets_of(missing)
    keys = [s["__key__"] for s in TarShards(urls, decode=None, remote=FAST)]
    assert keys == shard_set.keys[:16]  # the query is a signature, not a glob

    with pytest.raises(SampleError) as caught:
        list(TarShards([missing], decode=None, remote=FAST))
    assert "/conveyor-test/shards/no-such-shard.tar?" in str(caught.value)  # host and path
    assert "X-Amz-Signature=***" in str(caught.value)
    assert_no_secret(shown(caught.value), [missing])

    text, stats = run_skipping([urls[0], missing, urls[1]], num_workers, FAST)
    assert "no-such-shard.tar" in text
    assert_no_secret(text + repr(stats) + str(stats), [missing, *urls])


@pytest.mark.parametrize("read_ahead", [0, 4])
def test_credentials_in_http_urls_are_never_shown(faulty: FaultyServer, read_ahead: int) -> None:
    remote = dataclasses.replace(FAST, read_ahead=read_ahead)
    host = faulty.url.split("://", 1)[1]
    urls = [
        f"http://alice:{PASSWORD}@{host}/shards/part-00{i}.tar?token=t0k3n-never-shown&part={i}"
        for i in range(2)
    ]
    failing = "/shards/part-001.tar"
    faulty.script(failing, *[Fault("status", 500)] * (FAST.retries + 1))
    with pytest.raises(SampleError) as caught:
        list(TarShards(urls, decode=None, remote=remote))
    message = shown(caught.value)
    assert f"http://***@{host}{failing}?token=***&part=1" in message
    for secret in (PASSWORD, "t0k3n-never-shown"):
        assert secret not in message

    faulty.script(failing, *[Fault("status", 500)] * (FAST.retries + 1))
    text, stats = run_skipping(urls, 0, remote)
    ledger = repr(drain_skips())
    for secret in (PASSWORD, "t0k3n-never-shown"):
        assert secret not in text + ledger + repr(stats)

    sock, refused = refusing_url()
    url = refused.replace("://", f"://alice:{PASSWORD}@") + "/x.tar?sig=s1gn4ture-never-shown"
    with sock, pytest.raises(OSError) as refusal, open_url(url, remote=remote) as stream:
        stream.read(1)
    assert PASSWORD not in shown(refusal.value) and "s1gn4ture" not in shown(refusal.value)
