"""``round_robin`` groups of the SQS + DynamoDB backend (``SupportsRoundRobin``): claims
rotate over a group's keys.

A round-robin job stays in its queue's ready partition, so the claim meets it in claim
order like any job (:mod:`backends.sqs.claiming`). Whenever a claim meets jobs of a group,
it claims in their places the group's next turns (:class:`Turns`): the best ready job of
the key that comes first in :func:`queue_core.rules.control.round_robin_order` among the
group's keys below their limit -- least recently served, never served first, ties by
the key's best job.

Items:

* **Group item** ``pk = P RG#<group>``, ``sk = Q#<queue>``: each key's served mark as
  attribute ``~<key>`` (the group's claim counter when the key was last served; ``0`` =
  never served), the counter ``c`` and the version ``v``. An enqueue of round-robin jobs
  registers their keys after storing them (one ``UpdateItem`` per group and call,
  ``~<key> = if_not_exists(~<key>, 0)``, no version bump); a claim that meets a key not
  registered serves it as never served.
* **A key's turn partition**: a queued round-robin job carries ``ltp = P RK#[queue,
  group, key]`` and ``lx`` = its claim order (:meth:`backends.sqs.codec.Keys.queued_fields`,
  ready or parked), in the ``deadtask`` index (string hash and range; the dead letters'
  partitions are ``P DT#<task>``): a Query reads a key's best ready jobs without reading
  the backlog of the others. Claims and ends remove them with ``rq``/``rk``.

A claim reads the group item once (consistent ``GetItem``), a key's best ready jobs
(one Query of its turn partition) only when it considers the key, and the running counts
(one ``BatchGetItem`` of the keys' concurrency counters) once it considers a key with a
limit: served marks differ,
so apart from never-served keys (compared by their best job) the least recently served
key with a ready job below its limit is the turn, whatever the backlog.

Atomicity: the turns a claim takes go in one ``TransactWriteItems`` with their jobs'
starts (each conditional on the job's version), their concurrency counters (``run <
limit``) and the group item's new marks and counter, **conditional on the version the
claim read**: two claimers serving one group serialize on it (the loser reads the group
again), and never hand out a job twice nor exceed a key's limit. A key with no ready job
whose counter says it has no queued or running job (``act = 0``) is forgotten, in a
transaction with a ``ConditionCheck`` on that counter, so an enqueue racing it (which
adds to ``act`` before it registers) keeps its key.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from backends.sqs.codec import Item, vals
from backends.sqs.debounce import Debounce
from backends.sqs.dynamo import TX_MAX, TxCancelled
from backends.sqs.errors import translate
from backends.sqs.limits import Limits
from backends.sqs.pauses import Pauses
from backends.sqs.store import Store
from backends.sqs.tables import DUE_TYPE, due_by
from queue_core.records.jobs import Enqueued, JobState, NewJob
from queue_core.rules.control import round_robin_order

__all__ = ["ROUND_ROBIN", "GroupKey", "RoundRobin", "Turns", "turn_of"]

ROUND_ROBIN = "round_robin"
MARK = "~"
"""Prefix of a key's served-mark attribute on its group item."""
_PER_UPDATE = 40
"""Keys registered per ``UpdateItem`` (an update expression holds at most 4 KB)."""
TURNS_PER_TX = TX_MAX // 5
"""Turns per transaction: a job's start, counter, rate and execution, plus the group."""

_T = TypeVar("_T")
GroupKey = tuple[str, str]
"""``(queue, group)``: groups rotate among the jobs of one queue."""


def turn_of(it: Item) -> GroupKey | None:
    """The group whose turns a queued job item takes, or ``None`` (not round robin)."""
    if it.get("cb") != ROUND_ROBIN or it.get("ck") is None:
        return None
    return str(it["q"]), str(it.get("cg") or it.get("task") or "")


def _n(value: int) -> dict[str, str]:
    return {"N": str(value)}


