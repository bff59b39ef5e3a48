"""The URL of one backend for tests parametrised over backends by name."""

from __future__ import annotations

from pathlib import Path

import pytest


def backend_url(request: pytest.FixtureRequest, tmp_path: Path, name: str) -> str:
    """``memory://``, a fresh SQLite file in ``tmp_path``, or the ``<name>_url`` fixture
    (a real server started by tests/servers: postgres, redis, redis_cluster, sqs)."""
    if name == "memory":
        return "memory://"
    if name == "sqlite":
        return f"sqlite:///{tmp_path / 'queue.db'}"
    url = request.getfixturevalue(f"{name}_url")
    assert isinstance(url, str)
    return url
