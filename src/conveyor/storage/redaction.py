"""Secrets out of every URL conveyor shows: one function for errors, warnings, stats, records.

A URL may carry credentials (``http://alice:SECRET@host/x.tar``, ``s3://KEY:SECRET@bucket``)
or a signature in its query (presigned S3 and GCS URLs, Azure SAS tokens, ``?token=...``).
Whatever conveyor *shows* — an exception's message, a warning, the skip ledger, a stats
report, a cache warning — goes through `redact_url` (one URL) or `redact_text` (a message
that may quote URLs, e.g. a client library's error): the user-info part becomes ``***``
and the value of every query parameter whose name looks secret becomes ``***``; scheme,
host, port, path and the other parameters stay, so the message still says which object.

What is *data* keeps the URL as given: a sample's ``__url__`` and `SampleError.url` (the
program compares them), and the URL conveyor opens.
"""

from __future__ import annotations

import re

__all__ = ["REDACTED", "SECRET_PARAMETER", "redact_text", "redact_url"]

REDACTED = "***"

SECRET_PARAMETER = re.compile(
    r"sig|token|secret|passw|pwd|credential|key|auth|session",
    re.IGNORECASE,
)
"""Query parameter names whose values are secrets (matched anywhere in the name):
``X-Amz-Signature``, ``X-Amz-Credential``, ``X-Amz-Security-Token``, ``X-Goog-Signature``,
``Signature``, ``sig`` (Azure SAS), ``token``, ``access_token``, ``api_key``,
``AWSAccessKeyId``, ``password``, ... A harmless parameter that matches loses only its
value in messages."""

_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`]+")
_AUTHORITY = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*://)([^/?#]*)")
_PARAMETER = re.compile(r"([?&;])([^=&;#]*)=([^&;#]*)")


def redact_url(url: str) -> str:
    """``url`` with its credentials and secret query values replaced by ``***``.

    Never raises; a string that is not a URL comes back unchanged (unless it has a
    query). Idempotent."""
    text = str(url)
    match = _AUTHORITY.match(text)
    if match is not None and "@" in match.group(2):
        host = match.group(2).rsplit("@", 1)[1]
        text = f"{match.group(1)}{REDACTED}@{host}{text[match.end() :]}"
    query_at = text.find("?")
    if query_at < 0:
        return text
    head, query = text[:query_at], text[query_at:]
    return head + _PARAMETER.sub(_redact_parameter, query)


def _redact_parameter(match: re.Match[str]) -> str:
    separator, name, value = match.groups()
    if value and SECRET_PARAMETER.search(name):
        value = REDACTED
    return f"{separator}{name}={value}"


def redact_text(text: str) -> str:
    """Every URL quoted in ``text`` (a message) redacted as by `redact_url`."""
    text = str(text)
    if "://" not in text:
        return text
    return _URL_IN_TEXT.sub(lambda match: redact_url(match.group(0)), text)
