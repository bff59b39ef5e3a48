"""backends.sql.queries reads a dialect's file on first access: a SQLite worker never
parses the PostgreSQL statements (and the other way round)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("module", "read"),
    [("backends.sql.sqlite", ["SQLITE"]), ("backends.sql.postgresql", ["POSTGRESQL"])],
)
def test_a_dialect_module_reads_only_its_own_queries(module: str, read: list[str]) -> None:
    code = f"""
import json
import {module}
from backends.sql import queries
first = sorted(queries._loaded)
same = queries.SQLITE is queries.SQLITE and queries.POSTGRESQL is queries.POSTGRESQL
try:
    queries.NOPE
except AttributeError as exc:
    error = str(exc)
print(json.dumps([first, sorted(queries._loaded), same, error]))
"""
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [
        read,
        ["POSTGRESQL", "SQLITE"],
        True,
        "module 'backends.sql.queries' has no attribute 'NOPE'",
    ], proc.stderr[-2000:]
