"""DynamoDB items of the SQS backend <-> queue-core records. Pure: no requests, no clock.

Item attribute names are short because every byte of an item is paid for on every read
and write. This is the one legend of them (also in ``docs/backends/sqs.md``); the item
families and indexes are described in :mod:`backends.sqs.tables`.

Job item (``pk = P J#<id>``, ``sk = J``; ``P`` is the key prefix ``"<prefix>#"``):

========  ===================================================================
name      meaning
========  ===================================================================
``id``    job id
``task``  task name
``q``     queue name
``pl``    payload (bytes), inline when at most 256 KB
``plc``   number of payload chunk items (``sk = P#0000`` …) when larger
``pr``    priority (higher runs first)
``enq``   enqueued at (epoch ms)
``seq``   enqueue sequence (FIFO tie-break within a priority and ready time)
``ma``    max attempts
``ld``    lost delay: retry delay when the *next* reap requeues the job (moves on
          with each retry that sets ``lost_delay_ms``)
``ld1``   the lost delay given at enqueue (what a dead-letter entry carries)
``to``    attempt timeout (ms) or absent
``hbms``  heartbeat bound (ms), ``0`` = heartbeats not required
``s2s``   schedule-to-start bound (ms) or absent
``ck``    concurrency key; ``cl`` its limit; ``cs`` ``True`` = ``skip`` behaviour
``cb``    SPEC §13 concurrency behaviour (``round_robin`` …); ``cg`` its group
``opt``   core-owned options (JSON text)
``rof``   replay of: the dead-letter id this job replays
``xid``   flows: the execution this job is a step of; ``xs`` its step id
``dbk``   debounce key; ``dbm`` debounce ms; ``dbx`` debounce max ms
``fdl``   flows: the execution's deadline (epoch ms), set when the step is released
``st``    state (``queued``, ``running``, ``succeeded``, ``dead``, …)
``rsn``   job reason (``fatal``, ``retries_exhausted``, ``cancelled``, …)
``ra``    ready at (epoch ms)
``att``   attempts started so far
``tok``   lease token of the running attempt (fencing)
``wk``    worker id of the latest attempt
``sa``    started at (latest attempt); ``fa`` finished at
``le``    lease expires at; ``dl`` attempt deadline
``cxl``   cancel requested (``True``)
``res``   result (bytes; ``rsc`` chunk items when large, :mod:`backends.sqs.blobs`);
          ``err`` last error map (``ec``, ``et``, ``msg``, ``tb``)
``did``   dead-letter entry id once dead
``pg``    latest progress: ``f`` fraction (text), ``m`` message, ``at`` (epoch ms)
``po``    a reaped job's place in line while its backoff delays ``ra`` (``queued_fields``)
``ao``    outcome of the last attempt when it ended inline (a success without
          counter: no attempt item is written); ``ar`` its reason, ``am`` mode
``v``     version, incremented by every update (conditional writes compare it)
``ttl``   DynamoDB TTL (epoch seconds) of a finished job
========  ===================================================================

Index keys (sparse; present only while the job is in that index): ``rq``/``rk`` ready
queue and claim order, ``dp``/``dx`` due partition and time (``P P`` parked, ``P S``
schedule-to-start, ``P R`` running by ``reap_due(le, dl)``, ``P F`` finished), ``tp``/
``tx`` an earlier version's deadline, ``hp``/``hx`` heartbeat, ``ap`` every job; a queued
``round_robin`` job's ``ltp``/``lx`` = its key's turn partition and claim order
(:mod:`backends.sqs.round_robin`).

Attempt item (``sk = A#00001`` …): ``n`` number, ``wk``, ``sa``, ``fa``, ``oc`` outcome,
``rsn`` reason, ``ec``/``et``/``msg``/``tb`` error, ``mode``. Written when the attempt
ends (in the transaction that ends it); while it runs, its record is the job item's
``att``/``wk``/``sa`` (a claim is one write to the job item, not a transaction of two),
and a success without concurrency key keeps its end there too (``ao``): a plain job's
finish is then one conditional UpdateItem (a step job that runs again stores it first).

Dead-letter entry (``pk = P D#<id>``, ``sk = D``): ``id``, ``job`` (job id), ``task``,
``q``, ``pl``/``plc``, ``error`` (message), ``ec``, ``rsn``, ``atts`` (attempt items;
``atc`` chunks when large), ``dead_at``, ``rof``, ``spec`` (the job as enqueued: ``pr``,
``ma``, ``ld``, ``to``, ``hbms``, ``s2s``, ``ck``, ``cl``, ``cs``, ``opt``, ``rof``), index
keys ``lp``/``ltp``/``lx``.

Concurrency counter (``pk = P C#<key>``, ``sk = C``): ``run`` running, ``act`` queued +
running.

Flows (:mod:`backends.sqs.flow_items`): a step's job item is kept in its execution's ``JB#``
part (zlib JSON of 200 job items) from the start until it is released (no job item
before: ``get_job`` of a pending step is ``None``). Execution item ``pk = P X#<id>``,
``sk = X``: ``id``, ``fl`` flow, ``sh`` spec hash, ``st``, ``rsn``, ``fs`` failed step,
``mp`` max_parallel, ``to`` timeout, ``dl`` deadline, ``ca``/``sa``/``fa``, ``seq``,
``ck``/``cl``/``cb`` execution concurrency, ``in`` input, ``sp`` steps and dependencies
(JSON; a workflow's only), ``ss`` step cells (lines ``state|released|reason``), ``r``
claims (idx -> attempt), ``td`` job operations left (JSON; the three zlib'd from 1 KB), ``v``;
index keys ``ap`` = ``P X``, ``tp``/``tx`` = ``P XT``/deadline (running) or ``P XF``/finished_at,
``dp``/``dx`` = ``P XA`` while ``td`` is set. In the same partition: step-end events (``sk =
E#<idx>#<attempt>#a|q``: ``i``, ``n``, ``st``, ``rsn``, ``dp``/``dx`` = ``P XA``) and
succeeded steps' results (``sk = O#<idx>``: ``d``). Spec ``pk = P FS#<hash>``, ``sk =
FS``: ``body`` (zlib; a declared flow's steps are read from it). Execution concurrency
key ``pk = P XK#<key>``, ``sk = XK``: ``a`` active executions (id -> ``state|created_at``),
``cl``, ``cb``, ``v``, ``dp``/``dx`` = ``P XP`` while a promotion may be due.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from backends.sqs.blobs import chunk_count
from backends.sqs.salvage import salvaged_job
from queue_core.records.corrupt import problems
from queue_core.records.errors import StorageError
from queue_core.records.jobs import (
    AttemptRecord,
    DeadJob,
    ErrorInfo,
    JobRecord,
    JobState,
    NewJob,
    Outcome,
    dt_from_ms,
)
from queue_core.rules.leases import queued_expiry, reap_due

__all__ = [
    "Item",
    "Keys",
    "all_index_query",
    "attempt_record",
    "current_attempt",
    "dead_entry",
    "dead_job",
    "decode_item",
    "enc",
    "encode_item",
    "enqueued_spec",
    "error_map",
    "job_record",
    "new_item",
    "spec_from_dead",
    "vals",
    "with_current_attempt",
]

Item = dict[str, Any]
_PRIO_BIAS = 1 << 40
RUNNING_ONLY = ("rq", "rk", "ltp", "lx", "tp", "hp", "tok", "le")
"""Attributes a job loses when it stops running (index keys and lease)."""


# --------------------------------------------------------------------------- attribute values


def enc(v: Any) -> dict[str, Any]:
    """A Python value as a DynamoDB attribute value."""
    if v is None:
        return {"NULL": True}
    if isinstance(v, bool):
        return {"BOOL": v}
    if isinstance(v, int):
        return {"N": str(v)}
    if isinstance(v, str):
        return {"S": v}
    if isinstance(v, (bytes, bytearray)):
        return {"B": bytes(v)}
    if isinstance(v, dict):
        return {"M": {k: enc(x) for k, x in v.items()}}
    if isinstance(v, (list, tuple)):
        return {"L": [enc(x) for x in v]}
    raise TypeError(f"cannot store {type(v).__name__}")


def dec(a: dict[str, Any]) -> Any:
    """A DynamoDB attribute value as a Python value."""
    ((t, v),) = a.items()
    if t == "N":
        return int(v)
    if t in ("S", "BOOL"):
        return v
    if t == "B":
        return bytes(v)
    if t == "NULL":
        return None
    if t == "M":
        return {k: dec(x) for k, x in v.items()}
    if t == "L":
        return [dec(x) for x in v]
    raise StorageError(f"sqs backend: unexpected attribute type {t!r}")


def encode_item(item: Item) -> dict[str, Any]:
    """An item for DynamoDB (``None`` attributes are left out)."""
    return {k: enc(v) for k, v in item.items() if v is not None}


def decode_item(raw: dict[str, Any]) -> Item:
    return {k: dec(v) for k, v in raw.items()}


def vals(**values: Any) -> dict[str, Any]:
    """``ExpressionAttributeValues`` from keywords: ``vals(q="x")`` -> ``{":q": …}``."""
    return {f":{k}": enc(v) for k, v in values.items()}


def all_index_query(ap: str, **equal: str | None) -> dict[str, Any]:
    """``Query`` arguments for partition ``ap`` of the ``all`` index, filtered to the items
    whose attributes equal the keywords that are not ``None`` (``all_index_query(p,
    st="dead", q=None)``: every item of ``p`` in state ``dead``)."""
    values = vals(ap=ap)
    filters: list[str] = []
    for name, value in equal.items():
        if value is not None:
            filters.append(f"{name} = :{name}")
            values[f":{name}"] = enc(value)
    kw: dict[str, Any] = {
        "IndexName": "all",
        "KeyConditionExpression": "ap = :ap",
        "ExpressionAttributeValues": values,
    }
    if filters:
        kw["FilterExpression"] = " AND ".join(filters)
    return kw


# --------------------------------------------------------------------------- keys


class Keys:
    """Primary keys and index partitions of one prefix (``"<prefix>#"``)."""

    def __init__(self, prefix: str) -> None:
        self.p = f"{prefix}#"

    def job_pk(self, job_id: str) -> str:
        return f"{self.p}J#{job_id}"

    def job(self, job_id: str) -> dict[str, Any]:
        return {"pk": {"S": self.job_pk(job_id)}, "sk": {"S": "J"}}

    def attempt(self, job_id: str, n: int) -> dict[str, Any]:
        return {"pk": {"S": self.job_pk(job_id)}, "sk": {"S": f"A#{n:05d}"}}

    def dead(self, dead_id: str) -> dict[str, Any]:
        return {"pk": {"S": f"{self.p}D#{dead_id}"}, "sk": {"S": "D"}}

    def counter(self, key: str) -> dict[str, Any]:
        return {"pk": {"S": f"{self.p}C#{key}"}, "sk": {"S": "C"}}

    def ready(self, queue: str) -> str:
        return f"{self.p}Q#{queue}"

    def turns(self, queue: str, group: str | None, key: str) -> str:
        """The ``deadtask`` index partition of a ``round_robin`` key's queued jobs."""
        return f"{self.p}RK#" + json.dumps([queue, group, key], separators=(",", ":"))

    def dead_partition(self, task_name: str | None) -> tuple[str, str, str]:
        """(index, key attribute, partition) of the dead letters, of one task or all."""
        if task_name is None:
            return "dead", "lp", f"{self.p}DL"
        return "deadtask", "ltp", f"{self.p}DT#{task_name}"

    # partitions of the ``due`` index
    @property
    def parked(self) -> str:
        return f"{self.p}P"

    @property
    def s2s(self) -> str:
        return f"{self.p}S"

    @property
    def running(self) -> str:
        return f"{self.p}R"

    @property
    def finished(self) -> str:
        return f"{self.p}F"

    def queued_fields(
        self, item: Item, ready_at: int, now: int, place_at: int | None = None
    ) -> tuple[Item, list[str]]:
        """SET values and REMOVE names placing a queued job in the right indexes.
        ``place_at``: a reap's place in line (``reap_place_at``), kept in ``po`` and used in
        the claim order ``rk``; ``None`` removes ``po`` (the place is the ready time)."""
        sets: Item = {"st": JobState.QUEUED.value, "ra": ready_at}
        removes = ["tp", "hp", "tok", "le"]
        place = ready_at if place_at is None else min(place_at, ready_at)

        def order() -> str:  # claim order (only read when used: a corrupt item's is wrong)
            return f"{_PRIO_BIAS - item['pr']:014d}#{place:016d}#{item['seq']:020d}"

        if place_at is None:
            removes.append("po")
        else:
            sets["po"] = place_at
        if item.get("cb") == "round_robin" and item.get("ck") is not None:
            sets["ltp"] = self.turns(item["q"], item.get("cg") or item.get("task"), item["ck"])
            sets["lx"] = order()  # ready or parked: a key's turn reads both
        if ready_at <= now:
            sets["rq"] = self.ready(item["q"])
            sets["rk"] = order()
            expiry = queued_expiry(ready_at, item.get("s2s"))
            if expiry is not None:
                sets["dp"], sets["dx"] = self.s2s, expiry
            else:
                removes += ["dp", "dx"]
        else:
            sets["dp"], sets["dx"] = self.parked, ready_at
            removes += ["rq", "rk"]
        return sets, removes

    def finished_fields(self, state: JobState, now: int, ttl: int) -> tuple[Item, list[str]]:
        """SET values and REMOVE names of a job that ends in ``state`` at ``now``."""
        sets: Item = {"st": state.value, "fa": now, "dp": self.finished, "dx": now, "ttl": ttl}
        return sets, list(RUNNING_ONLY)

    def running_fields(
        self, item: Item, worker_id: str, token: str, now: int, lease_ms: int
    ) -> Item:
        """SET values (``None`` = REMOVE) that start the next attempt of ``item``."""
        sets: Item = {
            "st": JobState.RUNNING.value,
            "att": item["att"] + 1,
            "tok": token,
            "wk": worker_id,
            "sa": now,
            "le": now + lease_ms,
            "dp": self.running,
            "dx": now + lease_ms,
            "rsn": None,
            "dl": None,
        }
        # a mistyped value is left to the claim's corrupt check (split_claimed), not added
        to, hb = item.get("to"), item.get("hbms")
        if isinstance(to, int):  # one index entry serves the lease and the deadline
            sets["dl"] = now + to
            sets["dx"] = reap_due(now + lease_ms, now + to)
        if isinstance(hb, int) and hb:
            sets["hp"], sets["hx"] = f"{self.p}H", now + hb
        return sets


