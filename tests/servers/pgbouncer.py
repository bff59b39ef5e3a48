"""Session fixture: PgBouncer in transaction pooling mode in front of the test PostgreSQL.

* ``pgbouncer_server`` (session): Debian's ``pgbouncer`` (``apt-get install pgbouncer``;
  ``.ci/run`` installs it) on a random port of 127.0.0.1, ``pool_mode = transaction``,
  ``auth_type = trust``, every database forwarded to ``postgres_server``. It runs as the
  same non-root user as PostgreSQL (PgBouncer refuses to run as root). A missing binary
  or a bouncer that does not start is an error, never a skip.
* ``pgbouncer_clean_url`` (function): ``postgres_clean_url`` (the shared migrated
  database, emptied for the test) reached through the bouncer, with ``?pgbouncer=true``.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from backends.sql.url import parse_sql_url
from tests.contract.urls import with_option
from tests.servers.ports import free_port
from tests.servers.postgres import SUPERUSER, PostgresServer, _os_user
from tests.servers.process import ServerProcess

PGBOUNCER = os.environ.get("QUEUE_CORE_PGBOUNCER", "/usr/sbin/pgbouncer")


class PgBouncer(ServerProcess):
    """One ``pgbouncer`` process forwarding every database to ``upstream``."""

    name = "pgbouncer"
    stop_timeout = 10.0

    def __init__(self, upstream: PostgresServer, pool_mode: str = "transaction") -> None:
        if shutil.which(PGBOUNCER) is None:
            raise RuntimeError(f"{PGBOUNCER} not found: apt-get install -y pgbouncer")
        self.user = _os_user()
        self.root = Path(tempfile.mkdtemp(prefix="qc-pgb-"))
        self.port = free_port()
        self.logfile = self.root / "pgbouncer.log"
        (self.root / "userlist.txt").write_text(f'"{SUPERUSER}" ""\n')
        (self.root / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={upstream.host} port={upstream.port}\n"
            "[pgbouncer]\n"
            f"listen_addr = {self.host}\nlisten_port = {self.port}\n"
            "unix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.root / 'userlist.txt'}\n"
            f"pool_mode = {pool_mode}\n"
            "max_client_conn = 1000\ndefault_pool_size = 40\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
            f"logfile = {self.logfile}\npidfile = {self.root / 'pgbouncer.pid'}\n"
            f"admin_users = {SUPERUSER}\n"
        )
        if self.user is not None:
            info = pwd.getpwnam(self.user)
            for p in (self.root, *self.root.iterdir()):
                os.chown(p, info.pw_uid, info.pw_gid)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> None:
        self.launch([PGBOUNCER, str(self.root / "pgbouncer.ini")], timeout, output_to_log=False)

    def probe_dsn(self) -> str:
        return f"postgresql://{SUPERUSER}@{self.host}:{self.port}/postgres"

    def url_for(self, direct_url: str) -> str:
        """``direct_url`` (a queue-core PostgreSQL URL) through this bouncer."""
        u = replace(parse_sql_url(direct_url), host=self.host, port=self.port)
        return with_option(u.render(hide_password=False), "pgbouncer", "true")


@pytest.fixture(scope="session")
def pgbouncer_server(postgres_server: PostgresServer) -> Iterator[PgBouncer]:
    bouncer = PgBouncer(postgres_server)
    try:
        bouncer.start()
        yield bouncer
    finally:
        bouncer.destroy()


@pytest.fixture
def pgbouncer_clean_url(pgbouncer_server: PgBouncer, postgres_clean_url: str) -> str:
    """The shared migrated database, emptied for this test, through PgBouncer."""
    return pgbouncer_server.url_for(postgres_clean_url)
