"""SPEC §4 "never early" for ``isolation="process"``: a body whose child starts it late (a
fresh child importing its module, a slow unpickle, a busy machine) still runs its whole
timeout -- the deadline counts from the body's start, not from the request -- on the
event-loop path (``ProcessPool.run``) and the direct one (``ProcessPool.run_direct``)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from queue_core import JobState, Queue
from queue_core.worker.process import ProcessOutcome, ProcessPool, ProcessResult
from queue_core.worker.process.children import request_of
from tests.unit.worker import late_start_tasks
from tests.unit.worker.conftest import drain
from tests.unit.worker.test_process_isolation import SLACK

TASKS = late_start_tasks.__name__
IMPORT_S = late_start_tasks.IMPORT_S
TIMEOUT = 0.5
"""Shorter than the module's import: without the late start counted, every body here
would be stopped before it began."""


def _looped(qualname: str, *args: object) -> ProcessResult:
    async def main() -> ProcessResult:
        async with ProcessPool(1) as pool:
            return await pool.run(
                TASKS, qualname, args, {}, job_id="j", attempt=1, timeout=TIMEOUT, kill_grace=0.5
            )

    return anyio.run(main)


def _direct(qualname: str, *args: object) -> ProcessResult:
    pool = ProcessPool(1)
    try:
        request = request_of(
            TASKS, qualname, args, {}, job_id="j", attempt=1, timeout=TIMEOUT,
            heartbeat_every=1.0, wants_ctx=False, execution_id=None, step_id=None, carried=(),
        )  # fmt: skip
        return pool.run_direct(
            request, timeout=TIMEOUT, kill_grace=0.5, heartbeat=None, cancelled=lambda: False
        )
    finally:
        anyio.run(lambda: pool.aclose(grace=1.0))


@pytest.mark.parametrize("attempt", [_looped, _direct], ids=["loop", "direct"])
def test_a_body_started_late_by_its_import_gets_its_whole_timeout(attempt) -> None:
    result = attempt("nap", TIMEOUT * 0.6)  # IMPORT_S + this > TIMEOUT, this < TIMEOUT

    assert result.outcome is ProcessOutcome.RETURNED, result
    assert result.value == "done"


@pytest.mark.parametrize("attempt", [_looped, _direct], ids=["loop", "direct"])
def test_a_body_started_late_is_stopped_no_earlier_than_its_timeout(
    attempt, tmp_path: Path
) -> None:
    ran = tmp_path / "ran"

    result = attempt("until_stopped", str(ran))

    assert result.outcome is ProcessOutcome.TIMED_OUT
    body_ran = float(ran.read_text())
    assert TIMEOUT <= body_ran < TIMEOUT + SLACK  # never early; late only by scheduling
    assert (
        result.duration is not None and result.duration >= IMPORT_S + TIMEOUT
    )  # counted from the body's start


@pytest.mark.parametrize("per_call", [False, True], ids=["direct", "loop"])
@pytest.mark.parametrize(
    ("options", "nap"),
    [({"timeout": TIMEOUT}, TIMEOUT * 0.6), ({"heartbeat": 1.0}, 0.6)],
    ids=["timeout", "heartbeat"],
)
def test_the_worker_judges_a_late_body_from_its_start(
    queue: Queue, per_call: bool, options: dict[str, float], nap: float
) -> None:
    """The worker's own watch of an attempt -- its timeout and its heartbeat silence --
    counts from the body's start too, not from the request (a fresh child's import here;
    a cold child's start likewise): each body is shorter than its bound, but not the
    import and the body together."""
    task = queue.task(isolation="process", max_retries=0, **options)(late_start_tasks.nap)
    # a per-call option sends the attempt down the event loop's path, else a body thread's
    handle = task.apply(args=(nap,), kill_grace=1.0) if per_call else task.delay(nap)
    drain(queue)

    info = handle.info()
    assert (info.state, info.reason) == (JobState.SUCCEEDED, None), handle.attempts()
    assert handle.result(timeout=1) == "done"
