"""The job writes the SQS storage's parts share: storing a new job, ending an attempt or
a queued job, dead letters.

What happens to a job is decided elsewhere (:func:`~queue_core.rules.outcomes.end_state`,
:func:`~queue_core.rules.outcomes.reap_verdict`, a flow plan's ``EndJob``); this part
builds the transaction actions that record it: the job item's fields, the attempt's
record, a dead-letter entry, the concurrency counter. A flow step's event is the caller's
explicit addition (:meth:`backends.sqs.flows.SQSFlows.step_event`).
"""

from __future__ import annotations

import uuid
from typing import Any

from backends.sqs.blobs import attempts_fields, result_fields, side_keys
from backends.sqs.codec import Item, current_attempt, dead_entry, encode_item, error_map
from backends.sqs.store import Store
from queue_core.records.jobs import ErrorInfo, JobState, Outcome, Reason

__all__ = ["Writes"]

Actions = list[dict[str, Any]]


def _attempt_sets(
    outcome: Outcome, reason: str | None, error: ErrorInfo | None, mode: str | None, now: int
) -> Item:
    """SET values of an attempt item as the attempt ends."""
    sets: Item = {"oc": outcome.value, "rsn": reason, "fa": now, "mode": mode}
    if error is not None:
        sets.update(
            ec=error.error_class, et=error.error_type, msg=error.message, tb=error.traceback
        )
    return sets