# --------------------------------------------------------------------------- specs


def new_item(keys: Keys, spec: NewJob, now: int, seq: int) -> Item:
    """The job item for ``spec``, enqueued at ``now`` with sequence ``seq``."""
    ready_at = (spec.run_at if spec.run_at is not None else now) + spec.delay_ms
    chunks = chunk_count(spec.payload)
    item: Item = {
        "pk": keys.job_pk(spec.id),
        "sk": "J",
        "id": spec.id,
        "task": spec.task_name,
        "q": spec.queue,
        "pl": None if chunks else spec.payload,
        "plc": chunks,
        "enq": now,
        "seq": seq,
        **_spec_attrs(spec),
        "ld1": spec.lost_delay_ms,
        "fdl": spec.flow_deadline_at,
        "att": 0,
        "v": 1,
        "ap": keys.p,
    }
    sets, _ = keys.queued_fields(item, ready_at, now)
    item.update(sets)
    return item


def _spec_from_attrs(attrs: Item, names: Item, job_id: str, payload: bytes) -> NewJob:
    """A job spec from stored spec attributes (a job item or a dead entry's ``spec`` map);
    ``names`` holds ``task``, ``q`` and ``rof``."""
    return NewJob(
        id=job_id,
        task_name=names.get("task") or "",  # absent: a corrupt item, dead-lettered
        queue=names["q"],
        payload=payload,
        priority=attrs.get("pr", 0),
        max_attempts=attrs.get("ma", 1),
        lost_delay_ms=attrs.get("ld", 0),
        timeout_ms=attrs.get("to"),
        heartbeat_ms=attrs.get("hbms") or None,
        schedule_to_start_ms=attrs.get("s2s"),
        concurrency_key=attrs.get("ck"),
        concurrency_limit=attrs.get("cl"),
        concurrency_skip=bool(attrs.get("cs", False)),
        concurrency_behavior=attrs.get("cb"),
        concurrency_group=attrs.get("cg"),
        options=attrs.get("opt"),
        replay_of=names.get("rof"),
        rate_key=attrs.get("rtk"),
        rate_limit=attrs.get("rtl"),
        rate_window_ms=attrs.get("rtw"),
        execution_id=attrs.get("xid"),
        step_id=attrs.get("xs"),
        debounce_key=attrs.get("dbk"),
        debounce_ms=attrs.get("dbm"),
        debounce_max_ms=attrs.get("dbx"),
    )