class RoundRobin:
    """:class:`~queue_core.storage.control.SupportsRoundRobin` of the SQS storage: its
    enqueues register the keys of round-robin jobs (stored through ``debounce`` and
    ``limits``), :meth:`turns` gives each claim its turns."""

    def __init__(self, store: Store, pauses: Pauses, debounce: Debounce, limits: Limits) -> None:
        self.store = store
        self.db = store.db
        self.keys = store.keys
        self.pauses = pauses
        self.debounce = debounce
        self.limits = limits

    # ------------------------------------------------------------------ enqueue

    def enqueue(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[JobState]:
        """See :meth:`queue_core.storage.protocol.Storage.enqueue`."""
        return self._registering(jobs, lambda: self.debounce.enqueue(jobs, now=now))

    def enqueue_unique(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[Enqueued]:
        """See :meth:`queue_core.storage.abilities.SupportsUniqueJobs.enqueue_unique`."""
        return self._registering(jobs, lambda: self.limits.enqueue_unique(jobs, now=now))

    def enqueue_debounced(
        self, jobs: Sequence[NewJob], *, now: int | None = None
    ) -> list[Enqueued]:
        """See :meth:`queue_core.storage.control.SupportsDebounce.enqueue_debounced`."""
        return self._registering(jobs, lambda: self.debounce.enqueue_debounced(jobs, now=now))

    def _registering(self, jobs: Sequence[NewJob], store: Callable[[], _T]) -> _T:
        """``store()``, then register the round-robin keys of ``jobs`` (also when it
        failed part way: a key registered without a job is forgotten by a claim)."""
        try:
            return store()
        finally:
            self._register(jobs)

    def _register(self, jobs: Sequence[NewJob]) -> None:
        """Add the keys of the round-robin ``jobs`` to their groups (a mark kept)."""
        groups: dict[GroupKey, set[str]] = {}
        for j in jobs:
            if j.concurrency_behavior == ROUND_ROBIN and j.concurrency_key is not None:
                gk = (j.queue, j.concurrency_group or j.task_name)
                groups.setdefault(gk, set()).add(j.concurrency_key)
        with translate("enqueue"):
            for gk, found in groups.items():
                keys = sorted(found)
                for i in range(0, len(keys), _PER_UPDATE):
                    chunk = keys[i : i + _PER_UPDATE]
                    self.db.client.update_item(
                        TableName=self.db.name,
                        Key=self.group_key(*gk),
                        UpdateExpression="SET "
                        + ", ".join(
                            f"#k{n} = if_not_exists(#k{n}, :zero)" for n in range(len(chunk))
                        ),
                        ExpressionAttributeNames={f"#k{n}": MARK + k for n, k in enumerate(chunk)},
                        ExpressionAttributeValues={":zero": _n(0)},
                    )

    # ------------------------------------------------------------------ reads

    def group_key(self, queue: str, group: str) -> dict[str, Any]:
        return {"pk": {"S": f"{self.keys.p}RG#{group}"}, "sk": {"S": f"Q#{queue}"}}

    def heads(self, queue: str, group: str, key: str, now: int, n: int) -> list[Item]:
        """Up to ``n`` claimable queued jobs of ``key`` at ``now`` (ready, not moved aside
        by a pause, schedule-to-start not passed), best first: one Query."""
        cond = (
            f"st = :q AND {due_by('now')} AND attribute_not_exists(hd)"
            " AND (attribute_not_exists(dx) OR dx > :now OR dp = :parked)"
        )
        return self.db.query(
            IndexName="deadtask",
            KeyConditionExpression="ltp = :p",
            FilterExpression=cond,
            ExpressionAttributeValues={
                **vals(
                    p=self.keys.turns(queue, group, key),
                    q="queued",
                    now=now,
                    parked=self.keys.parked,
                ),
                **DUE_TYPE,
            },
            Limit=max(n, 1),
        )[: max(n, 1)]

    def counter(self, key: str) -> tuple[int, int]:
        """``(running, queued + running)`` of concurrency key ``key`` (one GetItem)."""
        item = self.db.get(self.keys.counter(key)) or {}
        return int(item.get("run", 0)), int(item.get("act", 0))

    def counters(self, keys: Sequence[str]) -> dict[str, tuple[int, int]]:
        """:meth:`counter` of each of ``keys`` (one BatchGetItem per 100)."""
        if len(keys) == 1:
            return {keys[0]: self.counter(keys[0])}
        found = self.db.batch_get([self.keys.counter(k) for k in keys])
        counts = {k: (0, 0) for k in keys}
        cut = len(self.keys.p) + 2  # "P C#"
        for it in found:
            counts[str(it["pk"])[cut:]] = (int(it.get("run", 0)), int(it.get("act", 0)))
        return counts

    def round_robin_keys(self, group: str, *, now: int | None = None) -> list[str]:
        """See :meth:`queue_core.storage.control.SupportsRoundRobin.round_robin_keys`
        (over every queue: a key's earliest served mark and best job count). One Query
        of the group's items, one of each key's turn partition, one GetItem of each
        limited key's counter."""
        t = self.store.now(now)
        with translate("round_robin_keys"):
            items = self.db.find("pk = :pk", pk=f"{self.keys.p}RG#{group}")
            served: dict[str, int] = {}
            best: dict[str, str] = {}
            for item in items:
                queue = str(item["sk"])[2:]
                for name, mark in item.items():
                    if not name.startswith(MARK):
                        continue
                    key = name[len(MARK) :]
                    served[key] = min(served.get(key, int(mark)), int(mark))
                    head = self.heads(queue, group, key, t, 1)
                    if not head or key in best and best[key] <= head[0]["lx"]:
                        continue
                    limit = head[0].get("cl")
                    if limit is None or self.counter(key)[0] < int(limit):
                        best[key] = head[0]["lx"]
        ranked = sorted(best, key=best.__getitem__)
        return round_robin_order({k: (served[k], i) for i, k in enumerate(ranked)})

    def turns(self, now: int, room: int, rate_full: set[str]) -> Turns:
        """The turns of one claim at ``now`` of up to ``room`` jobs; ``rate_full``: the
        rate keys the claim found spent (their keys are passed over)."""
        return Turns(self, now, room, rate_full)


class _Group:
    """One group of one queue as one claim reads and changes it."""

    def __init__(self, queue: str, group: str, item: Item | None) -> None:
        item = item or {}
        self.queue, self.group = queue, group
        self.version: int | None = item.get("v")
        self.counter = int(item.get("c", 0))
        self.served = {k[len(MARK) :]: int(v) for k, v in item.items() if k.startswith(MARK)}
        self.stored = set(self.served)
        """The keys the group item holds (only those can be forgotten)."""
        self.jobs: dict[str, deque[Item]] = {}
        self.counts: dict[str, tuple[int, int]] = {}
        """Per key read: ``[running, queued + running]`` (running kept up to date)."""
        self.passed: set[str] = set()
        """Keys not served by this claim: full, or their best job's rate spent."""
        self.gone: set[str] = set()
        """Keys found without a claimable job."""


class Turns:
    """The round-robin turns of one claim (:meth:`RoundRobin.turns`)."""

    def __init__(self, rr: RoundRobin, now: int, room: int, rate_full: set[str]) -> None:
        self.rr, self.now, self.room, self.rate_full = rr, now, room, rate_full
        self.groups: dict[GroupKey, _Group] = {}
        self.met: dict[GroupKey, set[str]] = {}
        self.slots: dict[GroupKey, int] = {}

    def segments(self, kept: list[Item]) -> list[list[Item] | GroupKey]:
        """``kept`` (claim candidates in claim order) cut into runs of other jobs and,
        where a group's first job is met, that group: its turns are claimed there, as
        many as the round met jobs of it."""
        out: list[list[Item] | GroupKey] = []
        plain: list[Item] = []
        for it in kept:
            gk = turn_of(it)
            if gk is None:
                plain.append(it)
                continue
            if gk not in self.met:
                self.met[gk] = set()
            if not any(seg == gk for seg in out):
                if plain:
                    out.append(plain)
                    plain = []
                out.append(gk)
            self.met[gk].add(str(it["ck"]))
            self.slots[gk] = self.slots.get(gk, 0) + 1
        if plain:
            out.append(plain)
        return out

    def _group(self, gk: GroupKey) -> _Group:
        g = self.groups.get(gk)
        if g is None:
            g = self.groups[gk] = self._load(gk)
        for key in self.met.get(gk, ()):
            g.served.setdefault(key, 0)  # met but not registered: never served
        return g

    def _load(self, gk: GroupKey) -> _Group:
        return _Group(*gk, self.rr.db.get(self.rr.group_key(*gk)))

    def _open(self, g: _Group, key: str) -> bool:
        """Whether ``key`` has a claimable job and is below its limit (read on first use)."""
        if key in g.passed or key in g.gone:
            return False
        jobs = g.jobs.get(key)
        if jobs is None:
            found = self.rr.heads(g.queue, g.group, key, self.now, self.room)
            if found and self.rr.pauses.jobs_paused:
                found = self.rr.pauses.hold(found)
            jobs = g.jobs[key] = deque(found)
        if not jobs:
            g.gone.add(key)
            return False
        head = jobs[0]
        if head.get("rtk") is not None and head["rtk"] in self.rate_full:
            return False
        limit = head.get("cl")
        if limit is None:
            return True
        if key not in g.counts:  # the counts of every key not read yet, in one request
            unread = [k for k in sorted(g.served) if k not in g.counts and k not in g.gone]
            g.counts.update(self.rr.counters(unread[:100] if key in unread[:100] else [key]))
        return g.counts[key][0] < int(limit)

    def _next(self, g: _Group, served: dict[str, int]) -> str | None:
        """The key served next (:func:`~queue_core.rules.control.round_robin_order`):
        never-served keys first, by their best job; then the least recently served.
        Marks of served keys differ, so only never-served keys need their best job read."""
        fresh = [k for k, n in served.items() if n == 0 and self._open(g, k)]
        if fresh:
            heads = sorted(fresh, key=lambda k: (g.jobs[k][0]["lx"], k))
            return round_robin_order({k: (0, i) for i, k in enumerate(heads)})[0]
        for _, key in sorted((n, k) for k, n in served.items() if n > 0):
            if self._open(g, key):
                return key
        return None

    def batch(self, gk: GroupKey, room: int) -> list[Item]:
        """The next turns of group ``gk`` for one transaction, in turn order: one job per
        key (the batch ends where the next turn is a key already in it)."""
        g = self._group(gk)
        served, counter = dict(g.served), g.counter
        out: list[Item] = []
        while len(out) < min(room, self.slots.get(gk, 0), TURNS_PER_TX):
            key = self._next(g, served)
            if key is None or any(it["ck"] == key for it in out):
                break
            out.append(g.jobs[key][0])
            counter += 1
            served[key] = counter
        return out

    def write(self, gk: GroupKey, batch: list[Item]) -> dict[str, Any]:
        """The group item's update serving ``batch`` in order, conditional on the
        version read."""
        g = self.groups[gk]
        names = {"#c": "c", "#v": "v"}
        values: dict[str, Any] = {}
        sets: list[str] = []
        counter = g.counter
        for i, it in enumerate(batch):
            counter += 1
            names[f"#k{i}"] = MARK + str(it["ck"])
            values[f":k{i}"] = _n(counter)
            sets.append(f"#k{i} = :k{i}")
        values.update({":c": _n(counter), ":v1": _n((g.version or 0) + 1)})
        update: dict[str, Any] = {
            "TableName": self.rr.db.name,
            "Key": self.rr.group_key(*gk),
            "UpdateExpression": "SET " + ", ".join([*sets, "#c = :c", "#v = :v1"]),
            "ConditionExpression": "attribute_not_exists(#v)",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }
        if g.version is not None:
            update["ConditionExpression"] = "#v = :v0"
            values[":v0"] = _n(g.version)
        return {"Update": update}

    def taken(self, gk: GroupKey, batch: list[Item]) -> None:
        """``batch`` was claimed: its keys are served, in order."""
        g = self.groups[gk]
        for it in batch:
            key = str(it["ck"])
            g.jobs[key].popleft()
            g.counter += 1
            g.served[key] = g.counter
            g.stored.add(key)
            if key in g.counts:
                run, act = g.counts[key]
                g.counts[key] = (run + 1, act)
        g.version = (g.version or 0) + 1
        self.slots[gk] -= len(batch)

    def failed(self, gk: GroupKey, lost: list[Item], passed: set[str], group: bool) -> None:
        """A transaction of ``gk``'s turns was cancelled: ``lost`` jobs were taken or
        changed by another writer, ``passed`` keys are full (or their rate spent);
        ``group``: the group item changed (it, and what hangs on it, is read again)."""
        if group:
            self._reload(gk)
            return
        g = self.groups[gk]
        g.passed |= passed
        for it in lost:
            jobs = g.jobs.get(str(it["ck"]))
            if jobs and jobs[0] is it:
                jobs.popleft()

    def _reload(self, gk: GroupKey) -> None:
        """Read the group item again; keep what was read of the keys whose marks did not
        change (another claimer served the others: their jobs and counts are read again)."""
        old, fresh = self.groups[gk], self._load(gk)
        seen = old.stored | fresh.stored
        changed = {k for k in seen if old.served.get(k) != fresh.served.get(k)}
        fresh.jobs = {k: v for k, v in old.jobs.items() if k not in changed}
        fresh.counts = {k: v for k, v in old.counts.items() if k not in changed}
        fresh.passed = old.passed - changed
        fresh.gone = old.gone - changed
        self.groups[gk] = fresh

    def tidy(self) -> None:
        """Forget the keys found without a claimable job that have no queued or running
        job left (``act = 0``): one transaction per group, conditional on the version
        read and on each forgotten key's counter; a race lost is left to a later claim."""
        for gk, g in self.groups.items():
            idle: list[str] = []
            for key in sorted(g.gone & g.stored)[: TX_MAX - 1]:
                if key not in g.counts:
                    g.counts[key] = self.rr.counter(key)
                if g.counts[key][1] <= 0:
                    idle.append(key)
            if idle and g.version is not None:
                self._forget(gk, g, idle)

    def _forget(self, gk: GroupKey, g: _Group, idle: list[str]) -> None:
        db = self.rr.db
        names = {"#v": "v", **{f"#k{i}": MARK + k for i, k in enumerate(idle)}}
        forget = {
            "TableName": db.name,
            "Key": self.rr.group_key(*gk),
            "UpdateExpression": "SET #v = :v1 REMOVE "
            + ", ".join(f"#k{i}" for i in range(len(idle))),
            "ConditionExpression": "#v = :v0",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": {
                ":v0": _n(g.version or 0),
                ":v1": _n((g.version or 0) + 1),
            },
        }
        checks = [
            {
                "ConditionCheck": {
                    "TableName": db.name,
                    "Key": self.rr.keys.counter(key),
                    "ConditionExpression": "attribute_not_exists(act) OR act <= :zero",
                    "ExpressionAttributeValues": {":zero": _n(0)},
                }
            }
            for key in idle
        ]
        try:
            db.transact([{"Update": forget}, *checks])
        except TxCancelled:
            return
        g.version = (g.version or 0) + 1
