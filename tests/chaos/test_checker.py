"""The chaos checker itself: each kind of damage it must report is reported (fast, no
worker processes; the drain is tests/chaos/test_chaos.py)."""

from __future__ import annotations

from collections import Counter

import pytest

from queue_core import JobState, Outcome, Queue
from queue_core.records.jobs import AttemptRecord, JobRecord
from queue_core.testing.fixtures import attempt_record
from tests.chaos.app import LIMIT, register
from tests.chaos.driver import ChaosReport, _check_concurrency_slots, _check_job


def _job(state: JobState, attempts: int, reason: str | None = None) -> JobRecord:
    return JobRecord(
        id="j1", task_name="noop", queue="default", state=state, reason=reason,
        payload=b"[]", result=None, error=None, attempts=attempts, max_attempts=30,
        priority=0, enqueued_at=0, run_at=0, started_at=None, finished_at=None,
    )  # fmt: skip


def _rec(number: int, outcome: Outcome) -> AttemptRecord:
    return attempt_record(number, outcome)


def test_a_clean_recovered_job_counts_as_lost_and_recovered_and_ran_twice() -> None:
    report = ChaosReport("t", 1)
    records = [_rec(1, Outcome.LOST), _rec(2, Outcome.SUCCEEDED)]
    _check_job("noop", _job(JobState.SUCCEEDED, 2), records, Counter({1: 1, 2: 1}), report)
    assert report.violations == []
    assert (report.lost_attempts, report.recovered_jobs, report.ran_twice) == (1, 1, 1)
    assert report.jobs_lost == 0


@pytest.mark.parametrize(
    ("kind", "job", "records", "runs", "found"),
    [
        ("noop", None, [], {}, "missing"),
        ("noop", _job(JobState.QUEUED, 0), [], {}, "ended queued"),
        ("fatal", _job(JobState.SUCCEEDED, 1), [_rec(1, Outcome.SUCCEEDED)], {1: 1}, "ended"),
        ("noop", _job(JobState.SUCCEEDED, 2), [_rec(2, Outcome.SUCCEEDED)], {2: 1}, "attempts"),
        ("noop", _job(JobState.SUCCEEDED, 1), [_rec(1, Outcome.SUCCEEDED)], {1: 2}, "more than"),
        ("noop", _job(JobState.SUCCEEDED, 1), [_rec(1, Outcome.SUCCEEDED)], {}, "never executed"),
        ("noop", _job(JobState.SUCCEEDED, 1), [_rec(1, Outcome.SUCCEEDED)], {1: 1, 3: 1}, "unrec"),
        (
            "noop",
            _job(JobState.SUCCEEDED, 2),
            [_rec(1, Outcome.FAILED), _rec(2, Outcome.SUCCEEDED)],
            {1: 1, 2: 1},
            "earlier attempts",
        ),
        ("flaky", _job(JobState.SUCCEEDED, 1), [_rec(1, Outcome.SUCCEEDED)], {1: 1}, "failures"),
    ],
)
def test_damage_is_reported(
    kind: str, job: JobRecord | None, records: list[AttemptRecord], runs: dict[int, int],
    found: str,
) -> None:  # fmt: skip
    report = ChaosReport("t", 1)
    _check_job(kind, job, records, Counter(runs), report)
    assert any(found in v for v in report.violations), report.violations


def test_a_leaked_concurrency_slot_is_reported() -> None:
    q = Queue("memory://")
    try:
        limited = register(q)["limited"]
        clean = ChaosReport("t", 0)
        _check_concurrency_slots(q, limited, clean)
        assert clean.violations == []
        # the first probe left LIMIT jobs running (only a cancel request reaches them),
        # so they hold every slot, as a leak would
        leaky = ChaosReport("t", 0)
        _check_concurrency_slots(q, limited, leaky)
        assert [v for v in leaky.violations if f"got 0 of {LIMIT + 1}" in v], leaky.violations
    finally:
        q.close()
