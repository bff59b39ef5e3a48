"""Flows on SQS + DynamoDB when the process that ended a step dies before advancing.

The finishing transaction records a durable step-end event; the advance (folding it and
releasing the dependents) and the chunks of a wide release are separate writes. A
caller killed between them stalls nothing: the first ``reap`` at least
``REAP_MARGIN_MS`` later completes the work (an earlier one leaves it to the finisher,
which may still be advancing), and every released job exists exactly once.
"""

from __future__ import annotations

from typing import Any

import pytest

from queue_core.records.flows import StepState
from queue_core.records.jobs import JobState
from queue_core.rules.leases import REAP_MARGIN_MS as M
from queue_core.storage.flows import step_job_id
from queue_core.testing.fixtures import LEASE, T0, complete_end
from queue_core.testing.suite._flows_base import make_execution, make_spec, states
from tests.backends.sqs.conftest import Factory


def _killed_after_the_event(storage: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The caller 'dies' right after its finishing transaction: no advance runs."""
    monkeypatch.setattr(storage.flows, "after_ends", lambda eids, now: [])


def test_reap_releases_the_dependents_of_a_step_whose_finisher_died(
    make_storage: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker, reaper = make_storage(), make_storage()
    new = make_execution(make_spec({"a": [], "b": ["a"]}))
    worker.start_execution(new, now=T0)
    a = worker.claim("w", ["default"], 1, LEASE, now=T0 + 1)[0]
    _killed_after_the_event(worker, monkeypatch)
    assert worker.finish([complete_end(a.ref, b'"A"')], now=T0 + 2) == [True]
    assert worker.get_job(a.id).state is JobState.SUCCEEDED  # type: ignore[union-attr]
    assert reaper.get_job(step_job_id(new.id, 1)) is None  # not released yet
    assert reaper.reap(now=T0 + 1 + M) == []  # within the margin: the finisher's to do
    assert reaper.get_job(step_job_id(new.id, 1)) is None
    assert reaper.reap(now=T0 + 2 + M) == []
    assert states(reaper, new.id) == {"a": StepState.SUCCEEDED, "b": StepState.QUEUED}
    b = reaper.claim("w2", ["default"], 5, LEASE, now=T0 + 3 + M)
    assert [c.step_id for c in b] == ["b"]
    assert reaper.get_step_inputs(new.id, "b").results == {"a": b'"A"'}


def test_a_wide_release_interrupted_between_chunks_is_completed_once(
    make_storage: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker, reaper = make_storage(), make_storage()
    width = 150  # more job writes than one transaction holds
    graph: dict[str, list[str]] = {"root": []}
    graph.update({f"s{i}": ["root"] for i in range(width)})
    new = make_execution(make_spec(graph))
    worker.start_execution(new, now=T0)
    root = worker.claim("w", ["default"], 1, LEASE, now=T0 + 1)[0]
    # the finisher advances (first chunk written with the execution) and dies before
    # draining the rest of the release
    monkeypatch.setattr(worker.flows, "_drain", lambda eid, now: [])
    assert worker.finish([complete_end(root.ref)], now=T0 + 2) == [True]
    released = [worker.get_job(step_job_id(new.id, i + 1)) for i in range(width)]
    assert 0 < sum(j is not None for j in released) < width
    reaper.reap(now=T0 + 2 + M)
    reaper.reap(now=T0 + 2 + M)  # a second reaper pass finds nothing left to do
    claimed = reaper.claim("w2", ["default"], 2 * width, LEASE, now=T0 + 3 + M)
    assert sorted(c.step_id or "" for c in claimed) == sorted(f"s{i}" for i in range(width))
    assert len({c.id for c in claimed}) == width


def test_an_aws_error_in_the_advance_after_a_finish_is_left_to_the_reaper(
    make_storage: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from botocore.exceptions import ClientError

    worker, reaper = make_storage(), make_storage()
    new = make_execution(make_spec({"a": [], "b": ["a"]}))
    worker.start_execution(new, now=T0)
    a = worker.claim("w", ["default"], 1, LEASE, now=T0 + 1)[0]
    get = worker.store.db.get

    def throttled(key: dict[str, Any]) -> Any:
        if key["sk"]["S"] == "X":  # the advance reads the execution
            error = {"Error": {"Code": "ThrottlingException", "Message": "slow down"}}
            raise ClientError(error, "GetItem")  # type: ignore[arg-type]
        return get(key)

    monkeypatch.setattr(worker.store.db, "get", throttled)
    assert worker.finish([complete_end(a.ref)], now=T0 + 2) == [True]
    assert reaper.get_job(step_job_id(new.id, 1)) is None
    reaper.reap(now=T0 + 2 + M)
    assert states(reaper, new.id) == {"a": StepState.SUCCEEDED, "b": StepState.QUEUED}
