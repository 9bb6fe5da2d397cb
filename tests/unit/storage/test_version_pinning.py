"""ObjectFacts: the first answer pins the object's version; later answers must agree."""

from __future__ import annotations

import pytest

from conveyor.storage.pinning import ObjectFacts
from conveyor.storage.ranged import Answer
from conveyor.storage.retry import ObjectChangedError


def test_the_first_answer_pins_etag_size_and_modification_time() -> None:
    facts = ObjectFacts()
    facts.admit(Answer("body", 0, 10, 100, '"v1"', "Mon, 01 Jan 2026 00:00:00 GMT"))
    assert (facts.size, facts.etag, facts.if_match()) == (100, '"v1"', '"v1"')
    facts.admit(Answer("body", 10, 20, 100, '"v1"', None))  # agrees (or says nothing)
    facts.admit(Answer("body", 20, 30, None, None, None))
    for changed in (
        Answer("body", 10, 20, 100, '"v2"'),
        Answer("body", 10, 20, 120, '"v1"'),
        Answer("body", 10, 20, 100, None, "Tue, 02 Jan 2026 00:00:00 GMT"),
    ):
        with pytest.raises(ObjectChangedError, match="changed while it was read"):
            facts.admit(changed)


def test_a_weak_etag_is_compared_but_never_sent_as_if_match() -> None:
    facts = ObjectFacts()
    facts.admit(Answer("body", 0, 10, 100, 'W/"v1"'))
    assert facts.if_match() is None
    with pytest.raises(ObjectChangedError):
        facts.admit(Answer("body", 10, 20, 100, 'W/"v2"'))


def test_a_range_past_the_end_is_no_change_but_an_earlier_end_is() -> None:
    facts = ObjectFacts()
    facts.admit(Answer("body", 0, 10, 100, None))
    facts.admit(Answer(None, 100, 100, 100))  # 416 past the end, as S3 answers it
    with pytest.raises(ObjectChangedError, match="100 bytes at first, now 50"):
        facts.admit(Answer(None, 50, 50, 50))  # the object ends before its known size