class Writes:
    """Builds the actions that store and end jobs on one :class:`Store`."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.db = store.db
        self.keys = store.keys

    def put_new(self, item: Item, payload: bytes) -> Actions:
        """The writes storing new job item ``item`` (``payload`` in chunk items when it is
        too large to sit inline) and counting it in its concurrency key's ``act``."""
        actions = [self.db.put(item)]
        if item.get("plc"):
            actions += self.db.chunk_puts(item["pk"], payload)
        if item.get("ck") is not None:
            actions.append({"Update": self.db.counter(self.keys.counter(item["ck"]), act=1)})
        return actions

    def end_attempt(
        self,
        job: Item,
        outcome: Outcome,
        attempt_reason: str | None,
        error: ErrorInfo | None,
        mode: str | None,
        now: int,
        *,
        state: JobState,
        job_reason: str | None,
        cond: str,
        cond_values: Item,
        ready_at: int | None = None,
        place_at: int | None = None,
        result: bytes | None = None,
        lost_delay_ms: int | None = None,
        refund: bool = False,
        also: Item | None = None,
    ) -> tuple[Actions, Item]:
        """The writes that end the current attempt of ``job`` and put the job in ``state``
        with ``job_reason`` (``queued`` ones ready at ``ready_at``, in line at ``place_at``
        when a reap kept their place), conditional on
        ``cond``; and the SET values of the job item. ``refund``: the attempt spent none of
        the retry budget (``Decision.spends_attempt`` false): ``max_attempts`` grows by one
        in the same fenced update. ``also``: more SET values of the job item (an end's
        progress)."""
        att_sets = _attempt_sets(outcome, attempt_reason, error, mode, now)
        inline = state is JobState.SUCCEEDED and error is None
        inline = inline and job.get("ck") is None
        actions: Actions = [] if inline else [self._attempt_put(job, att_sets)]
        if state is JobState.QUEUED:
            sets, removes = self.keys.queued_fields(
                job, now if ready_at is None else ready_at, now, place_at
            )
            sets["rsn"] = None
            if lost_delay_ms is not None:
                sets["ld"] = lost_delay_ms
        else:
            sets, removes = self._finished(job, state, now)
            sets["rsn"] = job_reason
            if state is JobState.SUCCEEDED:  # a large result in chunk items beside it
                fields, chunks = result_fields(job["pk"], result)
                sets.update(fields)
                actions += self.db.puts(chunks)
            if inline:  # the job item keeps the ended attempt: see current_attempt
                sets.update(ao=outcome.value, ar=attempt_reason, am=mode)
            if state is JobState.DEAD:
                sets["did"], puts = self._dead_after(job, att_sets, job_reason, error, now)
                actions += puts
        if error is not None:
            sets["err"] = error_map(error)
        if refund:  # fenced by ``cond``: the item read holds the current budget
            sets["ma"] = int(job["ma"]) + 1
        if also:
            sets.update(also)
        job_update = self.db.update(
            self.keys.job(job["id"]), sets, removes, cond=cond, cond_values=cond_values
        )
        actions.insert(0, {"Update": job_update})
        if job.get("ck") is not None:
            dec_act = 0 if state is JobState.QUEUED else -1
            counter = self.db.counter(self.keys.counter(job["ck"]), run=-1, act=dec_act)
            actions.append({"Update": counter})
        return actions, sets

    def end_queued(self, job: Item, state: JobState, reason: str, now: int) -> Actions:
        """The writes that end queued ``job`` unrun in ``state`` with ``reason`` (a cancel,
        a flow's ``not_run``, schedule-to-start), conditional on the version read; a
        ``dead`` one gets its dead-letter entry."""
        sets, removes = self._finished(job, state, now)
        sets["rsn"] = reason
        puts: Actions = []
        if state is JobState.DEAD:
            attempts = self.db.attempts(self.keys.job_pk(job["id"]))
            sets["did"], puts = self.dead_puts(job, reason, None, attempts, now)
        update = self.db.update(
            self.keys.job(job["id"]),
            sets,
            removes,
            cond="st = :q AND v = :ver",
            cond_values={"q": "queued", "ver": job["v"]},
        )
        actions: Actions = [{"Update": update}, *puts]
        if job.get("ck") is not None:
            actions.append({"Update": self.db.counter(self.keys.counter(job["ck"]), act=-1)})
        return actions

    def _finished(self, job: Item, state: JobState, now: int) -> tuple[Item, list[str]]:
        """The finished fields of ``job``; a workflow's step job (``wf``) stays out of the
        job prune and the TTL: it goes with its execution (the flows prune)."""
        sets, removes = self.store.finished_fields(state, now)
        if job.get("wf"):
            sets.update(dp=None, dx=None, ttl=None)
        return sets, removes

    def rerun(
        self, job: Item, stored: Item, deadline_at: int | None, now: int
    ) -> tuple[Actions, None, Item | None]:
        """A step job released again (``plan.Release`` after a resume): a finished one runs
        again -- queued ready now, ``max_attempts`` = its attempts so far + the budget it
        was stored with, reason, result and error cleared, its dead-letter entry removed,
        its attempt records kept (a success ended inline on the job item is stored as its
        attempt item); a queued or running one is left alone. The writes, and
        the job item to hint."""
        if job["st"] in (JobState.QUEUED.value, JobState.RUNNING.value):
            return [], None, None
        sets, removes = self.keys.queued_fields(job, now, now)
        sets.update(ma=int(job.get("att", 0)) + int(stored["ma"]), fdl=deadline_at)
        sets.update(
            {k: None for k in ("rsn", "res", "rsc", "err", "fa", "did", "ttl", "cxl", "ao")}
        )
        values = {"s": job["st"], "jv": job["v"]}
        job_update = self.db.update(
            self.keys.job(job["id"]), sets, removes, cond="st = :s AND v = :jv", cond_values=values
        )
        actions: Actions = [{"Update": job_update}]
        if job.get("ao") is not None:  # its success ended inline: stored as its record now
            record = encode_item(current_attempt(job))
            actions.append({"Put": {"TableName": self.db.name, "Item": record}})
        keys = side_keys(job, ("rsc",))  # its result's chunks, and its dead-letter entry's
        entry = self.db.get(self.keys.dead(job["did"])) if job.get("did") else None
        if entry is not None:
            keys += [self.keys.dead(job["did"]), *side_keys(entry)]
        actions += [{"Delete": {"TableName": self.db.name, "Key": k}} for k in keys]
        if job.get("ck") is not None:
            actions.append({"Update": self.db.counter(self.keys.counter(job["ck"]), act=1)})
        return actions, None, {**job, **sets}

    def skipped(self, item: Item, now: int) -> Item:
        """New job item ``item`` as stored ``skipped`` (``concurrency_limit``) instead."""
        sets, removes = self.store.finished_fields(JobState.SKIPPED, now)
        skipped = {k: v for k, v in item.items() if k not in (*removes, "dp", "dx")}
        skipped.update(sets, rsn=Reason.CONCURRENCY_LIMIT.value)
        return skipped

    def dead_puts(
        self, job: Item, reason: str, error: ErrorInfo | None, attempts: list[Item], now: int
    ) -> tuple[str, Actions]:
        """A new dead-letter entry for ``job``: its id and the Put actions storing it."""
        dead_id = uuid.uuid4().hex
        payload = self.db.payload(job)
        entry = dead_entry(
            self.keys,
            job,
            payload,
            dead_id=dead_id,
            reason=reason,
            error=error,
            attempts=attempts,
            now=now,
        )
        fields, chunks = attempts_fields(entry["pk"], entry["atts"])  # many: chunk items
        entry.update(fields)
        puts = [self.db.put(entry), *self.db.puts(chunks)]
        if entry.get("plc"):
            puts += self.db.chunk_puts(entry["pk"], payload)
        return dead_id, puts

    def _attempt_put(self, job: Item, att_sets: Item) -> dict[str, Any]:
        """The Put storing the record of ``job``'s current attempt as it ends.

        A running attempt's record lives on the job item (``att``, ``wk``, ``sa``, written
        by the claim); it becomes its own item in the transaction that ends the attempt
        (fenced by the job item's condition). Unconditional: an attempt item written at
        claim by an earlier version holds the same start fields and is overwritten."""
        record = current_attempt(job)
        record.update({k: v for k, v in att_sets.items() if v is not None})
        return {"Put": {"TableName": self.db.name, "Item": encode_item(record)}}

    def _dead_after(
        self, job: Item, att_sets: Item, reason: str | None, error: ErrorInfo | None, now: int
    ) -> tuple[str, Actions]:
        """The dead-letter entry of ``job`` whose current attempt ends with ``att_sets``:
        every attempt record, the current one as it ends."""
        n = job["att"]
        prior = [a for a in self.db.attempts(self.keys.job_pk(job["id"])) if a["n"] != n]
        current = {**current_attempt(job), **att_sets}
        current = {k: v for k, v in current.items() if v is not None}
        atts = sorted([*prior, current], key=lambda a: a["n"])
        return self.dead_puts(job, reason or "", error, atts, now)
