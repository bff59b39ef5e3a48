"""The schema version this code reads and writes, importable without SQLAlchemy.

A worker checks the stored version on its first operation with a plain DBAPI query and
imports :mod:`backends.sql.schema` (and SQLAlchemy) only when it has to migrate.
"""

from __future__ import annotations

from queue_core.errors import SchemaMismatch

__all__ = ["SCHEMA_VERSION", "check_version"]

SCHEMA_VERSION = 10
"""The schema version this code reads and writes (the last step of
:data:`backends.sql.schema.MIGRATIONS`)."""


def check_version(version: int, where: str) -> None:
    """Raise :class:`SchemaMismatch` when ``version`` is newer than this code."""
    if version > SCHEMA_VERSION:
        raise SchemaMismatch(
            f"the queue-core schema in {where} is version {version}, newer than version "
            f"{SCHEMA_VERSION} that this queue-core understands; upgrade queue-core"
        )
