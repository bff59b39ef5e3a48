"""AWS requests per job on ``sqs://`` (SQS + DynamoDB), enqueue -> claim -> finish.

One in-process moto server (the one of ``tests/servers/moto.py``), one queue-core
``Queue`` on it, ``-n`` jobs (1,000 by default) enqueued one ``delay()`` at a time, then
drained by one in-process ``Worker`` (``burst=True``, 1 slot); then the same with one
``map()`` (bulk enqueue). Every AWS request the producer and the worker make is counted
through botocore's ``before-call`` event on the storage's two clients, so the figures
are requests as AWS would bill them, not an estimate.

DynamoDB capacity units are computed from those requests (moto does not meter them):
every write action costs ``ceil(item KB)`` write request units (twice that inside
``TransactWriteItems``), plus, since every index projects all attributes, per global
secondary index: a put, one unit per index whose key attributes it has; an update
(sized by the item the in-process moto server holds before it), per index, the item's
units twice when it sets a key of an entry the item keeps (a move: a delete and a put;
an upper bound, the value may be unchanged), once when it puts the item in or takes it
out, once when the item stays in with its keys unchanged (the entry rewritten); every
read costs ``ceil(KB / 4)`` read request units (half for an
eventually consistent read), a Query by the items it returned. Item sizes are measured
on the items moto stores (attribute names + values, DynamoDB's sizing). SQS requests
are billed per 64 KB chunk: every request here is below 64 KB.

Prices (AWS list prices, us-east-1): SQS standard $0.40 per million requests; DynamoDB
on-demand $1.25 per million write request units, $0.25 per million read request units.

``--kept K`` first drains K more jobs and keeps them (finished, default retention), so
that the measured drain runs beside a history; ``read/job`` is the items Queries read
per job (``ScannedCount``, before their filters: what DynamoDB bills a filtered Query
for), which shows any read that grows with the history.

Run from the repo root::

    python bench/sqs_requests.py [-n 1000] [--enqueue delay|map|both] [--kept 0]

``--flow W`` measures a flow instead: one execution of a fan-out (a root, ``W`` steps
depending on it, a join: ``W + 2`` steps) started (the ``enqueue`` rows) and drained by
one 8-slot worker, so that steps are claimed together as in a real drain; the figures
are per step::

    python bench/sqs_requests.py --flow 500

``--by-item`` also splits the drain's write units by write (Put, Update, Delete; inside a
transaction or not) and by the kind of item written (the sort key before its ``#``: ``J``
a job, ``X`` an execution, ``E`` a step-end event, ...).
"""

from __future__ import annotations

import argparse
import logging
import math
import re
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

REGION = "us-east-1"
"""The region of the storage measured (its moto backend is read for item sizes)."""
SQS_PER_M = 0.40
WRU_PER_M = 1.25
RRU_PER_M = 0.25
_TX_ACTIONS = ("Put", "Update", "Delete", "ConditionCheck")


def _size(value: dict[str, Any]) -> int:
    """Bytes of one attribute value by DynamoDB's sizing rules (close enough for units)."""
    ((kind, v),) = value.items()
    if kind == "S":
        return len(v.encode())
    if kind == "B":
        return len(v) if isinstance(v, bytes) else len(v) * 3 // 4
    if kind == "N":
        return len(str(v).lstrip("-").replace(".", "")) // 2 + 2
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k) + _size(x) for k, x in v.items())
    if kind == "L":
        return 3 + sum(1 + _size(x) for x in v)
    return 3 + sum(len(str(x)) for x in v)


def item_bytes(item: dict[str, Any]) -> int:
    return sum(len(k) + _size(v) for k, v in item.items())


def _clauses(expr: str, names: dict[str, str]) -> tuple[set[str], set[str]]:
    """The attributes an update expression sets and removes (names resolved)."""
    assigned: set[str] = set()
    removed: set[str] = set()
    for verb, clause in re.findall(
        r"\b(SET|REMOVE|ADD|DELETE)\b(.*?)(?=\b(?:SET|REMOVE|ADD|DELETE)\b|$)", expr, re.I
    ):
        if verb.upper() == "REMOVE":
            removed |= {names.get(t, t) for t in re.findall(r"#?\w+", clause)}
        elif verb.upper() == "SET":
            assigned |= {names.get(t, t) for t in re.findall(r"(#?\w+)\s*=", clause)}
        else:  # ADD / DELETE: the first name of each element
            assigned |= {names.get(t, t) for t in re.findall(r"(?:^|,)\s*(#?\w+)", clause)}
    return assigned, removed


