"""Calls checked at the call: names a worker can import, arguments bound against the
body's signature, options declared once, and ``JobHandle.result`` on the queue's clock."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import queue_core
import queue_core.app.task
from queue_core import ConfigError, JobCancelled, JobContext, Queue
from queue_core.app.handle import JobHandle
from queue_core.testing.clock import ManualClock

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def queue() -> Any:
    q = Queue("memory://")
    yield q
    q.close()


def _jobs(queue: Queue) -> int:
    return sum(s.ready + s.scheduled for s in queue.stats())


# --------------------------------------------------------------------------- __main__


def _run(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )


_SCRIPT = textwrap.dedent(
    """
    from queue_core import Queue

    queue = Queue("memory://")

    @queue.task
    def send(x: int) -> int:
        return x

    class Mailer:
        @staticmethod
        def deliver() -> None:
            return None

    queue.task(Mailer.deliver)
    print(sorted(queue.tasks))
    """
)


def test_task_in_a_script_is_named_after_the_module_a_worker_imports(tmp_path: Path) -> None:
    (tmp_path / "tasks.py").write_text(_SCRIPT)
    out = _run(tmp_path, "tasks.py")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['tasks.Mailer.deliver', 'tasks.send']"

    # imported the way a worker imports it: the same names
    imported = _run(tmp_path, "-c", "import tasks")
    assert imported.stdout.strip() == "['tasks.Mailer.deliver', 'tasks.send']"


def test_the_script_loaded_again_as_mp_main_in_a_child_gets_the_same_names(
    tmp_path: Path,
) -> None:
    # how a spawned child (multiprocessing, process isolation) loads the parent's script
    (tmp_path / "tasks.py").write_text(_SCRIPT)
    loader = (
        "import importlib.util, sys\n"
        "spec = importlib.util.spec_from_file_location('__mp_main__', 'tasks.py')\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "sys.modules['__mp_main__'] = module\n"
        "spec.loader.exec_module(module)\n"
    )
    out = _run(tmp_path, "-c", loader)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['tasks.Mailer.deliver', 'tasks.send']"


def test_task_in_a_module_run_with_dash_m_keeps_its_dotted_name(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "jobs.py").write_text(_SCRIPT)
    out = _run(tmp_path, "-m", "app.jobs")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['app.jobs.Mailer.deliver', 'app.jobs.send']"


def test_task_in_a_script_with_an_unimportable_file_name_is_refused(tmp_path: Path) -> None:
    (tmp_path / "my-tasks.py").write_text(_SCRIPT)
    out = _run(tmp_path, "my-tasks.py")
    assert out.returncode != 0
    assert "ConfigError" in out.stderr and "'my-tasks' is not an importable module name" in (
        out.stderr
    )
    assert "rename the file" in out.stderr

    named_script = _SCRIPT.replace("@queue.task\n", "@queue.task(name='x')\n")
    (tmp_path / "my-named.py").write_text(named_script.replace("queue.task(Mailer.deliver)", ""))
    named = _run(tmp_path, "my-named.py")
    assert named.returncode == 0, named.stderr
    assert named.stdout.strip() == "['x']"


# --------------------------------------------------------------------------- arguments


def test_delay_binds_arguments_against_the_signature(queue: Queue) -> None:
    @queue.task
    def add(a: int, b: int) -> int:
        return a + b

    with pytest.raises(TypeError) as err:
        add.delay(x=1, y=2)  # type: ignore[call-arg]
    message = str(err.value)
    # every problem, not only the first (issue 23 item 14)
    assert message.startswith("add.delay(): got unexpected keyword arguments 'x' and 'y'; "
                              "missing required arguments: 'a' and 'b' — ")
    assert add.name in message and "(a: int, b: int)" in message
    with pytest.raises(TypeError) as both:
        add.delay(1, c=2)  # type: ignore[call-arg]
    assert str(both.value).startswith(
        "add.delay(): got an unexpected keyword argument 'c'; missing a required argument: 'b'"
    )
    with pytest.raises(TypeError, match="got multiple values for 'a'"):
        add.delay(1, a=2)  # type: ignore[misc]
    with pytest.raises(TypeError, match="too many positional arguments"):
        add.delay(1, 2, 3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="missing a required argument: 'b'"):
        add.delay(1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="add.apply\\(\\): got an unexpected keyword argument 'c'"):
        add.apply(args=(1, 2), kwargs={"c": 3})
    with pytest.raises(TypeError, match="add.map\\(\\)"):
        add.map([(1, 2), (1,)])
    assert _jobs(queue) == 0  # nothing was written

    add.delay(1, 2)
    add.delay(1, b=2)
    add.apply(kwargs={"a": 1, "b": 2})
    add.map([(1, 2), [3, 4]])
    assert _jobs(queue) == 5


def test_binding_ignores_the_injected_ctx_and_knows_defaults_and_varargs(queue: Queue) -> None:
    @queue.task
    def with_ctx(a: int, ctx: JobContext, b: int = 0) -> int:
        return a + b

    @queue.task
    def kw_only(a: int, *, flag: bool) -> None:
        return None

    @queue.task
    def varargs(*args: int, **kwargs: int) -> None:
        return None

    with_ctx.delay(1)
    with_ctx.delay(1, b=2)
    with pytest.raises(TypeError, match="with_ctx.delay\\(\\): missing a required argument: 'a'"):
        with_ctx.delay()
    with pytest.raises(TypeError, match="unexpected keyword argument 'ctx'"):
        with_ctx.delay(1, ctx=None)
    with pytest.raises(TypeError, match="missing a required argument: 'flag'"):
        kw_only.delay(1)
    kw_only.delay(1, flag=True)
    varargs.delay()
    varargs.delay(1, 2, 3, x=4)
    assert _jobs(queue) == 5


def test_enqueue_by_name_of_a_registered_task_binds_too(queue: Queue) -> None:
    @queue.task(name="add")
    def add(a: int, b: int) -> int:
        return a + b

    with pytest.raises(TypeError, match="task 'add' takes"):
        queue.enqueue("add", args=(1,))
    queue.enqueue(
        "not.registered.here", args=(1, 2, 3), kwargs={"any": 1}, allow_unregistered=True
    )
    assert _jobs(queue) == 1


# --------------------------------------------------------------------------- options


def test_unknown_option_suggests_the_close_one(queue: Queue) -> None:
    with pytest.raises(TypeError, match="'max_retry' \\(did you mean 'max_retries'\\?\\)"):
        queue.task(max_retry=3)  # type: ignore[call-overload]

    @queue.task
    def body() -> None:
        return None

    with pytest.raises(TypeError, match="'dealy' \\(did you mean 'delay'\\?\\)"):
        body.apply(dealy=3)  # type: ignore[call-arg]
    assert _jobs(queue) == 0


def test_every_spec_option_is_declared_once() -> None:
    spec_options = {
        "queue", "max_retries", "max_attempts", "retry_backoff", "retry_backoff_kind",
        "retry_coefficient", "retry_max_delay", "retry_jitter", "retry", "retry_on",
        "dont_retry_on", "non_retryable", "timeout", "heartbeat", "schedule_to_start",
        "concurrency", "isolation", "kill_grace", "dead_letter_replay", "priority",
        "unique_key", "unique_for", "rate_limit",  # SPEC §11
        "debounce", "debounce_max", "debounce_key",  # SPEC §13
    }
    assert set(queue_core.app.task.TaskOptions.__annotations__) == spec_options
    call_options = set(queue_core.app.task.CallOptions.__annotations__)
    assert call_options == spec_options | {"delay", "run_at"}


# --------------------------------------------------------------------------- JobHandle


def test_job_handle_lives_in_its_own_module_and_is_importable_as_before() -> None:
    assert queue_core.JobHandle is JobHandle
    assert queue_core.app.task.JobHandle is JobHandle
    assert JobHandle.__module__ == "queue_core.app.handle"


def test_result_timeout_is_measured_on_the_queues_clock_without_sleeping() -> None:
    clock = ManualClock()
    queue = Queue("memory://", clock=clock)

    @queue.task
    def body() -> None:
        return None

    job = body.delay()
    start_clock, start_wall = clock.monotonic(), time.monotonic()
    with pytest.raises(TimeoutError, match=f"job {job.id} has not finished within 3600 s"):
        job.result(timeout=3600)
    assert clock.monotonic() - start_clock == pytest.approx(3600, abs=0.01)
    assert time.monotonic() - start_wall < 5  # an hour on the clock, no hour of sleep


class _CancelsAfter(ManualClock):
    """A manual clock whose n-th wait cancels the job (a worker finishing it meanwhile)."""

    def __init__(self, waits: int) -> None:
        super().__init__()
        self.waits: list[float] = []
        self.left = waits
        self.job: JobHandle | None = None

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        super().sleep(seconds)
        self.left -= 1
        if self.left == 0 and self.job is not None:
            self.job.cancel()


def test_result_keeps_polling_on_the_clock_until_the_job_ends() -> None:
    clock = _CancelsAfter(waits=6)
    queue = Queue("memory://", clock=clock)

    @queue.task
    def body() -> None:
        return None

    clock.job = body.delay()
    with pytest.raises(JobCancelled):
        clock.job.result(timeout=None)
    assert len(clock.waits) == 6
    assert clock.waits[0] == pytest.approx(0.002)
    assert clock.waits == sorted(clock.waits)  # pauses grow
    assert clock.monotonic() == pytest.approx(sum(clock.waits), abs=0.01)


def test_task_definition_errors_are_config_errors(queue: Queue) -> None:
    with pytest.raises(ConfigError):
        queue.task(timeout="1y")
