"""A claim that loses its candidates to another worker reads the ready index again.

The claim reads up to ``max(4 * limit, 20)`` candidates, then starts them with
conditional writes. When another worker took them between the read and the write, the
claim reads the index again (without the ids it tried) to fill its batch, at most
``CLAIM_ROUNDS`` times.
"""

from __future__ import annotations

from typing import Any

from backends.sqs.claiming import CLAIM_ROUNDS
from queue_core.records.jobs import JobState, NewJob
from queue_core.testing.fixtures import T0
from tests.backends.sqs.conftest import Factory

LEASE = 30_000


def _jobs(n: int) -> list[NewJob]:
    return [NewJob(id=f"r{i:03d}", task_name="t", queue="default", payload=b"{}") for i in range(n)]


def test_a_claim_whose_candidates_were_taken_fills_its_batch(make_storage: Factory) -> None:
    mine, other = make_storage(), make_storage()
    assert mine.enqueue(_jobs(25), now=T0) == [JobState.QUEUED] * 25
    transact = mine.store.db.transact
    taken: list[str] = []

    def other_worker_first(actions: list[dict[str, Any]]) -> None:
        if not taken:  # between our read and our first write, another worker claims 20
            taken.extend(c.id for c in other.claim("other", ["default"], 20, LEASE, now=T0))
        transact(actions)

    mine.store.db.transact = other_worker_first  # type: ignore[method-assign]
    got = mine.claim("mine", ["default"], 5, LEASE, now=T0)
    # all 20 candidates of the first read were gone; the second read found the other 5
    assert len(taken) == 20
    assert len(got) == 5
    assert {c.id for c in got}.isdisjoint(taken)
    assert {c.id for c in got} | set(taken) == {j.id for j in _jobs(25)}
    for c in got:
        rec = mine.get_job(c.id)
        assert rec is not None and rec.state is JobState.RUNNING and rec.attempts == 1


def test_a_claim_that_keeps_losing_gives_up_after_its_rounds(make_storage: Factory) -> None:
    s, other = make_storage(), make_storage()
    s.enqueue(_jobs(120), now=T0)
    ready_reads = 0
    query, transact = s.store.db.query, s.store.db.transact

    def counting_query(**kw: Any) -> list[dict[str, Any]]:
        nonlocal ready_reads
        ready_reads += kw.get("IndexName") == "ready"
        return query(**kw)

    def always_lose(actions: list[dict[str, Any]]) -> None:
        # before each of our writes, another client changes every job we are starting
        for a in actions:
            if "Update" in a and a["Update"]["Key"]["sk"]["S"] == "J":
                other.cancel(a["Update"]["Key"]["pk"]["S"].rsplit("#", 1)[1], now=T0)
        transact(actions)

    s.store.db.query = counting_query  # type: ignore[method-assign]
    s.store.db.transact = always_lose  # type: ignore[method-assign]
    assert s.claim("w", ["default"], 5, LEASE, now=T0) == []
    # 120 jobs would feed six reads of 20 candidates; the claim stops at its bound
    assert ready_reads == CLAIM_ROUNDS
    left = [j.id for j in _jobs(120) if s.get_job(j.id).state is JobState.QUEUED]  # type: ignore[union-attr]
    assert len(left) == 120 - CLAIM_ROUNDS * 20
