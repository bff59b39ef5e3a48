"""Debounce on SQS + DynamoDB: a merged payload may move between inline and chunk items."""

from __future__ import annotations

from queue_core.records.jobs import JobState, NewJob
from tests.backends.sqs.conftest import Factory

T0 = 1_700_000_000_000
SEC = 1000


def _call(job_id: str, payload: bytes) -> NewJob:
    return NewJob(
        id=job_id,
        task_name="t",
        queue="default",
        payload=payload,
        delay_ms=10 * SEC,
        debounce_key="t:k",
        debounce_ms=10 * SEC,
        debounce_max_ms=100 * SEC,
    )


def test_a_merge_replaces_inline_and_chunked_payloads_whole(make_storage: Factory) -> None:
    s = make_storage()
    big, bigger = b"a" * 700_000, b"b" * 400_000  # three chunk items, then two
    (first,) = s.enqueue_debounced([_call("d1", b"small")], now=T0)
    for i, payload in enumerate((big, bigger, b"tiny")):
        (got,) = s.enqueue_debounced([_call(f"d{i + 2}", payload)], now=T0 + (i + 1) * SEC)
        assert (got.job_id, got.existing) == ("d1", True)
        record = s.get_job("d1")
        assert record is not None and record.payload == payload
    (claimed,) = s.claim("w", ["default"], 1, 30_000, now=T0 + 20 * SEC)
    assert (claimed.id, claimed.payload) == ("d1", b"tiny")
    assert s.enqueue([_call("d9", big)], now=T0 + 21 * SEC) == [JobState.QUEUED]
    assert s.get_job("d9") is not None
