"""Fixtures for the CLI tests: a real SQLite file in tmp_path and an importable APP module."""

from __future__ import annotations

import importlib
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from click.testing import CliRunner, Result

from contrib.cli import cli

APP_SOURCE = '''
from queue_core import Queue, TaskError

queue = Queue({url!r})


@queue.task(name="app.add")
def add(a, b=0):
    return a + b


@queue.task(name="app.explode")
def explode(n):
    raise TaskError.fatal(f"boom {{n}}")


@queue.task(name="app.flaky_forever", max_retries=1, retry_backoff="10ms", retry_jitter=0)
def flaky_forever():
    raise ValueError("still broken")


not_a_queue = 42
'''


@dataclass
class App:
    """An APP module written to tmp_path, its Queue, and the SQLite URL it uses."""

    module_name: str
    module: ModuleType
    url: str
    db: Path
    dir: Path

    @property
    def spec(self) -> str:
        return f"{self.module_name}:queue"

    @property
    def queue(self) -> Any:
        return self.module.queue


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[App]:
    db = tmp_path / "cli.db"
    url = f"sqlite:///{db}"
    name = f"cliapp_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(APP_SOURCE.format(url=url))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("QUEUE_CORE_URL", raising=False)
    module = importlib.import_module(name)
    try:
        yield App(module_name=name, module=module, url=url, db=db, dir=tmp_path)
    finally:
        module.queue.close()
        sys.modules.pop(name, None)


@pytest.fixture
def run() -> Any:
    """Invoke the CLI in-process; returns click's Result (stdout/stderr kept apart)."""
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Result:
        return runner.invoke(cli, list(args), input=input, env=env, catch_exceptions=False)

    return invoke


@dataclass
class Populated:
    """A real worker run: 1 success, 3 fatal ``app.explode``, 1 exhausted ``app.flaky_forever``."""

    app: App
    succeeded_id: str
    explode_ids: list[str]
    flaky_id: str


@pytest.fixture
def populated(app: App) -> Populated:
    q = app.queue
    ok = q.enqueue("app.add", args=(2, 3))
    explode = [q.enqueue("app.explode", args=(i,)).id for i in range(3)]
    flaky = q.enqueue("app.flaky_forever")
    q.run_worker(burst=True, slots=2)
    return Populated(app=app, succeeded_id=ok.id, explode_ids=explode, flaky_id=flaky.id)