def enqueued_spec(job: Item, payload: bytes) -> NewJob:
    """The job as it was enqueued: its spec with the attempt-1 lost delay (``ld1``; items
    written before ``ld1`` existed fall back to the current ``ld``)."""
    attrs = {**job, "ld": job.get("ld1", job.get("ld", 0))}
    return _spec_from_attrs(attrs, job, job["id"], payload)


def spec_from_dead(d: Item, payload: bytes) -> NewJob:
    """The job spec a dead-letter entry carries (what ``retry_dead`` replays)."""
    return _spec_from_attrs(d.get("spec", {}), d, d["job"], payload)


def _spec_attrs(spec: NewJob) -> Item:
    """The stored spec attributes of ``spec`` (a job item's, a dead entry's ``spec``)."""
    attrs: Item = {
        "pr": spec.priority,
        "ma": spec.max_attempts,
        "ld": spec.lost_delay_ms,
        "to": spec.timeout_ms,
        "hbms": spec.heartbeat_ms or 0,
        "s2s": spec.schedule_to_start_ms,
        "ck": spec.concurrency_key,
        "cl": spec.concurrency_limit,
        "cs": spec.concurrency_skip,
        "cb": spec.concurrency_behavior,
        "cg": spec.concurrency_group,
        "opt": spec.options,
        "rof": spec.replay_of,
        "rtk": spec.rate_key,  # rate limits (backends/sqs/limits.py)
        "rtl": spec.rate_limit,
        "rtw": spec.rate_window_ms,
        "xid": spec.execution_id,
        "xs": spec.step_id,
        "dbk": spec.debounce_key,  # debounce (backends/sqs/debounce.py)
        "dbm": spec.debounce_ms,
        "dbx": spec.debounce_max_ms,
    }
    return {k: v for k, v in attrs.items() if v is not None}


