"""The SQL of the SQL backend: named statements in ``.sql`` files, loaded once per dialect.

Each statement sits under a ``-- name: <name>`` header (the way procrastinate keeps its
``queries.sql``); comment lines below a header describe it and are not sent.

* ``sql/shared.sql`` and ``sql/flows.sql``: what both dialects run, written once, in
  sqlite3's parameter style (``:name``, ``?`` for positional rows). For PostgreSQL
  :func:`load` rewrites them to psycopg's (``%(name)s``, ``%s``).
* ``sql/sqlite.sql`` / ``sql/postgresql.sql``: the statements only that dialect runs (the
  batch shapes of enqueue, claim, renew and finish; advisory locks), in its own style.

Placeholders, expanded at load:

* ``{now}``: the operation's time. SQLite always receives ``:now`` from Python;
  PostgreSQL ``coalesce(%(now)s, <server clock>)``, so ``now=None`` means the server's
  clock, stable within one statement.
* ``{in:p:type}`` / ``{not_in:p:type}``: membership in the list parameter ``p``: SQLite
  ``IN (SELECT value FROM json_each(:p))`` (a JSON list), PostgreSQL ``= ANY(CAST(%(p)s AS
  type[]))`` (an array; ``<> ALL`` for ``not_in``).
* ``{for_update}`` / ``{for_share}`` / ``{skip_locked}``: PostgreSQL row locks; nothing on
  SQLite, whose write transactions (``BEGIN IMMEDIATE``) are serialized by the write lock.
* ``{reap_margin}``: :data:`queue_core.rules.leases.REAP_MARGIN_MS`, how long after a
  deadline the reaper judges it passed (``deadline <= now - {reap_margin}``, as
  :func:`~queue_core.rules.leases.reap_cutoff`).

Three more are expanded by the caller, once per shape: ``{queues}`` (the claim's queue
filter, :func:`queues_filter`), ``{paused}`` (``select_ready``'s pause column: ``NULL``, or
the ``paused_field`` expression while a task or flow is paused) and ``{rows}`` (the
``VALUES`` rows of a finish batch).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from queue_core.rules.leases import REAP_MARGIN_MS

__all__ = ["PG_NOW", "DialectName", "load", "parse", "queues_filter", "rewrite"]

DialectName = Literal["sqlite", "postgresql"]

PG_NOW = "(extract(epoch from statement_timestamp()) * 1000)::bigint"
"""Epoch milliseconds by the PostgreSQL server's clock, stable within one statement."""

_DIR = Path(__file__).parent / "sql"
_SHARED = ("shared.sql", "flows.sql")
_HEADER = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
_LIST = re.compile(r"\{(in|not_in):([a-z_]+):([a-z]+)\}")
_LOCKS = {
    "{for_update}": "FOR UPDATE",
    "{for_share}": "FOR SHARE",
    "{skip_locked}": "FOR UPDATE SKIP LOCKED",
}
_REAP_MARGIN = str(REAP_MARGIN_MS)


def parse(text: str) -> dict[str, str]:
    """The named statements of one ``.sql`` file's ``text``.

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


def _list(dialect: DialectName, match: re.Match[str]) -> str:
    op, name, kind = match.groups()
    if dialect == "sqlite":
        return f"{'NOT IN' if op == 'not_in' else 'IN'} (SELECT value FROM json_each(:{name}))"
    return f"{'<> ALL' if op == 'not_in' else '= ANY'}(CAST(%({name})s AS {kind}[]))"


def rewrite(sql: str, dialect: DialectName, *, shared: bool) -> str:
    """``sql`` with its placeholders expanded for ``dialect``; a ``shared`` statement
    (sqlite3's parameter style) also gets psycopg's parameter style on PostgreSQL.

    Raises:
        ValueError: a shared statement holds a ``%`` (psycopg would read it as a parameter).
    """
    if shared and "%" in sql:
        raise ValueError(f"a shared statement may not hold a literal '%': {sql[:60]!r}")
    sql = _LIST.sub(lambda m: _list(dialect, m), sql)
    sql = sql.replace("{reap_margin}", _REAP_MARGIN)
    if dialect == "sqlite":
        sql = sql.replace("{now}", ":now")
        for lock in _LOCKS:
            sql = sql.replace(lock, "")
        return sql.strip()
    if shared:
        sql = _NAMED.sub(r"%(\1)s", sql).replace("?", "%s")
    for lock, clause in _LOCKS.items():
        sql = sql.replace(lock, clause)
    return sql.replace("{now}", f"coalesce(CAST(%(now)s AS bigint), {PG_NOW})").strip()


@lru_cache(maxsize=2)
def load(dialect: DialectName) -> Mapping[str, str]:
    """Every named statement ``dialect`` runs: the shared files' and its own, expanded.

    Read on first use (a SQLite worker never parses the PostgreSQL file).

    Raises:
        ValueError: a name defined in two of the files.
    """
    # A plain file read: importlib.resources (and the zipfile it imports) cost a worker
    # tens of milliseconds at start-up; the package is installed as files.
    files = [(name, True) for name in _SHARED] + [(f"{dialect}.sql", False)]
    out: dict[str, str] = {}
    for name, shared in files:
        for key, sql in parse((_DIR / name).read_text("utf-8")).items():
            if key in out:
                raise ValueError(f"query {key!r} is defined in two files (the second: {name})")
            out[key] = rewrite(sql, dialect, shared=shared)
    return MappingProxyType(out)


def queues_filter(dialect: DialectName, n: int) -> str:
    """The claim's ``{queues}`` for ``n`` queue names: one queue is an equality (so the
    ready index yields the order and the scan stops at ``limit``).

    SQLite: ``queue IN (:q0, :q1, ...)``; PostgreSQL: ``queue = %(q0)s`` for one queue,
    ``queue = ANY(%(queues)s)`` for more.
    """
    if dialect == "sqlite":
        return "queue IN (" + ", ".join(f":q{i}" for i in range(n)) + ")"
    return "queue = %(q0)s" if n == 1 else "queue = ANY(CAST(%(queues)s AS text[]))"