def _index_units(
    keys: tuple[str, ...], stored: set[str], assigned: set[str], removed: set[str]
) -> int:
    """Index writes (in units of the item's size) of an update, for one index of ``keys``
    projecting all attributes: an entry moved (a key set while in it; an upper bound, the
    value may be the same) a delete and a put, put or deleted one, rewritten one."""
    before = all(k in stored for k in keys)
    after = all((k in stored or k in assigned) and k not in removed for k in keys)
    if before and after:
        return 2 if set(keys) & assigned else 1
    return 1 if before or after else 0


def _stored(table: str, key: dict[str, Any]) -> tuple[set[str], int]:
    """The attribute names and bytes of the item ``key`` as the in-process moto server
    holds it before an update (DynamoDB bills an update by the larger of the item before
    and after: this undercounts an update that grows it); none, 0 when the update
    creates it."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.dynamodb.models import dynamodb_backends

    backend = dynamodb_backends[DEFAULT_ACCOUNT_ID][REGION]
    try:
        item = backend.get_item(table, key)
    except Exception:  # noqa: BLE001 - no such table yet: nothing stored
        return set(), 0
    return (set(), 0) if item is None else (set(item.attrs), int(item.size()))


class Meter:
    """Counts requests per service and operation, and DynamoDB request units."""

    def __init__(self, storage: Any, indexes: dict[str, tuple[str, str | None]]) -> None:
        self.calls: Counter[str] = Counter()
        self.wru = 0.0
        self.gsi = 0.0
        """Of ``wru``: the global secondary index writes (an upper bound)."""
        self.rru = 0.0
        self.max_item = 0
        self.max_update = 0
        """Bytes of the largest item an update wrote over."""
        self.scanned = 0
        """Items Queries read (``ScannedCount``: before their filters)."""
        self.mean_item = 1024
        """Bytes billed per item a Query read but did not return (``Select=COUNT``)."""
        self.items: Counter[str] = Counter()
        """Write units by write and item kind (``--by-item``), since the last :meth:`take`."""
        self.last_items: Counter[str] = Counter()
        """:attr:`items` as the last :meth:`take` found them."""
        self._index_keys = [tuple(k for k in pair if k) for pair in indexes.values()]
        for client in (storage.store.ddb, storage.store.sqs):
            service = client.meta.service_model.service_name
            client.meta.events.register(
                f"before-call.{service}", lambda model, s=service, **_: self._call(s, model)
            )
            client.meta.events.register(f"before-parameter-build.{service}", self._params)
        storage.store.ddb.meta.events.register("after-call.dynamodb", self._reads)

    def _call(self, service: str, model: Any) -> None:
        self.calls[f"{service}.{model.name}"] += 1

    def _indexes_touched(self, names: set[str]) -> int:
        return sum(1 for keys in self._index_keys if names & set(keys))

    def _write(self, kind: str, body: dict[str, Any], factor: int) -> None:
        if kind == "Put":
            size = item_bytes(body["Item"])
            self.max_item = max(self.max_item, size)
            gsi = self._indexes_touched(set(body["Item"]))
        elif kind == "Update":
            stored, size = _stored(body["TableName"], body["Key"])
            size = max(size, 1)
            self.max_update = max(self.max_update, size)
            names = body.get("ExpressionAttributeNames", {})
            assigned, removed = _clauses(body.get("UpdateExpression", ""), names)
            gsi = math.ceil(size / 1024) * sum(
                _index_units(keys, stored, assigned, removed) for keys in self._index_keys
            )
        else:
            size, gsi = 1024, 0
        if kind == "ConditionCheck":
            self.wru += factor
            return
        units = factor * math.ceil(size / 1024) + gsi
        self.wru += units
        self.gsi += gsi
        key = body.get("Key") or body.get("Item") or {}
        sk = str(key.get("sk", {}).get("S", "?"))
        tx = " (in a transaction)" if factor == 2 else ""
        self.items[f"{kind} {sk.split('#')[0]}{tx}"] += units

    def _params(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        op = model.name
        if op == "TransactWriteItems":
            for action in params["TransactItems"]:
                ((kind, body),) = action.items()
                self._write(kind, body, 2)
        elif op in ("PutItem", "UpdateItem", "DeleteItem"):
            self._write(op.removesuffix("Item"), params, 1)
        elif op == "BatchWriteItem":
            for reqs in params["RequestItems"].values():
                for r in reqs:
                    if "PutRequest" in r:
                        self._write("Put", r["PutRequest"], 1)
                    else:
                        self._write("Delete", r["DeleteRequest"], 1)

    def _reads(self, http_response: Any, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        op = model.name
        if op == "Query":
            items = parsed.get("Items", [])
            size = sum(item_bytes(i) for i in items)
            scanned = int(parsed.get("ScannedCount", len(items)))
            self.scanned += scanned
            if scanned > len(items):  # a filter or Select=COUNT: DynamoDB bills what it read
                size = scanned * (size // len(items) if items else self.mean_item)
            self.rru += max(1, math.ceil(size / 4096)) * 0.5  # eventually consistent (GSI)
        elif op == "GetItem":
            self.rru += max(1, math.ceil(item_bytes(parsed.get("Item", {})) / 4096))
        elif op == "BatchGetItem":
            for items in parsed.get("Responses", {}).values():
                self.rru += sum(max(1, math.ceil(item_bytes(i) / 4096)) for i in items)

    def take(self) -> tuple[Counter[str], float, float, float, int]:
        out = (Counter(self.calls), self.wru, self.rru, self.gsi, self.scanned)
        self.calls.clear()
        self.wru = self.rru = self.gsi = 0.0
        self.scanned = 0
        self.last_items, self.items = self.items, Counter()
        return out


def _drain(queue: Any, task: Any, n: int, bulk: bool, meter: Meter) -> dict[str, Any]:
    from queue_core.worker import Worker

    meter.take()
    if bulk:
        task.map([(i,) for i in range(n)])
    else:
        for i in range(n):
            task.delay(i)
    enq = meter.take()
    Worker(queue, slots=1, burst=True, install_signal_handlers=False, scheduler=False).run()
    run = meter.take()
    stats = {s.queue: s for s in queue.stats()}
    assert stats["default"].succeeded >= n, stats
    return {"enqueue": enq, "drain": run, "items": meter.last_items}


def _drain_flow(queue: Any, width: int, meter: Meter) -> dict[str, Any]:
    """``--flow``: start one fan-out execution of ``width + 2`` steps and drain it."""
    from queue_core.worker import Worker

    fan = queue.flow("bench-fan")
    root = fan.step(id="root")(_root)
    leaves = [fan.step(id=f"s{i}", depends_on=[root])(_leaf) for i in range(width)]
    fan.step(id="join", depends_on=leaves)(_join)
    meter.take()
    execution = fan.start(1)
    start = meter.take()
    Worker(queue, slots=8, burst=True, install_signal_handlers=False, scheduler=False).run()
    run = meter.take()
    assert execution.status().value == "succeeded", execution.status()
    return {"enqueue": start, "drain": run, "items": meter.last_items}


def _root(input: int) -> int:
    return input


def _leaf(root: int) -> int:
    return root


def _join() -> int:
    return 0


def _per_job(part: tuple[Counter[str], float, float, float, int], n: int) -> tuple[float, ...]:
    calls, wru, rru, gsi, scanned = part
    sqs = sum(v for k, v in calls.items() if k.startswith("sqs."))
    ddb = sum(v for k, v in calls.items() if k.startswith("dynamodb."))
    return sqs / n, ddb / n, wru / n, gsi / n, rru / n, scanned / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=1000, help="jobs per drain (default 1000)")
    ap.add_argument(
        "--enqueue",
        choices=("delay", "map", "both"),
        default="both",
        help="enqueue one delay() per job, one map() of all, or both runs (default)",
    )
    ap.add_argument(
        "--kept",
        type=int,
        default=0,
        help="finished jobs drained and kept before the measured drain (default 0)",
    )
    ap.add_argument(
        "--flow",
        type=int,
        metavar="W",
        help="measure a fan-out flow of W + 2 steps (8-slot worker) instead of plain jobs",
    )
    ap.add_argument(
        "--by-item",
        action="store_true",
        help="also split the drain's write units by write and item kind (J job, X execution, ...)",
    )
    args = ap.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto logs every request

    from backends.sqs import SQSStorage
    from backends.sqs.tables import INDEXES
    from queue_core import Queue
    from queue_core.worker import Worker
    from tests.servers.moto import moto_server  # sets test credentials and the region

    with moto_server() as (endpoint, _server):
        rows = []
        modes = {"delay": [False], "map": [True], "both": [False, True]}[args.enqueue]
        for bulk in [False] if args.flow else modes:
            storage = SQSStorage(
                region=REGION,
                table="qc-bench",
                prefix=f"b{uuid.uuid4().hex[:10]}",
                endpoint_url=endpoint,
            )
            queue = Queue(storage=storage)

            @queue.task(name="bench.noop")
            def noop(i: int) -> int:
                return i

            meter = Meter(storage, INDEXES)
            noop.delay(-1)  # warm-up: queue URLs resolved, one job through
            Worker(queue, slots=1, burst=True, install_signal_handlers=False, scheduler=False).run()
            for start in range(0, args.kept, 1000):  # the history: map()s of 1,000, drained
                noop.map([(i,) for i in range(start, min(args.kept, start + 1000))])
                Worker(
                    queue, slots=8, burst=True, install_signal_handlers=False, scheduler=False
                ).run()
            meter.mean_item = meter.max_item or 1024
            if args.flow:
                got = _drain_flow(queue, args.flow, meter)
            else:
                got = _drain(queue, noop, args.n, bulk, meter)
            rows.append((bulk, got, meter.max_item, meter.max_update))
            queue.close()
    if args.flow:
        _report(rows, args.flow + 2, args.kept, "flow", args.by_item)
    else:
        _report(rows, args.n, args.kept, by_item=args.by_item)


def _report(
    rows: list[tuple[bool, dict[str, Any], int, int]],
    n: int,
    kept: int,
    flow: str = "",
    by_item: bool = False,
) -> None:
    head = (
        f"{'enqueue':<8} {'phase':<8} {'SQS req/job':>11} {'DDB req/job':>11} "
        f"{'WRU/job':>8} {'of: GSI':>8} {'RRU/job':>8} {'$/M jobs':>9} {'no GSI':>7} "
        f"{'read/job':>10}"
    )
    what = f"{n}-step flow fan-out, 1 worker (8 slots)" if flow else f"{n} jobs, 1 worker (1 slot)"
    print(f"{what}, {kept:,} finished jobs kept, requests per job (step)\n{head}")
    for bulk, got, biggest, rewritten in rows:
        total = [0.0] * 6
        for phase in ("enqueue", "drain"):
            per = _per_job(got[phase], n)
            total = [a + b for a, b in zip(total, per, strict=True)]
            print(f"{flow or ('map' if bulk else 'delay'):<8} {phase:<8} " + _cells(per))
        print(f"{flow or ('map' if bulk else 'delay'):<8} {'total':<8} " + _cells(tuple(total)))
        for phase in ("enqueue", "drain"):
            ops = ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(got[phase][0].items()))
            print(f"    {phase}: {ops}")
        print(f"    largest item put: {biggest} bytes, largest item updated: {rewritten} bytes")
        if by_item:
            ranked = sorted(got["items"].items(), key=lambda kv: -kv[1])
            print("    drain write units by write and item kind (sort key before '#'):")
            for what, units in ranked:
                if units / n >= 0.005:
                    print(f"        {units / n:6.2f}  {what}")


def _cells(per: tuple[float, ...]) -> str:
    sqs, ddb, wru, gsi, rru, scanned = per
    cost = sqs * SQS_PER_M + wru * WRU_PER_M + rru * RRU_PER_M
    bare = cost - gsi * WRU_PER_M
    return (
        f"{sqs:>11.2f} {ddb:>11.2f} {wru:>8.2f} {gsi:>8.2f} {rru:>8.2f} {cost:>9.2f} "
        f"{bare:>7.2f} {scanned:>10.2f}"
    )


if __name__ == "__main__":
    main()
