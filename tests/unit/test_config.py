"""Configuration: queue-core.toml / [tool.queue-core], precedence explicit > env > file >
default, validation naming the bad key, and ``queue-core config``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from contrib.cli import cli
from queue_core import ConfigError, Queue, RetryPolicy
from queue_core.app.config import KEYS, load_config


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for key in KEYS:
        if key.env:
            monkeypatch.delenv(key.env, raising=False)
    monkeypatch.delenv("QUEUE_CORE_CONFIG", raising=False)
    return tmp_path


FILE = """
url = "sqlite:///from-file.db"
lease = "45s"

[worker]
slots = 3
queues = ["emails", "default"]

[task]
queue = "main"
max_retries = 2
retry_backoff = "5s"
timeout = "1m"
"""


def test_no_file_means_defaults(here: Path) -> None:
    config = load_config()
    assert config.path is None
    assert {s.key: (s.value, s.source) for s in config.settings()}["worker.slots"] == (8, "default")
    q = Queue("memory://")
    assert (q.lease, q.default_timeout, q.default_queue, q.eager) == (30.0, 300.0, "default", False)


def test_queue_core_toml_sets_url_options_and_task_defaults(here: Path) -> None:
    (here / "queue-core.toml").write_text(FILE)
    q = Queue()
    try:
        assert q.url == "sqlite:///from-file.db"
        assert (q.lease, q.default_timeout, q.default_queue) == (45.0, 60.0, "main")
        assert q.retry_policy.max_attempts == 3 and q.retry_policy.initial == 5.0

        @q.task
        def plain() -> None:
            return None

        @q.task(queue="own", max_attempts=1, timeout=5)
        def own() -> None:
            return None

        assert (plain.queue_name, plain.policy.max_attempts, plain.timeout) == ("main", 3, 60.0)
        assert (own.queue_name, own.policy.max_attempts, own.timeout) == ("own", 1, 5.0)
        rec = q.storage().get_job(plain.delay().id)
        assert rec is not None and (rec.queue, rec.max_attempts) == ("main", 3)
        assert (here / "from-file.db").exists()
    finally:
        q.close()


def test_precedence_is_explicit_then_env_then_file_then_default(
    here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (here / "queue-core.toml").write_text(FILE)
    monkeypatch.setenv("QUEUE_CORE_URL", "memory://")
    monkeypatch.setenv("QUEUE_CORE_WORKER_SLOTS", "5")
    monkeypatch.setenv("QUEUE_CORE_DEFAULT_TIMEOUT", "none")
    config = load_config()
    got = {s.key: (s.value, s.source) for s in config.settings({"lease": (10.0, "argument")})}
    file_source = f"file {here / 'queue-core.toml'}"
    assert got["url"] == ("memory://", "env QUEUE_CORE_URL")
    assert got["worker.slots"] == (5, "env QUEUE_CORE_WORKER_SLOTS")
    assert got["worker.queues"] == (["emails", "default"], file_source)
    assert got["task.timeout"] == (None, "env QUEUE_CORE_DEFAULT_TIMEOUT")
    assert got["lease"] == (10.0, "argument")
    assert got["serializer"] == ("json", "default")
    q = Queue(lease=12, default_timeout=7)
    try:
        assert q.url == "memory://"  # env over file
        assert (q.lease, q.default_timeout) == (12.0, 7.0)  # explicit over env and file
        assert Queue(default_timeout=None).default_timeout is None  # an explicit None too
        assert Queue(retry=RetryPolicy(max_attempts=9)).retry_policy.max_attempts == 9
    finally:
        q.close()


def test_pyproject_table_is_read_and_queue_core_toml_wins(here: Path) -> None:
    (here / "pyproject.toml").write_text(
        '[project]\nname = "app"\n\n[tool.queue-core]\nurl = "memory://"\n'
        "[tool.queue-core.worker]\nslots = 2\n"
    )
    config = load_config()
    assert config.path == here / "pyproject.toml"
    assert (config.value("url"), config.value("worker.slots")) == ("memory://", 2)
    (here / "pyproject.toml").write_text('[project]\nname = "queue-core-app"\n')
    assert load_config().path is None  # mentions queue-core, but has no table
    (here / "queue-core.toml").write_text("[worker]\nslots = 4\n")
    (here / "pyproject.toml").write_text("[tool.queue-core.worker]\nslots = 2\n")
    assert load_config().value("worker.slots") == 4


def test_env_names_another_file(here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = here / "conf" / "prod.toml"
    other.parent.mkdir()
    other.write_text('serializer = "pickle"\n')
    monkeypatch.setenv("QUEUE_CORE_CONFIG", str(other))
    assert Queue("memory://").serializer.name == "pickle"


@pytest.mark.parametrize(
    ("text", "code", "named"),
    [
        ("urll = 'memory://'\n", "unknown_option", "'urll' in"),
        ("[worker]\nslot = 2\n", "unknown_option", "'worker.slot'"),
        ("[task]\nconcurrency = 2\n", "unknown_option", "'task.concurrency'"),
        ("[worker]\nslots = 0\n", "invalid_option", "worker.slots 0"),
        ("[worker]\nqueues = 'emails'\n", None, None),  # a string is a comma list: fine
        ("lease = 'soon'\n", "invalid_option", "lease 'soon'"),
        ("serializer = 'yaml'\n", "invalid_option", "'json' or 'pickle'"),
        ("[task]\nmax_retries = 1\nmax_attempts = 3\n", "conflicting_options", "[task] of"),
        ("[task]\nretry_jitter = 2\n", "invalid_option", "retry_jitter: 2"),
        ("worker = 3\n", "invalid_option", "a table"),
        ("url = \n", "invalid_config", "not TOML"),
    ],
)
def test_a_bad_file_is_refused_naming_the_key(
    here: Path, text: str, code: str | None, named: str | None
) -> None:
    (here / "queue-core.toml").write_text(text)
    if code is None:
        assert load_config().value("worker.queues") == ["emails"]
        return
    with pytest.raises(ConfigError) as bad:
        Queue("memory://")
    assert bad.value.code == code
    assert named in str(bad.value) and "queue-core.toml" in str(bad.value)
    if code == "unknown_option":
        assert "accepted keys are: url, eager, lease" in str(bad.value)


def test_a_bad_env_value_names_the_variable(here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUEUE_CORE_WORKER_SLOTS", "many")
    with pytest.raises(ConfigError, match="env QUEUE_CORE_WORKER_SLOTS") as bad:
        load_config().value("worker.slots")
    assert bad.value.code == "invalid_option"


def test_run_worker_takes_slots_and_queues_from_env_then_file(
    here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import queue_core.worker

    seen: list[dict[str, Any]] = []

    class FakeWorker:
        def __init__(self, queue: Queue, **kwargs: Any) -> None:
            seen.append(kwargs)

        def run(self) -> None:
            return None

    monkeypatch.setattr(queue_core.worker, "Worker", FakeWorker)
    (here / "queue-core.toml").write_text(FILE)
    q = Queue("memory://")
    q.run_worker(burst=True)
    monkeypatch.setenv("QUEUE_CORE_WORKER_SLOTS", "6")
    q.run_worker(burst=True)
    q.run_worker(slots=1, queues=["x"], burst=True)
    assert [(s["slots"], s["queues"]) for s in seen] == [
        (3, ["emails", "default"]),
        (6, ["emails", "default"]),
        (1, ["x"]),
    ]


def test_queue_core_config_command_shows_values_and_sources(
    here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (here / "queue-core.toml").write_text(FILE)
    monkeypatch.setenv("QUEUE_CORE_WORKER_SLOTS", "5")
    runner = CliRunner()
    shown = runner.invoke(cli, ["config"], catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    lines = {line.split()[0]: line.split() for line in shown.output.splitlines()[3:]}
    assert lines["worker.slots"][1:] == ["5", "env", "QUEUE_CORE_WORKER_SLOTS"]
    assert lines["task.max_retries"][1:3] == ["2", "file"]
    assert lines["serializer"][1:] == ["json", "default"]
    assert f"configuration file: {here / 'queue-core.toml'}" in shown.output

    as_json = runner.invoke(cli, ["--url", "redis://u:secret@h/0", "config", "--json"])
    data = json.loads(as_json.output)
    by_key = {s["key"]: s for s in data["settings"]}
    assert data["file"] == str(here / "queue-core.toml")
    assert by_key["url"] == {"key": "url", "value": "redis://u:***@h/0", "source": "--url"}
    assert by_key["task.timeout"]["value"] == 60.0
    assert [s["key"] for s in data["settings"]] == [k.name for k in KEYS]

    with_app = runner.invoke(cli, ["--app", "tasks:queue", "config"])
    assert with_app.exit_code == 2 and "does not take --app" in with_app.output

    (here / "queue-core.toml").write_text("[worker]\nslotz = 1\n")
    bad = runner.invoke(cli, ["config"])
    assert bad.exit_code == 2
    assert "unknown setting 'worker.slotz'" in bad.output and "worker.slots" in bad.output
