"""``Store.tx_pipelined`` (the transaction of a flow step's end): on PostgreSQL its
statements go in psycopg's pipeline mode, so a failed statement whose reply was never read
must still fail the transaction, roll back what came before it, and leave the connection
usable; on SQLite it is a plain transaction."""

from __future__ import annotations

import pytest

from backends.sql import SQLStorage
from queue_core.testing import T0, new_job


def _count(storage: SQLStorage) -> int:
    with storage.store.stmt() as cur:
        row = cur.execute("SELECT count(*) AS n FROM qc_pipe_probe").fetchone()
    return int(row["n"] if isinstance(row, dict) or hasattr(row, "keys") else row[0])


def test_writes_whose_replies_are_never_read_are_committed(storage: SQLStorage) -> None:
    storage.enqueue([new_job()], now=T0)  # the schema and the connection exist
    with storage.store.tx() as cur:
        cur.execute("CREATE TABLE qc_pipe_probe (v integer NOT NULL)")
    with storage.store.tx_pipelined() as cur:
        cur.execute("INSERT INTO qc_pipe_probe VALUES (1)")
        cur.execute("INSERT INTO qc_pipe_probe VALUES (2)")
    assert _count(storage) == 2


def test_a_failed_statement_never_read_rolls_the_transaction_back(storage: SQLStorage) -> None:
    storage.enqueue([new_job()], now=T0)
    with storage.store.tx() as cur:
        cur.execute("CREATE TABLE qc_pipe_probe (v integer NOT NULL)")
    with pytest.raises(Exception, match="(?i)null"):
        with storage.store.tx_pipelined() as cur:
            cur.execute("INSERT INTO qc_pipe_probe VALUES (1)")
            cur.execute("INSERT INTO qc_pipe_probe VALUES (NULL)")  # fails; nobody reads it
            cur.execute("INSERT INTO qc_pipe_probe VALUES (3)")
    assert _count(storage) == 0
    # the thread's connection is usable again: a job is enqueued and claimed on it
    storage.enqueue([new_job()], now=T0)
    assert len(storage.claim("w", ["default"], 10, 1000, now=T0)) == 2
    with storage.store.tx_pipelined() as cur:
        cur.execute("INSERT INTO qc_pipe_probe VALUES (4)")
    assert _count(storage) == 1
