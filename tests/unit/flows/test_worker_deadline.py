"""The worker bounds a step attempt by its flow's deadline (pure parts, no clock)."""

from __future__ import annotations

from queue_core.records.jobs import ClaimedJob
from queue_core.worker.flowsteps import flow_binds, flow_deadline_of
from queue_core.worker.slots import Attempt
from queue_core.worker.watchdog import deadline_of

T0 = 1_700_000_000_000


def _job(timeout_ms: int | None, flow_deadline_at: int | None) -> ClaimedJob:
    return ClaimedJob(
        id="e.0",
        task_name="f.a",
        queue="default",
        payload=b"{}",
        attempt=1,
        lease_token="t",
        lease_expires_at=T0 + 30_000,
        deadline=None,
        max_attempts=3,
        timeout_ms=timeout_ms,
        started_at=T0,
        execution_id="e",
        step_id="a",
        flow_deadline_at=flow_deadline_at,
    )


def test_the_earlier_bound_wins_and_names_the_reason() -> None:
    assert flow_binds(_job(None, T0 + 5_000)) is True
    assert flow_binds(_job(10_000, T0 + 5_000)) is True
    assert flow_binds(_job(3_000, T0 + 5_000)) is False
    assert flow_binds(_job(3_000, None)) is False


def test_deadline_of_takes_the_flow_deadline_on_the_worker_clock() -> None:
    # never early (SPEC §4): exactly at the bound, not a lead before it
    att = Attempt(_job(10_000, T0 + 5_000), None)
    att.claimed_at = 100.0
    assert flow_deadline_of(att.job, 100.0) == 105.0
    assert deadline_of(att) == 105.0  # flow first (own bound 110.0)
    own_first = Attempt(_job(1_500, T0 + 5_000), None)
    own_first.claimed_at = 100.0
    assert deadline_of(own_first) == 101.5
    past = Attempt(_job(None, T0 - 1_000), None)
    past.claimed_at = 100.0
    assert deadline_of(past) == 100.0  # already past: stop at once


def test_a_timeout_counts_from_the_bodys_start_and_a_flow_deadline_does_not() -> None:
    own = Attempt(_job(1_500, None), None)
    own.claimed_at = 100.0
    assert deadline_of(own, 100.25) == 101.75  # the body started 0.25 s after the claim
    assert deadline_of(own, 99.0) == 101.5  # never before the claim
    flow = Attempt(_job(None, T0 + 2_000), None)
    flow.claimed_at = 100.0
    assert deadline_of(flow, 100.25) == 102.0  # the execution's deadline is fixed
