"""What both dialects of the SQL backend share: URL handling, the schema engine, and
transactions on one DBAPI connection per thread.

:class:`SQLBase` declares the hooks each dialect class fills in
(:class:`~backends.sql.sqlite.SQLiteStorage`, :class:`~backends.sql.postgresql.PostgresStorage`);
the operations written once over those hooks are in :class:`backends.sql.storage.SQLStorage`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar

from backends.sql.connections import ThreadConnections
from backends.sql.errors import _is_unavailable, translate_errors, translated
from backends.sql.queries import Dialect
from backends.sql.records import (
    EndRow,
    Row,
    claimed_from_row,
)
from backends.sql.url import SQLURL, parse_sql_url
from backends.sql.version import SCHEMA_VERSION, check_version
from backends.sql.watchdog import Watchdog
from queue_core.errors import ConfigError, StorageError
from queue_core.model import (
    ClaimedJob,
    ErrorInfo,
    JobState,
    NewJob,
)
from queue_core.policy.outcomes import (
    DEFAULT_RETENTION_MS,
    parse_retention,
)
from queue_core.storage import Storage
from queue_core.urls import mask_url

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["Grave", "Order", "SQLBase", "local_ms", "split_url"]

_PG_DRIVERS = {"postgresql", "postgres", "postgresql+psycopg"}
_SQLITE_DRIVERS = {"sqlite", "sqlite+pysqlite"}

_META_EXISTS = {
    "sqlite": "SELECT 1 AS v FROM sqlite_master WHERE type = 'table' AND name = 'qc_meta'",
    "postgresql": "SELECT 1 AS v WHERE to_regclass('qc_meta') IS NOT NULL",
}
"""Whether the schema's ``qc_meta`` table exists (the version check reads it raw)."""

Grave = tuple[str, str, str, ErrorInfo | None]
"""A dead-letter entry to write: (job id, dead id, reason, the ending attempt's error)."""
Order = tuple[int, int, int]
"""How claimed jobs are ordered: (-priority, run_at, seq)."""


def local_ms() -> int:
    """This machine's clock in epoch milliseconds."""
    return time.time_ns() // 1_000_000


def split_url(url: str) -> tuple[SQLURL, int | None]:
    """Parse ``url``; strip and parse ``?retention=``; map PostgreSQL to psycopg."""
    try:
        sa_url = parse_sql_url(url)
    except ValueError as exc:
        raise ConfigError(
            f"invalid SQL storage URL {mask_url(url)!r}: {exc}",
            code="invalid_url",
            field="url",
            value=mask_url(url),
        ) from None
    retention: int | None = None
    raw = sa_url.get("retention")
    if raw is not None:
        retention = parse_retention(raw)
        sa_url = sa_url.without("retention")
    driver = sa_url.drivername.lower()
    if driver in _PG_DRIVERS:
        sa_url = sa_url.with_driver("postgresql+psycopg")
    elif driver in _SQLITE_DRIVERS:
        _check_sqlite_query(sa_url, url)
    else:
        raise ConfigError(
            f"unsupported SQL URL scheme {driver!r} in {mask_url(url)!r}: use sqlite:///path.db "
            "or postgresql+psycopg://user:password@host/db",
            code="unknown_scheme",
            field="url",
            value=driver,
        )
    return sa_url, retention


_SQLITE_QUERY = ("retention", "timeout", "check_same_thread", "uri")


def _check_sqlite_query(sa_url: SQLURL, url: str) -> None:
    """Refuse a query option the SQLite driver would ignore (SQLAlchemy only warns): a
    typo such as ``?retension=1d`` must not pass silently. With ``uri=true`` the SQLite
    URI options (``mode``, ``cache``...) are the driver's to judge."""
    if (sa_url.get("uri") or "").lower() == "true":
        return
    unknown = sorted({k for k, _ in sa_url.query if k not in _SQLITE_QUERY})
    if unknown:
        raise ConfigError(
            f"unknown sqlite:// option(s) {', '.join(map(repr, unknown))} in {mask_url(url)!r}; "
            f"supported: {', '.join(_SQLITE_QUERY)}",
            code="invalid_option",
            field="url",
            value=unknown[0],
        )


