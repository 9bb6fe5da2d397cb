"""redact_url / redact_text: credentials and signatures out, host and path kept."""

from __future__ import annotations

import pytest

from conveyor.storage import redact_text, redact_url

CASES = {
    "http://alice:SECRET@host:8080/a/b.tar": "http://***@host:8080/a/b.tar",
    "s3://AKIAKEY:SECRET@bucket/x.tar": "s3://***@bucket/x.tar",
    "https://h/x.tar?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AK%2F2026"
    "&X-Amz-Date=20260101T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host"
    "&X-Amz-Security-Token=TOKEN&X-Amz-Signature=abc123": "https://h/x.tar?X-Amz-Algorithm="
    "AWS4-HMAC-SHA256&X-Amz-Credential=***&X-Amz-Date=20260101T000000Z&X-Amz-Expires=3600"
    "&X-Amz-SignedHeaders=***&X-Amz-Security-Token=***&X-Amz-Signature=***",
    "https://acct.blob.core.windows.net/c/x.tar?sv=2024&se=2026&sp=r&sig=SAS%3D":
        "https://acct.blob.core.windows.net/c/x.tar?sv=2024&se=2026&sp=r&sig=***",
    "https://storage.googleapis.com/b/x.tar?GoogleAccessId=me&Expires=1&Signature=S":
        "https://storage.googleapis.com/b/x.tar?GoogleAccessId=me&Expires=1&Signature=***",
    "https://h/x.tar?access_token=T&api_key=K&part=3&password=P":
        "https://h/x.tar?access_token=***&api_key=***&part=3&password=***",
    "http://u@h/x.tar?Signature=S#frag": "http://***@h/x.tar?Signature=***#frag",
    "/data/shards/x.tar": "/data/shards/x.tar",
    "memory://bucket/x.tar": "memory://bucket/x.tar",
    "http://h/x.tar?Signature=": "http://h/x.tar?Signature=",
}  # fmt: skip


@pytest.mark.parametrize("url", list(CASES))
def test_redact_url(url: str) -> None:
    assert redact_url(url) == CASES[url]
    assert redact_url(redact_url(url)) == CASES[url]  # idempotent


def test_redact_text_redacts_every_url_it_quotes() -> None:
    text = (
        "HTTP 500 reading http://alice:PW@127.0.0.1:80/x.tar?sig=abc at byte 5; "
        "(shard 'https://bob:PW2@h/y.tar?token=zz'), see <http://h/z?X-Amz-Signature=q>"
    )
    assert redact_text(text) == (
        "HTTP 500 reading http://***@127.0.0.1:80/x.tar?sig=*** at byte 5; "
        "(shard 'https://***@h/y.tar?token=***'), see <http://h/z?X-Amz-Signature=***>"
    )
    assert redact_text("no url here: key=value") == "no url here: key=value"
