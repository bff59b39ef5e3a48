"""SQS + DynamoDB storage: DynamoDB is the system of record, SQS the delivery channel.

Every decision (readiness, leases, backoff, schedule-to-start, fencing, concurrency) is
judged from DynamoDB attributes against ``now``; SQS never gates correctness, so the
contract suite's explicit clock works and a lost or duplicated message costs at most a
wake-up. See ``docs/backends/sqs.md`` for the design and the request counts.

URL form::

    sqs://?region=us-east-1&prefix=qc&table=qc-jobs&endpoint_url=http://127.0.0.1:5000
          &retention=7d&visibility=30&hop=900

Credentials come from the usual AWS chain (environment, shared config, instance role);
the URL carries none, and none appear in reprs, logs or errors.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from urllib.parse import parse_qs, urlsplit

from botocore.exceptions import ClientError
from typing_extensions import Self

from backends.sqs.errors import error_code, translate
from backends.sqs.tables import ensure_table
from queue_core.durations import parse_duration, to_ms
from queue_core.errors import ConfigError, LeaseLost, NotFound, StorageError
from queue_core.model import (
    AttemptEnd,
    AttemptRecord,
    ClaimedJob,
    DeadJob,
    ErrorInfo,
    JobRecord,
    JobState,
    LeaseRef,
    NewJob,
    Outcome,
    QueueStats,
    ReapedJob,
    Reason,
    RenewResult,
    dt_from_ms,
)
from queue_core.policy.outcomes import (
    DEFAULT_RETENTION_MS,
    end_state,
    parse_retention,
    reap_verdict,
    replay_job,
)
from queue_core.storage import Storage

__all__ = ["SQSStorage"]

_MAX_DELAY_S = 900  # SQS DelaySeconds ceiling
_MAX_VISIBILITY_S = 43_200
_TX_MAX = 100  # items per TransactWriteItems
_PRIO_BIAS = 1 << 40
_INLINE = 256 * 1024  # payloads above this live in chunk items (400 KB item limit)
_CHUNK = 300 * 1024
_FINISHED = frozenset(s for s in JobState if s.finished)

Item = dict[str, Any]


# --------------------------------------------------------------------------- attribute codec


def _enc(v: Any) -> dict[str, Any]:
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
        return {"M": {k: _enc(x) for k, x in v.items()}}
    if isinstance(v, (list, tuple)):
        return {"L": [_enc(x) for x in v]}
    raise TypeError(f"cannot store {type(v).__name__}")


def _dec(a: dict[str, Any]) -> Any:
    (t, v), = a.items()
    if t == "N":
        return int(v)
    if t in ("S", "BOOL"):
        return v
    if t == "B":
        return bytes(v)
    if t == "NULL":
        return None
    if t == "M":
        return {k: _dec(x) for k, x in v.items()}
    if t == "L":
        return [_dec(x) for x in v]
    raise StorageError(f"sqs backend: unexpected attribute type {t!r}")


def _encode_item(item: Item) -> dict[str, Any]:
    return {k: _enc(v) for k, v in item.items() if v is not None}


def _decode_item(raw: dict[str, Any]) -> Item:
    return {k: _dec(v) for k, v in raw.items()}


def _vals(**values: Any) -> dict[str, Any]:
    return {f":{k}": _enc(v) for k, v in values.items()}


# --------------------------------------------------------------------------- URL helpers

def _parse_seconds(text: str, field: str) -> int:
    """A URL duration option (``visibility``, ``hop``) in whole seconds (at least 1)."""
    return max(1, to_ms(parse_duration(text, field=field)) // 1000)


def _sqs_name(prefix: str, queue: str) -> str:
    raw = f"{prefix}-{queue}"
    clean = re.sub(r"[^A-Za-z0-9_-]", "_", raw)
    if clean != raw or len(clean) > 80:
        digest = hashlib.sha1(raw.encode()).hexdigest()[:10]
        clean = f"{clean[:69]}-{digest}"
    return clean


def _system_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class _Seq:
    """Process-wide strictly increasing enqueue sequence (microseconds of wall time)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0

    def take(self, n: int) -> list[int]:
        with self._lock:
            base = max(self._last + 1, time.time_ns() // 1000)
            self._last = base + n - 1
            return list(range(base, base + n))


_SEQ = _Seq()
_TABLES_READY: set[tuple[str | None, str, str]] = set()
_TABLES_LOCK = threading.Lock()


class _TxCancelled(Exception):
    """A transaction was cancelled; ``codes`` has one cancellation code per item."""

    def __init__(self, codes: list[str]) -> None:
        super().__init__(codes)
        self.codes = codes


# --------------------------------------------------------------------------- the storage


class SQSStorage(Storage):
    """Job storage on DynamoDB (state) and SQS (delivery hints and wake-ups).

    Args:
        region: AWS region name.
        table: DynamoDB table name (created with its indexes when missing).
        prefix: key prefix inside the table and name prefix of the SQS queues, so that
            several independent queue-core deployments (or tests) can share one table.
        endpoint_url: an endpoint for local stacks (moto, LocalStack); ``None`` for AWS.
        retention_ms: how long finished jobs are kept (``prune`` and the TTL attribute).
        visibility_s: the SQS queues' default visibility timeout (seconds).
        hop_s: the longest SQS delay used for one hop (<= 900, SQS's ceiling).
        create: create the table and queues when missing.
        clock: epoch-ms clock used when ``now`` is ``None`` (local clock by default).
        session: a ``boto3.Session`` to use instead of the default credential chain.
    """

    def __init__(
        self,
        *,
        region: str = "us-east-1",
        table: str = "queue-core",
        prefix: str = "qc",
        endpoint_url: str | None = None,
        retention_ms: int = DEFAULT_RETENTION_MS,
        visibility_s: int = 30,
        hop_s: int = _MAX_DELAY_S,
        create: bool = True,
        clock: Callable[[], int] | None = None,
        session: Any = None,
    ) -> None:
        import boto3
        from botocore.config import Config

        if retention_ms < 0:
            raise ConfigError(
                f"retention_ms must be >= 0 (0 keeps no finished job), got {retention_ms!r}",
                code="invalid_option",
                field="retention_ms",
                value=retention_ms,
            )
        if not 0 <= hop_s <= _MAX_DELAY_S:
            raise ConfigError(
                f"hop must be within 0..{_MAX_DELAY_S} s, got {hop_s!r}",
                code="invalid_option",
                field="hop",
                value=hop_s,
            )
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,40}", prefix):
            raise ConfigError(
                f"prefix must be 1-40 of [A-Za-z0-9_-], got {prefix!r}",
                code="invalid_option",
                field="prefix",
                value=prefix,
            )
        self.region = region
        self.table = table
        self.prefix = prefix
        self.endpoint_url = endpoint_url
        self.retention_ms = retention_ms
        self.visibility_s = visibility_s
        self.hop_s = hop_s
        self._create = create
        self._clock: Callable[[], int] = clock or _system_clock_ms
        self._p = f"{prefix}#"
        sess = session or boto3.session.Session()
        cfg = Config(retries={"max_attempts": 4, "mode": "standard"}, max_pool_connections=32)
        with translate("creating AWS clients"):
            self.ddb: Any = sess.client(
                "dynamodb", region_name=region, endpoint_url=endpoint_url, config=cfg
            )
            self.sqs: Any = sess.client(
                "sqs", region_name=region, endpoint_url=endpoint_url, config=cfg
            )
        self._lock = threading.Lock()
        self._queue_urls: dict[str, str] = {}
        # SQS receipts this instance holds: job id -> (queue url, receipt handle)
        self._prefetched: dict[str, tuple[str, str]] = {}
        self._running: dict[str, tuple[str, str]] = {}
        # claimed job items by (job id, attempt, token): spares a read at finish
        self._claimed: dict[tuple[str, int, str], Item] = {}
        self._closed = False
        if create:
            self.migrate()

    @classmethod
    def from_url(cls, url: str) -> Self:
        """Build from ``sqs://?region=…&prefix=…&table=…&endpoint_url=…&retention=…``.

        Recognised query options: ``region`` (default ``us-east-1``), ``table``
        (``queue-core``), ``prefix`` (``qc``), ``endpoint_url``, ``retention`` (a
        duration, default ``7d``), ``visibility`` (seconds, default 30), ``hop``
        (seconds, <= 900), ``create`` (``true``/``false``). Credentials are never taken
        from the URL: the usual AWS chain supplies them.
        """
        parts = urlsplit(url)
        if parts.scheme.lower() != "sqs":
            raise ConfigError(
                f"not an sqs:// URL: {parts.scheme!r}",
                code="invalid_url",
                field="url",
                value=parts.scheme,
            )
        if parts.username or parts.password:
            raise ConfigError(
                "sqs:// URLs take no credentials; use the AWS credential chain "
                "(environment, shared config, instance role)",
                code="invalid_url",
                field="url",
                value="sqs://***",
            )
        q = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        known = {"region", "table", "prefix", "endpoint_url", "retention", "visibility", "hop",
                 "create"}
        unknown = sorted(set(q) - known)
        if unknown:
            raise ConfigError(
                f"unknown sqs:// option(s) {', '.join(unknown)}; supported: "
                f"{', '.join(sorted(known))}",
                code="invalid_option",
                field="url",
                value=unknown[0],
            )
        kw: dict[str, Any] = {}
        for name in ("region", "table", "prefix", "endpoint_url"):
            if name in q:
                kw[name] = q[name]
        if "retention" in q:
            kw["retention_ms"] = parse_retention(q["retention"])
        if "visibility" in q:
            kw["visibility_s"] = _parse_seconds(q["visibility"], "visibility")
        if "hop" in q:
            kw["hop_s"] = _parse_seconds(q["hop"], "hop")
        if "create" in q:
            kw["create"] = q["create"].lower() not in ("0", "false", "no")
        return cls(**kw)

    def __repr__(self) -> str:
        return (
            f"SQSStorage(region={self.region!r}, table={self.table!r}, "
            f"prefix={self.prefix!r})"
        )

    def migrate(self) -> None:
        """Create the table (indexes, TTL) when missing. Idempotent; safe concurrently."""
        key = (self.endpoint_url, self.region, self.table)
        with _TABLES_LOCK:
            if key in _TABLES_READY:
                return
            ensure_table(self.ddb, self.table)
            _TABLES_READY.add(key)

    # ------------------------------------------------------------------ small helpers

    def _now(self, now: int | None) -> int:
        return self._clock() if now is None else now

    def _jk(self, job_id: str) -> dict[str, Any]:
        return {"pk": {"S": f"{self._p}J#{job_id}"}, "sk": {"S": "J"}}

    def _ak(self, job_id: str, n: int) -> dict[str, Any]:
        return {"pk": {"S": f"{self._p}J#{job_id}"}, "sk": {"S": f"A#{n:05d}"}}

    def _dk(self, dead_id: str) -> dict[str, Any]:
        return {"pk": {"S": f"{self._p}D#{dead_id}"}, "sk": {"S": "D"}}

    def _ck(self, key: str) -> dict[str, Any]:
        return {"pk": {"S": f"{self._p}C#{key}"}, "sk": {"S": "C"}}

    def _rk(self, priority: int, ready_at: int, seq: int) -> str:
        return f"{_PRIO_BIAS - priority:014d}#{ready_at:016d}#{seq:020d}"

    def _ttl(self, finished_at: int) -> int:
        # never earlier than retention after the real write time, whatever `now` said
        return (max(finished_at, self._clock()) + self.retention_ms) // 1000 + 3600

    def _queued_fields(self, item: Item, ready_at: int, now: int) -> tuple[Item, list[str]]:
        """SET values and REMOVE names placing a queued job in the right indexes."""
        sets: Item = {"st": JobState.QUEUED.value, "ra": ready_at}
        removes = ["tp", "hp", "tok", "le"]
        if ready_at <= now:
            sets["rq"] = f"{self._p}Q#{item['q']}"
            sets["rk"] = self._rk(item["pr"], ready_at, item["seq"])
            if item.get("s2s") is not None:
                sets["dp"], sets["dx"] = f"{self._p}S", ready_at + item["s2s"]
            else:
                removes += ["dp", "dx"]
        else:
            sets["dp"], sets["dx"] = f"{self._p}P", ready_at
            removes += ["rq", "rk"]
        return sets, removes

    def _finished_fields(self, state: JobState, now: int) -> tuple[Item, list[str]]:
        sets: Item = {
            "st": state.value,
            "fa": now,
            "dp": f"{self._p}F",
            "dx": now,
            "ttl": self._ttl(now),
        }
        return sets, ["rq", "rk", "tp", "hp", "tok", "le"]

    @staticmethod
    def _update(
        key: dict[str, Any],
        table: str,
        sets: Item,
        removes: Iterable[str] = (),
        cond: str | None = None,
        cond_values: Item | None = None,
        add: Item | None = None,
    ) -> dict[str, Any]:
        names: dict[str, str] = {}
        values: dict[str, Any] = {}
        parts: list[str] = []
        set_exprs = []
        for i, (k, v) in enumerate(sets.items()):
            names[f"#s{i}"] = k
            if v is None:
                removes = [*removes, k]
                del names[f"#s{i}"]
                continue
            values[f":s{i}"] = _enc(v)
            set_exprs.append(f"#s{i} = :s{i}")
        set_exprs.append("#v = if_not_exists(#v, :zero) + :one")
        names["#v"] = "v"
        values[":zero"] = {"N": "0"}
        values[":one"] = {"N": "1"}
        parts.append("SET " + ", ".join(set_exprs))
        rem = [r for r in dict.fromkeys(removes) if r not in sets or sets[r] is None]
        if rem:
            for i, r in enumerate(rem):
                names[f"#r{i}"] = r
            parts.append("REMOVE " + ", ".join(f"#r{i}" for i in range(len(rem))))
        if add:
            adds = []
            for i, (k, v) in enumerate(add.items()):
                names[f"#a{i}"] = k
                values[f":a{i}"] = _enc(v)
                adds.append(f"#a{i} :a{i}")
            parts.append("ADD " + ", ".join(adds))
        op: dict[str, Any] = {
            "TableName": table,
            "Key": key,
            "UpdateExpression": " ".join(parts),
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }
        if cond:
            op["ConditionExpression"] = cond
            values.update({f":{k}": _enc(v) for k, v in (cond_values or {}).items()})
        return op

    def _counter(
        self, key: str, *, run: int = 0, act: int = 0, limit_on: str | None = None,
        limit: int | None = None,
    ) -> dict[str, Any]:
        """An Update on the counter item of ``key`` (optionally guarded by a limit)."""
        add: Item = {}
        if run:
            add["run"] = run
        if act:
            add["act"] = act
        names = {f"#{k}": k for k in add}
        values = {f":{k}": _enc(v) for k, v in add.items()}
        op: dict[str, Any] = {
            "TableName": self.table,
            "Key": self._ck(key),
            "UpdateExpression": "ADD " + ", ".join(f"#{k} :{k}" for k in add),
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }
        if limit_on is not None and limit is not None:
            names[f"#{limit_on}"] = limit_on
            values[":lim"] = {"N": str(limit)}
            op["ConditionExpression"] = f"attribute_not_exists(#{limit_on}) OR #{limit_on} < :lim"
        return op

    def _transact(self, actions: list[dict[str, Any]]) -> None:
        """TransactWriteItems; raises :class:`_TxCancelled` with per-item codes."""
        try:
            self.ddb.transact_write_items(TransactItems=actions)
        except ClientError as exc:
            if error_code(exc) != "TransactionCanceledException":
                raise
            reasons = exc.response.get("CancellationReasons") or []
            codes = [str(r.get("Code", "None")) for r in reasons]
            if not codes:
                codes = _codes_from_message(str(exc), len(actions))
            raise _TxCancelled(codes) from exc

    def _query(self, **kw: Any) -> list[Item]:
        out: list[Item] = []
        limit = kw.get("Limit")
        while True:
            resp = self.ddb.query(TableName=self.table, **kw)
            out.extend(_decode_item(r) for r in resp.get("Items", []))
            lek = resp.get("LastEvaluatedKey")
            if not lek or (limit is not None and len(out) >= limit):
                return out
            kw["ExclusiveStartKey"] = lek

    def _count(self, **kw: Any) -> int:
        n = 0
        while True:
            resp = self.ddb.query(TableName=self.table, Select="COUNT", **kw)
            n += int(resp.get("Count", 0))
            lek = resp.get("LastEvaluatedKey")
            if not lek:
                return n
            kw["ExclusiveStartKey"] = lek

    def _get(self, key: dict[str, Any]) -> Item | None:
        resp = self.ddb.get_item(TableName=self.table, Key=key, ConsistentRead=True)
        raw = resp.get("Item")
        return _decode_item(raw) if raw else None

    def _batch_get(self, job_ids: Sequence[str]) -> dict[str, Item]:
        found: dict[str, Item] = {}
        ids = list(dict.fromkeys(job_ids))
        for i in range(0, len(ids), 100):
            keys: list[dict[str, Any]] = [self._jk(j) for j in ids[i : i + 100]]
            while keys:
                resp = self.ddb.batch_get_item(
                    RequestItems={self.table: {"Keys": keys, "ConsistentRead": True}}
                )
                for raw in resp.get("Responses", {}).get(self.table, []):
                    item = _decode_item(raw)
                    found[item["id"]] = item
                keys = resp.get("UnprocessedKeys", {}).get(self.table, {}).get("Keys", [])
        return found

    def _attempt_items(self, job_id: str) -> list[Item]:
        return self._query(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :a)",
            ExpressionAttributeValues=_vals(pk=f"{self._p}J#{job_id}", a="A#"),
            ConsistentRead=True,
        )

    def _chunk_puts(self, pk: str, payload: bytes) -> list[dict[str, Any]]:
        """Put actions for the chunk items of a payload too large to sit inline."""
        return [
            {"Put": {"TableName": self.table, "Item": _encode_item(
                {"pk": pk, "sk": f"P#{i:04d}", "d": payload[off : off + _CHUNK]}
            )}}
            for i, off in enumerate(range(0, len(payload), _CHUNK))
        ]

    def _payload(self, item: Item) -> bytes:
        """An item's payload: inline, or joined from its chunk items."""
        if not item.get("plc"):
            return bytes(item.get("pl", b""))
        parts = self._query(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :c)",
            ExpressionAttributeValues=_vals(pk=item["pk"], c="P#"),
            ConsistentRead=True,
        )
        return b"".join(c["d"] for c in sorted(parts, key=lambda c: c["sk"]))

    # ------------------------------------------------------------------ records

    @staticmethod
    def _attempt_record(a: Item) -> AttemptRecord:
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

    def _job_record(self, item: Item) -> JobRecord:
        err = item.get("err")
        return JobRecord(
            id=item["id"],
            task_name=item["task"],
            queue=item["q"],
            state=JobState(item["st"]),
            reason=item.get("rsn"),
            payload=self._payload(item),
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
        )

    def _dead_job(self, d: Item) -> DeadJob:
        return DeadJob.build(
            id=d["id"],
            job_id=d["job"],
            task_name=d["task"],
            queue=d["q"],
            payload=self._payload(d),
            error=d.get("error"),
            error_class=d.get("ec"),
            reason=d["rsn"],
            attempts=[self._attempt_record(a) for a in d.get("atts", [])],
            dead_at_ms=d["dead_at"],
            replay_of=d.get("rof"),
        )

    def _dead_entry(
        self, job: Item, reason: str, error: ErrorInfo | None, attempts: list[Item], now: int
    ) -> tuple[str, list[dict[str, Any]]]:
        dead_id = uuid.uuid4().hex
        lx = f"{now:016d}#{dead_id}"
        payload = self._payload(job)
        chunked = len(payload) > _INLINE
        spec = _spec_attrs(_enqueued_spec(job, payload))
        entry: Item = {
            "pk": f"{self._p}D#{dead_id}",
            "sk": "D",
            "id": dead_id,
            "job": job["id"],
            "task": job["task"],
            "q": job["q"],
            "pl": None if chunked else payload,
            "plc": len(range(0, len(payload), _CHUNK)) if chunked else None,
            "error": error.message if error else None,
            "ec": error.error_class if error else None,
            "rsn": reason,
            "atts": [{k: v for k, v in a.items() if k not in ("pk", "sk", "v")} for a in attempts],
            "dead_at": now,
            "rof": job.get("rof"),
            "spec": spec,
            "lp": f"{self._p}DL",
            "ltp": f"{self._p}DT#{job['task']}",
            "lx": lx,
        }
        put = {
            "Put": {
                "TableName": self.table,
                "Item": _encode_item(entry),
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        }
        chunks = self._chunk_puts(entry["pk"], payload) if chunked else []
        return dead_id, [put, *chunks]

    # ------------------------------------------------------------------ enqueue

    def _new_item(self, spec: NewJob, t: int, seq: int) -> Item:
        ready_at = (spec.run_at if spec.run_at is not None else t) + spec.delay_ms
        item: Item = {
            "pk": f"{self._p}J#{spec.id}",
            "sk": "J",
            "id": spec.id,
            "task": spec.task_name,
            "q": spec.queue,
            "pl": spec.payload if len(spec.payload) <= _INLINE else None,
            "plc": len(range(0, len(spec.payload), _CHUNK))
            if len(spec.payload) > _INLINE
            else None,
            "pr": spec.priority,
            "enq": t,
            "seq": seq,
            "ma": spec.max_attempts,
            "ld": spec.lost_delay_ms,
            "ld1": spec.lost_delay_ms,
            "to": spec.timeout_ms,
            "hbms": spec.heartbeat_ms or 0,
            "s2s": spec.schedule_to_start_ms,
            "ck": spec.concurrency_key,
            "cl": spec.concurrency_limit,
            "cs": spec.concurrency_skip,
            "opt": spec.options,
            "rof": spec.replay_of,
            "att": 0,
            "v": 1,
            "ap": self._p,
        }
        sets, _ = self._queued_fields(item, ready_at, t)
        item.update(sets)
        return item

    def _put(self, item: Item) -> dict[str, Any]:
        return {
            "Put": {
                "TableName": self.table,
                "Item": _encode_item(item),
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        }

    def enqueue(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[JobState]:
        """See :meth:`queue_core.storage.Storage.enqueue`.

        Jobs without a ``skip`` concurrency limit go in one ``TransactWriteItems`` per
        100 items (all or nothing: a duplicate id stores none of that chunk); each
        ``skip`` job is its own transaction with a guarded counter update, so earlier
        jobs of the batch count against later ones.
        """
        t = self._now(now)
        ids = [j.id for j in jobs]
        if len(set(ids)) != len(ids):
            raise StorageError("sqs backend: duplicate job id within one enqueue batch")
        seqs = _SEQ.take(len(jobs))
        items = [self._new_item(spec, t, seq) for spec, seq in zip(jobs, seqs, strict=False)]
        states = [JobState.QUEUED] * len(jobs)
        with translate("enqueue"):
            plain: list[dict[str, Any]] = []
            keyed: dict[str, int] = {}
            for spec, item in zip(jobs, items, strict=True):
                if item.get("plc"):
                    big = [self._put(item), *self._chunk_puts(item["pk"], spec.payload)]
                    if spec.concurrency_key is not None and not spec.concurrency_skip:
                        big.append({"Update": self._counter(spec.concurrency_key, act=1)})
                    if spec.concurrency_key is None or not spec.concurrency_skip:
                        self._tx_or_duplicate(big)
                elif spec.concurrency_key is None:
                    plain.append(self._put(item))
                elif not spec.concurrency_skip:
                    plain.append(self._put(item))
                    keyed[spec.concurrency_key] = keyed.get(spec.concurrency_key, 0) + 1
            # counters of queue-behaviour keys ride in the same transaction
            plain += [{"Update": self._counter(k, act=n)} for k, n in keyed.items()]
            for i in range(0, len(plain), _TX_MAX):
                self._tx_or_duplicate(plain[i : i + _TX_MAX])
            for i, (spec, item) in enumerate(zip(jobs, items, strict=False)):
                if spec.concurrency_key is None or not spec.concurrency_skip:
                    continue
                counter = self._counter(
                    spec.concurrency_key, act=1, limit_on="act", limit=spec.concurrency_limit
                )
                chunks = self._chunk_puts(item["pk"], spec.payload) if item.get("plc") else []
                try:
                    self._transact([self._put(item), {"Update": counter}, *chunks])
                except _TxCancelled as exc:
                    if exc.codes and exc.codes[0] == "ConditionalCheckFailed":
                        raise StorageError(f"job id {spec.id!r} already exists") from None
                    if len(exc.codes) > 1 and exc.codes[1] == "ConditionalCheckFailed":
                        skipped = dict(item)
                        fs, rm = self._finished_fields(JobState.SKIPPED, t)
                        for r in rm + ["dp", "dx"]:
                            skipped.pop(r, None)
                        skipped.update(fs)
                        skipped["rsn"] = Reason.CONCURRENCY_LIMIT.value
                        try:
                            self._transact([self._put(skipped), *chunks])
                        except _TxCancelled:
                            raise StorageError(f"job id {spec.id!r} already exists") from None
                        states[i] = JobState.SKIPPED
                        items[i] = skipped
                        continue
                    raise StorageError("sqs backend: enqueue transaction conflicted") from None
            queued = [it for it, st in zip(items, states, strict=True) if st is JobState.QUEUED]
            self._hint(queued, t)
        return states

    def _tx_or_duplicate(self, actions: list[dict[str, Any]]) -> None:
        try:
            self._transact(actions)
        except _TxCancelled as exc:
            for action, code in zip(actions, exc.codes, strict=False):
                if code == "ConditionalCheckFailed" and "Put" in action:
                    job_id = _decode_item(action["Put"]["Item"])["id"]
                    raise StorageError(f"job id {job_id!r} already exists") from None
            raise StorageError("sqs backend: enqueue transaction conflicted") from None

    # ------------------------------------------------------------------ promotion

    def _promote(self, now: int, limit: int = 100) -> None:
        """Move parked jobs that are due by ``now`` into the ready index."""
        parked = self._query(
            IndexName="due",
            KeyConditionExpression="dp = :dp AND dx <= :now",
            ExpressionAttributeValues=_vals(dp=f"{self._p}P", now=now),
            Limit=limit,
        )
        for item in parked:
            sets, removes = self._queued_fields(item, item["ra"], now)
            op = self._update(
                self._jk(item["id"]), self.table, sets, removes,
                cond="st = :q AND v = :v", cond_values={"q": "queued", "v": item["v"]},
            )
            try:
                self.ddb.update_item(**op)
            except ClientError as exc:
                if error_code(exc) != "ConditionalCheckFailedException":
                    raise

    # ------------------------------------------------------------------ claim

    def claim(
        self,
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        lease_ms: int,
        *,
        now: int | None = None,
    ) -> list[ClaimedJob]:
        """See :meth:`queue_core.storage.Storage.claim`.

        One Query of the parked index (promotion), one Query of the ready index per
        queue, then one ``TransactWriteItems`` that starts every chosen job (conditional
        on its version) and writes its attempt record; a cancelled transaction is
        retried without the items that lost their race.
        """
        t = self._now(now)
        if limit <= 0 or not queues:
            return []
        with translate("claim"):
            self._promote(t)
            claimed: list[ClaimedJob] = []
            full: set[str] = set()
            tried: set[str] = set()
            for _round in range(6):  # re-query while races took our candidates
                lost = False
                cands: list[Item] = []
                for q in dict.fromkeys(queues):
                    cands += self._query(
                        IndexName="ready",
                        KeyConditionExpression="rq = :rq",
                        FilterExpression="ra <= :now AND (attribute_not_exists(dx) OR dx > :now)",
                        ExpressionAttributeValues=_vals(rq=f"{self._p}Q#{q}", now=t),
                        Limit=max(limit * 4, 20),
                    )
                cands = [it for it in cands if it["id"] not in tried]
                cands.sort(key=lambda it: it["rk"])
                tried.update(it["id"] for it in cands)
                conflicts = 0
                while cands and len(claimed) < limit:
                    batch: list[Item] = []
                    keys_in_batch: set[str] = set()
                    rest: list[Item] = []
                    for it in cands:
                        key = it.get("ck")
                        if key is not None and key in full and not it.get("cs"):
                            continue
                        if (
                            len(batch) < min(limit - len(claimed), _TX_MAX // 3)
                            and (key is None or key not in keys_in_batch)
                        ):
                            batch.append(it)
                            if key is not None:
                                keys_in_batch.add(key)
                        else:
                            rest.append(it)
                    if not batch:
                        break
                    actions: list[dict[str, Any]] = []
                    owners: list[int] = []
                    starts: list[tuple[Item, str, Item]] = []
                    for bi, it in enumerate(batch):
                        tok = uuid.uuid4().hex
                        n = it["att"] + 1
                        sets: Item = {
                            "st": "running",
                            "att": n,
                            "tok": tok,
                            "wk": worker_id,
                            "sa": t,
                            "le": t + lease_ms,
                            "dp": f"{self._p}R",
                            "dx": t + lease_ms,
                            "rsn": None,
                        }
                        if it.get("to") is not None:
                            sets["tp"] = f"{self._p}T"
                            sets["tx"] = sets["dl"] = t + it["to"]
                        else:
                            sets["dl"] = None
                        if it.get("hbms"):
                            sets["hp"], sets["hx"] = f"{self._p}H", t + it["hbms"]
                        actions.append({"Update": self._update(
                            self._jk(it["id"]), self.table, sets, ["rq", "rk"],
                            cond="st = :q AND v = :ver",
                            cond_values={"q": "queued", "ver": it["v"]},
                        )})
                        owners.append(bi)
                        att: Item = {"pk": f"{self._p}J#{it['id']}", "sk": f"A#{n:05d}", "n": n,
                                     "wk": worker_id, "sa": t}
                        put = {"TableName": self.table, "Item": _encode_item(att)}
                        actions.append({"Put": put})
                        owners.append(bi)
                        key = it.get("ck")
                        if key is not None:
                            if it.get("cs"):
                                counter = self._counter(key, run=1)
                            else:
                                counter = self._counter(key, run=1, limit_on="run",
                                                        limit=it.get("cl"))
                            actions.append({"Update": counter})
                            owners.append(bi)
                        new = dict(it)
                        new.update({k: v for k, v in sets.items() if v is not None})
                        new["v"] = it["v"] + 1
                        starts.append((it, tok, new))
                    try:
                        self._transact(actions)
                    except _TxCancelled as exc:
                        drop: set[int] = set()
                        for action, owner, code in zip(actions, owners, exc.codes, strict=False):
                            if code in ("None", ""):
                                continue
                            drop.add(owner)
                            if code == "ConditionalCheckFailed" and "Update" in action and (
                                action["Update"]["Key"]["sk"]["S"] == "C"
                            ):
                                full.add(batch[owner].get("ck") or "")
                        if not drop:  # conflict without a named item: retry the batch a few times
                            conflicts += 1
                            if conflicts > 5:
                                break
                            time.sleep(0.01)
                        cands = [it for bi, it in enumerate(batch) if bi not in drop] + rest
                        continue
                    for _, tok, new in starts:
                        claimed.append(self._claimed_job(new, tok, t))
                        with self._lock:
                            self._claimed[(new["id"], new["att"], tok)] = new
                    cands = rest
                if len(claimed) >= limit or not lost:
                    break
            self._bind_claimed(claimed)
            return claimed

    def _claimed_job(self, it: Item, tok: str, t: int) -> ClaimedJob:
        payload = self._payload(it)
        return ClaimedJob(
            id=it["id"],
            task_name=it["task"],
            queue=it["q"],
            payload=payload,
            attempt=it["att"],
            lease_token=tok,
            lease_expires_at=it["le"],
            deadline=it.get("dl"),
            max_attempts=it["ma"],
            priority=it["pr"],
            timeout_ms=it.get("to"),
            heartbeat_ms=it.get("hbms") or None,
            options=it.get("opt"),
            enqueued_at=it["enq"],
            replay_of=it.get("rof"),
            started_at=t,
        )

    # ------------------------------------------------------------------ lease

    _FENCE = "st = :run AND att = :att AND tok = :tok"

    def _fence_values(self, ref: LeaseRef) -> Item:
        return {"run": "running", "att": ref.attempt, "tok": ref.lease_token}

    def renew(
        self, refs: Sequence[LeaseRef], lease_ms: int, *, now: int | None = None
    ) -> RenewResult:
        """See :meth:`queue_core.storage.Storage.renew`. One conditional UpdateItem per ref,
        plus one ``ChangeMessageVisibilityBatch`` per queue for the receipts held."""
        t = self._now(now)
        result = RenewResult()
        with translate("renew"):
            for ref in refs:
                op = self._update(
                    self._jk(ref.job_id), self.table, {"le": t + lease_ms, "dx": t + lease_ms},
                    cond=self._FENCE, cond_values=self._fence_values(ref),
                )
                op["ReturnValues"] = "ALL_NEW"
                try:
                    resp = self.ddb.update_item(**op)
                except ClientError as exc:
                    if error_code(exc) != "ConditionalCheckFailedException":
                        raise
                    result.lost.append(ref)
                    with self._lock:
                        self._running.pop(ref.job_id, None)
                    continue
                if resp.get("Attributes", {}).get("cxl", {}).get("BOOL"):
                    result.cancel_requested.append(ref)
            alive = {r.job_id for r in refs} - {r.job_id for r in result.lost}
            self._extend_visibility(alive, lease_ms)
        return result

    def heartbeat(self, ref: LeaseRef, *, now: int | None = None) -> bool:
        """See :meth:`queue_core.storage.Storage.heartbeat` (one conditional UpdateItem)."""
        t = self._now(now)
        with translate("heartbeat"):
            op = self._update(
                self._jk(ref.job_id), self.table, {},
                cond=self._FENCE, cond_values=self._fence_values(ref),
            )
            op["UpdateExpression"] = op["UpdateExpression"].replace(
                "SET ", "SET #hx = #hbms + :now, ", 1
            )
            op["ExpressionAttributeNames"].update({"#hx": "hx", "#hbms": "hbms"})
            op["ExpressionAttributeValues"][":now"] = _enc(t)
            op["ReturnValues"] = "ALL_NEW"
            try:
                resp = self.ddb.update_item(**op)
            except ClientError as exc:
                if error_code(exc) != "ConditionalCheckFailedException":
                    raise
                raise LeaseLost(
                    f"attempt {ref.attempt} of job {ref.job_id} is not current"
                ) from None
            return bool(resp.get("Attributes", {}).get("cxl", {}).get("BOOL"))

    # ------------------------------------------------------------------ finish

    def _attempt_update(
        self, job_id: str, n: int, outcome: Outcome, reason: str | None, error: ErrorInfo | None,
        mode: str | None, now: int,
    ) -> tuple[dict[str, Any], Item]:
        sets: Item = {"oc": outcome.value, "rsn": reason, "fa": now, "mode": mode}
        if error is not None:
            sets.update(ec=error.error_class, et=error.error_type, msg=error.message,
                        tb=error.traceback)
        op = self._update(self._ak(job_id, n), self.table, sets,
                          cond="attribute_exists(pk)")
        return {"Update": op}, sets

    def _end_actions(
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
        result: bytes | None = None,
        lost_delay_ms: int | None = None,
    ) -> tuple[list[dict[str, Any]], Item]:
        """The writes that end the current attempt of ``job`` and put the job in ``state``
        (with ``job_reason``; ``queued`` ones ready at ``ready_at``), as decided by
        :func:`~queue_core.policy.outcomes.end_state` or ``reap_verdict``."""
        n = job["att"]
        att_action, att_sets = self._attempt_update(
            job["id"], n, outcome, attempt_reason, error, mode, now
        )
        actions: list[dict[str, Any]] = [att_action]
        sets: Item
        removes: list[str]
        if error is not None:
            err = {"ec": error.error_class, "et": error.error_type, "msg": error.message,
                   "tb": error.traceback}
            err_sets: Item = {"err": {k: v for k, v in err.items() if v is not None}}
        else:
            err_sets = {}
        key = job.get("ck")
        if state is JobState.QUEUED:
            sets, removes = self._queued_fields(job, now if ready_at is None else ready_at, now)
            sets["rsn"] = None
            if lost_delay_ms is not None:
                sets["ld"] = lost_delay_ms
            dec_act = 0
        else:
            if state is JobState.SUCCEEDED:
                err_sets["res"] = result
            sets, removes = self._finished_fields(state, now)
            sets["rsn"] = job_reason
            dec_act = -1
            if state is JobState.DEAD:
                prior = [a for a in self._attempt_items(job["id"]) if a["n"] != n]
                current = {"n": n, "wk": job.get("wk"), "sa": job.get("sa"), **att_sets}
                current = {k: v for k, v in current.items() if v is not None}
                atts = sorted([*prior, current], key=lambda a: a["n"])
                dead_id, puts = self._dead_entry(job, job_reason or "", error, atts, now)
                sets["did"] = dead_id
                actions += puts
        sets.update(err_sets)
        actions.insert(0, {"Update": self._update(
            self._jk(job["id"]), self.table, sets, removes, cond=cond, cond_values=cond_values,
        )})
        if key is not None:
            actions.append({"Update": self._counter(key, run=-1, act=dec_act)})
        return actions, sets

    def finish(self, ends: Sequence[AttemptEnd], *, now: int | None = None) -> list[bool]:
        """See :meth:`queue_core.storage.Storage.finish`.

        The job items come from this instance's claim cache (else one BatchGetItem);
        every end is then one set of fenced writes, all ends in one
        ``TransactWriteItems`` (a DEAD end also Queries its attempt records). Ends whose
        fence fails are dropped and the rest retried. Held SQS receipts of taken ends
        are deleted in one ``DeleteMessageBatch`` per queue; retries send a new hint.
        """
        t = self._now(now)
        took = [False] * len(ends)
        with translate("finish"):
            jobs: dict[int, Item] = {}
            missing: list[str] = []
            with self._lock:
                for i, end in enumerate(ends):
                    r = end.ref
                    cached = self._claimed.get((r.job_id, r.attempt, r.lease_token))
                    if cached is not None:
                        jobs[i] = cached
                    else:
                        missing.append(r.job_id)
            if missing:
                fetched = self._batch_get(missing)
                for i, end in enumerate(ends):
                    if i not in jobs and end.ref.job_id in fetched:
                        jobs[i] = fetched[end.ref.job_id]
            pending: dict[int, tuple[list[dict[str, Any]], JobState, Item]] = {}
            for i, end in enumerate(ends):
                job = jobs.get(i)
                if job is None or job.get("att") != end.ref.attempt:
                    continue
                d = end.decision
                state, job_reason = end_state(d, end.reason)
                actions, sets = self._end_actions(
                    job, end.outcome, end.reason, end.error, end.mode, t,
                    state=state, job_reason=job_reason,
                    cond=self._FENCE, cond_values=self._fence_values(end.ref),
                    ready_at=t + d.delay_ms, result=end.result, lost_delay_ms=d.lost_delay_ms,
                )
                pending[i] = (actions, state, sets)
            requeued: list[Item] = []
            conflicts = 0
            while pending:
                order = list(pending)
                chunk: list[int] = []
                size = 0
                seen: set[str] = set()  # one transaction may touch an item only once
                for i in order:
                    if size + len(pending[i][0]) > _TX_MAX:
                        break
                    job_id, key = ends[i].ref.job_id, jobs[i].get("ck")
                    if job_id in seen or (key is not None and f"C#{key}" in seen):
                        continue
                    seen.add(job_id)
                    if key is not None:
                        seen.add(f"C#{key}")
                    chunk.append(i)
                    size += len(pending[i][0])
                actions = [a for i in chunk for a in pending[i][0]]
                owners = [i for i in chunk for _ in pending[i][0]]
                try:
                    self._transact(actions)
                except _TxCancelled as exc:
                    failed = {
                        o for o, c in zip(owners, exc.codes, strict=False) if c not in ("None", "")
                    }
                    if not failed:
                        conflicts += 1
                        if conflicts > 5:
                            raise StorageError("sqs backend: finish kept conflicting") from None
                        time.sleep(0.01)
                    for i in failed:
                        del pending[i]
                    continue
                for i in chunk:
                    _, state, sets = pending.pop(i)
                    took[i] = True
                    if state is JobState.QUEUED:
                        requeued.append({**jobs[i], **{k: v for k, v in sets.items()
                                                       if v is not None}})
            with self._lock:
                for end in ends:
                    r = end.ref
                    self._claimed.pop((r.job_id, r.attempt, r.lease_token), None)
            self._release_messages([e.ref.job_id for e, ok in zip(ends, took, strict=False) if ok])
            self._hint(requeued, t)
        return took

    # ------------------------------------------------------------------ reaper

    def reap(self, *, now: int | None = None, limit: int = 100) -> list[ReapedJob]:
        """See :meth:`queue_core.storage.Storage.reap`.

        Queries the running jobs by earliest lease expiry, attempt deadline and
        heartbeat deadline, and the due jobs by schedule-to-start deadline; each is ended
        by one transaction conditional on the version read, so concurrent reapers record
        it once.
        """
        t = self._now(now)
        out: list[ReapedJob] = []
        with translate("reap"):
            self._promote(t)
            stale: dict[str, Item] = {}
            for index, pkey, skey, part in (
                ("due", "dp", "dx", f"{self._p}R"),
                ("timeout", "tp", "tx", f"{self._p}T"),
                ("heartbeat", "hp", "hx", f"{self._p}H"),
            ):
                for it in self._query(
                    IndexName=index,
                    KeyConditionExpression=f"{pkey} = :p AND {skey} <= :now",
                    ExpressionAttributeValues=_vals(p=part, now=t),
                    Limit=limit,
                ):
                    if it.get("st") == "running":
                        stale.setdefault(it["id"], it)
            requeued: list[Item] = []
            for it in sorted(stale.values(), key=lambda x: (x.get("le", 0), x.get("seq", 0))):
                if len(out) >= limit:
                    break
                verdict = reap_verdict(
                    t,
                    lease_expires_at=it.get("le", 0),
                    deadline=it.get("dl"),
                    heartbeat_expires_at=it.get("hx") if it.get("hp") else None,
                    cancel_requested=bool(it.get("cxl")),
                    attempt=it["att"],
                    max_attempts=it["ma"],
                    lost_delay_ms=it.get("ld", 0),
                )
                if verdict is None:
                    continue
                state, reason, outcome = verdict.state, verdict.reason, verdict.outcome
                actions, sets = self._end_actions(
                    it, outcome, reason.value, None, None, t,
                    state=state, job_reason=verdict.job_reason, ready_at=verdict.ready_at,
                    cond="st = :run AND v = :ver", cond_values={"run": "running", "ver": it["v"]},
                )
                try:
                    self._transact(actions)
                except _TxCancelled:
                    continue
                if state is JobState.QUEUED:
                    requeued.append({**it, **{k: v for k, v in sets.items() if v is not None}})
                out.append(ReapedJob(job_id=it["id"], attempt=it["att"], outcome=outcome,
                                     reason=reason.value, state=state))
            if len(out) < limit:
                for it in self._query(
                    IndexName="due",
                    KeyConditionExpression="dp = :p AND dx <= :now",
                    ExpressionAttributeValues=_vals(p=f"{self._p}S", now=t),
                    Limit=limit - len(out),
                ):
                    if it.get("st") != "queued":
                        continue
                    sets, removes = self._finished_fields(JobState.DEAD, t)
                    sets["rsn"] = Reason.SCHEDULE_TO_START.value
                    dead_id, puts = self._dead_entry(
                        it, Reason.SCHEDULE_TO_START.value, None, self._attempt_items(it["id"]), t
                    )
                    sets["did"] = dead_id
                    actions = [
                        {"Update": self._update(
                            self._jk(it["id"]), self.table, sets, removes,
                            cond="st = :q AND v = :ver",
                            cond_values={"q": "queued", "ver": it["v"]},
                        )},
                        *puts,
                    ]
                    if it.get("ck") is not None:
                        actions.append({"Update": self._counter(it["ck"], act=-1)})
                    try:
                        self._transact(actions)
                    except _TxCancelled:
                        continue
                    out.append(ReapedJob(job_id=it["id"], attempt=0, outcome=None,
                                         reason=Reason.SCHEDULE_TO_START.value,
                                         state=JobState.DEAD))
            self._hint(requeued, t)
        return out

    def prune(self, *, now: int | None = None, limit: int = 1000) -> int:
        """See :meth:`queue_core.storage.Storage.prune`. Queries the finished index by
        ``finished_at`` and deletes jobs and attempt records with BatchWriteItem; items
        it misses are removed by the table's TTL."""
        cutoff = self._now(now) - self.retention_ms
        with translate("prune"):
            done = self._query(
                IndexName="due",
                KeyConditionExpression="dp = :p AND dx <= :cut",
                ExpressionAttributeValues=_vals(p=f"{self._p}F", cut=cutoff),
                Limit=limit,
            )[:limit]
            keys: list[dict[str, Any]] = []
            for it in done:
                keys.append(self._jk(it["id"]))
                keys += [self._ak(it["id"], n) for n in range(1, it.get("att", 0) + 1)]
                keys += [
                    {"pk": {"S": it["pk"]}, "sk": {"S": f"P#{i:04d}"}}
                    for i in range(it.get("plc") or 0)
                ]
            self._batch_delete(keys)
        return len(done)

    def _batch_delete(self, keys: list[dict[str, Any]]) -> None:
        for i in range(0, len(keys), 25):
            reqs = [{"DeleteRequest": {"Key": k}} for k in keys[i : i + 25]]
            while reqs:
                resp = self.ddb.batch_write_item(RequestItems={self.table: reqs})
                reqs = resp.get("UnprocessedItems", {}).get(self.table, [])

    # ------------------------------------------------------------------ control and reads

    def cancel(self, job_id: str, *, now: int | None = None) -> JobState:
        """See :meth:`queue_core.storage.Storage.cancel` (read, then a conditional write)."""
        t = self._now(now)
        with translate("cancel"):
            while True:
                job = self._get(self._jk(job_id))
                if job is None:
                    raise NotFound(f"no job with id {job_id!r}")
                state = JobState(job["st"])
                try:
                    if state is JobState.QUEUED:
                        sets, removes = self._finished_fields(JobState.CANCELLED, t)
                        sets["rsn"] = Reason.CANCELLED.value
                        actions = [{"Update": self._update(
                            self._jk(job_id), self.table, sets, removes,
                            cond="v = :ver", cond_values={"ver": job["v"]},
                        )}]
                        if job.get("ck") is not None:
                            actions.append({"Update": self._counter(job["ck"], act=-1)})
                        self._transact(actions)
                        return JobState.CANCELLED
                    if state is JobState.RUNNING:
                        self._transact([{"Update": self._update(
                            self._jk(job_id), self.table, {"cxl": True},
                            cond="v = :ver", cond_values={"ver": job["v"]},
                        )}])
                    return state
                except _TxCancelled:
                    continue

    def get_job(self, job_id: str) -> JobRecord | None:
        """See :meth:`queue_core.storage.Storage.get_job` (one consistent GetItem)."""
        with translate("get_job"):
            item = self._get(self._jk(job_id))
        return self._job_record(item) if item else None

    def list_attempts(self, job_id: str) -> list[AttemptRecord]:
        """See :meth:`queue_core.storage.Storage.list_attempts` (one consistent Query)."""
        with translate("list_attempts"):
            items = self._attempt_items(job_id)
        return [self._attempt_record(a) for a in sorted(items, key=lambda a: a["n"])]

    def count_pending(
        self, queues: Sequence[str], horizon_ms: int, *, now: int | None = None
    ) -> int:
        """See :meth:`queue_core.storage.Storage.count_pending`."""
        by = self._now(now) + horizon_ms
        wanted = list(dict.fromkeys(queues))
        if not wanted:
            return 0
        names = {f":q{i}": {"S": q} for i, q in enumerate(wanted)}
        inq = ", ".join(names)
        with translate("count_pending"):
            return self._count(
                IndexName="all",
                KeyConditionExpression="ap = :ap",
                FilterExpression=f"q IN ({inq}) AND (st = :run OR (st = :qd AND ra <= :by))",
                ExpressionAttributeValues={
                    **_vals(ap=self._p, run="running", qd="queued", by=by), **names,
                },
            )

    def stats(self, *, now: int | None = None) -> list[QueueStats]:
        """See :meth:`queue_core.storage.Storage.stats` (one paged Query of the ``all``
        index, projecting queue, state and ready time)."""
        t = self._now(now)
        counts: dict[str, dict[str, int]] = {}
        with translate("stats"):
            kw: dict[str, Any] = {
                "IndexName": "all",
                "KeyConditionExpression": "ap = :ap",
                "ProjectionExpression": "q, st, ra",
                "ExpressionAttributeValues": _vals(ap=self._p),
            }
            for it in self._query(**kw):
                c = counts.setdefault(it["q"], {})
                name = it["st"]
                if name == "queued":
                    name = "ready" if it["ra"] <= t else "scheduled"
                c[name] = c.get(name, 0) + 1
        return [QueueStats(queue=q, **counts[q]) for q in sorted(counts)]

    def list_jobs(
        self,
        *,
        state: JobState | None = None,
        queue: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[JobRecord]:
        """A page of jobs, newest (latest enqueued) first, optionally filtered
        (:class:`~queue_core.storage.SupportsJobScan`). Pages the ``all`` index; meant
        for dashboards and the CLI, not for hot paths."""
        filters: list[str] = []
        vals = _vals(ap=self._p)
        if state is not None:
            filters.append("st = :st")
            vals.update(_vals(st=state.value))
        if queue is not None:
            filters.append("q = :q")
            vals.update(_vals(q=queue))
        kw: dict[str, Any] = {
            "IndexName": "all",
            "KeyConditionExpression": "ap = :ap",
            "ExpressionAttributeValues": vals,
        }
        if filters:
            kw["FilterExpression"] = " AND ".join(filters)
        with translate("list_jobs"):
            items = self._query(**kw)
            items.sort(key=lambda it: (it["enq"], it["seq"]), reverse=True)
            return [self._job_record(it) for it in items[offset : offset + max(0, limit)]]

    # ------------------------------------------------------------------ dead letters

    def list_dead(
        self, limit: int = 20, offset: int = 0, task_name: str | None = None
    ) -> list[DeadJob]:
        """See :meth:`queue_core.storage.Storage.list_dead`.

        Newest first from the ``dead`` (or ``deadtask``) index. DynamoDB has no offset:
        pages of ``Limit`` are read with ``ExclusiveStartKey`` and the first ``offset``
        entries skipped.
        """
        if limit <= 0:
            return []
        if task_name is None:
            index, cond, vals = "dead", "lp = :p", _vals(p=f"{self._p}DL")
        else:
            index, cond, vals = "deadtask", "ltp = :p", _vals(p=f"{self._p}DT#{task_name}")
        want = offset + limit
        got: list[Item] = []
        with translate("list_dead"):
            kw: dict[str, Any] = {
                "TableName": self.table,
                "IndexName": index,
                "KeyConditionExpression": cond,
                "ExpressionAttributeValues": vals,
                "ScanIndexForward": False,
            }
            while len(got) < want:
                kw["Limit"] = min(want - len(got), 500)
                resp = self.ddb.query(**kw)
                got += [_decode_item(r) for r in resp.get("Items", [])]
                lek = resp.get("LastEvaluatedKey")
                if not lek:
                    break
                kw["ExclusiveStartKey"] = lek
        return [self._dead_job(d) for d in got[offset:want]]

    def get_dead(self, dead_id: str) -> DeadJob | None:
        """See :meth:`queue_core.storage.Storage.get_dead` (one GetItem)."""
        with translate("get_dead"):
            item = self._get(self._dk(dead_id))
        return self._dead_job(item) if item else None

    def retry_dead(
        self, dead_id: str, queue: str | None = None, *, now: int | None = None
    ) -> str:
        """See :meth:`queue_core.storage.Storage.retry_dead`: one transaction deletes the
        entry (conditional on its existence) and puts the new job."""
        t = self._now(now)
        with translate("retry_dead"):
            d = self._get(self._dk(dead_id))
            if d is None:
                raise NotFound(f"no dead-letter entry with id {dead_id!r}")
            spec = replay_job(
                _spec_from_attrs(d.get("spec", {}), d, d["job"], self._payload(d)),
                dead_id=dead_id, new_id=uuid.uuid4().hex, queue=queue, now=t,
            )
            new_id = spec.id
            item = self._new_item(spec, t, _SEQ.take(1)[0])
            actions: list[dict[str, Any]] = [
                {"Delete": {"TableName": self.table, "Key": self._dk(dead_id),
                            "ConditionExpression": "attribute_exists(pk)"}},
                self._put(item),
            ]
            if item.get("plc"):
                actions += self._chunk_puts(item["pk"], spec.payload)
            actions += [
                {"Delete": {"TableName": self.table,
                            "Key": {"pk": {"S": d["pk"]}, "sk": {"S": f"P#{i:04d}"}}}}
                for i in range(d.get("plc") or 0)
            ]
            if spec.concurrency_key is not None:
                actions.append({"Update": self._counter(spec.concurrency_key, act=1)})
            try:
                self._transact(actions)
            except _TxCancelled as exc:
                if exc.codes and exc.codes[0] == "ConditionalCheckFailed":
                    raise NotFound(f"no dead-letter entry with id {dead_id!r}") from None
                raise StorageError("sqs backend: retry_dead conflicted; try again") from None
            self._hint([item], t)
        return new_id

    def purge_dead(self, task_name: str | None = None, before: int | None = None) -> int:
        """See :meth:`queue_core.storage.Storage.purge_dead` (Query the dead index, then
        BatchWriteItem deletes)."""
        if task_name is None:
            index, cond, vals = "dead", "lp = :p", _vals(p=f"{self._p}DL")
        else:
            index, cond, vals = "deadtask", "ltp = :p", _vals(p=f"{self._p}DT#{task_name}")
        if before is not None:
            cond += " AND lx <= :b"
            vals.update(_vals(b=f"{before:016d}#~"))
        with translate("purge_dead"):
            items = self._query(
                IndexName=index,
                KeyConditionExpression=cond,
                ExpressionAttributeValues=vals,
                ProjectionExpression="id, pk, plc",
            )
            keys: list[dict[str, Any]] = []
            for it in items:
                keys.append(self._dk(it["id"]))
                keys += [
                    {"pk": {"S": it["pk"]}, "sk": {"S": f"P#{i:04d}"}}
                    for i in range(it.get("plc") or 0)
                ]
            self._batch_delete(keys)
        return len(items)

    def close(self) -> None:
        """Release prefetched SQS receipts (visibility 0) and the clients. Idempotent."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            held = list(self._prefetched.values())
            self._prefetched.clear()
        try:
            with translate("close"):
                self._change_visibility(held, 0)
        except StorageError:
            pass
        for client in (self.ddb, self.sqs):
            closer = getattr(client, "close", None)
            if closer is not None:
                closer()

    # ------------------------------------------------------------------ SQS: hints, wake-ups

    def _queue_url(self, queue: str) -> str:
        with self._lock:
            url = self._queue_urls.get(queue)
        if url is not None:
            return url
        name = _sqs_name(self.prefix, queue)
        try:
            url = self.sqs.get_queue_url(QueueName=name)["QueueUrl"]
        except ClientError as exc:
            if error_code(exc) not in (
                "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"
            ) or not self._create:
                raise
            url = self.sqs.create_queue(
                QueueName=name,
                Attributes={
                    "VisibilityTimeout": str(self.visibility_s),
                    "MessageRetentionPeriod": str(14 * 24 * 3600),
                },
            )["QueueUrl"]
        with self._lock:
            self._queue_urls[queue] = url
        return str(url)

    def _hint(self, items: Sequence[Item], now: int) -> None:
        """Send one delivery hint per queued job (SendMessageBatch of 10 per queue)."""
        by_queue: dict[str, list[Item]] = {}
        for it in items:
            by_queue.setdefault(it["q"], []).append(it)
        for q, its in by_queue.items():
            url = self._queue_url(q)
            for i in range(0, len(its), 10):
                entries = [
                    {
                        "Id": str(k),
                        "MessageBody": json.dumps({"j": it["id"], "r": it["ra"]}),
                        "DelaySeconds": self._delay_s(it["ra"], now),
                    }
                    for k, it in enumerate(its[i : i + 10])
                ]
                self.sqs.send_message_batch(QueueUrl=url, Entries=entries)

    def _delay_s(self, ready_at: int, now: int) -> int:
        return max(0, min(self.hop_s, math.ceil((ready_at - now) / 1000)))

    def _change_visibility(self, held: Sequence[tuple[str, str]], seconds: int) -> None:
        by_url: dict[str, list[str]] = {}
        for url, receipt in held:
            by_url.setdefault(url, []).append(receipt)
        for url, receipts in by_url.items():
            for i in range(0, len(receipts), 10):
                self.sqs.change_message_visibility_batch(
                    QueueUrl=url,
                    Entries=[
                        {"Id": str(k), "ReceiptHandle": r, "VisibilityTimeout": seconds}
                        for k, r in enumerate(receipts[i : i + 10])
                    ],
                )

    def _delete_messages(self, held: Sequence[tuple[str, str]]) -> None:
        by_url: dict[str, list[str]] = {}
        for url, receipt in held:
            by_url.setdefault(url, []).append(receipt)
        for url, receipts in by_url.items():
            for i in range(0, len(receipts), 10):
                self.sqs.delete_message_batch(
                    QueueUrl=url,
                    Entries=[
                        {"Id": str(k), "ReceiptHandle": r}
                        for k, r in enumerate(receipts[i : i + 10])
                    ],
                )

    def _bind_claimed(self, claimed: Sequence[ClaimedJob]) -> None:
        """Receipts of prefetched messages whose job we claimed now follow the attempt;
        the other prefetched receipts are released for a short while."""
        ids = {c.id for c in claimed}
        with self._lock:
            for job_id in ids & set(self._prefetched):
                self._running[job_id] = self._prefetched.pop(job_id)
            release = list(self._prefetched.values())
            self._prefetched.clear()
        if release:
            self._change_visibility(release, 2)

    def _extend_visibility(self, job_ids: Iterable[str], lease_ms: int) -> None:
        with self._lock:
            held = [self._running[j] for j in job_ids if j in self._running]
            held += list(self._prefetched.values())
        if held:
            self._change_visibility(
                held, min(_MAX_VISIBILITY_S, max(1, math.ceil(lease_ms / 1000)))
            )

    def _release_messages(self, job_ids: Iterable[str]) -> None:
        with self._lock:
            held = [self._running.pop(j) for j in job_ids if j in self._running]
        if held:
            self._delete_messages(held)

    def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> bool:
        """Long-poll the queues' SQS queues for up to ``timeout`` seconds.

        A received hint is checked against DynamoDB (one BatchGetItem per receive):
        a due queued job keeps its receipt (prefetched; the next :meth:`claim` binds it
        to the attempt) and wakes the caller; a not-yet-due one is re-sent for the
        remainder (a hop) and deleted; one running elsewhere is hidden until its lease
        would expire; a finished or unknown one is deleted. Spurious wake-ups are allowed.
        """
        if self._closed:
            return False
        deadline = time.monotonic() + max(0.0, timeout)
        wanted = list(dict.fromkeys(queues))
        if not wanted:
            time.sleep(max(0.0, timeout))
            return False
        with translate("wait_for_jobs"):
            with self._lock:
                if any(True for _ in self._prefetched):
                    return True
            while True:
                remaining = deadline - time.monotonic()
                per = int(max(0.0, min(20.0, remaining / len(wanted))))
                for q in wanted:
                    url = self._queue_url(q)
                    resp = self.sqs.receive_message(
                        QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=per
                    )
                    msgs = resp.get("Messages", [])
                    if msgs and self._handle_messages(url, msgs):
                        return True
                if time.monotonic() >= deadline or self._closed:
                    return False

    def _handle_messages(self, url: str, msgs: Sequence[dict[str, Any]]) -> bool:
        now = self._clock()
        parsed: list[tuple[str, str, int]] = []
        junk: list[tuple[str, str]] = []
        for m in msgs:
            try:
                body = json.loads(m["Body"])
                parsed.append((str(body["j"]), m["ReceiptHandle"], int(body["r"])))
            except (ValueError, KeyError, TypeError):
                junk.append((url, m["ReceiptHandle"]))
        jobs = self._batch_get([p[0] for p in parsed]) if parsed else {}
        woke = False
        delete: list[tuple[str, str]] = list(junk)
        hops: list[Item] = []
        for job_id, receipt, _ in parsed:
            job = jobs.get(job_id)
            if job is None or JobState(job["st"]) in _FINISHED:
                delete.append((url, receipt))
            elif job["st"] == "queued" and job["ra"] > now:
                hops.append(job)
                delete.append((url, receipt))
            elif job["st"] == "queued":
                with self._lock:
                    old = self._prefetched.get(job_id)
                    self._prefetched[job_id] = (url, receipt)
                if old is not None:
                    delete.append(old)
                woke = True
            else:  # running elsewhere: come back when its lease may have lapsed
                wait = math.ceil((job.get("le", now) - now) / 1000) + 1
                self._change_visibility([(url, receipt)], min(_MAX_VISIBILITY_S, max(1, wait)))
        if hops:
            self._hint(hops, now)
        if delete:
            self._delete_messages(delete)
        return woke


def _spec_from_attrs(attrs: Item, names: Item, job_id: str, payload: bytes) -> NewJob:
    """A job spec from stored spec attributes (a job item or a dead entry's ``spec`` map);
    ``names`` holds ``task``, ``q`` and ``rof``."""
    return NewJob(
        id=job_id,
        task_name=names["task"],
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
        options=attrs.get("opt"),
        replay_of=names.get("rof"),
    )


def _enqueued_spec(job: Item, payload: bytes) -> NewJob:
    """The job as it was enqueued: its spec with the attempt-1 lost delay (``ld1``; items
    written before ``ld1`` existed fall back to the current ``ld``)."""
    attrs = {**job, "ld": job.get("ld1", job.get("ld", 0))}
    return _spec_from_attrs(attrs, job, job["id"], payload)


def _spec_attrs(spec: NewJob) -> Item:
    """The ``spec`` map a dead-letter entry stores for ``spec``."""
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
        "opt": spec.options,
        "rof": spec.replay_of,
    }
    return {k: v for k, v in attrs.items() if v is not None}


def _codes_from_message(message: str, n: int) -> list[str]:
    """Parse ``[Code1, None, …]`` out of a TransactionCanceled message (moto fallback)."""
    m = re.search(r"\[([^\]]*)\]", message)
    if not m:
        return ["None"] * n
    codes = [c.strip() for c in m.group(1).split(",")]
    return codes + ["None"] * (n - len(codes))
