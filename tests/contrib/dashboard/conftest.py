"""Fixtures for the dashboard tests: a real SQLite queue with jobs in every state, a live
uvicorn server in a thread, and Debian's chromium driven by Playwright."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.testclient import TestClient

from queue_core import Concurrency, JobState, Queue, TaskError
from tests.servers.ports import free_port

CHROMIUM = os.environ.get("QUEUE_CORE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = (
    Path(
        os.environ.get(
            "QUEUE_CORE_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / "artifacts"
        )
    )
    / "dashboard"
)

WORKER_QUEUES = ["default"]
"""The queues the tests' burst workers drain; ``parked`` and ``held`` keep their jobs."""


@dataclass
class Populated:
    """A SQLite queue holding jobs in every state a worker can produce, plus ids to find them."""

    queue: Queue
    db: Path
    flag: Path
    """``dash.needs_flag`` fails (fatally) until this file exists."""
    ids: dict[str, list[str]] = field(default_factory=dict)

    def drain(self) -> None:
        """Run a burst worker on the ``default`` queue."""
        run_burst(self.queue, queues=WORKER_QUEUES, slots=2)

    def one(self, kind: str) -> str:
        return self.ids[kind][0]


def run_burst(queue: Queue, **options: Any) -> None:
    """``queue.run_worker(burst=True)`` in a thread of its own: Playwright's sync API keeps
    an event loop running in the test's thread while a browser is open, and the worker
    runs its own loop."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            queue.run_worker(burst=True, install_signal_handlers=False, **options)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            failure.append(exc)

    thread = threading.Thread(target=run, name="burst-worker")
    thread.start()
    thread.join(timeout=90)
    assert not thread.is_alive(), "the burst worker did not finish within 90 s"
    if failure:
        raise failure[0]


def make_queue(url: str, flag: Path) -> Queue:
    q = Queue(url)

    @q.task(name="dash.add")
    def add(a: int, b: int = 0) -> dict[str, int]:
        return {"sum": a + b}

    @q.task(name="dash.explode")
    def explode(n: int) -> None:
        raise TaskError.fatal(f"boom {n}")

    @q.task(name="dash.needs_flag")
    def needs_flag(path: str) -> str:
        if not Path(path).exists():
            raise TaskError.fatal(f"flag {path} missing")
        return "flag found"

    @q.task(name="dash.once", concurrency=Concurrency(1, behavior="skip"))
    def once() -> None:
        return None

    @q.task(name="dash.parked", queue="parked")
    def parked(x: int) -> int:
        return x

    @q.task(name="dash.held", queue="held")
    def held() -> None:
        return None

    return q


def populate(tmp_path: Path) -> Populated:
    db = tmp_path / "dash.db"
    flag = tmp_path / "flag"
    q = make_queue(f"sqlite:///{db}", flag)
    tasks = q.tasks
    ids: dict[str, list[str]] = {}
    ids["succeeded"] = [tasks["dash.add"].delay(i, b=i).id for i in range(3)]
    ids["dead"] = [tasks["dash.explode"].delay(i).id for i in range(2)]
    ids["needs_flag"] = [tasks["dash.needs_flag"].delay(str(flag)).id]
    cancelled = tasks["dash.add"].apply(args=(9,), delay=3600)
    assert q.cancel(cancelled.id) is JobState.CANCELLED
    ids["cancelled"] = [cancelled.id]
    ids["scheduled"] = [tasks["dash.once"].apply(delay=3600).id]
    ids["skipped"] = [tasks["dash.once"].apply(delay=3600).id]
    ids["queued"] = [tasks["dash.parked"].delay(7).id]
    ids["running"] = [tasks["dash.held"].delay().id]
    populated = Populated(queue=q, db=db, flag=flag, ids=ids)
    populated.drain()
    # a worker that claimed the ``held`` job and has not finished it (long lease)
    claimed = q.storage().claim("dashboard-test-worker", ["held"], 1, 3_600_000)
    assert [c.id for c in claimed] == ids["running"]
    expected = {
        "succeeded": "succeeded",
        "dead": "dead",
        "needs_flag": "dead",
        "cancelled": "cancelled",
        "scheduled": "queued",
        "skipped": "skipped",
        "queued": "queued",
        "running": "running",
    }
    for kind, state in expected.items():
        states = {q.storage().get_job(i).state.value for i in ids[kind]}  # type: ignore[union-attr]
        assert states == {state}, (kind, states)
    return populated


@pytest.fixture
def populated(tmp_path: Path) -> Iterator[Populated]:
    p = populate(tmp_path)
    try:
        yield p
    finally:
        p.queue.close()


# --------------------------------------------------------------------------- clients


def local_client(app: Any, **options: Any) -> TestClient:
    """Starlette's TestClient naming ``localhost`` in ``Host``, as a browser on this
    machine does (the dashboard refuses hosts it does not answer to, such as
    TestClient's default ``testserver``)."""
    return TestClient(app, base_url="http://localhost", **options)


# --------------------------------------------------------------------------- live server


@dataclass
class Live:
    url: str
    server: uvicorn.Server
    thread: threading.Thread


def start_server(app: Any) -> Live:
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"uvicorn did not start on port {port}")
        time.sleep(0.02)
    return Live(url=f"http://127.0.0.1:{port}", server=server, thread=thread)


def stop_server(live: Live) -> None:
    live.server.should_exit = True
    live.thread.join(timeout=20)
    assert not live.thread.is_alive(), "uvicorn did not stop"


@pytest.fixture
def serve() -> Iterator[Callable[[Any], str]]:
    """``serve(app) -> base URL``: runs the app with uvicorn on a free port until teardown."""
    running: list[Live] = []

    def start(app: Any) -> str:
        live = start_server(app)
        running.append(live)
        return live.url

    yield start
    for live in running:
        stop_server(live)


# --------------------------------------------------------------------------- browser


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"the dashboard browser tests need chromium at {CHROMIUM}: apt-get install -y chromium "
            "(or set QUEUE_CORE_CHROMIUM); never `playwright install`"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(15_000)
    pg = context.new_page()
    try:
        yield pg
    finally:
        context.close()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
