"""The SQS backend's store: AWS clients, the table, the clock and what every part shares.

Every part of :class:`~backends.sqs.storage.SQSStorage` holds one :class:`Store`: the
DynamoDB table (:class:`~backends.sqs.dynamo.Table`, whose ``transact``/``write`` are the
transaction helper), the key layout (:class:`~backends.sqs.codec.Keys`), the SQS delivery
channel (:class:`~backends.sqs.delivery.Delivery`), the clock (:meth:`Store.now`) and the
enqueue sequence. Driver errors are translated by :func:`backends.sqs.errors.translate`,
which every operation runs in. :func:`url_options` is the backend's one URL parser.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import parse_qs, urlsplit

from backends.sqs.codec import Item, Keys, vals
from backends.sqs.delivery import MAX_DELAY_S, Delivery
from backends.sqs.dynamo import Table
from backends.sqs.errors import translate
from backends.sqs.tables import ensure_table
from queue_core.records.durations import parse_duration, to_ms
from queue_core.records.errors import ConfigError, StorageError, StorageUnavailable
from queue_core.records.jobs import JobState
from queue_core.rules.outcomes import parse_retention

__all__ = ["SEQ", "Store", "url_options"]

_TABLES_READY: set[tuple[str | None, str, str]] = set()
_TABLES_LOCK = threading.Lock()
_URL_OPTIONS = frozenset(
    {"region", "table", "prefix", "endpoint_url", "retention", "visibility", "hop", "create"}
)


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


SEQ = _Seq()


class _TableFirst:
    """The DynamoDB client of a storage whose table could not be ensured when it was
    built (the endpoint did not answer: a worker started during an outage): each call
    ensures the table first (``StorageUnavailable`` while the endpoint is unreachable,
    retried by the caller like any call), then goes to the client. Once the table is
    ensured the store drops it (:meth:`Store.migrate`): later calls go straight to the
    client."""

    def __init__(self, client: Any, migrate: Callable[[], None]) -> None:
        self.client = client
        self._migrate: Callable[[], None] | None = migrate

    def __getattr__(self, name: str) -> Any:
        if self._migrate is not None:
            self._migrate()
            self._migrate = None
        return getattr(self.client, name)


def _system_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _bad(field: str, value: object, message: str, code: str = "invalid_option") -> ConfigError:
    return ConfigError(message, code=code, field=field, value=value)


def url_options(url: str) -> dict[str, Any]:
    """The constructor keywords of an ``sqs://?region=…&prefix=…`` URL (see
    :meth:`~backends.sqs.storage.SQSStorage.from_url`); ``ConfigError`` names a bad one."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "sqs":
        raise _bad("url", parts.scheme, f"not an sqs:// URL: {parts.scheme!r}", "invalid_url")
    if parts.username or parts.password:
        raise _bad(
            "url",
            "sqs://***",
            "sqs:// URLs take no credentials; use the AWS credential chain "
            "(environment, shared config, instance role)",
            "invalid_url",
        )
    if parts.hostname or parts.path.strip("/"):
        raise _bad(
            "url",
            url,
            f"sqs:// URLs name no host or path, got {parts.netloc + parts.path!r}: give the "
            "options as a query, e.g. sqs://?region=eu-west-1&table=queue_core",
            "invalid_url",
        )
    given = parse_qs(parts.query, keep_blank_values=True)
    for name, values in given.items():
        if len(values) > 1 or not values[0].strip():
            why = "is given twice" if len(values) > 1 else "is empty"
            raise _bad(name, values, f"sqs:// option {name!r} {why}: give it once, with a value")
    q = {k: v[0] for k, v in given.items()}
    unknown = sorted(set(q) - _URL_OPTIONS)
    if unknown:
        raise _bad(
            "url",
            unknown[0],
            f"unknown sqs:// option(s) {', '.join(unknown)}; supported: "
            f"{', '.join(sorted(_URL_OPTIONS))}",
        )
    kw: dict[str, Any] = {k: q[k] for k in ("region", "table", "prefix", "endpoint_url") if k in q}
    if "retention" in q:
        kw["retention_ms"] = parse_retention(q["retention"])
    for name in ("visibility", "hop"):
        if name in q:  # whole seconds, at least 1
            kw[f"{name}_s"] = max(1, to_ms(parse_duration(q[name], field=name)) // 1000)
    if "create" in q:
        flag = _FLAGS.get(q["create"].lower())
        if flag is None:
            raise _bad(
                "create", q["create"], f"create={q['create']!r}: use create=true or create=false"
            )
        kw["create"] = flag
    return kw


_FLAGS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def _check_options(*, retention_ms: int, hop_s: int, prefix: str, visibility_s: int) -> None:
    """Refuse constructor options no deployment could work with (``ConfigError``)."""
    if isinstance(visibility_s, bool) or not isinstance(visibility_s, int) or visibility_s < 1:
        raise _bad(
            "visibility_s",
            visibility_s,
            f"visibility_s must be a whole number of seconds >= 1, got {visibility_s!r}",
        )
    if retention_ms < 0:
        raise _bad(
            "retention_ms",
            retention_ms,
            f"retention_ms must be >= 0 (0 keeps no finished job), got {retention_ms!r}",
        )
    if not 0 <= hop_s <= MAX_DELAY_S:
        raise _bad("hop", hop_s, f"hop must be within 0..{MAX_DELAY_S} s, got {hop_s!r}")
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,40}", prefix):
        raise _bad("prefix", prefix, f"prefix must be 1-40 of [A-Za-z0-9_-], got {prefix!r}")


