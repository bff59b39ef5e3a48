"""A huge page number or offset is a ``ConfigError`` naming it on every path -- the Python
API, the CLI (exit 2, one line, no traceback) and the dashboard (400, not 500 or 503) --
on SQLite, PostgreSQL and Redis, before any storage read (SQLite raised a raw
``OverflowError``; PostgreSQL and Redis answered the dashboard 503)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from contrib.dashboard import create_app
from queue_core import ConfigError, Queue, TaskError
from queue_core.rules.paging import MAX_PAGE_VALUE
from tests.contrib.dashboard.conftest import run_burst, start_server, stop_server

ROOT = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).parent / "queue-core")
HUGE = 2**70
FIXTURES = {"postgresql": "postgres_url", "redis": "redis_url"}


@pytest.fixture(params=["sqlite", "postgresql", "redis"])
def queue(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Queue]:
    """A queue holding one dead letter and one failed flow execution."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'pages.db'}"
    else:
        url = str(request.getfixturevalue(FIXTURES[request.param]))
    q = Queue(url)

    @q.task(name="pages.fail")
    def fail() -> None:
        raise TaskError.fatal("no")

    flow = q.flow("pages-flow")

    @flow.step()
    def only() -> None:
        raise TaskError.fatal("no")

    fail.delay()
    flow.start({})
    run_burst(q)
    try:
        yield q
    finally:
        q.close()


def test_the_python_api_refuses_a_huge_offset(queue: Queue) -> None:
    for call in (
        lambda: queue.dead_letters(offset=HUGE),
        lambda: queue.dead_letters(limit=HUGE),
        lambda: queue.executions(offset=HUGE),
        lambda: queue.storage().list_dead(1, HUGE),
        lambda: queue.storage().list_jobs(offset=HUGE),  # type: ignore[attr-defined]
    ):
        with pytest.raises(ConfigError) as info:
            call()
        assert info.value.code == "invalid_option"
        assert info.value.field in ("limit", "offset")
        assert f"from 0 to {MAX_PAGE_VALUE}" in str(info.value)
    assert len(queue.dead_letters()) == 2  # the task's and the flow step's
    assert len(queue.executions()) == 1


@pytest.mark.parametrize(
    "args",
    [
        ["dlq", "list", "--offset", str(HUGE)],
        ["jobs", "list", "--offset", str(HUGE)],
        ["jobs", "list", "--offset", str(HUGE), "--task", "pages.fail"],
        ["flow", "executions", "--offset", str(HUGE)],
    ],
    ids=lambda a: " ".join(a[:2]) + (" --task" if "--task" in a else ""),
)
def test_the_cli_refuses_a_huge_offset_in_one_line(
    queue: Queue, tmp_path: Path, args: list[str]
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUE_CORE_")}
    env["PYTHONPATH"] = str(ROOT)
    assert queue.url is not None
    result = subprocess.run(
        [CLI, *args, "--url", queue.url], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("Error: invalid offset: ")
    assert f"expected an integer from 0 to {MAX_PAGE_VALUE}" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize("path", ["/dead", "/jobs", "/jobs?state=dead", "/jobs?task=x", "/flows"])
def test_the_dashboard_answers_400_naming_the_page(queue: Queue, path: str) -> None:
    live = start_server(create_app(queue))
    sep = "&" if "?" in path else "?"
    try:
        for page in (str(HUGE), str(10**30), str(MAX_PAGE_VALUE)):
            response = httpx.get(f"{live.url}{path}{sep}page={page}", timeout=60)
            assert response.status_code == 400, response.text
            assert f"invalid page {page}: expected a page number from 1 to " in response.text
        last = MAX_PAGE_VALUE // 50 + 1  # 50 a page: the last page that can be asked for
        assert httpx.get(f"{live.url}{path}{sep}page={last}", timeout=60).status_code == 200
        huge = httpx.get(f"{live.url}{path}{sep}page={'9' * 5000}", timeout=60)
        assert huge.status_code == 400
    finally:
        stop_server(live)
