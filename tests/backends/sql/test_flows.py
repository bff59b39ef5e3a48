"""Flows on the SQL backend beyond the contract suite: the version 2 -> 3 upgrade and
concurrent events on one execution (the lock order of ``backends/sql/flows.py``: no
deadlock, a consistent end). A plain job whose id has a dot is a contract case
(``FinishContract.test_a_job_id_with_dots_is_an_ordinary_job_id``)."""

from __future__ import annotations

import sqlite3
from dataclasses import replace

from sqlalchemy import create_engine, text

from backends.sql import SQLStorage
from backends.sql.schema import SCHEMA_VERSION
from queue_core.records.flows import ExecutionState, StepState
from queue_core.records.jobs import JobState
from queue_core.rules.flows import decide
from queue_core.testing import MIN, SEC, T0, new_job
from queue_core.testing.fixtures import LEASE, complete_end, run_concurrently
from queue_core.testing.suite._flows_base import make_execution, make_spec, states, view_of

_V3_DOWN = (
    "DROP TABLE qc_flow_steps",
    "DROP TABLE qc_executions",
    "DROP TABLE qc_flow_specs",
    "DROP INDEX ix_qc_jobs_execution",
    "ALTER TABLE qc_jobs DROP COLUMN execution_id",
    "ALTER TABLE qc_jobs DROP COLUMN step_id",
    "ALTER TABLE qc_jobs DROP COLUMN flow_deadline_at",
    "UPDATE qc_meta SET value = '2' WHERE key = 'schema_version'",
)


def _downgrade_to_v2(url: str) -> None:
    if url.startswith("sqlite"):
        raw = sqlite3.connect(url.removeprefix("sqlite:///"))
        for statement in _V3_DOWN:
            raw.execute(statement)
        raw.commit()
        raw.close()
        return
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.begin() as conn:
        for statement in _V3_DOWN:
            conn.execute(text(statement))
    engine.dispose()


def test_a_version_2_database_is_upgraded_and_runs_flows(url: str) -> None:
    first = SQLStorage(url)
    first.enqueue([job := new_job()], now=T0)
    first.close()
    _downgrade_to_v2(url)
    second = SQLStorage(url)
    try:
        assert second.schema_version() == 2
        (c,) = second.claim("w", ["default"], 1, LEASE, now=T0)
        assert (c.id, c.execution_id) == (job.id, None)
        assert second.schema_version() == SCHEMA_VERSION
        new = make_execution(make_spec({"a": [], "b": ["a"]}))
        assert second.start_execution(new, now=T0) is ExecutionState.RUNNING
        (a,) = second.claim("w", ["default"], 1, LEASE, now=T0 + 1)
        assert second.finish([complete_end(a.ref, b'"A"')], now=T0 + 2) == [True]
        assert states(second, new.id) == {"a": StepState.SUCCEEDED, "b": StepState.QUEUED}
    finally:
        second.close()


def test_concurrent_finishes_claims_reaps_and_a_cancel_end_consistently(
    storage: SQLStorage,
) -> None:
    """Workers finish siblings while others claim, a reaper runs and the execution is
    cancelled: every call returns (no deadlock), and the stored execution is a fixpoint
    of the decisions (nothing left for ``decide.advance`` to do)."""
    width = 12
    graph: dict[str, list[str]] = {f"s{i}": [] for i in range(width)}
    graph["join"] = list(graph)
    new = make_execution(make_spec(graph, timeout_ms=10 * MIN, max_parallel=8))
    storage.start_execution(new, now=T0)

    def work(i: int) -> object:
        if i == 0:
            return storage.cancel_execution(new.id, now=T0 + 3 * SEC)
        if i == 1:
            return storage.reap(now=T0 + 2 * SEC)
        done = 0
        for k in range(6):
            for c in storage.claim(f"w{i}", ["default"], 2, LEASE, now=T0 + SEC + k):
                done += storage.finish([complete_end(c.ref)], now=T0 + SEC + k) == [True]
        return done

    results = run_concurrently(6, work)
    assert not [r for r in results if isinstance(r, BaseException)], results
    for c in storage.claim("w", ["default"], 50, LEASE, now=T0 + 4 * SEC):
        storage.finish([complete_end(c.ref)], now=T0 + 4 * SEC)
    record = storage.get_execution(new.id)
    assert record is not None
    assert record.state in (ExecutionState.CANCELLED, ExecutionState.SUCCEEDED)
    view = view_of(storage, new.id)
    assert not decide.advance(view, T0 + 5 * SEC).changes(view)
    running = storage.list_jobs(state=JobState.RUNNING) + storage.list_jobs(state=JobState.QUEUED)
    assert running == []


