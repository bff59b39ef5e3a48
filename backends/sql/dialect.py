"""What differs between SQLite and PostgreSQL, as the one object the store holds.

The store (:mod:`backends.sql.store`) opens connections and scopes through its dialect,
and the parts run the batch statements of the hot operations through it; every other
statement is shared (``backends/sql/sql/shared.sql``). Two implementations:
:class:`backends.sql.sqlite.SQLite` and :class:`backends.sql.postgresql.PostgreSQL`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from backends.sql.queries import DialectName
from backends.sql.records import EndRow, Order, TemplateRows
from backends.sql.url import SQLURL
from queue_core.records.jobs import ClaimedJob, JobState, LeaseRef, NewJob, RenewResult

__all__ = ["Dialect"]


class Dialect(Protocol):
    """A SQL dialect: connections and transactions, its clock, its parameters, its locks,
    and the statements whose shape differs (enqueue, claim, renew, finish)."""

    name: DialectName
    url: SQLURL
    """The database's URL (the backend's own options removed)."""
    pgbouncer: bool
    """PostgreSQL behind PgBouncer in transaction pooling (``?pgbouncer=true``): no
    session state (prepared statements, ``SET``, ``LISTEN``)."""
    q: Mapping[str, str]
    """Every statement this dialect runs (:func:`backends.sql.queries.load`)."""
    locking: bool
    """Rows and keys are locked explicitly (PostgreSQL); SQLite's write lock serializes
    every write transaction instead."""
    single_statement_batches: bool
    """A batch enqueue or renew is one statement (no transaction needed)."""
    claim_in_tx: bool
    """:meth:`claim` runs in a write transaction (else on the hot cursor)."""
    shared_connection: bool
    """Every thread gets the same connection (an in-memory SQLite database)."""
    watch: Any
    """The :class:`~backends.sql.watchdog.Watchdog` bounding each call, or ``None``."""
    meta_exists: str
    """A query with a row when the schema's ``qc_meta`` table exists."""

    # ------------------------------------------------------------------ connections

    def connect(self) -> Any:
        """A new DBAPI connection for one thread."""
        ...

    def connect_waiter(self) -> Any:
        """A new connection of its own for an idle worker's wait."""
        ...

    def pipeline(self, conn: Any) -> Any:
        """An entered pipeline on ``conn`` (statements sent without waiting for their
        replies until one is read; ``__exit__`` waits for the rest), or ``None`` where
        the driver has none (:meth:`~backends.sql.store.Store.tx_pipelined`)."""
        ...

    def pipelined(self, cur: Any) -> bool:
        """Whether ``cur``'s connection is in the pipeline of :meth:`pipeline`."""
        ...

    def enter(self, conn: Any, write: bool) -> Any:
        """Start a scope on ``conn`` (a write transaction when ``write``); a cursor whose
        rows are read by column name."""
        ...

    def leave(self, conn: Any, write: bool) -> None:
        """End a scope that succeeded (commit)."""
        ...

    def abort(self, conn: Any, write: bool) -> bool:
        """End a scope that failed (roll back, never raise); whether ``conn`` is usable."""
        ...

    def abort_quietly(self, conn: Any) -> bool:
        """After a failed start or commit: whether ``conn`` is usable."""
        ...

    def hot_cursor(self, conn: Any) -> Any:
        """This thread's cached cursor on ``conn`` for one hot statement, or ``None``."""
        ...

    def read_cursor(self, conn: Any) -> Any:
        """A cursor on ``conn`` for reads that need no scope (no lock, no transaction:
        each statement reads a committed state), or ``None`` to read in a plain scope."""
        ...

    def make_engine(self, pool_size: int, max_overflow: int, echo: bool) -> Any:
        """The SQLAlchemy engine that creates and migrates the schema."""
        ...

    def create_fresh(self, cur: Any) -> bool:
        """Create the schema of an empty database without SQLAlchemy; whether it did."""
        ...

    # ------------------------------------------------------------------ values

    def clock(self, now: int | None) -> int | None:
        """The ``now`` parameter of a statement (PostgreSQL: ``None`` = server clock)."""
        ...

    def server_now(self, cur: Any) -> int:
        """The storage's clock, in epoch ms."""
        ...

    def array(self, values: Sequence[Any]) -> Any:
        """A list parameter (``{in:...}``): SQLite a JSON array (text), PostgreSQL an array."""
        ...

    def lock_key(self, cur: Any, key: str, *, wait: bool, flows: bool = False) -> bool:
        """Lock ``key`` for this transaction (a flow's key when ``flows``); whether it is
        held (``wait=False`` does not wait for another holder)."""
        ...

    def notify(self, cur: Any) -> None:
        """Wake idle workers (PostgreSQL ``NOTIFY``; SQLite waiters see the commit)."""
        ...

    # ------------------------------------------------------------------ batch statements

    def many(self, cur: Any, name: str, rows: Sequence[Any]) -> None:
        """``executemany`` of statement ``name`` over ``rows`` (PostgreSQL: a large batch
        as one statement over arrays, when the dialect has ``<name>_arrays``)."""
        ...

    def insert(
        self,
        cur: Any,
        jobs: Sequence[NewJob],
        states: Sequence[JobState] | None,
        reasons: Sequence[str | None] | None,
        now: int | None,
    ) -> None:
        """Insert ``jobs`` (all queued when ``states`` is ``None``) and wake waiters."""
        ...

    def claim(
        self,
        cur: Any,
        worker_id: str,
        queues: list[str],
        limit: int,
        lease_ms: int,
        now: Any,
        pauses_version: str | None,
        ahead: bool = False,
    ) -> tuple[list[Any], bool]:
        """Start the unkeyed jobs among the top ``limit`` ready ones: (their rows, whether
        a keyed or rate-limited job may be ready). Nothing when the stored pauses'
        version is not ``pauses_version`` (the one ``queues`` was filtered with)."""
        ...

    def start_claimed(
        self, cur: Any, refs: Sequence[LeaseRef], ago_ms: list[int], now: Any
    ) -> list[bool]:
        """``SupportsPrefetch.start_claimed`` of ``refs``: per ref, whether it was current."""
        ...

    def claimed(self, rows: list[Any]) -> list[tuple[Order, ClaimedJob]]:
        """``(order, job)`` of the rows :meth:`claim` started."""
        ...

    def renew(
        self, cur: Any, refs: Sequence[LeaseRef], lease_ms: int, now: int | None
    ) -> RenewResult:
        """Extend the current leases among ``refs`` (rows taken in job id order)."""
        ...

    def finish_batch(
        self, cur: Any, ends: list[EndRow], now: int | None, *, steps: bool = False
    ) -> dict[str, str | None]:
        """Apply ends (one per job id) fenced, to plain jobs only (to flow steps' jobs only
        when ``steps``); ``{job id: concurrency key}`` of those taken."""
        ...

    def template_rows(self, n: int) -> bool:
        """Whether a plain template batch of ``n`` jobs goes by :meth:`insert_template`
        (else as expanded jobs through :meth:`insert`)."""
        ...

    def insert_template(
        self, cur: Any, rows: TemplateRows, jobs: Sequence[tuple[str, bytes, int]], now: Any
    ) -> None:
        """Insert the jobs ``(id, payload, lost_delay_ms)`` of ``rows``' template."""
        ...
