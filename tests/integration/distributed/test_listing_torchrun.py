"""One listing per job across ranks: rank 0 lists a glob on S3 and hands it to rank 1
(gloo), whose workers list nothing either (counted at the proxy in front of SeaweedFS)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from remote_servers import BUCKET, S3Server, ShardSet
from test_listing_once import logging_proxy, s3_lists
from test_torchrun import torchrun

pytestmark = pytest.mark.timeout(240)


@pytest.mark.parametrize("worker_type", ["process", "thread"])
def test_one_listing_for_two_ranks_under_torchrun(
    s3_server: S3Server, shard_set: ShardSet, tmp_path: Path, worker_type: str
) -> None:
    log = tmp_path / "requests.jsonl"
    out = tmp_path / "ranks.json"
    with logging_proxy(s3_server, log) as proxy:
        pattern = f"s3://{BUCKET}/shards/part-*.tar"
        torchrun("remote_listing_job.py", str(out), proxy.endpoint, pattern, worker_type)
    ranks = json.loads(out.read_text())
    assert sorted(key for rank in ranks for key in rank["keys"]) == shard_set.keys
    assert [rank["listings"] for rank in ranks] == [1, 0]  # rank 0 listed, for both
    assert s3_lists(log) == 1
