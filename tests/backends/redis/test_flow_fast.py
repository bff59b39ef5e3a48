"""The Redis fast advance (``RedisFlows._fast`` in backends/redis/flows.py, deciding with
``folding.fold_fast``): a step end of a running execution reads O(dependents), not the
whole execution, and the counters it reads stay equal to the step states they count
(design docs/design/flows-storage.md §10)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import redis

from backends.redis import RedisStorage, flow_inputs
from backends.redis.flows import RedisFlows
from queue_core.records.flows import ExecutionState, StepState
from queue_core.records.jobs import AttemptEnd
from queue_core.testing.fixtures import T0, complete_end, dead_end, retry_end
from queue_core.testing.suite._flows_base import claim_steps, make_execution, make_spec, states

_S = StepState
index_of = flow_inputs.parse_index


def _counters_match(storage: RedisStorage, raw: redis.Redis[bytes], eid: str) -> None:
    """``c.<state>`` of P:x equals the states in P:xs; P:xu equals each step's
    dependencies not succeeded."""
    p = storage.keys.prefix
    stored = raw.hgetall(f"{p}:xs:{eid}")
    counted = Counter(v.decode().split("|", 1)[0] for v in stored.values())
    fields = raw.hgetall(f"{p}:x:{eid}")
    kept = {k.decode()[2:]: int(v) for k, v in fields.items() if k.startswith(b"c.") and int(v)}
    assert kept == dict(counted)
    record = storage.get_execution(eid)
    assert record is not None
    now = states(storage, eid)
    spec = record.spec()
    unmet = raw.hgetall(f"{p}:xu:{eid}")
    for i, step in enumerate(spec.steps):
        if step.depends_on:
            left = sum(1 for d in set(step.depends_on) if now[d] is not _S.SUCCEEDED)
            assert int(unmet[str(i).encode()]) == left, step.id


def _spy(
    monkeypatch: pytest.MonkeyPatch, given: list[bool] | None = None
) -> tuple[list[str], list[str]]:
    """Records each fast attempt's outcome (and in ``given`` whether ``finish.lua`` had
    read its head) and each full read of an execution."""
    fast: list[str] = []
    full: list[str] = []
    orig_fast = RedisFlows._fast
    orig_read = RedisFlows._read

    def try_fast(self: Any, eid: str, now: int, head: Any = None) -> Any:
        got = orig_fast(self, eid, now, head)
        fast.append("none" if got is False else "gone" if got is None else "applied")
        if given is not None:
            given.append(head is not None)
        return got

    def read_exec(self: Any, eid: str) -> Any:
        full.append(eid)
        return orig_read(self, eid)

    monkeypatch.setattr(RedisFlows, "_fast", try_fast)
    monkeypatch.setattr(RedisFlows, "_read", read_exec)
    return fast, full


def test_a_wide_fan_in_is_advanced_without_reading_every_step(
    storage: RedisStorage, raw: redis.Redis[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    mids = [f"m{i}" for i in range(12)]
    spec = make_spec({"root": [], **{m: ["root"] for m in mids}, "join": mids})
    new = make_execution(spec, max_attempts=3)
    storage.start_execution(new, now=T0)
    fast, full = _spy(monkeypatch)

    def finish(end: AttemptEnd, now: int) -> None:
        before = len(full)
        storage.finish([end], now=now)
        assert len(full) == before  # the advance did not read the whole execution

    root = claim_steps(storage, T0 + 1)["root"]
    finish(complete_end(root.ref), T0 + 2)
    got = claim_steps(storage, T0 + 3, limit=20)
    assert sorted(got) == sorted(mids)
    finish(retry_end(got["m0"].ref, 0), T0 + 4)  # a retry: nothing released
    _counters_match(storage, raw, new.id)
    for m in mids[1:]:
        finish(complete_end(got[m].ref), T0 + 5)
        assert states(storage, new.id)["join"] is _S.PENDING
    again = claim_steps(storage, T0 + 6)["m0"]
    finish(complete_end(again.ref), T0 + 7)
    assert states(storage, new.id)["join"] is _S.QUEUED  # released by the last dependency
    _counters_match(storage, raw, new.id)
    join = claim_steps(storage, T0 + 8)["join"]
    assert set(storage.get_step_inputs(new.id, "join").results) == set(mids)
    finish(complete_end(join.ref), T0 + 9)
    record = storage.get_execution(new.id)
    assert record is not None and record.state is ExecutionState.SUCCEEDED
    assert fast == ["applied"] * (len(mids) + 3)  # every advance decided by the fast path
    _counters_match(storage, raw, new.id)


def test_a_failing_execution_takes_the_full_path_and_keeps_the_counters(
    storage: RedisStorage, raw: redis.Redis[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = make_spec({"a": [], "b": [], "c": ["a", "b"], "d": ["c"]})
    new = make_execution(spec)
    storage.start_execution(new, now=T0)
    fast, _ = _spy(monkeypatch)
    got = claim_steps(storage, T0 + 1)
    storage.finish([complete_end(got["a"].ref)], now=T0 + 2)
    storage.finish([dead_end(got["b"].ref)], now=T0 + 3)
    assert fast == ["applied", "none"]
    assert states(storage, new.id) == {
        "a": _S.SUCCEEDED,
        "b": _S.DEAD,
        "c": _S.NOT_RUN,
        "d": _S.NOT_RUN,
    }
    _counters_match(storage, raw, new.id)
    record = storage.get_execution(new.id)
    assert record is not None and record.state is ExecutionState.FAILED


def test_an_execution_without_counters_is_advanced_on_the_full_view(
    storage: RedisStorage, raw: redis.Redis[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An execution stored before the counters existed (no c.pending, no P:xu) is never
    judged from counters it does not have."""
    new = make_execution(make_spec({"a": [], "b": ["a"], "c": ["b"]}))
    storage.start_execution(new, now=T0)
    p = storage.keys.prefix
    fields = [k for k in raw.hkeys(f"{p}:x:{new.id}") if k.startswith(b"c.")]
    raw.hdel(f"{p}:x:{new.id}", *fields)
    raw.delete(f"{p}:xu:{new.id}")
    fast, _ = _spy(monkeypatch)
    for step, now in (("a", T0 + 1), ("b", T0 + 3), ("c", T0 + 5)):
        got = claim_steps(storage, now)[step]
        storage.finish([complete_end(got.ref)], now=now + 1)
    assert fast == ["none", "none", "none"]
    record = storage.get_execution(new.id)
    assert record is not None and record.state is ExecutionState.SUCCEEDED


