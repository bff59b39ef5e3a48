"""The fast step end of SQL flows (``plan.step_end`` on the rows ``backends/sql/flows.py``
reads): taken for a wide fan-out (no full read of the execution's steps, no full
``decide.step_ended``), not taken for an execution without counters (started before
schema version 10), and the counters it relies on stay equal to what the step states say
whichever path decided, with the same outcome as memory's full decisions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from backends.memory import MemoryStorage
from backends.sql import SQLStorage, flow_reads
from backends.sql.flows import Flows
from queue_core.records.errors import NotFound
from queue_core.records.flows import ExecutionState, StepState
from queue_core.records.jobs import AttemptEnd
from queue_core.rules.flows import decide
from queue_core.storage.flows import NewExecution
from queue_core.testing import SEC, T0
from queue_core.testing.fixtures import complete_end, dead_end, retry_end
from queue_core.testing.suite._flows_base import claim_steps, make_execution, make_spec, states

_BAD = {StepState.TIMED_OUT, StepState.DEAD, StepState.CANCELLED, StepState.SKIPPED,
        StepState.NOT_RUN}  # fmt: skip


def _sql(url: str, statement: str, **params: Any) -> list[Any]:
    """Run ``statement`` on a connection of its own; the rows (if any)."""
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.begin() as conn:
            result = conn.execute(text(statement), params)
            return list(result.fetchall()) if result.returns_rows else []
    finally:
        engine.dispose()


class _Spy:
    """Counts full step reads (``Flows._view`` of an execution not read whole yet) and
    full step-end decisions."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.full_reads = 0
        self.full_decisions = 0
        view, step_ended = Flows._view, decide.step_ended

        def counted_view(me: Flows, x: Any) -> Any:
            self.full_reads += not x.whole
            return view(me, x)

        def counted_decide(*a: Any, **k: Any) -> Any:
            self.full_decisions += 1
            return step_ended(*a, **k)

        monkeypatch.setattr(Flows, "_view", counted_view)
        monkeypatch.setattr(decide, "step_ended", counted_decide)


def _fan_out(width: int) -> NewExecution:
    graph: dict[str, list[str]] = {"root": []}
    mids = [f"s{i}" for i in range(width)]
    graph.update({m: ["root"] for m in mids})
    graph["join"] = mids
    return make_execution(make_spec(graph))


def _drain(storage: SQLStorage, t: int) -> int:
    """Claim and complete step jobs one finish at a time until none is left; how many."""
    done = 0
    while got := claim_steps(storage, t, limit=16):
        for c in got.values():
            t += 1
            assert storage.finish([complete_end(c.ref)], now=t) == [True]
            done += 1
    return done


