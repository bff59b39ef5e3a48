"""Eager mode: ``.delay()`` runs the job to its end on the worker's recording path, with
no worker -- same classification, retries (delays recorded, not slept), timeouts and
dead letters, attempt records of ``mode="eager"``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from queue_core import JobContext, JobFailed, JobState, Queue, TaskError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["memory", "sqlite"])
def queue(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Queue]:
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'e.db'}"
    q = Queue(url, eager=True)
    yield q
    q.close()


def _shape(q: Queue, job_id: str) -> list[tuple[object, ...]]:
    return [
        (a.number, a.outcome, a.reason, a.error_class, a.error_type, a.message)
        for a in q.job(job_id).attempts()
    ]


def test_a_flaky_task_shows_three_attempts_and_succeeds(queue: Queue) -> None:
    @queue.task(max_retries=3, retry_backoff="30s", retry_jitter=0)
    def flaky(order: int, ctx: JobContext) -> str:
        if ctx.attempt < 3:
            raise ConnectionError(f"attempt {ctx.attempt} of order {order}")
        return f"order {order} on attempt {ctx.attempt}"

    began = time.monotonic()
    handle = flaky.delay(7)
    assert time.monotonic() - began < 10  # 30 s + 60 s of backoff were not slept
    assert handle.status() is JobState.SUCCEEDED  # ended before .delay() returned
    assert handle.result(timeout=0) == "order 7 on attempt 3"
    attempts = handle.attempts()
    assert [(a.number, a.outcome.value, a.reason, a.mode) for a in attempts] == [
        (1, "failed", "error", "eager"),
        (2, "failed", "error", "eager"),
        (3, "succeeded", None, "eager"),
    ]
    assert attempts[0].error_class == "ConnectionError"
    assert attempts[0].message == "attempt 1 of order 7"
    # the delays are recorded: each retry started a full backoff after the failure
    gap1 = attempts[1].started_at - attempts[0].finished_at  # type: ignore[operator]
    gap2 = attempts[2].started_at - attempts[1].finished_at  # type: ignore[operator]
    assert 30 <= gap1.total_seconds() < 35 and 60 <= gap2.total_seconds() < 65
    info = handle.info()
    assert (info.attempts, info.max_attempts, info.state) == (3, 4, JobState.SUCCEEDED)


def test_an_always_failing_task_is_dead_lettered(queue: Queue) -> None:
    @queue.task(max_retries=2, retry_backoff="1h")
    def broken(n: int) -> None:
        raise RuntimeError(f"broken {n}")

    handle = broken.delay(1)
    assert handle.status() is JobState.DEAD
    [dead] = queue.dead_letters()
    assert (dead.job_id, dead.reason, dead.error_class) == (
        handle.id,
        "retries_exhausted",
        "RuntimeError",
    )
    assert dead.args == (1,) and len(dead.attempts) == 3
    with pytest.raises(JobFailed) as failed:
        handle.result()
    assert failed.value.reason == "retries_exhausted"


def test_classification_is_the_workers(queue: Queue) -> None:
    @queue.task(max_retries=5, dont_retry_on=[KeyError])
    def picky(kind: str) -> None:
        if kind == "key":
            raise KeyError("no such key")
        raise TaskError.fatal("give up")

    key, fatal = picky.delay("key"), picky.delay("fatal")
    assert [len(h.attempts()) for h in (key, fatal)] == [1, 1]
    reasons = {d.job_id: d.reason for d in queue.dead_letters()}
    assert reasons == {key.id: "fatal", fatal.id: "fatal"}
    # a per-call override is applied as on a worker
    once = picky.apply(args=("key",), dont_retry_on=[ValueError], max_retries=1)
    assert [a.outcome.value for a in once.attempts()] == ["failed", "failed"]
    assert once.status() is JobState.DEAD


def test_a_timeout_ends_the_attempt_as_on_a_worker(queue: Queue) -> None:
    @queue.task(timeout="200ms", max_retries=1, retry_backoff="1h")
    def slow() -> None:
        time.sleep(1.0)

    @queue.task(timeout="200ms")
    async def slow_async() -> None:
        await anyio.sleep(1.0)

    for task in (slow, slow_async):
        handle = task.delay()
        assert handle.status() is JobState.DEAD
        assert {(a.outcome.value, a.reason, a.mode) for a in handle.attempts()} == {
            ("timed_out", "timeout", "eager")
        }
    assert len(slow.delay().attempts()) == 2


def test_records_match_a_real_workers(tmp_path: Path) -> None:
    def declare(q: Queue) -> object:
        @q.task(name="flaky", max_retries=2, retry_backoff="10ms", retry_jitter=0)
        def flaky(ctx: JobContext) -> int:
            if ctx.attempt < 3:
                raise ValueError(f"no {ctx.attempt}")
            return ctx.attempt

        return flaky

    eager = Queue(f"sqlite:///{tmp_path / 'eager.db'}", eager=True)
    real = Queue(f"sqlite:///{tmp_path / 'real.db'}")
    try:
        by_eager = declare(eager).delay()  # type: ignore[attr-defined]
        by_worker = declare(real).delay()  # type: ignore[attr-defined]
        assert by_worker.status() is JobState.QUEUED
        real.run_worker(burst=True, install_signal_handlers=False)
        assert _shape(eager, by_eager.id) == _shape(real, by_worker.id)
        assert by_eager.info().result == by_worker.info().result == 3
        assert {a.mode for a in by_worker.attempts()} == {"thread"}
        assert {a.mode for a in by_eager.attempts()} == {"eager"}
        assert set(by_eager.attempts()[0]) == set(by_worker.attempts()[0])  # same fields
    finally:
        eager.close()
        real.close()


def test_async_bodies_nested_enqueues_and_the_async_api(queue: Queue) -> None:
    @queue.task
    async def double(x: int) -> int:
        await anyio.lowlevel.checkpoint()
        return 2 * x

    @queue.task
    def parent(x: int) -> int:
        return double.delay(x).result() + 1  # an eager enqueue inside an eager body

    assert parent.delay(20).result() == 41

    async def from_a_loop() -> tuple[int, int]:
        sync_call = double.delay(1).result()  # .delay() inside a running event loop
        handle = await double.delay_async(2)
        return sync_call, await handle.result_async()

    assert anyio.run(from_a_loop) == (2, 4)


def test_map_unknown_tasks_and_bad_results(queue: Queue) -> None:
    @queue.task
    def square(x: int) -> int:
        return x * x

    @queue.task(max_retries=3)
    def unserializable() -> object:
        return object()

    assert [h.result() for h in square.map([1, 2, 3])] == [1, 4, 9]
    ghost = queue.enqueue("nobody.declares.this", allow_unregistered=True)
    assert ghost.status() is JobState.DEAD
    assert queue.dead_letters(task_name="nobody.declares.this")[0].reason == "unknown_task"
    bad = unserializable.delay()
    assert (bad.status(), len(bad.attempts())) == (JobState.DEAD, 1)


def test_env_turns_eager_on_and_off_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QUEUE_CORE_EAGER", raising=False)
    plain = Queue("memory://")
    assert plain.eager is False
    monkeypatch.setenv("QUEUE_CORE_EAGER", "1")
    q = Queue("memory://")
    assert q.eager is True
    assert Queue("memory://", eager=False).eager is False  # explicit wins over env

    @q.task
    def one() -> int:
        return 1

    @plain.task
    def later() -> int:
        return 2

    assert one.delay().status() is JobState.SUCCEEDED
    assert later.delay().status() is JobState.QUEUED


PLUGIN_TEST = """
from queue_core import JobState, Queue

