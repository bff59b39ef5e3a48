"""A storage reads only its own dialect's statements: a SQLite worker never parses the
PostgreSQL file (and the other way round)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("url", "read"),
    [("sqlite://", "sqlite"), ("postgresql://u@127.0.0.1:1/db", "postgresql")],
)
def test_a_storage_reads_only_its_own_dialects_statements(url: str, read: str) -> None:
    code = f"""
import json
from backends.sql import SQLStorage, queries
before = queries.load.cache_info().currsize
storage = SQLStorage({url!r})
after = queries.load.cache_info().currsize
own = queries.load(storage.dialect).items() <= storage.store.q.items()
print(json.dumps([before, after, storage.dialect, own]))
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
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == [0, 1, read, True], proc.stderr[-2000:]
