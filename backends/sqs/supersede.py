"""``cancel_in_progress`` and ``latest`` of the SQS + DynamoDB backend (``SupportsSupersede``)
for jobs.

A superseding concurrency key's item ``pk = P SK#<key>``, ``sk = SK`` holds ``a``, its
jobs that may be active (job id -> enqueue sequence), and the version ``v``. An enqueue
reads it and those jobs' items (one GetItem, one BatchGetItem), asks
:func:`queue_core.rules.control.supersede` which of the ``queued`` and ``running`` ones
the new job ends, and writes in **one transaction**: the key's item (conditional on the
version read: entries of ended jobs dropped, the new job's added), each victim's end as
:func:`~queue_core.rules.control.superseded_end` says (a queued one conditional on its
version; a running one's attempt ends ``cancelled`` fenced by its attempt number and
lease token, as the flow deadline ends a step: its worker's ``finish`` is refused and
``renew`` reports it lost), one update of the key's concurrency counter for all of them,
and the new job. Racing enqueues of one key: one transaction wins, the others read
again; a ``finish`` racing the supersede either takes first (the job is no longer
active when read again) or is refused.

Executions are superseded by :meth:`backends.sqs.flows.SQSFlows.start_execution`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from backends.sqs.codec import Item, new_item
from backends.sqs.dynamo import TxCancelled
from backends.sqs.errors import translate
from backends.sqs.limits import Limits
from backends.sqs.store import SEQ, Store
from backends.sqs.writes import Actions, Writes
from queue_core.records.errors import StorageError
from queue_core.records.jobs import Enqueued, JobState, NewJob, Outcome
from queue_core.rules.control import Active, supersede, superseded_end

__all__ = ["SUPERSEDING", "Supersede"]

SUPERSEDING = ("cancel_in_progress", "latest")
_RETRIES = 20
_FAILED = "ConditionalCheckFailed"


def _superseding(job: NewJob) -> bool:
    return job.concurrency_behavior in SUPERSEDING and job.concurrency_key is not None


class Supersede:
    """:class:`~queue_core.storage.control.SupportsSupersede` of the SQS storage for jobs;
    its :meth:`enqueue` stores the others through ``limits``."""

    def __init__(self, store: Store, writes: Writes, limits: Limits) -> None:
        self.store = store
        self.db = store.db
        self.keys = store.keys
        self.writes = writes
        self.limits = limits

    def enqueue(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[JobState]:
        """See :meth:`queue_core.storage.protocol.Storage.enqueue` (superseding jobs
        honoured)."""
        if any(_superseding(j) for j in jobs):
            return [e.state for e in self.enqueue_superseding(jobs, now=now)]
        return self.limits.enqueue(jobs, now=now)

    def enqueue_superseding(
        self, jobs: Sequence[NewJob], *, now: int | None = None
    ) -> list[Enqueued]:
        """See :meth:`queue_core.storage.control.SupportsSupersede.enqueue_superseding`.
        Each job in order, so an earlier one counts against later ones."""
        t = self.store.now(now)
        if len({j.id for j in jobs}) != len(jobs):
            raise StorageError("sqs backend: duplicate job id within one enqueue batch")
        out: list[Enqueued] = []
        for j in jobs:
            if not _superseding(j):
                out += self.limits.enqueue_unique([j], now=t)
                continue
            with translate("enqueue"):
                out.append(self._store(j, t))
        return out

    def _store(self, job: NewJob, t: int) -> Enqueued:
        assert job.concurrency_key is not None
        kkey = {"pk": {"S": f"{self.keys.p}SK#{job.concurrency_key}"}, "sk": {"S": "SK"}}
        item = new_item(self.keys, job, t, SEQ.take(1)[0])
        for _ in range(_RETRIES):
            current = self.db.get(kkey)
            ids: dict[str, int] = dict(current["a"]) if current else {}
            found = self.store.read_jobs(list(ids)) if ids else {}
            active = {i: it for i, it in found.items() if it["st"] in ("queued", "running")}
            victims = supersede(
                job.concurrency_behavior,
                [Active(i, JobState(it["st"]), ids[i]) for i, it in active.items()],
                job.concurrency_limit or 1,
            )
            keep = {i: ids[i] for i in active if i not in victims}
            keep[job.id] = item["seq"]
            counter = self.keys.counter(job.concurrency_key)
            actions = [self._key_write(kkey, current, keep)]
            actions += self._ends([active[v] for v in victims], job, t)
            actions += [
                a
                for a in self.writes.put_new(item, job.payload)
                if a.get("Update", {}).get("Key") != counter
            ]
            running = sum(1 for v in victims if active[v]["st"] == "running")
            act = 1 - len(victims)  # one counter update for all: a transaction touches an item once
            if running or act:
                actions.append({"Update": self.db.counter(counter, run=-running, act=act)})
            try:
                self.db.transact(actions)
            except TxCancelled as exc:
                puts = [a for a, c in zip(actions, exc.codes, strict=False) if c == _FAILED]
                if any("Put" in a and a["Put"]["Item"]["sk"]["S"] == "J" for a in puts):
                    raise StorageError(f"job id {job.id!r} already exists") from None
                continue  # the key or a victim changed: read again
            self.store.hint([item], t)
            return Enqueued(job.id, JobState.QUEUED, superseded=tuple(victims))
        raise StorageError(f"sqs backend: concurrency key {job.concurrency_key!r} kept changing")

    def _key_write(
        self, kkey: dict[str, Any], current: Item | None, keep: dict[str, int]
    ) -> dict[str, Any]:
        """The key item's update: its active jobs ``keep``, conditional on the version read."""
        if current is None:
            return {"Update": self.db.update(kkey, {"a": keep}, cond="attribute_not_exists(pk)")}
        update = self.db.update(
            kkey, {"a": keep}, cond="#v = :kv", cond_values={"kv": current["v"]}
        )
        return {"Update": update}

    def _ends(self, victims: list[Item], job: NewJob, t: int) -> Actions:
        """The writes ending each superseded job (its counter left to the caller)."""
        state, reason = superseded_end(job.concurrency_behavior)
        actions: Actions = []
        for v in victims:
            bare = {**v, "ck": None}  # the caller writes one counter update for all
            if v["st"] == "queued":
                actions += self.writes.end_queued(bare, state, reason, t)
                continue
            ended, _ = self.writes.end_attempt(
                bare,
                Outcome.CANCELLED,
                reason,
                None,
                None,
                t,
                state=state,
                job_reason=reason,
                cond="st = :run AND att = :att AND tok = :tok",
                cond_values={"run": "running", "att": v["att"], "tok": v["tok"]},
            )
            actions += ended
        return actions