def error_map(error: ErrorInfo) -> Item:
    """The ``err`` map of a job item (also the error fields of an attempt item)."""
    err = {
        "ec": error.error_class,
        "et": error.error_type,
        "msg": error.message,
        "tb": error.traceback,
    }
    return {k: v for k, v in err.items() if v is not None}


def dead_entry(
    keys: Keys,
    job: Item,
    payload: bytes,
    *,
    dead_id: str,
    reason: str,
    error: ErrorInfo | None,
    attempts: list[Item],
    now: int,
) -> Item:
    """The dead-letter entry of ``job`` (its payload stored as ``chunk_count`` says)."""
    chunks = chunk_count(payload)
    task = job.get("task") if isinstance(job.get("task"), str) else ""  # "": a corrupt item
    return {
        "pk": f"{keys.p}D#{dead_id}",
        "sk": "D",
        "id": dead_id,
        "job": job["id"],
        "task": task,
        "q": job["q"],
        "pl": None if chunks else payload,
        "plc": chunks,
        "error": error.message if error else None,
        "ec": error.error_class if error else None,
        "rsn": reason,
        "atts": [{k: v for k, v in a.items() if k not in ("pk", "sk", "v")} for a in attempts],
        "dead_at": now,
        "rof": job.get("rof"),
        "spec": _spec_attrs(enqueued_spec(job, payload)),
        "lp": f"{keys.p}DL",
        "ltp": f"{keys.p}DT#{task}",
        "lx": f"{now:016d}#{dead_id}",
    }


