"""The SQL backend's store: one database's connections, transactions, clock and statements.

Every part of :class:`~backends.sql.SQLStorage` (jobs, flows, limits...) runs its
statements through one :class:`Store`:

* ``store.tx()``: a write transaction on this thread's DBAPI connection; ``with`` yields a
  cursor. ``store.stmt()``: one statement (atomic on its own), or reads. ``store.hot()``:
  ``stmt`` on the dialect's cached cursor (PostgreSQL's claim and finish).
  ``store.read()``: reads that need no common snapshot (SQLite: without the write lock).
  Driver errors are translated on the way out (:mod:`backends.sql.errors`), and a connection that
  failed is forgotten so the thread reconnects next time.
* ``store.q``: the named statements of the dialect (:mod:`backends.sql.queries`).
* ``store.now(now)``: a statement's ``now`` (PostgreSQL: ``None`` = the server's clock);
  ``store.resolve_now(cur, now)``: the time as a number.
* ``store.dialect``: what differs between SQLite and PostgreSQL
  (:class:`~backends.sql.dialect.Dialect`), imported for the URL's database only.
* the schema: created (or upgraded) on the first operation, checked with one plain query;
  SQLAlchemy is imported only to migrate (:mod:`backends.sql.schema`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

from backends.sql import schema
from backends.sql.connections import ThreadConnections
from backends.sql.dialect import Dialect
from backends.sql.errors import _is_unavailable, translate_errors, translated
from backends.sql.records import Row
from backends.sql.url import SQLURL
from queue_core.records.errors import StorageError
from queue_core.storage.urls import mask_url

__all__ = ["CLAIMED_STEPS", "Scope", "Store", "open_dialect"]

CLAIMED_STEPS = 65_536
"""How many claimed step jobs a store remembers (:attr:`Store.claimed_steps`)."""


def open_dialect(url: SQLURL, busy_timeout_ms: int) -> Dialect:
    """The dialect of ``url`` (its module, and driver, imported now)."""
    if url.backend_name == "postgresql":
        from backends.sql.postgresql import PostgreSQL

        return PostgreSQL(url)
    from backends.sql.sqlite import SQLite

    return SQLite(url, busy_timeout_ms)


class Store:
    """One SQL database as the parts of a storage use it.

    Args:
        url: the parsed URL (the backend's own options removed).
        busy_timeout_ms: SQLite: how long a writer waits for another process's lock.
        engine_options: ``(pool_size, max_overflow, echo)`` of the schema engine.
    """

    def __init__(
        self, url: SQLURL, *, busy_timeout_ms: int, engine_options: tuple[int, int, bool]
    ) -> None:
        self.masked = mask_url(url.render(hide_password=False))
        self.secret = url.render(hide_password=False)
        """The URL as given: :func:`~queue_core.storage.urls.redact` scrubs its credentials
        (the password, ``?password=``...) from driver messages."""
        with translate_errors(self.masked, secret=self.secret):
            self.dialect = open_dialect(url, busy_timeout_ms)
        self.q = self.dialect.q
        self.watch = self.dialect.watch
        self.conns = ThreadConnections(self.dialect.connect)
        self.conns.shared = self.dialect.shared_connection
        self.closed = False
        self.closing: list[Callable[[], None]] = []
        """Called by :meth:`close` (parts that hold connections of their own)."""
        self.claimed_steps: dict[str, tuple[str, str]] = {}
        """Flow steps' jobs this store claimed, ``{job id: (execution id, step id)}``: their
        ends go straight to their executions (finish forgets them; at most
        :data:`CLAIMED_STEPS` are kept, any other end is looked up)."""
        self.now = self.dialect.clock
        """A statement's ``now`` for a caller's ``now`` (PostgreSQL: ``None`` = server clock)."""
        self.array = self.dialect.array
        """A list parameter (``{in:...}`` in the statements)."""
        self._schema_ready = False
        self._schema_lock = threading.Lock()
        self._engine_options = engine_options
        self._engine: Any = None

    def __repr__(self) -> str:
        return f"SQLStorage({self.masked!r})"

    # ------------------------------------------------------------------ scopes

    def _conn(self) -> Any:
        if self.closed:
            raise StorageError(f"{self!r} is closed")
        if not self._schema_ready:
            self.ensure_schema()
        conn = self.conns.current()
        if conn is None:
            with translate_errors(self.masked, secret=self.secret):
                conn = self.conns.get()
        return conn

    def tx(self) -> Scope:
        """A write transaction on this thread's connection; ``with`` yields a cursor."""
        return Scope(self, self._conn(), True)

    def tx_pipelined(self) -> Scope:
        """:meth:`tx` whose statements are sent without waiting for the replies no one
        reads (where the dialect can: :meth:`Dialect.pipeline`): ``BEGIN`` goes with the
        first statement, and the writes after the last read go with ``COMMIT``. Only
        for code that reads every result it uses (a ``rowcount`` is not one)."""
        return Scope(self, self._conn(), True, pipelined=True)

    def stmt(self) -> Scope:
        """One statement (atomic on its own), or reads, on this thread's connection."""
        return Scope(self, self._conn(), False)

    def hot(self) -> Scope:
        """:meth:`stmt` on the dialect's cached cursor, if it keeps one."""
        conn = self._conn()
        return Scope(self, conn, False, self.dialect.hot_cursor(conn))

    def read(self) -> Scope:
        """Reads whose statements need not share one snapshot (each reads a committed
        state): SQLite reads a file without the process's write lock; else :meth:`stmt`."""
        conn = self._conn()
        cur = self.dialect.read_cursor(conn)
        return Scope(self, conn, False) if cur is None else Scope(self, conn, None, cur)

    def resolve_now(self, cur: Any, now: int | None) -> int:
        """``now``, or the storage's clock read on ``cur``."""
        return now if now is not None else self.dialect.server_now(cur)

    def fetch(self, name: str, params: dict[str, Any]) -> list[Row]:
        """The rows of statement ``name`` (one statement)."""
        with self.stmt() as cur:
            rows: list[Row] = cur.execute(self.q[name], params).fetchall()
        return rows

    def lock_key(self, cur: Any, key: str, *, wait: bool = True, flows: bool = False) -> bool:
        """Lock ``key`` for this transaction (see :meth:`Dialect.lock_key`)."""
        return self.dialect.lock_key(cur, key, wait=wait, flows=flows)

    def notify(self, cur: Any) -> None:
        """Wake idle workers when this transaction commits."""
        self.dialect.notify(cur)

    def lock_keys(self, cur: Any, keys: Sequence[str]) -> None:
        """Lock ``keys`` in sorted order (no lock-order deadlocks), waiting for each."""
        for key in sorted(keys):
            self.dialect.lock_key(cur, key, wait=True)

    # ------------------------------------------------------------------ schema

    @property
    def engine(self) -> Any:
        """The schema engine, made (and SQLAlchemy imported) on first use."""
        if self._engine is None:
            with translate_errors(self.masked, secret=self.secret):
                self._engine = self.dialect.make_engine(*self._engine_options)
        return self._engine

    def ensure_schema(self) -> None:
        """Create or upgrade the schema unless it is current (once per store)."""
        if self._schema_ready:
            return
        with self._schema_lock:
            if self._schema_ready:
                return
            version = self._stored_version()
            schema.check_version(version, self.masked)
            if version != schema.SCHEMA_VERSION and not (version == 0 and self._create_fresh()):
                self.migrate()  # the rare case: SQLAlchemy needed
            self._schema_ready = True

    def _stored_version(self) -> int:
        """The stored schema version read on this thread's DBAPI connection (0 when
        there is no schema yet)."""
        with translate_errors(self.masked, secret=self.secret):
            conn = self.conns.get()
        with Scope(self, conn, False) as cur:
            if cur.execute(self.dialect.meta_exists).fetchone() is None:
                return 0
            cur.execute("SELECT value AS v FROM qc_meta WHERE key = 'schema_version'")
            row = cur.fetchone()
        return int(row["v"]) if row is not None else 0

    def _create_fresh(self) -> bool:
        with translate_errors(self.masked, secret=self.secret):
            conn = self.conns.get()
        with Scope(self, conn, True) as cur:
            return self.dialect.create_fresh(cur)

    def migrate(self) -> None:
        """Create or upgrade the schema (:func:`backends.sql.schema.migrate`)."""
        with translate_errors(self.masked, secret=self.secret):
            with self.engine.connect() as conn:
                with conn.begin():
                    schema.migrate(conn, where=self.masked)
        self._schema_ready = True

    def schema_version(self) -> int:
        """The schema version stored in the database (0 when there is none yet)."""
        with translate_errors(self.masked, secret=self.secret):
            with self.engine.connect() as conn:
                with conn.begin():
                    return schema.read_version(conn)

    # ------------------------------------------------------------------ close

    def close(self) -> None:
        """Release every connection (per-thread connections, the parts' own, the schema
        engine). Idempotent."""
        if self.closed:
            return
        self.closed = True
        self.conns.close_all()
        for close in self.closing:
            close()
        if self._engine is not None:
            self._engine.dispose()


class Scope:
    """``with store.tx() as cur`` / ``store.stmt()`` / ``store.hot()`` (a class rather
    than a generator: the hot operations pay for it on every call).

    Errors are translated (:func:`~backends.sql.errors.translated`); a connection that
    failed, or cannot roll back, is forgotten so the thread reconnects next time.
    """

    __slots__ = ("_conn", "_cursor", "_pipe", "_pipelined", "_store", "_write")

    def __init__(
        self,
        store: Store,
        conn: Any,
        write: bool | None,
        cursor: Any = None,
        *,
        pipelined: bool = False,
    ) -> None:
        """``write``: a transaction (``True``), one statement or reads (``False``), or
        ``None``: reads on ``cursor`` that the dialect neither enters nor leaves;
        ``pipelined``: see :meth:`Store.tx_pipelined`."""
        self._store = store
        self._conn = conn
        self._write = write
        self._cursor = cursor
        self._pipelined = pipelined
        self._pipe: Any = None
        """The dialect's open pipeline, if any (:meth:`Dialect.pipeline`)."""

    def __enter__(self) -> Any:
        watch = self._store.watch
        if watch is not None:
            watch.arm(self._conn)
        if self._cursor is not None:
            return self._cursor
        try:
            if self._pipelined:
                self._pipe = self._store.dialect.pipeline(self._conn)
            return self._store.dialect.enter(self._conn, self._write is True)
        except BaseException as exc:
            if watch is not None:
                watch.disarm(self._conn)
            self._end_pipe(exc)
            self._fail(exc, entered=False)
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._write is None:
                self._cursor.close()
                if exc is not None:
                    self._fail(exc, entered=False)
                return
            if exc is not None:
                self._end_pipe(exc)
                self._fail(exc, entered=True)
                return
            try:
                self._store.dialect.leave(self._conn, self._write is True)
                self._end_pipe(None)  # the replies not read yet: a failed statement raises
            except BaseException as err:
                self._end_pipe(err)
                self._fail(err, entered=False)
                raise
        finally:
            if self._store.watch is not None:
                self._store.watch.disarm(self._conn)

    def _end_pipe(self, exc: BaseException | None) -> None:
        """Leave the pipeline, if one is open: with ``exc``, quietly (what it held is
        rolled back next); else waiting for every reply (raising the first error)."""
        pipe, self._pipe = self._pipe, None
        if pipe is None:
            return
        if exc is None:
            pipe.__exit__(None, None, None)
            return
        try:
            pipe.__exit__(type(exc), exc, exc.__traceback__)
        except Exception:  # noqa: BLE001, S110 - exc is the error to report
            pass

    def _fail(self, exc: BaseException, *, entered: bool) -> None:
        """Clean up after ``exc``; raise its translation when it has one."""
        s, d = self._store, self._store.dialect
        healthy = (
            d.abort(self._conn, self._write is True) if entered else d.abort_quietly(self._conn)
        )
        if _is_unavailable(exc) or not healthy:
            s.conns.discard(self._conn)
        pair = translated(exc, s.masked, secret=s.secret)
        if pair is not None:
            raise pair[0] from pair[1]
