"""Pauses of the SQS + DynamoDB backend (``SupportsPause``): what is paused, and the jobs
moved aside.

**Items.** A pause is one item ``pk = P PZ``, ``sk = <kind>#<name>`` (``k`` kind, ``n``
name, ``since``). It also carries the ``due`` index key ``dp = P P``, ``dx = 0``: the
partition of parked jobs, which every claim already Queries to promote due jobs
(:meth:`backends.sqs.claiming.Claiming.promote`). Pauses sort first there, so each claim
reads the current pauses in the Query it made anyway: **no request is added** to a claim,
paused or not, and other workers see a pause at their next claim (the index's
propagation, well under a second on DynamoDB). A storage object's own ``pause`` and
``resume`` count at once for its claims (they overlay what the index says for a
couple of seconds).

**Paused queues** leave the claim's queue list before its ready Query, and a wake-up wait
does not receive from them: their jobs are never read. **A paused task's or flow's job**
is moved aside once, by the first claim that meets it: its ready-index partition ``rq``
becomes ``P QH#<kind>#<name>`` (its claim order ``rk`` kept) and ``hd`` names the pause,
in a transaction with a check that the pause still exists. ``resume`` deletes the pause
and moves the jobs of that partition back to their queue's ready partition, in their
order, with a delivery hint each; a received hint of a job moved aside is deleted (the
resume sends a new one). A step job's flow is its execution's (``fl`` of the execution
item, read once per execution while a flow is paused). The rule is
:func:`queue_core.rules.control.paused`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from backends.sqs.codec import Item, vals
from backends.sqs.dynamo import TxCancelled
from backends.sqs.errors import translate
from backends.sqs.store import Store
from queue_core.records.control import Pause, PauseKind
from queue_core.records.jobs import dt_from_ms
from queue_core.rules.control import pause_kind, paused

__all__ = ["PAUSES", "Pauses"]

PAUSES = "PZ"
"""The partition (after the key prefix) of the pause items."""
_OWN_S = 2.0
"""How long this object's own pause/resume overlays what a claim's Query returned."""
_FRESH_S = 1.0
"""How old the pause list may be for ``count_pending`` and waits (re-read after)."""
_FLOWS_KEPT = 10_000

_Key = tuple[PauseKind, str]


def _pause(kind: PauseKind, name: str, since_ms: int) -> Pause:
    since = dt_from_ms(since_ms)
    assert since is not None
    return Pause(kind=kind, name=name, since=since)


class Pauses:
    """:class:`~queue_core.storage.control.SupportsPause` of the SQS storage, and what the
    claim, ``count_pending`` and waits ask of the pauses."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.db = store.db
        self.keys = store.keys
        self.pk = f"{store.keys.p}{PAUSES}"
        self._lock = threading.Lock()
        self._since: dict[_Key, int] = {}
        self._read_at = -1.0  # monotonic time of the last read; < 0: never read
        self._own: dict[_Key, tuple[int | None, float]] = {}
        """This object's own writes: key -> (since, or ``None`` for a resume; when)."""
        self._flows: dict[str, str] = {}
        """Execution id -> its flow's name (never changes)."""

    # ------------------------------------------------------------------ SupportsPause

    def pause(self, kind: PauseKind, name: str, *, now: int | None = None) -> bool:
        """See :meth:`queue_core.storage.control.SupportsPause.pause` (one conditional
        PutItem)."""
        k = pause_kind(kind)
        t = self.store.now(now)
        item = {
            "pk": self.pk,
            "sk": f"{k.value}#{name}",
            "k": k.value,
            "n": name,
            "since": t,
            "dp": self.keys.parked,
            "dx": 0,
        }
        with translate("pause"):
            took = self.db.put_if(self.db.put(item)["Put"])
        if took:
            self._mine((k, name), t)
        return took

    def resume(self, kind: PauseKind, name: str) -> bool:
        """See :meth:`queue_core.storage.control.SupportsPause.resume`: delete the pause,
        then move its jobs back (one Query of their partition, one UpdateItem each, one
        hint per job)."""
        k = pause_kind(kind)
        with translate("resume"):
            resp = self.db.client.delete_item(
                TableName=self.db.name,
                Key=self._key(k, name),
                ReturnValues="ALL_OLD",
            )
            self._mine((k, name), None)
            if "Attributes" not in resp:
                return False
            if k is not PauseKind.QUEUE:
                self._give_back(k, name)
        return True

    def list_paused(self) -> list[Pause]:
        """See :meth:`queue_core.storage.control.SupportsPause.list_paused` (one
        consistent Query)."""
        with translate("list_paused"):
            since = self._read()
        return [_pause(kind, name, t) for (kind, name), t in sorted(since.items())]

    # ------------------------------------------------------------------ for the claim

    def seen(self, items: list[Item]) -> list[Item]:
        """Take the pause items out of a ``P P`` Query's result (they sort first) as the
        current pauses; the job items are returned."""
        n = 0
        while n < len(items) and items[n]["pk"] == self.pk:
            n += 1
        self._set({(PauseKind(it["k"]), it["n"]): int(it["since"]) for it in items[:n]})
        return items[n:]

    def unpaused(self, queues: Sequence[str]) -> list[str]:
        """``queues`` without the paused ones (the claim reads no job of those)."""
        with self._lock:
            since = self._since
        if not since:
            return list(queues)
        return [q for q in queues if (PauseKind.QUEUE, q) not in since]

    @property
    def jobs_paused(self) -> bool:
        """Whether a task or a flow is paused: only then does a claim look at its jobs."""
        with self._lock:
            return any(k is not PauseKind.QUEUE for k, _ in self._since)

    def hold(self, cands: list[Item]) -> list[Item]:
        """``cands`` without the jobs a task or flow pause matches; those are moved aside
        (each in a transaction checking the pause still exists)."""
        with self._lock:
            since = dict(self._since)
        flows = self._flows_of([it["xid"] for it in cands if it.get("xid") is not None], since)
        kept: list[Item] = []
        for it in cands:
            flow = flows.get(it.get("xid") or "")
            if not paused(since, "", it["task"], flow):
                kept.append(it)
                continue
            key = (PauseKind.TASK, it["task"])
            self._move_aside(it, key if key in since else (PauseKind.FLOW, flow or ""))
        return kept

    # ------------------------------------------------------------------ count and wait

    def fresh(self) -> dict[_Key, int]:
        """The pauses, re-read when the last read is over a second old."""
        with self._lock:
            stale = self._read_at < 0 or time.monotonic() - self._read_at > _FRESH_S
        return self._read() if stale else dict(self._since)

    def pending_filter(self) -> tuple[str, Item]:
        """A filter on queued jobs (`` AND …``, may be empty) leaving out those a pause
        matches, and its values: for ``count_pending``."""
        since = self.fresh()
        if not since:
            return "", {}
        parts = ["attribute_not_exists(hd)"]
        values: Item = {}
        for kind, attr in ((PauseKind.QUEUE, "q"), (PauseKind.TASK, "task")):
            names = [n for k, n in since if k is kind]
            if names:
                tags = [f"pz{attr}{i}" for i in range(len(names))]
                parts.append(f"NOT {attr} IN ({', '.join(':' + t for t in tags)})")
                values.update(zip(tags, names, strict=True))
        return " AND " + " AND ".join(parts), values

    def waitable(self, queues: Sequence[str]) -> list[str]:
        """``queues`` without the paused ones, for a wake-up wait."""
        self.fresh()
        return self.unpaused(queues)

    # ------------------------------------------------------------------ inside

    def _key(self, kind: PauseKind, name: str) -> dict[str, Any]:
        return {"pk": {"S": self.pk}, "sk": {"S": f"{kind.value}#{name}"}}

    def _held(self, kind: PauseKind, name: str) -> str:
        return f"{self.keys.p}QH#{kind.value}#{name}"

    def _read(self) -> dict[_Key, int]:
        items = self.db.find("pk = :pk", pk=self.pk)
        return self._set({(PauseKind(it["k"]), it["n"]): int(it["since"]) for it in items})

    def _set(self, read: dict[_Key, int]) -> dict[_Key, int]:
        """Store what was read, this object's recent writes laid over it."""
        mono = time.monotonic()
        with self._lock:
            for key, (since, at) in list(self._own.items()):
                if mono - at > _OWN_S:
                    del self._own[key]
                elif since is None:
                    read.pop(key, None)
                else:
                    read.setdefault(key, since)
            self._since, self._read_at = read, mono
            return dict(read)

    def _mine(self, key: _Key, since: int | None) -> None:
        with self._lock:
            self._own[key] = (since, time.monotonic())
            if since is None:
                self._since.pop(key, None)
            else:
                self._since.setdefault(key, since)

    def _flows_of(self, xids: list[str], since: dict[_Key, int]) -> dict[str, str]:
        """The flow of each execution in ``xids`` (read only while a flow is paused)."""
        if not xids or not any(k is PauseKind.FLOW for k, _ in since):
            return {}
        with self._lock:
            missing = [x for x in dict.fromkeys(xids) if x not in self._flows]
        if missing:
            found = self.db.batch_get(
                [{"pk": {"S": f"{self.keys.p}X#{x}"}, "sk": {"S": "X"}} for x in missing]
            )
            with self._lock:
                if len(self._flows) > _FLOWS_KEPT:
                    self._flows.clear()
                self._flows.update({it["id"]: it["fl"] for it in found})
        with self._lock:
            return {x: self._flows[x] for x in xids if x in self._flows}

    def _move_aside(self, job: Item, key: _Key) -> None:
        """Move a queued ``job`` out of its ready partition into the pause's (kept in
        its order), if the pause still exists and the job is as read."""
        kind, name = key
        update = self.db.update(
            self.keys.job(job["id"]),
            {"rq": self._held(kind, name), "hd": f"{kind.value}#{name}"},
            cond="st = :q AND v = :ver",
            cond_values={"q": "queued", "ver": job["v"]},
        )
        check = {
            "ConditionCheck": {
                "TableName": self.db.name,
                "Key": self._key(kind, name),
                "ConditionExpression": "attribute_exists(pk)",
            }
        }
        try:
            self.db.transact([{"Update": update}, check])
        except TxCancelled:
            pass  # claimed, changed or resumed meanwhile: the next claim sees it anew

    def _give_back(self, kind: PauseKind, name: str) -> None:
        """Move the jobs set aside for a resumed pause back to their ready partitions."""
        back: list[Item] = []
        for it in self.db.query(
            IndexName="ready",
            KeyConditionExpression="rq = :rq",
            ExpressionAttributeValues=vals(rq=self._held(kind, name)),
        ):
            op = self.db.update(
                self.keys.job(it["id"]),
                {"rq": self.keys.ready(it["q"])},
                ["hd"],
                cond="st = :q AND hd = :hd",
                cond_values={"q": "queued", "hd": f"{kind.value}#{name}"},
            )
            if self.db.update_if(op) is not None:
                back.append(it)
        self.store.hint(back, self.store.clock())