def test_a_batch_of_one_executions_ends_is_judged_end_by_end_like_memory(
    storage: SQLStorage,
) -> None:
    """``finish`` applies the step ends of one execution in one transaction, each on the
    view the previous one left: the outcome equals memory's, which judges them one by
    one."""
    from backends.memory import MemoryStorage
    from queue_core.testing.fixtures import dead_end

    spec = make_spec({"a": [], "b": [], "c": [], "d": ["a", "b"], "e": ["c"]}, max_parallel=2)
    memory = MemoryStorage()
    outcomes = []
    for s in (memory, storage):
        new = make_execution(spec)
        s.start_execution(new, now=T0)
        got = {c.step_id: c for c in s.claim("w", ["default"], 5, LEASE, now=T0 + 1)}
        assert sorted(got) == ["a", "b"]
        ends = [complete_end(got["a"].ref, b'"A"'), dead_end(got["b"].ref)]
        assert s.finish(ends, now=T0 + 2) == [True, True]
        record = s.get_execution(new.id)
        assert record is not None
        outcomes.append((record.state, record.failed_step, states(s, new.id)))
    assert outcomes[0] == outcomes[1]
    assert outcomes[1][0] is ExecutionState.FAILED


def test_concurrent_queue_starts_hold_the_limit_and_all_run_in_turn(
    storage: SQLStorage,
) -> None:
    """Eight executions of a ``queue`` flow (limit 2) started at once: two run, six wait;
    finishing them promotes the rest, never more than two running at a time."""
    from queue_core.rules.flows.spec import ConcurrencySpec

    spec = make_spec({"a": []}, name="two-at-a-time", concurrency=ConcurrencySpec(2, "queue"))
    news = [make_execution(spec) for _ in range(8)]
    started = run_concurrently(len(news), lambda i: storage.start_execution(news[i], now=T0))
    assert sorted(str(s) for s in started) == ["queued"] * 6 + ["running"] * 2
    t = T0
    while True:
        running = storage.list_executions(state=ExecutionState.RUNNING, limit=50)
        assert len(running) <= 2
        t += SEC
        got = storage.claim("w", ["default"], 8, LEASE, now=t)
        if not got:
            break
        assert storage.finish([complete_end(c.ref) for c in got], now=t) == [True] * len(got)
    done = storage.list_executions(state=ExecutionState.SUCCEEDED, limit=50)
    assert sorted(e.id for e in done) == sorted(n.id for n in news)


def test_one_finish_batch_mixing_plain_and_step_ends_applies_each_as_its_kind(
    storage: SQLStorage,
) -> None:
    """The batch statement takes plain jobs only; the step ends of two executions are
    then finished with their executions' decisions, a plain job whose id has a dot as any
    job, and a stale end of a step job stays refused."""
    spec = make_spec({"a": [], "b": ["a"]})
    one, two = make_execution(spec), make_execution(spec)
    for new in (one, two):
        storage.start_execution(new, now=T0)
    storage.enqueue([plain := new_job(), dotted := new_job(id="plain.1")], now=T0)
    got = {c.id: c for c in storage.claim("w", ["default"], 10, LEASE, now=T0 + 1)}
    a1, a2 = got[f"{one.id}.0"], got[f"{two.id}.0"]
    stale = replace(a2.ref, lease_token="0" * 24)
    ends = [complete_end(got[plain.id].ref), complete_end(a1.ref), complete_end(stale),
            complete_end(got[dotted.id].ref), complete_end(a2.ref)]  # fmt: skip
    assert storage.finish(ends, now=T0 + 2) == [True, True, False, True, True]
    for new in (one, two):
        assert states(storage, new.id) == {"a": StepState.SUCCEEDED, "b": StepState.QUEUED}
    for job_id in (plain.id, dotted.id):
        record = storage.get_job(job_id)
        assert record is not None and record.state is JobState.SUCCEEDED


def test_a_step_claimed_through_another_storage_finishes_with_its_execution(url: str) -> None:
    """The claiming storage knows its step jobs (their ends skip the plain statement);
    another one finds a step's job by its stored execution."""
    claimer, finisher = SQLStorage(url), SQLStorage(url)
    try:
        new = make_execution(make_spec({"a": [], "b": ["a"]}))
        claimer.start_execution(new, now=T0)
        (a,) = claimer.claim("w", ["default"], 1, LEASE, now=T0 + 1)
        assert a.id in claimer.store.claimed_steps
        assert finisher.finish([complete_end(a.ref)], now=T0 + 2) == [True]
        assert states(claimer, new.id) == {"a": StepState.SUCCEEDED, "b": StepState.QUEUED}
        assert claimer.finish([complete_end(a.ref)], now=T0 + 3) == [False]  # fenced
        assert a.id not in claimer.store.claimed_steps
    finally:
        claimer.close()
        finisher.close()
