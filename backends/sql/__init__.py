"""The SQL backend: SQLite (embedded default) and PostgreSQL through SQLAlchemy Core.

``from backends.sql import SQLStorage``; most users write a URL instead
(``sqlite:///jobs.db``, ``postgresql+psycopg://user:pw@host/db``).
"""

from backends.sql.storage import SQLStorage

__all__ = ["SQLStorage"]