def test_step_inputs_read_the_step_list_once_and_follow_a_changed_spec(
    storage: RedisStorage, raw: redis.Redis[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    # get_step_inputs keeps each execution's step index (keyed by its spec hash): the
    # step list (O(steps) bytes) is read once, and an id stored again with another
    # spec (pruned, then reused) is read again, not answered from the old one
    spec = make_spec({"root": [], "a": ["root"], "b": ["root"]})
    new = make_execution(spec, max_attempts=3)
    storage.start_execution(new, now=T0)
    root = claim_steps(storage, T0 + 1)["root"]
    storage.finish([complete_end(root.ref)], now=T0 + 2)
    lists: list[bytes] = []

    def counted(sp: bytes) -> Any:
        lists.append(sp)
        return index_of(sp)

    monkeypatch.setattr(flow_inputs, "parse_index", counted)
    for step in ("a", "b", "a"):
        assert storage.get_step_inputs(new.id, step).results == {"root": b'"ok"'}
    assert len(lists) <= 1  # the finish's advance may have read it already
    before = len(lists)
    p = storage.keys.prefix
    other = '[["root",[]],["a",[]],["b",["a"]]]'
    raw.hset(f"{p}:x:{new.id}", mapping={"sh": "another", "sp": other})
    assert storage.get_step_inputs(new.id, "b").results == {"a": None}
    assert len(lists) == before + 1


def test_a_step_end_is_advanced_from_the_head_finish_read(
    storage: RedisStorage, raw: redis.Redis[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    # finish.lua returns, per execution it recorded step ends of, the head and events the
    # advance would read first: the advance starts without a round trip of its own. Two
    # ends of one execution in one call: one head, read after both were recorded.
    new = make_execution(make_spec({"a": [], "b": [], "c": ["a", "b"]}))
    storage.start_execution(new, now=T0)
    given: list[bool] = []
    fast, full = _spy(monkeypatch, given)
    got = claim_steps(storage, T0 + 1)
    assert storage.finish([complete_end(got["a"].ref), complete_end(got["b"].ref)], now=T0 + 2)
    assert (fast, given, full) == (["applied"], [True], [])
    assert states(storage, new.id) == {"a": _S.SUCCEEDED, "b": _S.SUCCEEDED, "c": _S.QUEUED}
    _counters_match(storage, raw, new.id)


def test_a_step_end_told_no_time_is_advanced_at_the_time_finish_recorded_it(
    storage: RedisStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With no ``now``, finish.lua returns its clock with the head: the advance that follows
    # asks the server for no time of its own (a round trip per step end less).
    new = make_execution(make_spec({"a": [], "b": ["a"]}))
    storage.start_execution(new)
    a = storage.claim("w", ["default"], 10, 30_000)[0]
    asked: list[int | None] = []
    orig = type(storage.store).now

    def now(self: Any, given: int | None) -> int:
        asked.append(given)
        return orig(self, given)

    monkeypatch.setattr(type(storage.store), "now", now)
    assert storage.finish([complete_end(a.ref)]) == [True]
    assert None not in asked
    assert asked  # the advance ran, at the finish's time
    b = storage.get_job(f"{new.id}.1")
    assert b is not None and b.state.value == "queued"


def test_a_step_end_is_advanced_from_the_step_fields_finish_read_ahead(
    storage: RedisStorage, raw: redis.Redis[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Once this process knows an execution's step index, a batch of its step ends names
    # the ended steps and their dependents to finish.lua, which reads them with the head:
    # the advance makes no read of its own (fold_reads.py): b's end releases c, then c's
    # end releases d, each from what finish.lua read.
    new = make_execution(make_spec({"a": [], "b": [], "c": ["a", "b"], "d": ["c"]}))
    storage.start_execution(new, now=T0)
    got = claim_steps(storage, T0 + 1)
    pipelines: list[int] = []
    client = storage.store.client
    orig = client.pipeline

    def pipeline(*a: Any, **k: Any) -> Any:
        pipelines.append(1)
        return orig(*a, **k)

    monkeypatch.setattr(client, "pipeline", pipeline)
    assert storage.finish([complete_end(got["a"].ref)], now=T0 + 2) == [True]
    first = len(pipelines)  # the index is read (once), and maybe the steps with it
    assert storage.finish([complete_end(got["b"].ref)], now=T0 + 3) == [True]
    assert len(pipelines) == first  # b's end: a and c's state and unmet count read ahead
    assert states(storage, new.id)["c"] is _S.QUEUED
    c = claim_steps(storage, T0 + 4)["c"]
    before = len(pipelines)  # (reading the states above is a pipeline)
    assert storage.finish([complete_end(c.ref)], now=T0 + 5) == [True]
    assert len(pipelines) == before
    assert states(storage, new.id) == {
        "a": _S.SUCCEEDED, "b": _S.SUCCEEDED, "c": _S.SUCCEEDED, "d": _S.QUEUED
    }  # fmt: skip
    _counters_match(storage, raw, new.id)


def test_finish_reads_the_head_fields_the_fast_advance_reads() -> None:
    # the field list of finish.lua's head read mirrors backends/redis/flows.py's
    import re
    from pathlib import Path

    from backends.redis import flows

    text = (Path(flows.__file__).parent / "lua" / "finish.lua").read_text()
    block = re.search(r"local HEAD = \{(.*?)\}", text, re.S)
    assert block is not None
    assert re.findall(r"'([^']+)'", block.group(1)) == flows._FAST_FIELDS


def test_the_head_finish_read_holds_unset_fields_over_resp3_too(redis_url: str) -> None:
    # An unset field (no deadline, no reason) is false in the script; it must reach the
    # advance as unset over RESP3 too (a URL may ask for it), or an execution without a
    # deadline would be taken for one whose deadline (0) has passed.
    s = RedisStorage.from_url(f"{redis_url}&protocol=3")
    try:
        new = make_execution(make_spec({"a": [], "b": ["a"]}))
        s.start_execution(new, now=T0)
        a = claim_steps(s, T0 + 1)["a"]
        assert s.finish([complete_end(a.ref)], now=T0 + 2) == [True]
        assert states(s, new.id) == {"a": _S.SUCCEEDED, "b": _S.QUEUED}
        record = s.get_execution(new.id)
        assert record is not None and record.state is ExecutionState.RUNNING
    finally:
        s.close()
