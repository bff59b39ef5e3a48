"""SQS + DynamoDB storage: DynamoDB is the system of record, SQS the delivery channel.

Every decision (readiness, leases, backoff, schedule-to-start, fencing, concurrency) is
judged from DynamoDB attributes against ``now``; SQS never gates correctness, so the
contract suite's explicit clock works and a lost or duplicated message costs at most a
wake-up. See ``docs/backends/sqs.md`` for the design and the request counts.

The backend's modules: :mod:`~backends.sqs.codec` (items <-> records, the attribute
legend), :mod:`~backends.sqs.dynamo` (DynamoDB requests), :mod:`~backends.sqs.delivery`
(SQS hints, receipts, hops), :mod:`~backends.sqs.tables` (the table and its indexes),
and the operations: :mod:`~backends.sqs.claiming`, :mod:`~backends.sqs.attempts`,
:mod:`~backends.sqs.admin`, assembled here.

URL form::

    sqs://?region=us-east-1&prefix=qc&table=qc-jobs&endpoint_url=http://127.0.0.1:5000
          &retention=7d&visibility=30&hop=900

Credentials come from the usual AWS chain (environment, shared config, instance role);
the URL carries none, and none appear in reprs, logs or errors.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import parse_qs, urlsplit

from typing_extensions import Self

from backends.sqs.admin import Admin
from backends.sqs.attempts import Attempts
from backends.sqs.codec import Keys
from backends.sqs.delivery import MAX_DELAY_S, Delivery
from backends.sqs.dynamo import Table
from backends.sqs.errors import translate
from backends.sqs.flows import SQSFlows
from backends.sqs.schedules import SQSSchedules
from backends.sqs.tables import ensure_table
from backends.sqs.throughput import SQSThroughput
from backends.sqs.uniques import UniqueJobs
from backends.sqs.workers import SQSWorkers
from queue_core.durations import parse_duration, to_ms
from queue_core.errors import ConfigError, StorageError
from queue_core.policy.outcomes import DEFAULT_RETENTION_MS, parse_retention
from queue_core.storage import Storage

__all__ = ["SQSStorage"]

_TABLES_READY: set[tuple[str | None, str, str]] = set()
_TABLES_LOCK = threading.Lock()
_URL_OPTIONS = frozenset(
    {"region", "table", "prefix", "endpoint_url", "retention", "visibility", "hop", "create"}
)


def _system_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _parse_seconds(text: str, field: str) -> int:
    """A URL duration option (``visibility``, ``hop``) in whole seconds (at least 1)."""
    return max(1, to_ms(parse_duration(text, field=field)) // 1000)


def _check_options(*, retention_ms: int, hop_s: int, prefix: str) -> None:
    """Refuse constructor options no deployment could work with (``ConfigError``)."""
    if retention_ms < 0:
        raise ConfigError(
            f"retention_ms must be >= 0 (0 keeps no finished job), got {retention_ms!r}",
            code="invalid_option",
            field="retention_ms",
            value=retention_ms,
        )
    if not 0 <= hop_s <= MAX_DELAY_S:
        raise ConfigError(
            f"hop must be within 0..{MAX_DELAY_S} s, got {hop_s!r}",
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


class SQSStorage(
    SQSSchedules, SQSWorkers, SQSThroughput, SQSFlows, UniqueJobs, Attempts, Admin, Storage
):
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
        hop_s: int = MAX_DELAY_S,
        create: bool = True,
        clock: Callable[[], int] | None = None,
        session: Any = None,
    ) -> None:
        import boto3
        from botocore.config import Config

        _check_options(retention_ms=retention_ms, hop_s=hop_s, prefix=prefix)
        self.region = region
        self.table = table
        self.prefix = prefix
        self.endpoint_url = endpoint_url
        self.retention_ms = retention_ms
        self.visibility_s = visibility_s
        self.hop_s = hop_s
        self._clock = clock or _system_clock_ms
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
        self._claimed = {}
        self.keys = Keys(prefix)
        self.db = Table(self.ddb, table)
        self.delivery = Delivery(
            self.sqs,
            prefix=prefix,
            visibility_s=visibility_s,
            hop_s=hop_s,
            create=create,
            clock=self._clock,
            read_jobs=self._read_jobs,
        )
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
        unknown = sorted(set(q) - _URL_OPTIONS)
        if unknown:
            raise ConfigError(
                f"unknown sqs:// option(s) {', '.join(unknown)}; supported: "
                f"{', '.join(sorted(_URL_OPTIONS))}",
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
        return f"SQSStorage(region={self.region!r}, table={self.table!r}, prefix={self.prefix!r})"

    def migrate(self) -> None:
        """Create the table (indexes, TTL) when missing. Idempotent; safe concurrently."""
        key = (self.endpoint_url, self.region, self.table)
        with _TABLES_LOCK:
            if key in _TABLES_READY:
                return
            ensure_table(self.ddb, self.table)
            _TABLES_READY.add(key)

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
        for client in (self.ddb, self.sqs):
            closer = getattr(client, "close", None)
            if closer is not None:
                closer()

    def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> bool:
        """Long-poll the queues' SQS queues for up to ``timeout`` seconds.

        A received hint is checked against DynamoDB (one BatchGetItem per receive):
        a due queued job keeps its receipt (prefetched; the next :meth:`claim` binds it
        to the attempt) and wakes the caller; a not-yet-due one is re-sent for the
        remainder (a hop) and deleted; one running elsewhere is hidden until its lease
        would expire; a finished or unknown one is deleted. Spurious wake-ups are allowed.
        """
        with translate("wait_for_jobs"):
            return self.delivery.wait(queues, timeout)