class Store:
    """The AWS clients, table, keys, delivery channel and clock of one storage object.

    Arguments as :class:`~backends.sqs.storage.SQSStorage` documents them.
    """

    def __init__(
        self,
        *,
        region: str,
        table: str,
        prefix: str,
        endpoint_url: str | None,
        retention_ms: int,
        visibility_s: int,
        hop_s: int,
        create: bool,
        clock: Callable[[], int] | None,
        session: Any,
    ) -> None:
        import boto3
        from botocore.config import Config

        _check_options(
            retention_ms=retention_ms, hop_s=hop_s, prefix=prefix, visibility_s=visibility_s
        )
        self.region, self.table, self.prefix = region, table, prefix
        self.endpoint_url = endpoint_url
        self.retention_ms = retention_ms
        self.clock = clock or _system_clock_ms
        sess = session or boto3.session.Session()
        cfg = Config(retries={"max_attempts": 4, "mode": "standard"}, max_pool_connections=32)
        with translate("creating AWS clients"):
            self.ddb: Any = sess.client(
                "dynamodb", region_name=region, endpoint_url=endpoint_url, config=cfg
            )
            self.sqs: Any = sess.client(
                "sqs", region_name=region, endpoint_url=endpoint_url, config=cfg
            )
        self.keys = Keys(prefix)
        self._ddb = self.ddb  # the client itself, whatever stands in front of it
        self.db = Table(self.ddb, table)
        self.delivery = Delivery(
            self.sqs,
            prefix=prefix,
            visibility_s=visibility_s,
            hop_s=hop_s,
            create=create,
            clock=self.clock,
            read_jobs=self.read_jobs,
        )
        self._flows_seen = False
        self._closed = False
        if create:
            try:
                self.migrate()
            except StorageUnavailable:  # ensured at the first call instead (_TableFirst)
                self.ddb = self.db.client = _TableFirst(self.ddb, self.migrate)

    def now(self, now: int | None) -> int:
        """``now``, or this storage's clock when it is ``None`` (epoch ms)."""
        return self.clock() if now is None else now

    def ttl(self, finished_at: int) -> int:
        """The TTL attribute (epoch s) of an item finished at ``finished_at``: never earlier
        than retention after the real write time, whatever ``now`` said."""
        return (max(finished_at, self.clock()) + self.retention_ms) // 1000 + 3600

    def finished_fields(self, state: JobState, now: int) -> tuple[Item, list[str]]:
        """SET values and REMOVE names of a job that ends in ``state`` at ``now``."""
        return self.keys.finished_fields(state, now, self.ttl(now))

    def read_jobs(self, job_ids: Sequence[str]) -> dict[str, Item]:
        """Job items by id (consistent BatchGetItem); missing ids are left out."""
        keys = [self.keys.job(j) for j in dict.fromkeys(job_ids)]
        return {it["id"]: it for it in self.db.batch_get(keys)}

    def hint(self, items: Sequence[Item], now: int) -> None:
        """Delivery hints for queued job items (one SQS message each)."""
        self.delivery.hint(items, now)

    def flows_exist(self) -> bool:
        """Whether this deployment holds any flow execution: one Query of the ``all``
        index (partition ``P X``, ``Limit=1``) until one is seen, nothing after. A
        deployment without flows spares ``reap`` and ``prune`` their flow Queries; one
        whose executions were all pruned since this process saw one keeps paying them."""
        if not self._flows_seen:
            resp = self.ddb.query(
                TableName=self.table,
                IndexName="all",
                KeyConditionExpression="ap = :ap",
                ExpressionAttributeValues=vals(ap=f"{self.keys.p}X"),
                Limit=1,
            )
            self._flows_seen = bool(resp.get("Items"))
        return self._flows_seen

    def migrate(self) -> None:
        """Create the table (indexes, TTL) when missing. Idempotent; safe concurrently."""
        key = (self.endpoint_url, self.region, self.table)
        with _TABLES_LOCK:
            if key not in _TABLES_READY:
                ensure_table(self._ddb, self.table)
                _TABLES_READY.add(key)
        self.ddb = self.db.client = self._ddb  # a _TableFirst in front is done with

    def close(self) -> None:
        """Release prefetched SQS receipts (visibility 0) and the clients. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            with translate("close"):
                self.delivery.close()
        except StorageError:
            pass
        for client in (self._ddb, self.sqs):
            closer = getattr(client, "close", None)
            if closer is not None:
                closer()
