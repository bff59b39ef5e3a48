"""Bad input, fuzzed (hypothesis): every case ends in a clear library error or a
dead-lettered job, never a crash, never a lost neighbour job.

Targets: task options, durations, storage URLs, CLI arguments, flow files, and job rows
written straight into a SQLite database (corrupt payloads and options, wrong types,
huge blobs). ``QC_FUZZ_EXAMPLES`` examples per target (2,000 by default; these tests are
``soak``: ``nox -s soak`` runs them).

A "clear library error" is a :class:`~queue_core.records.errors.QueueCoreError` (``ConfigError``
and friends; ``ConfigError`` is also a ``ValueError``) or the ``TypeError`` Python
raises for a call that does not fit a signature, and its message is one line that
names what was wrong. URLs never name a host other than loopback, and nothing here
connects anywhere: storage is built, not used, except SQLite files under ``tmp_path``.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import string
from contextlib import closing
from datetime import timedelta
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contrib.cli import cli
from queue_core import JobState, Queue
from queue_core.app.config import open_storage
from queue_core.records.durations import parse_duration
from queue_core.records.errors import ConfigError, QueueCoreError

# 2,000 examples of a target take minutes on a loaded 2-core machine: the 120 s default
# per-test timeout would interrupt an example mid-way (hypothesis then reports it flaky).
pytestmark = [pytest.mark.soak, pytest.mark.timeout(1200)]

EXAMPLES = int(os.environ.get("QC_FUZZ_EXAMPLES", "2000"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["1s", "0", "-1", "5m", "1h30m", "1d", "nan", "inf", "2x", "", " ", "1e9"]),
)
values = st.one_of(
    scalars,
    st.lists(scalars, max_size=3),
    st.dictionaries(st.text(max_size=5), scalars, max_size=3),
)


def _clear(exc: BaseException) -> None:
    """A library error or a signature TypeError, with a one-line message."""
    assert isinstance(exc, (QueueCoreError, TypeError)), repr(exc)
    text = str(exc)
    assert text and "\n" not in text.strip(), repr(text)


# --------------------------------------------------------------------------- options

OPTION_NAMES = [
    "max_retries", "max_attempts", "retry_backoff", "retry_backoff_max", "retry_jitter",
    "retry_on", "dont_retry_on", "timeout", "heartbeat", "schedule_to_start", "queue",
    "priority", "concurrency", "isolation", "name", "replay", "kill_grace",
]  # fmt: skip


@FUZZ
@given(options=st.dictionaries(st.sampled_from(OPTION_NAMES), values, max_size=4))
def test_task_options(options: dict[str, Any]) -> None:
    q = Queue("memory://")
    try:
        task = q.task(**options)(_body)
    except Exception as exc:  # noqa: BLE001 - the property: only clear errors
        _clear(exc)
        return
    try:
        task.delay(1)
    except Exception as exc:  # noqa: BLE001
        _clear(exc)
    finally:
        q.close()


def _body(x: int) -> int:
    return x


@FUZZ
@given(
    value=st.one_of(
        scalars, st.timedeltas(min_value=timedelta(days=-2), max_value=timedelta(days=2))
    )
)
def test_durations(value: Any) -> None:
    try:
        seconds = parse_duration(value)
    except ConfigError as exc:
        assert exc.code == "invalid_duration"
        _clear(exc)
        return
    assert seconds > 0 and seconds == seconds and seconds != float("inf")


# --------------------------------------------------------------------------- URLs

_HOSTS = ["127.0.0.1", "localhost", "[::1]", "", "127.0.0.1:6379", "localhost:99999",
          "localhost:port", "127.0.0.1:-1", "[::1", "::1]"]  # fmt: skip
_SCHEMES = ["memory", "sqlite", "postgresql", "postgresql+psycopg", "postgres", "redis",
            "rediss", "redis+cluster", "sqs", "mysql", "", "http", "SQLITE",
            "redis+sentinel"]  # fmt: skip
_odd = st.text(alphabet=string.ascii_letters + string.digits + ":/@?#%&=[]+.-_ ", max_size=12)


@FUZZ
@given(
    scheme=st.sampled_from(_SCHEMES),
    userinfo=st.one_of(st.just(""), _odd.map(lambda t: t + "@")),
    host=st.sampled_from(_HOSTS),
    path=st.one_of(st.just(""), _odd.map(lambda t: "/" + t)),
    query=st.one_of(st.just(""), _odd.map(lambda t: "?" + t)),
)
def test_storage_urls(scheme: str, userinfo: str, host: str, path: str, query: str) -> None:
    if scheme.lower().startswith("sqlite"):
        return  # files: built below, under tmp_path only
    url = f"{scheme}://{userinfo}{host}{path}{query}"
    try:
        storage = open_storage(url)
    except Exception as exc:  # noqa: BLE001
        _clear(exc)
        assert "secret" not in str(exc)
        return
    storage.close()


@FUZZ
@given(name=_odd, query=st.one_of(st.just(""), _odd.map(lambda t: "?" + t)))
def test_sqlite_urls(tmp_path_factory: pytest.TempPathFactory, name: str, query: str) -> None:
    base = tmp_path_factory.mktemp("urls")
    url = f"sqlite:///{base}/{name}{query}"
    try:
        storage = open_storage(url)
    except Exception as exc:  # noqa: BLE001
        _clear(exc)
        return
    storage.close()


# --------------------------------------------------------------------------- CLI

_WORDS = ["stats", "jobs", "show", "list", "cancel", "dlq", "retry", "purge", "--all", "--yes",
          "--json", "--limit", "--offset", "--state", "--queue", "--task", "--url", "--app",
          "enqueue", "config", "flow", "executions", "-1", "0", "x", "nope:queue", "queued",
          "dead", "--older-than", "1d", "5m", "schedules", "workers", "--help"]  # fmt: skip


@FUZZ
@given(args=st.lists(st.one_of(st.sampled_from(_WORDS), st.text(max_size=8)), max_size=6))
def test_cli_arguments(tmp_path_factory: pytest.TempPathFactory, args: list[str]) -> None:
    base = tmp_path_factory.mktemp("cli")
    env = {"QUEUE_CORE_URL": f"sqlite:///{base}/cli.db"}
    if args and args[0] in ("worker", "dashboard"):
        return  # long-running commands
    result = CliRunner().invoke(cli, args, env=env, catch_exceptions=True)
    assert result.exit_code in (0, 1, 2), (args, result.exit_code, result.output)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{args}: uncaught {result.exception!r}")
    assert "Traceback" not in result.output, (args, result.output)


# --------------------------------------------------------------------------- flow files

_KEYS = ["id", "namespace", "tasks", "type", "file", "task", "depends_on", "timeout",
         "retry", "max_attempts", "backoff", "concurrency", "limit", "behavior",
         "max_parallel", "inputs", "x"]  # fmt: skip
yaml_values = st.recursive(
    scalars.filter(lambda v: not (isinstance(v, float) and v != v)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(_KEYS), inner, max_size=4)
    ),
    max_leaves=12,
)


@FUZZ
@given(doc=st.one_of(yaml_values, st.fixed_dictionaries(
    {"id": st.text(max_size=6),
     "tasks": st.lists(st.dictionaries(st.sampled_from(_KEYS), yaml_values, max_size=4),
                       max_size=4)},
    optional={"timeout": scalars, "concurrency": yaml_values, "retry": yaml_values},
)))  # fmt: skip
def test_flow_files(tmp_path_factory: pytest.TempPathFactory, doc: Any) -> None:
    base = tmp_path_factory.mktemp("flows")
    path = base / "flow.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    q = Queue("memory://")
    try:
        q.load_flow(path)
    except ConfigError as exc:
        assert exc.code in ("invalid_flow", "invalid_duration", "invalid_option"), exc.code
        assert str(path) in str(exc) or "flow.yaml" in str(exc), str(exc)
    finally:
        q.close()


# --------------------------------------------------------------------------- job rows

_COLUMNS = {
    "payload": st.one_of(
        st.binary(max_size=64),
        st.sampled_from([b"", b"{", b"[]", b'{"args": 1}', b'{"args": [], "kwargs": []}',
                         b'{"args": [' + b"[" * 5000 + b"]" * 5000 + b"]}", b"\x80\x04K\x01.",
                         b"x" * 2_000_000]),
    ),
    "options": st.one_of(st.none(), st.text(max_size=30),
                         st.sampled_from(["{", "[]", '{"timeout": "x"}', "null",
                                          '{"retry": {"max_attempts": -1}}'])),
    "task_name": st.one_of(st.just("fuzz.victim"), st.text(max_size=10)),
    "max_attempts": st.integers(min_value=-5, max_value=5),
    "timeout_ms": st.one_of(st.none(), st.integers(min_value=-1000, max_value=10**15)),
}  # fmt: skip


@pytest.fixture(scope="module")
def migrated_db(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """An empty, migrated database that each example copies (migrating costs ~2/3 of an
    example)."""
    db = tmp_path_factory.mktemp("template") / "jobs.db"
    q = Queue(f"sqlite:///{db}")
    q.migrate()
    q.close()  # checkpoints the WAL: the file alone is the whole database
    return db


@FUZZ
@given(column=st.sampled_from(sorted(_COLUMNS)), data=st.data())
def test_corrupt_job_rows(
    tmp_path_factory: pytest.TempPathFactory, migrated_db: Any, column: str, data: st.DataObject
) -> None:
    """One job's row is corrupted in the database; a burst worker ends it (or runs it)
    and the neighbour job enqueued beside it succeeds."""
    value = data.draw(_COLUMNS[column], label=column)
    db = tmp_path_factory.mktemp("rows") / "jobs.db"
    shutil.copyfile(migrated_db, db)
    q = Queue(f"sqlite:///{db}")
    try:
        victim = q.task(name="fuzz.victim", max_retries=0)(_body)
        neighbour = q.task(name="fuzz.neighbour")(_body)
        bad, good = victim.delay(1), neighbour.delay(2)
        with closing(sqlite3.connect(db)) as conn, conn:
            conn.execute(f"UPDATE qc_jobs SET {column} = ? WHERE id = ?", (value, bad.id))
        q.run_worker(burst=True, install_signal_handlers=False, reap_interval=0.2)
        assert good.status() is JobState.SUCCEEDED
        info = q.storage().get_job(bad.id)
        assert info is not None
        assert info.state in (JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELLED), info
        q.dead_letters()  # listing never breaks on the bad entry
    finally:
        q.close()
