"""The checker of the chaos drain with flows and workflows: each kind of damage it must
report is reported (fast, no worker processes; the drain is
tests/chaos/test_chaos_durable.py)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from queue_core import JobState, Outcome
from queue_core.flows import StepRun, StepState
from queue_core.records.jobs import AttemptRecord, JobRecord
from queue_core.testing.fixtures import attempt_record
from tests.chaos.durable_app import MAX_ATTEMPTS
from tests.chaos.durable_driver import (
    DurableChaosReport,
    _check_function,
    _check_memo_step,
    cut_bodies,
)
from tests.chaos.flows_driver import FlowChaosReport, _check_step

_S, _L, _F, _OK = Outcome.SUSPENDED, Outcome.LOST, Outcome.FAILED, Outcome.SUCCEEDED
_CLEAN = [(_S, "sleep"), (_L, None), (_S, "event"), (_S, "children"), (_OK, None)]


def _rec(
    number: int, outcome: Outcome, reason: str | None = None, error: str = ""
) -> AttemptRecord:
    return attempt_record(
        number, outcome, reason=reason, error_class=error or None,
        error_type=f"queue_core.records.errors.{error}" if error else None,
    )  # fmt: skip


def _main(attempts: list[tuple[Outcome, str | None]], error: str = "") -> StepRun:
    records = [
        _rec(n, o, r, error if o is _F else "") for n, (o, r) in enumerate(attempts, start=1)
    ]
    return StepRun(
        step_id="main", state=StepState.SUCCEEDED, reason=None, job_id="j", attempts=records
    )


def _job(attempts: int, max_attempts: int) -> JobRecord:
    return JobRecord(
        id="j", task_name="chaos-durable", queue="default", state=JobState.SUCCEEDED,
        reason=None, payload=b"[]", result=None, error=None, attempts=attempts,
        max_attempts=max_attempts, priority=0, enqueued_at=0, run_at=0, started_at=None,
        finished_at=None,
    )  # fmt: skip


def test_a_clean_function_counts_its_suspended_and_lost_attempts() -> None:
    report = DurableChaosReport("t", "SIGKILL", 0, 1)
    outcomes = _check_function("x", _main(_CLEAN), _job(5, MAX_ATTEMPTS + 3), report)
    assert report.violations == []
    assert (report.suspended, report.lost_attempts, report.fault_failed) == (3, 1, 0)
    assert outcomes == {1: _S, 2: _L, 3: _S, 4: _S, 5: _OK}


@pytest.mark.parametrize(
    ("attempts", "job", "found"),
    [
        (_CLEAN, _job(5, MAX_ATTEMPTS + 2), "they spent 1"),
        (_CLEAN, _job(4, MAX_ATTEMPTS + 3), "attempts, 5 recorded"),
        (_CLEAN, None, "recorded"),
        (
            [(_S, "sleep"), (_S, "children"), (_OK, None)],
            _job(3, MAX_ATTEMPTS + 2),
            "suspended for",
        ),
        ([*_CLEAN[:-1], (_F, "error"), (_OK, None)], _job(6, MAX_ATTEMPTS + 3), "earlier attempts"),
        ([*_CLEAN[:-1], (_L, None)], _job(5, MAX_ATTEMPTS + 3), "last attempt"),
    ],
)
def test_damage_to_a_function_is_reported(
    attempts: list[tuple[Outcome, str | None]], job: JobRecord | None, found: str
) -> None:
    report = DurableChaosReport("t", "SIGKILL", 0, 1)
    _check_function("x", _main(attempts), job, report)
    assert any(found in v for v in report.violations), report.violations


@pytest.mark.parametrize(("lost", "refunds"), [(1, 1), (3, 2)])
def test_lost_attempts_reaped_while_held_may_have_spent_none(lost: int, refunds: int) -> None:
    """A lost attempt reaped while held ahead of a slot (its worker killed before the
    body's start reached storage) gave its attempt back: at most one per lost attempt,
    and at most MAX_HELD_REFUNDS in all; one more is reported."""
    attempts = [(_S, "sleep"), *[(_L, None)] * lost, (_S, "event"), (_S, "children"), (_OK, None)]
    n = len(attempts)
    report = DurableChaosReport("t", "SIGKILL", 0, 1)
    _check_function("x", _main(attempts), _job(n, MAX_ATTEMPTS + 3 + refunds), report)
    assert report.violations == []
    _check_function("x", _main(attempts), _job(n, MAX_ATTEMPTS + 4 + refunds), report)
    assert any("they spent -" in v for v in report.violations), report.violations


def test_an_attempt_failed_by_a_storage_error_that_spent_one_is_reported() -> None:
    report = DurableChaosReport("t", "SIGKILL + Redis restart", 0, 1)
    attempts = [*_CLEAN[:-1], (_F, "error"), (_OK, None)]
    main = _main(attempts, error="StorageUnavailable")
    _check_function("x", main, _job(6, MAX_ATTEMPTS + 3), report)
    assert any("they spent 1" in v for v in report.violations), report.violations


def test_an_attempt_failed_by_a_storage_error_is_counted_and_explains_a_rerun() -> None:
    report = DurableChaosReport("t", "SIGKILL + Redis restart", 0, 1)
    attempts = [*_CLEAN[:-1], (_F, "error"), (_OK, None)]
    main = _main(attempts, error="StorageUnavailable")
    # it spent no attempt: the budget grew by one for it as for each suspended attempt
    outcomes = _check_function("x", main, _job(6, MAX_ATTEMPTS + 4), report)
    assert (report.violations, report.fault_failed) == ([], 1)
    _check_memo_step("x", "c", outcomes, [5, 6], [5, 6], report)
    assert report.violations == []
    assert report.reruns == 1


@pytest.mark.parametrize(
    ("started", "ended", "found"),
    [
        ([1], [], "never completed"),
        ([1, 1], [1, 1], "twice in one attempt"),
        ([1, 3], [1, 3], "not lost"),  # attempt 1 suspended after its memo: 3 ran it again
        ([9], [9], "outside the attempts"),
    ],
)
def test_damage_to_a_memoized_step_is_reported(
    started: list[int], ended: list[int], found: str
) -> None:
    outcomes = {1: _S, 2: _L, 3: _S, 4: _S, 5: _OK}
    report = DurableChaosReport("t", "SIGKILL", 0, 1)
    _check_memo_step("x", "a", outcomes, started, ended, report)
    assert any(found in v for v in report.violations), report.violations


def test_a_rerun_after_a_lost_attempt_is_explained() -> None:
    outcomes = {1: _S, 2: _L, 3: _S, 4: _S, 5: _OK}
    report = DurableChaosReport("t", "SIGKILL", 0, 1)
    _check_memo_step("x", "b", outcomes, [2, 3], [2, 3], report)
    assert report.violations == []
    assert (report.reruns, report.starts) == (1, 2)


def test_kills_that_cut_a_body_are_counted_by_kind(tmp_path: Path) -> None:
    (tmp_path / "wf-11.log").write_text("S x a 1 11\nE x a 1 11\nS x child-0 1 11\n")
    (tmp_path / "flow-11.log").write_text("S y a 1 11\n")
    (tmp_path / "wf-12.log").write_text("S x b 2 12\nS z c 1 12\n")
    (tmp_path / "wf-13.log").write_text("S x a 1 13\nE x a 1 13\n")  # killed between bodies
    cut = cut_bodies(tmp_path, [11, 12, 13, 14])
    assert cut == Counter({"child": 1, "flow": 1, "step": 1})


def _step(outcomes: list[Outcome], error: str) -> StepRun:
    records = [_rec(n, o, None, error if o is _F else "") for n, o in enumerate(outcomes, 1)]
    return StepRun(
        step_id="b", state=StepState.SUCCEEDED, reason=None, job_id="j", attempts=records
    )


def test_a_flow_step_attempt_failed_by_a_storage_error_is_counted_and_explains_a_rerun() -> None:
    part = FlowChaosReport("t", 1)
    _check_step("x", "b", _step([_F, _L, _OK], "StorageUnavailable"), [1, 2, 3], part)
    assert part.violations == []
    assert (part.fault_failed, part.lost_attempts, part.duplicates) == (1, 1, 2)


def test_a_flow_step_attempt_failed_by_its_own_error_is_reported() -> None:
    part = FlowChaosReport("t", 1)
    _check_step("x", "b", _step([_F, _OK], "ValueError"), [1, 2], part)
    assert any("only lost or storage-failed expected" in v for v in part.violations)
    assert part.fault_failed == 0
