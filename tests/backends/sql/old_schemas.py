"""SQLite databases at an old schema version, for the migration tests: the schema as that
version wrote it, kept in ``data/sqlite_schema_v<N>.sql`` (comment lines, statements
separated by a line holding ``;``)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

_DATA = Path(__file__).with_name("data")


def sqlite_at_version(path: Path, version: int) -> None:
    """Create the SQLite database ``path`` with schema version ``version`` and no jobs."""
    script = _DATA / f"sqlite_schema_v{version}.sql"
    body = [ln for ln in script.read_text("utf-8").splitlines() if not ln.startswith("--")]
    db = sqlite3.connect(path)
    try:
        for statement in "\n".join(body).split("\n;\n"):
            if statement.strip():
                db.execute(statement)
        db.commit()
    finally:
        db.close()
