"""Enqueue of one plain job: a conditional PutItem (1 write unit per KB), not a
transaction of one item (2), with the same duplicate-id refusal."""

from __future__ import annotations

from collections import Counter

import pytest

from queue_core.records.errors import StorageError
from queue_core.records.jobs import JobState, NewJob
from tests.backends.sqs.conftest import Factory


def _job(job_id: str, key: str | None = None) -> NewJob:
    return NewJob(id=job_id, task_name="t", queue="default", payload=b"{}", concurrency_key=key)


def test_one_plain_job_is_one_put_and_a_duplicate_is_refused(make_storage: Factory) -> None:
    s = make_storage()
    s.enqueue([_job("w0")])  # first use resolves the SQS queue URL
    calls: Counter[str] = Counter()
    s.store.ddb.meta.events.register(
        "before-call.dynamodb", lambda model, **_: calls.update([model.name])
    )
    assert s.enqueue([_job("e1")]) == [JobState.QUEUED]
    assert calls == Counter({"PutItem": 1})
    with pytest.raises(StorageError, match="job id 'e1' already exists"):
        s.enqueue([_job("e1")])
    assert {c.id for c in s.claim("w", ["default"], 5, 30_000)} == {"w0", "e1"}


def test_a_job_with_a_counter_stays_one_transaction(make_storage: Factory) -> None:
    s = make_storage()
    s.enqueue([_job("w0")])
    calls: Counter[str] = Counter()
    s.store.ddb.meta.events.register(
        "before-call.dynamodb", lambda model, **_: calls.update([model.name])
    )
    assert s.enqueue([_job("k1", key="k")]) == [JobState.QUEUED]
    assert calls == Counter({"TransactWriteItems": 1})  # the job and its counter together