def test_a_wide_fan_out_ends_every_step_on_the_fast_path(
    storage: SQLStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    new = _fan_out(40)
    storage.start_execution(new, now=T0)
    spy = _Spy(monkeypatch)
    assert _drain(storage, T0 + SEC) == 42
    assert (spy.full_reads, spy.full_decisions) == (0, 0)
    record = storage.get_execution(new.id)
    assert record is not None and record.state is ExecutionState.SUCCEEDED
    assert set(states(storage, new.id).values()) == {StepState.SUCCEEDED}


def test_an_execution_without_counters_is_decided_on_the_full_view(
    storage: SQLStorage, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As one started before schema version 10 (NULL counters): every end takes the full
    path, and the flow still ends as it should."""
    new = _fan_out(6)
    storage.start_execution(new, now=T0)
    _sql(url, "UPDATE qc_executions SET n_succeeded = NULL, n_bad = NULL WHERE id = :e", e=new.id)
    _sql(url, "UPDATE qc_flow_steps SET unmet = NULL WHERE execution_id = :e", e=new.id)
    spy = _Spy(monkeypatch)
    assert _drain(storage, T0 + SEC) == 8
    assert spy.full_decisions == 8
    record = storage.get_execution(new.id)
    assert record is not None and record.state is ExecutionState.SUCCEEDED


def _check_counters(storage: SQLStorage, url: str, eid: str) -> None:
    """The stored counters equal what the step states say."""
    steps = storage.list_steps(eid)
    by_id = {s.step_id: s.state for s in steps}
    ((n_succeeded, n_bad),) = _sql(
        url, "SELECT n_succeeded, n_bad FROM qc_executions WHERE id = :e", e=eid
    )
    assert n_succeeded == sum(s is StepState.SUCCEEDED for s in by_id.values())
    assert n_bad == sum(s in _BAD for s in by_id.values())
    unmet = dict(_sql(url, "SELECT idx, unmet FROM qc_flow_steps WHERE execution_id = :e", e=eid))
    for s in steps:
        deps = set(s.depends_on)
        assert unmet[s.idx] == sum(by_id[d] is not StepState.SUCCEEDED for d in deps), s.step_id


Script = list[tuple[str, Callable[..., AttemptEnd]]]


@pytest.mark.parametrize(
    "script",
    [
        [("a", lambda r: retry_end(r, 0)), ("a", complete_end), ("b", complete_end),
         ("e", complete_end), ("c", complete_end), ("d", complete_end)],
        [("a", complete_end), ("b", dead_end)],
        [("b", complete_end), ("a", lambda r: retry_end(r, 0)), ("a", complete_end),
         ("e", complete_end)],
    ],
    ids=["retry-then-success", "a-dead-step", "retry-after-success"],
)  # fmt: skip
def test_counters_hold_and_outcomes_equal_memory_whichever_path_decides(
    storage: SQLStorage, url: str, script: Script
) -> None:
    spec = make_spec({"a": [], "b": [], "c": ["a", "b"], "d": ["c"], "e": ["a"]})
    runs: list[tuple[Any, NewExecution]] = [
        (MemoryStorage(), make_execution(spec)),
        (storage, make_execution(spec)),
    ]
    held: list[dict[str, Any]] = [{}, {}]
    for s, new in runs:
        s.start_execution(new, now=T0)
    for k, (step, end) in enumerate(script):
        t = T0 + (k + 1) * SEC
        seen = []
        for j, (s, new) in enumerate(runs):
            held[j].update(claim_steps(s, t, limit=10, worker=f"w{k}"))
            assert s.finish([end(held[j].pop(step).ref)], now=t) == [True]
            record = s.get_execution(new.id)
            assert record is not None
            seen.append((record.state, record.failed_step, states(s, new.id)))
        assert seen[0] == seen[1], (k, step)
        _check_counters(storage, url, runs[1][1].id)


def test_a_batch_of_ends_is_folded_on_the_fast_path_like_memory(
    storage: SQLStorage, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several step ends of one execution in one ``finish`` (successes and a retry) are
    folded without a full read, and end as memory's one-by-one decisions do; the release
    and the step rows of a batch this wide are one statement each on PostgreSQL."""
    graph: dict[str, list[str]] = {"root": []}
    graph.update({f"s{i}": ["root"] for i in range(20)})  # past MANY_MIN: one statement
    graph["join"] = [f"s{i}" for i in range(20)]
    spec = make_spec(graph)
    runs: list[tuple[Any, NewExecution]] = [
        (MemoryStorage(), make_execution(spec)),
        (storage, make_execution(spec)),
    ]
    folds: list[int] = []
    ended = Flows.ended
    monkeypatch.setattr(
        Flows, "ended", lambda me, x, ends: folds.append(len(ends)) or ended(me, x, ends)
    )
    seen = []
    for s, new in runs:
        s.start_execution(new, now=T0)
        spy = _Spy(monkeypatch)  # the last one counts the SQL run only
        t, retried = T0, False
        while got := claim_steps(s, t + SEC, limit=20):
            t += SEC
            ends = [complete_end(c.ref) for c in got.values()]
            if len(ends) > 2 and not retried:
                ends[1], retried = retry_end(list(got.values())[1].ref, 0), True
            assert s.finish(ends, now=t) == [True] * len(ends)
            if s is storage:
                _check_counters(storage, url, new.id)
        record = s.get_execution(new.id)
        assert record is not None
        seen.append((record.state, states(s, new.id)))
        inputs = s.get_step_inputs(new.id, "join").results
        assert inputs == {f"s{i}": b'"ok"' for i in range(20)}  # results copied at success
    assert seen[0] == seen[1]
    assert seen[1][0] is ExecutionState.SUCCEEDED
    assert max(folds, default=0) >= 12  # the siblings' ends were folded in one batch
    assert spy.full_decisions == 0  # (list_steps above reads the steps: not counted)


def test_step_inputs_are_one_read_and_follow_an_id_stored_again_with_another_spec(
    storage: SQLStorage, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # after an execution's first step inputs, the next are one statement, checked
    # against the stored spec hash: an id stored again with another spec (pruned, then
    # reused) is read again, not answered from the step index kept for the old one
    spec = make_spec({"root": [], "a": ["root"], "b": ["root"]})
    new = make_execution(spec, max_attempts=3)
    storage.start_execution(new, now=T0)
    root = claim_steps(storage, T0 + 1)["root"]
    assert storage.finish([complete_end(root.ref)], now=T0 + 2) == [True]
    heads: list[str] = []
    index_of = flow_reads.index_of

    def counted(cur: Any, q: Any, head: Any) -> Any:
        heads.append(head["spec_hash"])
        return index_of(cur, q, head)

    monkeypatch.setattr(flow_reads, "index_of", counted)
    for step in ("a", "b", "a", "root"):
        got = storage.get_step_inputs(new.id, step)
        assert got.input == new.input
        assert got.results == ({} if step == "root" else {"root": b'"ok"'})
    assert len(heads) == 1  # the first read only
    _sql(url, "UPDATE qc_executions SET spec_hash = 'another' WHERE id = :e", e=new.id)
    _sql(url, "UPDATE qc_flow_steps SET deps = :d WHERE execution_id = :e AND step_id = :s",
         d='["a"]', e=new.id, s="b")  # fmt: skip
    _sql(url, "UPDATE qc_flow_steps SET deps = '[]' WHERE execution_id = :e AND step_id = 'a'",
         e=new.id)  # fmt: skip
    assert storage.get_step_inputs(new.id, "b").results == {"a": None}
    assert heads == [new.spec_hash, "another"]
    assert storage.get_step_inputs(new.id, "a").results == {}
    with pytest.raises(NotFound, match="no step 'zz'"):
        storage.get_step_inputs(new.id, "zz")
    with pytest.raises(NotFound, match="no flow execution"):
        storage.get_step_inputs("nope", "a")


def test_a_step_end_releases_its_dependents_with_the_rows_it_read(storage: SQLStorage) -> None:
    # a released step's stored job comes with the step rows the end read (pending, with
    # no more unmet dependencies than the batch has ends), not from a read of its own;
    # a join still waiting for a dependency is read without it; the flow runs as before
    spec = make_spec({"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]})
    new = make_execution(spec)
    storage.start_execution(new, now=T0)
    flows = storage.flows
    asked: list[str] = []

    class Counting(dict[str, str]):
        def __getitem__(self, name: str) -> str:
            asked.append(name)
            return super().__getitem__(name)

    flows.q = Counting(flows.q)
    t = T0 + SEC

    def end(step: Any, t: int) -> None:
        asked.clear()
        assert storage.finish([complete_end(step.ref)], now=t) == [True]
        assert "flow_step_rows" in asked and "flow_step_jobs" not in asked

    end(claim_steps(storage, t)["a"], t + 1)  # releases b and c
    got = claim_steps(storage, t + 2)
    assert sorted(got) == ["b", "c"]
    end(got["b"], t + 3)  # d waits for c
    assert claim_steps(storage, t + 4) == {}
    end(got["c"], t + 5)  # releases d
    last = claim_steps(storage, t + 6)
    assert sorted(last) == ["d"]
    end(last["d"], t + 7)
    record = storage.get_execution(new.id)
    assert record is not None and record.state is ExecutionState.SUCCEEDED


def test_a_step_end_asks_for_its_step_rows_before_its_own_statement(
    storage: SQLStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The step rows the end's decision reads do not depend on the end's statement, so
    # they are asked first (Flows.preload): on PostgreSQL, in the pipelined transaction,
    # both go in one round trip. Read once; the released steps run as before.
    new = make_execution(make_spec({"a": [], "b": ["a"], "c": ["a"]}))
    storage.start_execution(new, now=T0)
    flows, dialect = storage.flows, storage.store.dialect
    asked: list[str] = []

    class Counting(dict[str, str]):
        def __getitem__(self, name: str) -> str:
            asked.append(name)
            return super().__getitem__(name)

    finish_batch = dialect.finish_batch

    def counted(*a: Any, **k: Any) -> Any:
        asked.append("finish_batch")
        return finish_batch(*a, **k)

    flows.q = Counting(flows.q)
    monkeypatch.setattr(dialect, "finish_batch", counted)
    a = claim_steps(storage, T0 + 1)["a"]
    asked.clear()
    assert storage.finish([complete_end(a.ref)], now=T0 + 2) == [True]
    rows = [n for n in asked if n in ("flow_step_rows", "finish_batch")]
    assert rows == ["flow_step_rows", "finish_batch"]
    assert sorted(claim_steps(storage, T0 + 3)) == ["b", "c"]