def _check_retention(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(
            f"retention_ms must be an int >= 0 (0 keeps no finished job), got {value!r}",
            code="invalid_option",
            field="retention_ms",
            value=value,
        )
    return value


class SQLBase(Storage):
    """The shared base of the dialect classes (see :class:`~backends.sql.SQLStorage`)."""

    dialect: ClassVar[Dialect]
    """``"sqlite"`` or ``"postgresql"``."""
    _queries: ClassVar[Any]
    _single_statement_batches: ClassVar[bool] = False
    """Whether a batch enqueue is one statement (no transaction needed)."""

    def __init__(
        self,
        url: str,
        *,
        retention_ms: int | None = None,
        pool_size: int = 5,
        max_overflow: int = 10,
        busy_timeout_ms: int = 30_000,
        echo: bool = False,
    ) -> None:
        sa_url, url_retention = split_url(url)
        retention = retention_ms if retention_ms is not None else url_retention
        self.retention_ms = _check_retention(
            retention if retention is not None else DEFAULT_RETENTION_MS
        )
        self._url = sa_url
        self._masked = sa_url.render(hide_password=True)
        self._secret = sa_url.password
        self._q = self._queries
        self._busy_timeout_ms = busy_timeout_ms
        self._schema_ready = False
        self._schema_lock = threading.Lock()
        self._wait_lock = threading.Lock()
        self._waiter: Any = None
        self._closed = False
        self._conns = ThreadConnections(self._connect)
        self._engine_options = (pool_size, max_overflow, echo)
        self._engine_made: Any = None
        self._watch: Watchdog | None = None
        """Bounds each call (PostgreSQL; see :mod:`backends.sql.watchdog`)."""
        self._prepare()

    @classmethod
    def from_url(cls, url: str) -> Self:
        """Build from a URL (see the class docstring for the accepted forms)."""
        return cls(url)

    def __repr__(self) -> str:
        return f"SQLStorage({self._masked!r})"

    # ------------------------------------------------------------------ dialect hooks

    def _prepare(self) -> None:
        """Set up the dialect's state (no I/O, no SQLAlchemy)."""

    def _make_engine(self, pool_size: int, max_overflow: int, echo: bool) -> Any:
        """The SQLAlchemy engine that creates and migrates the schema."""
        raise NotImplementedError

    @property
    def _engine(self) -> Any:
        """The schema engine, made (and SQLAlchemy imported) on first use."""
        if self._engine_made is None:
            with translate_errors(self._masked, secret=self._secret):
                self._engine_made = self._make_engine(*self._engine_options)
        return self._engine_made

    def _connect(self) -> Any:
        """A new DBAPI connection for one thread."""
        raise NotImplementedError

    def _cursor(self, conn: Any) -> Any:
        """A cursor on ``conn`` whose rows are read by column name."""
        raise NotImplementedError

    def _enter(self, conn: Any, write: bool) -> Any:
        """Start a scope on ``conn`` (a write transaction when ``write``, else one
        statement or reads); return a cursor whose rows are read by column name."""
        raise NotImplementedError

    def _leave(self, conn: Any, write: bool) -> None:
        """End a scope that succeeded (commit); on failure it is already rolled back."""
        raise NotImplementedError

    def _abort(self, conn: Any, write: bool) -> bool:
        """End a scope that failed (roll back, never raise); whether ``conn`` is usable."""
        raise NotImplementedError

    def _clock(self, now: int | None) -> int | None:
        """The ``now`` parameter of a statement (PostgreSQL: ``None`` = server clock)."""
        raise NotImplementedError

    def _server_now(self, cur: Any) -> int:
        """The storage's clock, in epoch ms."""
        raise NotImplementedError

    def _list(self, values: Sequence[Any]) -> Any:
        """A list-valued parameter (SQLite: JSON for ``json_each``; PostgreSQL: an array)."""
        raise NotImplementedError

    def _insert(
        self, cur: Any, jobs: Sequence[NewJob], states: Sequence[JobState] | None,
        reasons: Sequence[str | None] | None, now: int | None,
    ) -> None:
        """Insert ``jobs`` (all queued when ``states`` is ``None``) and wake waiters."""
        raise NotImplementedError

    def _claim_unkeyed(
        self, worker_id: str, qs: list[str], limit: int, lease_ms: int, now: int | None
    ) -> tuple[list[Row], bool]:
        """Start the unkeyed jobs among the top ``limit`` ready ones: (started claim rows,
        whether a keyed job may be ready)."""
        raise NotImplementedError

    def _finish_batch(
        self, cur: Any, ends: list[EndRow], now: int | None
    ) -> dict[str, str | None]:
        """Apply ends (one per job id) fenced; ``{job id: concurrency key}`` of those taken."""
        raise NotImplementedError

    def _claim_pairs(self, rows: list[Any]) -> list[tuple[Order, ClaimedJob]]:
        """``(order, job)`` of the started rows of :meth:`_claim_unkeyed`."""
        return [((-r["priority"], r["run_at"], r["seq"]), claimed_from_row(r)) for r in rows]

    def _try_lock_key(self, cur: Any, key: str, *, wait: bool) -> bool:
        """Lock a concurrency key for this transaction (SQLite: the write lock does)."""
        return True

    def _notify(self, cur: Any) -> None:
        """Wake idle workers (PostgreSQL ``NOTIFY``; SQLite waiters see the commit)."""

    # ------------------------------------------------------------------ plumbing

    def _ensure_schema(self) -> None:
        if self._schema_ready:
            return
        with self._schema_lock:
            if self._schema_ready:
                return
            version = self._stored_version()
            check_version(version, self._masked)
            if version == SCHEMA_VERSION or (version == 0 and self._create_fresh()):
                self._schema_ready = True  # the common cases: no SQLAlchemy needed
                return
            from backends.sql import schema

            with translate_errors(self._masked, secret=self._secret):
                with self._engine.connect() as conn:
                    with conn.begin():
                        version = schema.read_version(conn)
                    check_version(version, self._masked)
                    if version < SCHEMA_VERSION:
                        with conn.begin():
                            schema.migrate(conn, where=self._masked)
            self._schema_ready = True

    def _create_fresh(self) -> bool:
        """Create the schema of an empty database without SQLAlchemy; whether it did
        (SQLite: :mod:`backends.sql.sqlite_fresh`)."""
        return False

    def _stored_version(self) -> int:
        """The stored schema version read on this thread's DBAPI connection (0 when
        there is no schema yet)."""
        with translate_errors(self._masked, secret=self._secret):
            conn = self._conns.get()
        with _Scope(self, conn, False) as cur:
            cur.execute(_META_EXISTS[self.dialect])
            if cur.fetchone() is None:
                return 0
            cur.execute("SELECT value AS v FROM qc_meta WHERE key = 'schema_version'")
            row = cur.fetchone()
        return int(row["v"]) if row is not None else 0

    def _conn(self) -> Any:
        if self._closed:
            raise StorageError(f"{self!r} is closed")
        if not self._schema_ready:
            self._ensure_schema()
        conn = self._conns.current()
        if conn is None:
            with translate_errors(self._masked, secret=self._secret):
                conn = self._conns.get()
        return conn

    def _tx(self) -> _Scope:
        """A write transaction on this thread's connection; ``with`` yields a cursor."""
        return _Scope(self, self._conn(), True)

    def _stmt(self) -> _Scope:
        """One statement (atomic on its own), or reads, on this thread's connection."""
        return _Scope(self, self._conn(), False)

    def _hot(self) -> _Scope:
        """:meth:`_stmt` for the worker's hot statements (PostgreSQL: a cached cursor)."""
        return self._stmt()

    def _resolve_now(self, cur: Any, now: int | None) -> int:
        return now if now is not None else self._server_now(cur)

    # ------------------------------------------------------------------ schema

    def migrate(self) -> None:
        """Create or upgrade the schema. Idempotent; safe to run concurrently.

        Raises:
            SchemaMismatch: the stored schema is newer than this code.
            StorageUnavailable: the database cannot be reached.
        """
        from backends.sql import schema

        with translate_errors(self._masked, secret=self._secret):
            with self._engine.connect() as conn:
                with conn.begin():
                    schema.migrate(conn, where=self._masked)
        self._schema_ready = True

    def schema_version(self) -> int:
        """The schema version stored in the database (0 when there is none yet)."""
        from backends.sql import schema

        with translate_errors(self._masked, secret=self._secret):
            with self._engine.connect() as conn:
                with conn.begin():
                    return schema.read_version(conn)


    def _abort_quietly(self, conn: Any) -> bool:
        """After a failed start or commit (the scope has released what it held):
        whether ``conn`` is usable."""
        return True

    # ------------------------------------------------------------------ close

    def close(self) -> None:
        """Release connections (per-thread connections, the schema engine, the
        listener). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._conns.close_all()
        with self._wait_lock:
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            try:
                waiter.close()
            except Exception:  # noqa: BLE001 - closing a broken connection is best effort
                pass
        if self._engine_made is not None:
            self._engine_made.dispose()


class _Scope:
    """``with storage._tx() as cur`` / ``with storage._stmt() as cur`` (a class rather
    than a generator: the hot operations pay for it on every call).

    Errors are translated (:func:`~backends.sql.errors.translated`); a connection that
    failed, or cannot roll back, is forgotten so the thread reconnects next time.
    """

    __slots__ = ("_conn", "_storage", "_write")

    def __init__(self, storage: SQLBase, conn: Any, write: bool) -> None:
        self._storage = storage
        self._conn = conn
        self._write = write

    def __enter__(self) -> Any:
        if self._storage._watch is not None:
            self._storage._watch.arm(self._conn)
        try:
            return self._storage._enter(self._conn, self._write)
        except BaseException as exc:
            if self._storage._watch is not None:
                self._storage._watch.disarm(self._conn)
            self._fail(exc, entered=False)
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self._exit(exc)
        finally:
            if self._storage._watch is not None:
                self._storage._watch.disarm(self._conn)

    def _exit(self, exc: BaseException | None) -> None:
        if exc is None:
            try:
                self._storage._leave(self._conn, self._write)
            except BaseException as err:
                self._fail(err, entered=False)
                raise
            return
        self._fail(exc, entered=True)

    def _fail(self, exc: BaseException, *, entered: bool) -> None:
        """Clean up after ``exc``; raise its translation when it has one."""
        s = self._storage
        healthy = s._abort(self._conn, self._write) if entered else s._abort_quietly(self._conn)
        if _is_unavailable(exc) or not healthy:
            s._conns.discard(self._conn)
        pair = translated(exc, s._masked, secret=s._secret)
        if pair is not None:
            raise pair[0] from pair[1]
