"""What a newcomer meets first: read-only commands never create storage, APP mistakes
get a suggestion, ``stats`` columns are the job states."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest

from tests.contrib.conftest import App

READ_ONLY = [
    ["jobs", "show", "some-job-id"],
    ["stats"],
    ["stats", "--json"],
    ["dlq", "list"],
    ["dlq", "show", "some-dead-id"],
    ["dlq", "retry", "some-dead-id"],
    ["dlq", "purge", "--yes"],
    ["jobs", "list"],
    ["jobs", "list", "--task", "t", "--json"],
    ["jobs", "cancel", "some-job-id"],
    ["dlq", "retry", "--all", "--yes"],
    ["dashboard", "--port", "0"],  # refused before it serves: never an empty file for a typo
]


@pytest.fixture
def empty_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "empty"
    folder.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.delenv("QUEUE_CORE_URL", raising=False)
    return folder


def test_jobs_show_in_an_empty_folder_creates_nothing_and_says_where_it_looked(
    empty_dir: Path,
) -> None:
    # the console script, as a newcomer types it
    env = {k: v for k, v in os.environ.items() if k != "QUEUE_CORE_URL"}
    script = str(Path(sys.executable).with_name("queue-core"))
    out = subprocess.run(
        [script, "jobs", "show", "X"],
        cwd=empty_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    assert list(empty_dir.iterdir()) == []
    [line] = out.stderr.strip().splitlines()
    assert "storage sqlite:///queue_core.db" in line and "does not exist" in line
    assert str(empty_dir / "queue_core.db") in line
    for way in ("--app", "--url", "QUEUE_CORE_URL"):
        assert way in line
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("command", READ_ONLY, ids=" ".join)
def test_read_only_commands_never_create_storage(run, empty_dir: Path, command) -> None:
    result = run(*command)
    assert result.exit_code == 1, result.stdout
    assert "does not exist" in result.stderr and "--app" in result.stderr
    by_url = run(*command, "--url", "sqlite:///elsewhere.db")
    assert by_url.exit_code == 1
    assert "sqlite:///elsewhere.db (from --url) does not exist" in by_url.stderr
    by_env = run(*command, env={"QUEUE_CORE_URL": "sqlite:///env.db"})
    assert by_env.exit_code == 1
    assert "from env QUEUE_CORE_URL" in by_env.stderr
    assert list(empty_dir.iterdir()) == []


def test_read_only_command_on_an_apps_missing_storage_and_on_memory(run, app: App) -> None:
    assert not app.db.exists()  # the app's Queue was built, its file not yet written
    for command in (["stats"], ["schedules"]):
        result = run(*command, "--app", app.spec)
        assert result.exit_code == 1
        assert f"the storage of --app {app.spec}" in result.stderr
        # the app was named: the hint is to create the schema, not to repeat --app
        assert result.stderr.rstrip().endswith(
            f"no schema yet: run `queue-core migrate --app {app.spec}` or start a worker "
            f"(`queue-core worker {app.spec}`)"
        )
    assert not app.db.exists()
    memory = run("dlq", "list", "--url", "memory://")
    assert memory.exit_code == 1
    assert "outside the process that created it" in memory.stderr


def test_commands_that_write_still_create_storage(run, empty_dir: Path) -> None:
    assert run("migrate").exit_code == 0
    assert (empty_dir / "queue_core.db").exists()
    stats = run("stats")
    assert stats.exit_code == 0 and "No jobs" in stats.stdout


WRITES = [
    ["enqueue", "app.add", "[1, 2]", "--allow-unregistered"],
    ["pause", "--queue", "default"],
    ["resume", "--queue", "default"],
]


@pytest.mark.parametrize("command", WRITES, ids=" ".join)
def test_commands_that_store_refuse_a_memory_storage_they_would_lose(
    run, empty_dir: Path, command: list[str]
) -> None:
    result = run(*command, "--url", "memory://")

    assert result.exit_code == 1, result.stdout
    assert "lives only inside this command's process" in result.stderr
    assert "would be lost when it ends" in result.stderr
    assert "--app" in result.stderr and result.stdout == ""  # no job id was printed
    assert list(empty_dir.iterdir()) == []


def test_migrate_on_memory_still_says_there_is_nothing_to_migrate(run) -> None:
    result = run("migrate", "--url", "memory://")
    assert result.exit_code == 0 and "Nothing to migrate" in result.stdout


def test_worker_durations_take_seconds_or_duration_strings(run, app: App) -> None:
    job = app.queue.enqueue("app.add", args=(1, 2))
    ran = run("worker", app.spec, "--burst", "--lease", "10s", "--reap-interval", "500ms")
    assert ran.exit_code == 0, ran.stderr
    assert app.queue.job(job.id).result(timeout=1) == 3
    for option, value in (("--lease", "soon"), ("--reap-interval", "0"), ("--lease", "-1")):
        bad = run("worker", app.spec, "--burst", option, value)
        assert bad.exit_code == 2, (option, value, bad.stdout)
        assert option in bad.stderr and repr(value) in bad.stderr, bad.stderr


def test_app_mistakes_get_a_suggestion(run, app: App) -> None:
    name = app.module_name
    cases = {
        f"{name}.queue": f"did you mean '{name}:queue'?",
        f"{name}:queue.nope": f"{name}:queue is a Queue, which has no attribute 'nope'",
        f"{name}:queu": f"has no attribute 'queu'; did you mean '{name}:queue'?",
        f"{name}:not_a_queue": f"not a queue_core.Queue; did you mean '{name}:queue'?",
    }
    for spec, message in cases.items():
        result = run("worker", spec, "--burst")
        assert result.exit_code == 2, (spec, result.stderr)
        assert message in result.stderr, (spec, result.stderr)
    assert run("worker", "no_such_pkg.queue", "--burst").stderr.count("did you mean") == 0


def test_bad_duration_names_the_unit(run, app: App) -> None:
    result = run("dlq", "purge", "--older-than", "2w", "--url", app.url)
    assert result.exit_code == 2
    assert "'w' is not a unit: write 2w as '336h'" in result.stderr


def test_read_only_commands_leave_an_empty_postgres_database_empty(run, postgres_server) -> None:
    """A PostgreSQL database without the queue-core schema is refused like a missing SQLite
    file: the command exits 1 naming the storage, and no table is created."""
    name = f"qc_empty_{uuid.uuid4().hex[:10]}"
    postgres_server.create_database(name)
    try:
        url = postgres_server.url(name)
        for command in (["stats"], ["jobs", "list"], ["dlq", "list"]):
            result = run(*command, "--url", url)
            assert result.exit_code == 1, result.stdout
            assert "holds no queue-core schema" in result.stderr, result.stderr
            assert "(from --url)" in result.stderr and "--app" in result.stderr
            assert "Traceback" not in result.stderr
        with psycopg.connect(postgres_server.dsn(name)) as conn:
            tables = conn.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
            ).fetchone()
        assert tables == (0,)
    finally:
        postgres_server.drop_database(name)


@pytest.mark.parametrize("url", ["sqlite://queue.db", "sqlite://", ":memory:"])
def test_a_sqlite_url_without_a_file_is_refused_naming_the_three_slashes(
    run, empty_dir: Path, url: str
) -> None:
    for command in (["jobs", "list"], ["enqueue", "app.add", "[1]"]):
        out = run(*command, "--url", url)
        assert out.exit_code == 2, out.output
        assert "sqlite:///queue.db" in out.stderr and "memory://" in out.stderr
        if url == "sqlite://queue.db":
            assert "two slashes" in out.stderr
    assert list(empty_dir.iterdir()) == []


def test_a_worker_of_an_app_on_two_slashes_refuses_to_start(empty_dir: Path) -> None:
    (empty_dir / "twoslash.py").write_text(
        'from queue_core import Queue\nqueue = Queue("sqlite://queue.db")\n'
    )
    env = {k: v for k, v in os.environ.items() if k != "QUEUE_CORE_URL"}
    script = str(Path(sys.executable).with_name("queue-core"))
    out = subprocess.run(
        [script, "worker", "twoslash:queue", "--burst"],
        cwd=empty_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert "did you mean sqlite:///queue.db (three slashes)?" in out.stderr
    assert "stopped after" not in out.stdout + out.stderr