# --------------------------------------------------------------------------- records


def current_attempt(job: Item) -> Item:
    """The attempt item of ``job``'s current attempt as its job item holds it (the claim
    writes ``att``, ``wk`` and ``sa`` there; the attempt item is stored when it ends,
    except a plain success, whose end stays on the job item: ``ao``/``ar``/``am``)."""
    n = int(job["att"])
    record: Item = {"pk": job["pk"], "sk": f"A#{n:05d}", "n": n}
    record.update({k: job[k] for k in ("wk", "sa") if job.get(k) is not None})
    if job.get("ao") is not None:  # ended inline (a plain success): see ``ao``
        ended = {"oc": job["ao"], "rsn": job.get("ar"), "fa": job.get("fa")}
        record.update({k: v for k, v in {**ended, "mode": job.get("am")}.items() if v})
    return record


def with_current_attempt(items: Sequence[Item]) -> list[Item]:
    """The attempt items among ``items`` (a job's partition: attempt items and its job
    item ``sk = J``) by number, with the current attempt taken from the job item when
    it has no attempt item yet (it is running)."""
    by_n = {a["n"]: a for a in items if str(a["sk"]).startswith("A#")}
    job = next((it for it in items if it["sk"] == "J"), None)
    if job is not None and job.get("att", 0) > 0:
        n = job["att"]
        if n not in by_n:
            by_n[n] = current_attempt(job)
        elif job.get("ao") is not None:  # an item written at claim by an earlier version
            by_n[n] = {**by_n[n], **current_attempt(job)}
    return [by_n[n] for n in sorted(by_n)]


