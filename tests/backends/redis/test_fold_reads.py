"""What a Redis ``finish`` asks ``finish.lua`` to read ahead for the flow advance that
follows (``backends/redis/fold_reads.py``), and when the advance may answer from it. That
the advance then makes no read of its own is checked on a server in test_flow_fast.py."""

from __future__ import annotations

from backends.redis import fold_reads
from backends.redis.fold_reads import Asked, asked_for
from queue_core.records.jobs import LeaseRef
from queue_core.rules.flows.decide_fast import StepIndex, step_index
from queue_core.storage.flows import step_job_id, step_of_job
from queue_core.testing.fixtures import complete_end, dead_end

INDEX = step_index([("a", []), ("b", ["a"]), ("c", ["a"]), ("d", ["b", "c"])])


def _ref(job_id: str) -> LeaseRef:
    return LeaseRef(job_id=job_id, attempt=1, lease_token="t")


def _index_of(eid: str) -> StepIndex | None:
    return INDEX if eid == "x1" else None


def test_step_of_job_inverts_step_job_id_and_refuses_other_ids() -> None:
    assert step_of_job(step_job_id("01ab.cd", 12)) == ("01ab.cd", 12)
    for job_id in ("01abcd", "01ab.", ".3", "01ab.x3", "01ab.-3"):
        assert step_of_job(job_id) is None, job_id


def test_a_success_asks_its_dependents_and_a_failure_only_itself() -> None:
    ends = [
        complete_end(_ref(step_job_id("x1", 0))),  # a: releases b and c
        dead_end(_ref(step_job_id("x1", 1))),  # b failed: d's count is not read for it
        complete_end(_ref("plainjob")),
        complete_end(_ref(step_job_id("unknown", 0))),  # index not known: the advance reads
    ]
    assert asked_for(ends, _index_of) == {"x1": Asked(steps=[0, 1, 2], deps=[1, 2])}
    assert fold_reads.argv(asked_for(ends, _index_of)) == [1, "x1", "0,1,2", "1,2"]
    assert fold_reads.argv({}) == [0]


def test_a_read_wider_than_the_bound_is_left_to_the_advance() -> None:
    wide = step_index([("r", []), *((f"s{i}", ["r"]) for i in range(fold_reads.MAX_FIELDS))])
    ends = [complete_end(_ref(step_job_id("w", 0)))]
    assert asked_for(ends, lambda eid: wide) == {}


def test_the_advance_answers_only_reads_the_prefetch_covers() -> None:
    pre = Asked(steps=[0, 1, 2], deps=[1, 2]).prefetched([b"s0", b"s1", None], [b"1", b"2"])
    assert pre.covers([0], [1, 2])
    assert pre.values([0], [1, 2]) == ([b"s0", b"s1", None], [b"1", b"2"])
    assert not pre.covers([3], [])  # an event of a step another call ended
    assert not pre.covers([0], [3])
    assert not Asked(steps=[0, 3], deps=[]).prefetched([b"s0", b"s3"], []).covers([0], [3])
