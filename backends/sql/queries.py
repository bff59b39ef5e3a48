"""The SQL of the SQL backend: named queries in one ``.sql`` file per dialect.

``backends/sql/sql/sqlite.sql`` and ``backends/sql/sql/postgresql.sql`` hold every
statement the backend runs, each under a ``-- name: <name>`` header (the way
procrastinate keeps its ``queries.sql``); comment lines below a header describe it and
are not sent. Both files define the same names, so the shared code in
:mod:`backends.sql.storage` runs ``queries["get_job"]`` without knowing the dialect.

Each file uses its driver's own parameter style: ``:name`` for sqlite3, ``%(name)s`` for
psycopg. Three placeholders are expanded, all once per shape and cached by the caller:

* ``{now}`` (PostgreSQL only, expanded at load): the operation's time,
  ``coalesce(%(now)s, <server clock>)``, so ``now=None`` means the server's clock,
  stable within one statement. SQLite always receives ``:now`` from Python.
* ``{queues}``: the queue filter of the claim, which differs with the number of queues
  (see :func:`queues_filter`).
* ``{rows}``: the ``VALUES`` rows of a batch (SQLite finish).

Each file is read once, on the first access to ``SQLITE`` or ``POSTGRESQL``.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import MappingProxyType
from typing import Literal

__all__ = ["PG_NOW", "Dialect", "load", "parse", "queues_filter"]

Dialect = Literal["sqlite", "postgresql"]

PG_NOW = "(extract(epoch from statement_timestamp()) * 1000)::bigint"
"""Epoch milliseconds by the PostgreSQL server's clock, stable within one statement."""

_HEADER = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def parse(text: str) -> dict[str, str]:
    """The named queries of one ``.sql`` file's ``text``.

    Raises:
        ValueError: a name defined twice, or text before the first header.
    """
    parts = _HEADER.split(text)
    if parts[0].strip() and not all(
        line.startswith("--") or not line.strip() for line in parts[0].splitlines()
    ):
        raise ValueError("SQL text before the first '-- name:' header")
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        lines = [ln.strip() for ln in body.splitlines()]
        queries[name] = " ".join(ln for ln in lines if ln and not ln.startswith("--"))
    return queries


def load(dialect: Dialect) -> MappingProxyType[str, str]:
    """Every named query of ``dialect``, with ``{now}`` expanded (PostgreSQL)."""
    # A plain file read: importlib.resources (and the zipfile it imports) cost a worker
    # tens of milliseconds at start-up; the package is installed as files.
    text = (Path(__file__).parent / "sql" / f"{dialect}.sql").read_text("utf-8")
    queries = parse(text)
    if dialect == "postgresql":
        now = f"coalesce(CAST(%(now)s AS bigint), {PG_NOW})"
        queries = {name: sql.replace("{now}", now) for name, sql in queries.items()}
    return MappingProxyType(queries)


def queues_filter(dialect: Dialect, n: int) -> str:
    """The claim's ``{queues}`` for ``n`` queue names: one queue is an equality (so the
    ready index yields the order and the scan stops at ``limit``).

    SQLite: ``queue IN (:q0, :q1, ...)``; PostgreSQL: ``queue = %(q0)s`` for one queue,
    ``queue = ANY(%(queues)s)`` for more.
    """
    if dialect == "sqlite":
        return "queue IN (" + ", ".join(f":q{i}" for i in range(n)) + ")"
    return "queue = %(q0)s" if n == 1 else "queue = ANY(CAST(%(queues)s AS text[]))"


_DIALECTS: dict[str, Dialect] = {"SQLITE": "sqlite", "POSTGRESQL": "postgresql"}
_loaded: dict[str, MappingProxyType[str, str]] = {}


def __getattr__(name: str) -> MappingProxyType[str, str]:
    """``SQLITE`` and ``POSTGRESQL``: each dialect's queries, read on first access (a
    worker parses only its own dialect's file)."""
    dialect = _DIALECTS.get(name)
    if dialect is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _loaded:
        _loaded[name] = load(dialect)
    return _loaded[name]
