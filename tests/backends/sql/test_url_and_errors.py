"""URL handling, password masking and driver-error translation."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.sql import SQLStorage
from queue_core.app.config import open_storage
from queue_core.records.errors import ConfigError, StorageError, StorageUnavailable
from queue_core.testing import DAY, T0, new_job


def test_sqlite_url_resolves_through_the_registry(tmp_path: Path) -> None:
    storage = open_storage(f"sqlite:///{tmp_path / 'q.db'}")
    try:
        assert isinstance(storage, SQLStorage)
        assert storage.dialect == "sqlite"
        assert storage.retention_ms == 7 * DAY
    finally:
        storage.close()


@pytest.mark.parametrize(
    ("query", "expected_ms"),
    [("7d", 7 * 86_400_000), ("12h", 12 * 3_600_000), ("90", 90_000), ("1d12h", 129_600_000)],
)
def test_retention_in_the_url_is_parsed_and_stripped(
    tmp_path: Path, query: str, expected_ms: int
) -> None:
    storage = SQLStorage.from_url(f"sqlite:///{tmp_path / 'q.db'}?retention={query}")
    try:
        assert storage.retention_ms == expected_ms
        assert "retention=" not in repr(storage)
        storage.enqueue([new_job()], now=T0)  # SQLAlchemy never saw the parameter
    finally:
        storage.close()


def test_bad_retention_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        SQLStorage.from_url(f"sqlite:///{tmp_path / 'q.db'}?retention=soon")
    assert info.value.code == "invalid_duration"


def test_unsupported_sql_scheme_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        SQLStorage("mysql://u:pw@localhost/db")
    assert info.value.code == "unknown_scheme"
    assert "pw" not in str(info.value)


def test_plain_postgresql_url_means_psycopg_and_repr_masks_the_password() -> None:
    storage = SQLStorage("postgresql://alice:s3cret-pw@127.0.0.1:1/db")
    try:
        assert storage.dialect == "postgresql"
        assert "s3cret-pw" not in repr(storage)
        assert "postgresql+psycopg://alice:***@127.0.0.1:1/db" in repr(storage)
    finally:
        storage.close()


def test_unreachable_postgres_is_storage_unavailable_without_the_password() -> None:
    storage = SQLStorage("postgresql+psycopg://alice:s3cret-pw@127.0.0.1:1/db")
    try:
        with pytest.raises(StorageUnavailable) as info:
            storage.enqueue([new_job()], now=T0)
        assert "s3cret-pw" not in str(info.value)
        assert "***" in str(info.value)
    finally:
        storage.close()


def test_unopenable_sqlite_file_is_storage_unavailable(tmp_path: Path) -> None:
    storage = SQLStorage(f"sqlite:///{tmp_path / 'missing-dir' / 'q.db'}")
    try:
        with pytest.raises(StorageUnavailable):
            storage.get_job("x")
    finally:
        storage.close()


def test_duplicate_id_is_a_storage_error_and_stores_nothing(tmp_path: Path) -> None:
    storage = SQLStorage(f"sqlite:///{tmp_path / 'q.db'}")
    try:
        job = new_job()
        storage.enqueue([job], now=T0)
        other = new_job()
        with pytest.raises(StorageError) as info:
            storage.enqueue([other, job], now=T0)
        assert not isinstance(info.value, StorageUnavailable)
        assert storage.get_job(other.id) is None
    finally:
        storage.close()


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("pgbouncer=maybe", "pgbouncer"),
        ("socket_timeout=-1", "socket_timeout"),
        ("socket_timeout=soon", "socket_timeout"),
        ("socket_timeout=inf", "socket_timeout"),
    ],
)
def test_bad_postgresql_session_options_are_config_errors(query: str, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        SQLStorage(f"postgresql://u@127.0.0.1:1/db?{query}")
    assert (info.value.code, info.value.field) == ("invalid_option", field)
    assert query.split("=")[1] in str(info.value)


def test_an_unknown_postgresql_option_is_a_config_error_libpq_s_are_kept() -> None:
    """Not a driver error at the first connection (which a worker retries as an outage)."""
    with pytest.raises(ConfigError) as info:
        SQLStorage("postgresql://u:pw@127.0.0.1:1/db?sslmode=disable&bogus_option=1")
    assert (info.value.code, info.value.value) == ("invalid_option", "bogus_option")
    assert "'bogus_option'" in str(info.value) and "pw" not in str(info.value)
    ok = SQLStorage("postgresql://u@127.0.0.1:1/db?sslmode=disable&application_name=qc")
    assert "sslmode=disable" in ok.store.dialect.conninfo  # type: ignore[attr-defined]


def test_postgresql_session_options_are_stripped_before_the_driver() -> None:
    from backends.sql.postgresql import PostgreSQL
    from backends.sql.url import SOCKET_TIMEOUT_S

    storage = SQLStorage("postgresql://u@127.0.0.1:1/db?pgbouncer=true&socket_timeout=2.5")
    dialect = storage.store.dialect
    assert isinstance(dialect, PostgreSQL) and dialect.pgbouncer
    assert "pgbouncer" not in dialect.conninfo and "socket_timeout" not in dialect.conninfo
    assert storage.store.watch is not None and storage.store.watch.bound_s == 2.5
    assert SQLStorage("postgresql://u@127.0.0.1:1/db?socket_timeout=0").store.watch is None
    default = SQLStorage("postgresql://u@127.0.0.1:1/db")
    assert default.store.watch is not None and default.store.watch.bound_s == SOCKET_TIMEOUT_S
    assert not default.store.dialect.pgbouncer