def attempt_record(a: Item) -> AttemptRecord:
    oc = a.get("oc")
    return AttemptRecord(
        number=a["n"],
        outcome=Outcome(oc) if oc else None,
        reason=a.get("rsn"),
        error_class=a.get("ec"),
        error_type=a.get("et"),
        message=a.get("msg"),
        traceback=a.get("tb"),
        worker_id=a.get("wk"),
        started_at=dt_from_ms(a.get("sa")),
        finished_at=dt_from_ms(a.get("fa")),
        mode=a.get("mode"),
    )


def job_record(item: Item, payload: bytes) -> JobRecord:
    """The record of job item ``item``; one with a missing attribute or one of the wrong
    type is salvaged (:mod:`queue_core.records.corrupt`: reason ``corrupt_record``)."""
    try:
        record = _job_record(item, payload)
    except (KeyError, ValueError, TypeError, AttributeError):
        record = None
    if record is not None and not problems(record):
        return record
    return salvaged_job(item, payload)


def _job_record(item: Item, payload: bytes) -> JobRecord:
    err = item.get("err")
    return JobRecord(
        id=item["id"],
        task_name=item["task"],
        queue=item["q"],
        state=JobState(item["st"]),
        reason=item.get("rsn"),
        payload=payload,
        result=item.get("res"),
        error=ErrorInfo(
            error_class=err.get("ec", ""),
            error_type=err.get("et", ""),
            message=err.get("msg", ""),
            traceback=err.get("tb"),
        )
        if err
        else None,
        attempts=item.get("att", 0),
        max_attempts=item["ma"],
        priority=item["pr"],
        enqueued_at=item["enq"],
        run_at=item["ra"],
        started_at=item.get("sa"),
        finished_at=item.get("fa"),
        options=item.get("opt"),
        replay_of=item.get("rof"),
        dead_id=item.get("did"),
        cancel_requested=bool(item.get("cxl", False)),
        execution_id=item.get("xid"),
        step_id=item.get("xs"),
    )


def dead_job(d: Item, payload: bytes) -> DeadJob:
    return DeadJob.build(
        id=d["id"],
        job_id=d["job"],
        task_name=d["task"],
        queue=d["q"],
        payload=payload,
        error=d.get("error"),
        error_class=d.get("ec"),
        reason=d["rsn"],
        attempts=[attempt_record(a) for a in d.get("atts", [])],
        dead_at_ms=d["dead_at"],
        replay_of=d.get("rof"),
    )