queue = Queue("memory://")        # built at import, before any fixture runs
calls = []


@queue.task(max_retries=2, retry_backoff="1h")
def flaky() -> str:
    calls.append(1)
    if len(calls) < 3:
        raise ValueError("not yet")
    return "done"


def test_eager(queue_core_eager):
    handle = flaky.delay()
    assert handle.status() is JobState.SUCCEEDED
    assert [a.mode for a in handle.attempts()] == ["eager"] * 3


def test_not_eager_without_the_fixture():
    assert flaky.delay().status() is JobState.QUEUED
"""


def test_the_pytest_fixture_makes_every_queue_eager(tmp_path: Path) -> None:
    (tmp_path / "test_app.py").write_text(textwrap.dedent(PLUGIN_TEST))
    from importlib.metadata import entry_points

    # installed from this tree, the plugin loads through its pytest11 entry point
    installed = any(
        ep.value == "queue_core.testing.pytest_plugin" for ep in entry_points(group="pytest11")
    )
    load = [] if installed else ["-p", "queue_core.testing.pytest_plugin"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *load, "-q", "-p", "no:cacheprovider", "test_app.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


DEFAULT_URL_TEST = """
from queue_core import JobState, Queue, TaskError

queue = Queue()  # no URL, no QUEUE_CORE_URL: the embedded default


@queue.task(max_retries=2)
def refund(order_id: int) -> None:
    raise TaskError.fatal(f"order {order_id} was never charged")


def test_one_dead_letter(queue_core_eager):
    assert refund.delay(7).status() is JobState.DEAD
    assert [d.reason for d in queue.dead_letters()] == ["fatal"]
    assert queue.url == "memory://"


def test_queues_built_in_the_test_are_in_memory_too(queue_core_eager):
    assert Queue().url == "memory://"
"""


def test_the_fixture_runs_on_memory_when_no_url_is_set(tmp_path: Path) -> None:
    # issue 23 item 9: on ./queue_core.db the second run saw the first run's dead letter
    (tmp_path / "test_default.py").write_text(textwrap.dedent(DEFAULT_URL_TEST))
    for run in (1, 2):
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "queue_core.testing.pytest_plugin", "-q",
             "-p", "no:cacheprovider", "test_default.py"],
            cwd=tmp_path, capture_output=True, text=True, timeout=120,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        assert done.returncode == 0, (run, done.stdout + done.stderr)
        assert "2 passed" in done.stdout
    assert not list(tmp_path.glob("queue_core.db*"))  # nothing written to the working dir
