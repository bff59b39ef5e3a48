"""Session fixture: a real PostgreSQL 15 started from ``initdb`` for the test session.

* ``postgres_server`` (session): initdb into a fresh temp dir as a non-root user
  (``qcpg``, created when running as root and missing), a random free port on
  127.0.0.1, ``fsync=off``; torn down at session end. A server that fails to start is
  an error, never a skip.
* ``postgres_template`` (session): a database migrated to the current queue-core schema.
* ``postgres_url`` (function): a fresh database cloned from the template
  (``CREATE DATABASE ... TEMPLATE``), dropped after the test (~0.5 s on a busy machine).
* ``postgres_clean_url`` (function): a shared migrated database whose queue-core tables
  are truncated before the test (a few ms); what the contract suite uses.

:class:`PostgresServer` also offers ``stop()``/``start()``/``restart()`` for tests of
connection loss.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.servers.ports import free_port
from tests.servers.process import ServerProcess

PG_BIN = Path(os.environ.get("QUEUE_CORE_PG_BIN", "/usr/lib/postgresql/15/bin"))
PG_USER = "qcpg"
SUPERUSER = "postgres"


def _os_user() -> str | None:
    """The user to run PostgreSQL as: ``qcpg`` when we are root (created if missing)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(PG_USER)
    except KeyError:
        subprocess.run(["useradd", "-r", "-m", PG_USER], check=True, capture_output=True)
    return PG_USER


class PostgresServer(ServerProcess):
    """One PostgreSQL server process on 127.0.0.1 with trust authentication."""

    name = "postgres"

    def __init__(self) -> None:
        self.user = _os_user()
        self.root = Path(tempfile.mkdtemp(prefix="qc-pg-"))
        self.datadir = self.root / "data"
        self.sockdir = self.root / "sock"
        self.logfile = self.root / "postgres.log"
        self.sockdir.mkdir()
        if self.user is not None:
            info = pwd.getpwnam(self.user)
            for p in (self.root, self.sockdir):
                os.chown(p, info.pw_uid, info.pw_gid)
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._initdb()

    def _initdb(self) -> None:
        result = subprocess.run(
            [
                str(PG_BIN / "initdb"),
                "-D",
                str(self.datadir),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
            ],
            capture_output=True,
            **self._run_as(),
        )
        if result.returncode != 0:
            raise RuntimeError(f"initdb failed: {result.stderr.decode(errors='replace')}")

    def start(self, timeout: float = 30.0) -> None:
        """Start the server and wait until it accepts connections."""
        settings = {
            "listen_addresses": self.host,
            "unix_socket_directories": self.sockdir,
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": 300,
        }
        argv = [str(PG_BIN / "postgres"), "-D", str(self.datadir), "-p", str(self.port)]
        for key, value in settings.items():
            argv += ["-c", f"{key}={value}"]
        self.launch(argv, timeout, output_to_log=True)

    def probe_dsn(self) -> str:
        return self.dsn()

    def restart(self) -> None:
        """Stop and start again on the same port (clients see their connections drop)."""
        self.stop()
        self.start()

    def dsn(self, database: str = "postgres") -> str:
        """A libpq URI for psycopg."""
        return f"postgresql://{SUPERUSER}@{self.host}:{self.port}/{database}"

    def url(self, database: str = "postgres") -> str:
        """A SQLAlchemy / queue-core URL."""
        return f"postgresql+psycopg://{SUPERUSER}@{self.host}:{self.port}/{database}"

    def admin(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn(), autocommit=True)

    def create_database(self, name: str, template: str | None = None) -> None:
        sql = f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else "")
        with self.admin() as conn:
            conn.execute(sql)

    def drop_database(self, name: str) -> None:
        with self.admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.destroy()


@pytest.fixture(scope="session")
def postgres_template(postgres_server: PostgresServer) -> str:
    """Name of a database holding the current queue-core schema (a clone source)."""
    from backends.sql import SQLStorage

    name = "qc_template"
    postgres_server.create_database(name)
    storage = SQLStorage(postgres_server.url(name), pool_size=1)
    try:
        storage.migrate()
    finally:
        storage.close()
    return name


@pytest.fixture
def postgres_url(postgres_server: PostgresServer, postgres_template: str) -> Iterator[str]:
    """URL of a fresh, migrated database for one test; dropped afterwards."""
    name = f"qc_test_{uuid.uuid4().hex[:12]}"
    postgres_server.create_database(name, template=postgres_template)
    try:
        yield postgres_server.url(name)
    finally:
        postgres_server.drop_database(name)


def _qc_tables(conn: psycopg.Connection[Any]) -> str:
    """Every queue-core table but ``qc_meta`` (the schema version), comma-separated."""
    rows = conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        " AND tablename LIKE 'qc\\_%' AND tablename <> 'qc_meta' ORDER BY tablename"
    ).fetchall()
    return ", ".join(r[0] for r in rows)


@pytest.fixture(scope="session")
def _postgres_shared_db(postgres_server: PostgresServer, postgres_template: str) -> str:
    name = "qc_shared"
    postgres_server.create_database(name, template=postgres_template)
    return name


@pytest.fixture
def postgres_clean_url(postgres_server: PostgresServer, _postgres_shared_db: str) -> str:
    """URL of the shared migrated database, emptied for this test."""
    with psycopg.connect(postgres_server.dsn(_postgres_shared_db), autocommit=True) as conn:
        conn.execute(f"TRUNCATE {_qc_tables(conn)} RESTART IDENTITY")
    return postgres_server.url(_postgres_shared_db)
