"""AWS requests per job for enqueue, claim and finish, counted through botocore events.

On AWS, requests are the bill and the latency, so these figures are printed (``-s``)
and held to upper bounds.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from queue_core.records.control import PauseKind, ProgressUpdate
from queue_core.records.jobs import (
    Action,
    AttemptEnd,
    Decision,
    JobState,
    NewJob,
    Outcome,
)
from queue_core.testing.suite._flows_base import make_execution, make_spec
from tests.backends.sqs.conftest import Factory


class _Counts:
    def __init__(self, storage: Any) -> None:
        self.calls: Counter[str] = Counter()
        self.queried: list[str] = []
        """The partition value (``:p``/``:ap``, prefix cut) of each DynamoDB Query."""
        self._prefix = storage.store.keys.p
        for client in (storage.store.ddb, storage.store.sqs):
            service = client.meta.service_model.service_name
            client.meta.events.register(
                f"before-call.{service}", lambda model, s=service, **_: self._count(s, model)
            )
        storage.store.ddb.meta.events.register("before-parameter-build.dynamodb.Query", self._query)

    def _count(self, service: str, model: Any) -> None:
        self.calls[f"{service}.{model.name}"] += 1

    def _query(self, params: Any, **_: Any) -> None:
        values = params.get("ExpressionAttributeValues", {})
        for name in (":p", ":ap", ":pk"):
            if isinstance(values.get(name), dict) and "S" in values[name]:
                self.queried.append(values[name]["S"].removeprefix(self._prefix))
                break

    def take(self) -> Counter[str]:
        out = Counter(self.calls)
        self.calls.clear()
        self.queried.clear()
        return out


def _by_service(c: Counter[str]) -> tuple[int, int]:
    ddb = sum(n for k, n in c.items() if k.startswith("dynamodb."))
    sqs = sum(n for k, n in c.items() if k.startswith("sqs."))
    return ddb, sqs


def _jobs(n: int, tag: str) -> list[NewJob]:
    return [NewJob(id=f"{tag}{i}", task_name="t", queue="default", payload=b"{}") for i in range(n)]


def _ends(claimed: list[Any]) -> list[AttemptEnd]:
    return [
        AttemptEnd(ref=c.ref, outcome=Outcome.SUCCEEDED, decision=Decision(action=Action.COMPLETE))
        for c in claimed
    ]


def test_requests_per_job(make_storage: Factory) -> None:
    s = make_storage()
    counts = _Counts(s)
    s.enqueue(_jobs(1, "warm"))  # first use resolves the SQS queue URL
    s.finish(_ends(s.claim("w", ["default"], 1, 30_000)))
    counts.take()

    report: dict[str, dict[str, tuple[int, int]]] = {}
    for n in (1, 10):
        assert s.enqueue(_jobs(n, f"b{n}-")) == [JobState.QUEUED] * n
        enq = counts.take()
        claimed = s.claim("w", ["default"], n, 30_000)
        assert len(claimed) == n
        clm = counts.take()
        assert s.finish(_ends(claimed)) == [True] * n
        fin = counts.take()
        report[f"batch of {n}"] = {
            "enqueue": _by_service(enq),
            "claim": _by_service(clm),
            "finish": _by_service(fin),
        }
        print(f"\nbatch of {n}: enqueue {dict(enq)}; claim {dict(clm)}; finish {dict(fin)}")
    one = report["batch of 1"]
    # (DynamoDB, SQS) requests for one job
    assert one["enqueue"] <= (1, 1)  # TransactWriteItems; SendMessageBatch
    assert one["claim"] <= (3, 0)  # Query parked + Query ready + TransactWriteItems
    assert one["finish"] <= (1, 0)  # TransactWriteItems (job from the claim cache)
    ten = report["batch of 10"]
    assert ten["enqueue"] <= (1, 1)
    assert ten["claim"] <= (3, 0)
    assert ten["finish"] <= (1, 0)


def test_a_pause_beside_costs_a_claim_nothing(make_storage: Factory) -> None:
    s = make_storage()
    counts = _Counts(s)
    s.finish(_ends(s.claim("w", ["default"], 1, 30_000)))
    s.pause(PauseKind.QUEUE, "other")
    s.pause(PauseKind.TASK, "elsewhere.task")
    s.enqueue(_jobs(1, "p"))
    counts.take()
    assert len(s.claim("w", ["default", "other"], 1, 30_000)) == 1
    clm = counts.take()
    print(f"\nclaim beside a paused queue and task: {dict(clm)}")
    # the pauses come with the promotion Query; the paused queue is not read
    assert _by_service(clm) <= (3, 0)


def test_progress_with_an_end_costs_no_request(make_storage: Factory) -> None:
    from dataclasses import replace

    s = make_storage()
    counts = _Counts(s)
    s.enqueue(_jobs(1, "g"))
    (claimed,) = s.claim("w", ["default"], 1, 30_000)
    counts.take()
    assert s.set_progress(claimed.ref, ProgressUpdate(0.5, "half")) is True
    report = counts.take()
    (end,) = _ends([claimed])
    assert s.finish([replace(end, progress=ProgressUpdate(1.0, "done"))]) == [True]
    fin = counts.take()
    print(f"\nset_progress {dict(report)}; finish with progress {dict(fin)}")
    assert _by_service(report) == (1, 0)  # one fenced UpdateItem
    assert _by_service(fin) == (1, 0)  # the end's own fenced UpdateItem carries it
    got = s.get_progress(claimed.id)
    assert got is not None and (got.fraction, got.message) == (1.0, "done")


def test_finish_after_a_delivered_hint_deletes_it_in_one_request(make_storage: Factory) -> None:
    s = make_storage()
    counts = _Counts(s)
    s.enqueue(_jobs(1, "h"))
    assert s.wait_for_jobs(["default"], 5.0) is True
    counts.take()
    claimed = s.claim("w", ["default"], 1, 30_000)
    clm = counts.take()
    assert s.finish(_ends(claimed)) == [True]
    fin = counts.take()
    print(f"\nwith a delivered hint: claim {dict(clm)}; finish {dict(fin)}")
    assert _by_service(clm) <= (3, 0)
    assert fin["sqs.DeleteMessageBatch"] == 1 and _by_service(fin) == (1, 1)


_FLOW_PARTS = {"XT", "XA", "XP"}
"""The partitions of the flow reap Queries (deadlines, events/job writes left, keys)."""


def test_reap_skips_the_flow_queries_until_a_flow_exists(make_storage: Factory) -> None:
    s, other = make_storage(), make_storage()
    counts = _Counts(s)
    s.reap()
    counts.take()  # first use resolves the SQS queue URL
    s.reap()
    queried = list(counts.queried)
    plain = counts.take()
    print(f"\nreap without flows: {dict(plain)}; partitions {queried}")
    assert not _FLOW_PARTS & set(queried)
    assert queried.count("X") == 1  # the one-item probe of the executions index

    other.start_execution(make_execution(make_spec({"a": [], "b": ["a"]})))
    s.reap()
    queried = list(counts.queried)
    flows = counts.take()
    print(f"reap with a flow: {dict(flows)}; partitions {queried}")
    assert _FLOW_PARTS <= set(queried)
    s.reap()
    queried = list(counts.queried)
    again = counts.take()
    assert "X" not in queried  # seen once: no probe any more
    assert sum(again.values()) == sum(plain.values()) - 1 + len(_FLOW_PARTS)


def test_a_wide_release_reads_each_step_jobs_part_once_per_transaction(
    make_storage: Factory,
) -> None:
    from queue_core.testing.fixtures import LEASE, T0, complete_end

    s = make_storage()
    graph: dict[str, list[str]] = {"root": []}
    graph.update({f"s{i}": ["root"] for i in range(150)})  # two transactions of releases
    s.start_execution(make_execution(make_spec(graph)), now=T0)
    (root,) = s.claim("w", ["default"], 1, LEASE, now=T0 + 1)
    parts: list[str] = []
    s.store.ddb.meta.events.register(
        "before-parameter-build.dynamodb.GetItem",
        lambda params, **_: parts.append(params["Key"]["sk"]["S"]),
    )
    counts = _Counts(s)
    assert s.finish([complete_end(root.ref)], now=T0 + 2) == [True]
    writes = counts.take()["dynamodb.TransactWriteItems"]
    print(f"\n150 releases: {writes} transactions, JB# reads {parts.count('JB#0000')}")
    assert len(s.claim("w", ["default"], 200, LEASE, now=T0 + 3)) == 150
    assert parts.count("JB#0000") <= writes - 1  # the finish's own transaction reads none
