"""Every state-changing DynamoDB write of the job lifecycle carries a condition.

moto checks DynamoDB conditions without a lock, so the contract tests serialise requests
at its edge; on AWS the guarantee comes from DynamoDB's atomic conditional writes. This
test holds the backend to that: it records every DynamoDB write request (botocore
``before-call`` hooks) made by ``claim``, ``renew``, ``heartbeat``, ``finish`` (success,
retry, dead), ``reap``, ``cancel`` and ``retry_dead``, and checks that each write — an
``UpdateItem``/``PutItem``/``DeleteItem``, or each action of a ``TransactWriteItems`` —
has a ``ConditionExpression``, or shares its transaction with a conditional action on
the same job (same partition key: the attempt record a claim writes rides on the job
item's fenced update; if that condition fails, the whole transaction does).
Unconditional batch writes (``BatchWriteItem``) are refused outright.
"""

from __future__ import annotations

import time
from typing import Any

from queue_core.records.jobs import (
    Action,
    AttemptEnd,
    Decision,
    JobState,
    NewJob,
    Outcome,
)
from tests.backends.sqs.conftest import Factory

_WRITES = {"UpdateItem", "PutItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"}


class _Writes:
    def __init__(self, storage: Any) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        storage.store.ddb.meta.events.register("before-parameter-build.dynamodb", self._seen)

    def _seen(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        if model.name in _WRITES:
            self.calls.append((model.name, params))

    def take(self) -> list[tuple[str, dict[str, Any]]]:
        out, self.calls = self.calls, []
        return out


def _pk(action: dict[str, Any]) -> str:
    return repr((action.get("Key") or action.get("Item", {})).get("pk"))


def _key(action: dict[str, Any]) -> str:
    key = action.get("Key") or {
        k: v for k, v in action.get("Item", {}).items() if k in ("pk", "sk")
    }
    return repr(sorted(key.items()))


def _unconditional(calls: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Each write without a condition, described (and a note when nothing was written:
    every operation checked here writes, so an empty list would mean it was not seen)."""
    bad: list[str] = [] if calls else ["no DynamoDB write seen"]
    for name, params in calls:
        if name == "BatchWriteItem":
            bad.append(f"BatchWriteItem {params.get('RequestItems')!r:.200}")
        elif name == "TransactWriteItems":
            actions = [next(iter(a.items())) for a in params["TransactItems"]]
            fenced = {_pk(body) for _, body in actions if "ConditionExpression" in body}
            for kind, body in actions:
                if kind == "ConditionCheck":
                    continue
                if "ConditionExpression" not in body and _pk(body) not in fenced:
                    bad.append(f"TransactWriteItems/{kind} {_key(body)}")
        elif "ConditionExpression" not in params:
            bad.append(f"{name} {_key(params)}")
    return bad


def _job(i: str, **kw: Any) -> NewJob:
    return NewJob(id=i, task_name="t", queue="default", payload=b"{}", **kw)


def _end(ref: Any, outcome: Outcome, decision: Decision) -> AttemptEnd:
    return AttemptEnd(ref=ref, outcome=outcome, decision=decision)


def test_every_lifecycle_write_is_conditional(make_storage: Factory) -> None:
    s = make_storage()
    s.enqueue([_job("ok"), _job("retry", max_attempts=3), _job("dead"),
               _job("hb", heartbeat_ms=60_000), _job("lost", max_attempts=3), _job("cq"),
               _job("cr")])  # fmt: skip
    writes = _Writes(s)
    seen: dict[str, list[str]] = {}

    claimed = {c.ref.job_id: c for c in s.claim("w", ["default"], 10, 30_000)}
    assert set(claimed) >= {"ok", "retry", "dead", "hb", "lost", "cq", "cr"}
    seen["claim"] = _unconditional(writes.take())
    s.renew([c.ref for c in claimed.values()], 30_000)
    seen["renew"] = _unconditional(writes.take())
    assert s.heartbeat(claimed["hb"].ref) is False
    seen["heartbeat"] = _unconditional(writes.take())
    assert s.finish([
        _end(claimed["ok"].ref, Outcome.SUCCEEDED, Decision(action=Action.COMPLETE)),
        _end(claimed["retry"].ref, Outcome.FAILED, Decision(action=Action.RETRY, delay_ms=10)),
        _end(claimed["dead"].ref, Outcome.FAILED, Decision(action=Action.DEAD, reason="fatal")),
        _end(claimed["hb"].ref, Outcome.SUCCEEDED, Decision(action=Action.COMPLETE)),
    ]) == [True] * 4  # fmt: skip
    seen["finish"] = _unconditional(writes.take())
    s.cancel("cr")  # running: the cancel is requested
    seen["cancel running"] = _unconditional(writes.take())
    reaped = s.reap(now=int(time.time() * 1000) + 10 * 60_000)  # every lease has expired
    assert {r.job_id for r in reaped} >= {"lost"}
    seen["reap"] = _unconditional(writes.take())
    [dead] = [d for d in s.list_dead(50, 0, None) if d.job_id == "dead"]
    s.retry_dead(dead.id)
    seen["retry_dead"] = _unconditional(writes.take())
    s.enqueue([_job("cq2")])
    writes.take()
    assert s.cancel("cq2") is JobState.CANCELLED
    seen["cancel queued"] = _unconditional(writes.take())

    assert {op: bad for op, bad in seen.items() if bad} == {}
