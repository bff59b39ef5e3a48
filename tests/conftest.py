"""Root conftest: session-scoped real servers live in tests/servers/, one module each."""

pytest_plugins = [
    "tests.servers.postgres",
    "tests.servers.pgbouncer",
    "tests.servers.redis",
    "tests.servers.redis_cluster",
    "tests.servers.moto",
]
