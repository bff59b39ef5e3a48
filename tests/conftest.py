"""Root conftest: session-scoped real servers live in tests/servers/, one module each.

A server's fixtures are registered when its driver is installed, so ``pytest tests/unit``
runs with only the base install (``pip install -e . pytest``); in the full test
environment (``.[test]``, what CI installs) every driver is there and every server
fixture is registered. A test that needs a server whose driver is missing errors with
"fixture not found" -- it is never skipped.
"""

from importlib.util import find_spec

_SERVERS = {
    "tests.servers.postgres": "psycopg",
    "tests.servers.pgbouncer": "psycopg",
    "tests.servers.redis": "redis",
    "tests.servers.redis_cluster": "redis",
    "tests.servers.moto": "moto",
}

pytest_plugins = [plugin for plugin, driver in _SERVERS.items() if find_spec(driver) is not None]
