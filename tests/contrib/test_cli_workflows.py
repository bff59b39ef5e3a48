"""``queue-core flow show|retry|replay`` for workflows and flows (SPEC §12), driven by
click's CliRunner against an APP module whose ``Queue("memory://")`` a real worker serves
from a thread of the test."""

from __future__ import annotations

import importlib
import json
import re
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from queue_core import Queue
from queue_core.flows import ExecutionState
from queue_core.worker import Worker

APP = """
from queue_core import DurableContext, Queue

queue = Queue("memory://", lease=3)
broken = {"b": True}

@queue.task
def mail(address: str) -> str:
    return f"sent {address}"

def b() -> str:
    if broken["b"]:
        raise ValueError("b is broken")
    return "B"

@queue.workflow
async def onboard(ctx: DurableContext, user: str) -> str:
    profile = await ctx.step("fetch", lambda: {"user": user})
    await ctx.sleep(0.2)
    decision = await ctx.wait_for_event("approval", key=user)
    sent = await ctx.gather(ctx.run(mail, f"{user}@a"), ctx.run(mail, f"{user}@b"))
    return f"{decision}: {profile['user']} {len(sent)}"

@queue.workflow
def steps(ctx: DurableContext) -> str:
    return ctx.step("a", lambda: "A") + ctx.step("b", b)

pipeline = queue.flow("pipeline")

@pipeline.step
def first() -> int:
    return 1

@pipeline.step(depends_on=[first])
def second(first: int) -> int:
    return first + 1

@queue.workflow
async def with_sub(ctx: DurableContext) -> dict:
    return await ctx.run_flow(pipeline)
"""


@dataclass
class WorkflowApp:
    spec: str
    queue: Queue
    module: ModuleType


@pytest.fixture
def wf_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[WorkflowApp]:
    name = f"wfapp_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(APP)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("QUEUE_CORE_URL", raising=False)
    module = importlib.import_module(name)
    queue: Queue = module.queue
    worker = Worker(queue, install_signal_handlers=False, reap_interval=0.2, shutdown_grace=2)
    thread = threading.Thread(target=worker.run, name="wf-cli-worker", daemon=True)
    thread.start()
    try:
        yield WorkflowApp(spec=f"{name}:queue", queue=queue, module=module)
    finally:
        worker.stop()
        thread.join(timeout=15)
        queue.close()
        sys.modules.pop(name, None)


def _wait_state(handle: Any, *states: ExecutionState, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while handle.status() not in states:
        assert time.monotonic() < end, f"{handle.id} is {handle.status()}, not {states}"
        time.sleep(0.02)


def _timeline(stdout: str) -> list[list[str]]:
    lines = stdout.split("Timeline (", 1)[1].splitlines()[1:]
    rows = []
    for line in lines[2:]:
        if not line.strip():
            break
        rows.append(re.split(r"\s{2,}", line.strip()))
    return rows


def test_show_prints_a_workflow_s_steps_sleeps_waits_and_children(
    run: Any, wf_app: WorkflowApp
) -> None:
    execution = wf_app.module.onboard.start("ann")
    end = time.monotonic() + 20
    while len(execution.steps()[0].attempts) < 2:  # past the sleep, waiting for the event
        assert time.monotonic() < end
        time.sleep(0.02)
    _wait_state(execution, ExecutionState.WAITING)
    waiting = run("flow", "show", execution.id, "--app", wf_app.spec)
    assert waiting.exit_code == 0, waiting.stderr
    labels = [(r[0], r[1]) for r in _timeline(waiting.stdout)]
    assert ("step fetch", "done") in labels
    assert ("sleep #1", "slept") in labels
    assert ("wait approval [ann]", "waiting") in labels
    assert ("main #1", "suspended") in labels and ("main #2", "suspended") in labels
    assert wf_app.queue.send_event("approval", key="ann", data="ok") == 1
    assert execution.result(timeout=20) == "ok: ann 2"
    shown = run("flow", "show", execution.id[:12], "--app", wf_app.spec)
    assert shown.exit_code == 0, shown.stderr
    assert re.search(r"^result:\s+\"ok: ann 2\"$", shown.stdout, re.MULTILINE), shown.stdout
    labels = [(r[0], r[1]) for r in _timeline(shown.stdout)]
    assert ("wait approval [ann]", "received") in labels
    assert {label for label, _ in labels} >= {f"{wf_app.module.mail.name}#0 #1",
                                               f"{wf_app.module.mail.name}#1 #1"}  # fmt: skip
    as_json = run("flow", "show", execution.id, "--json", "--app", wf_app.spec)
    data = json.loads(as_json.stdout)
    assert data["result"] == "ok: ann 2"
    assert [(h["kind"], h["name"], h["state"]) for h in data["history"]] == [
        ("step", "fetch", "done"),
        ("sleep", "sleep #1", "slept"),
        ("wait", "approval", "received"),
        ("child", f"{wf_app.module.mail.name}#0", "succeeded"),
        ("child", f"{wf_app.module.mail.name}#1", "succeeded"),
    ]


def test_retry_resumes_a_failed_workflow_and_refuses_a_succeeded_one(
    run: Any, wf_app: WorkflowApp
) -> None:
    execution = wf_app.module.steps.start()
    _wait_state(execution, ExecutionState.FAILED)
    wf_app.module.broken["b"] = False
    retried = run("flow", "retry", execution.id, "--app", wf_app.spec)
    assert retried.exit_code == 0, retried.stderr
    assert f"Execution {execution.id} resumes: running again." in retried.stdout
    assert re.search(r"^main\s+queued\s+1$", retried.stdout, re.MULTILINE), retried.stdout
    assert execution.result(timeout=20) == "AB"
    again = run("flow", "retry", execution.id, "--app", wf_app.spec)
    assert again.exit_code == 1
    assert "is succeeded: retry() resumes a failed, timed_out or cancelled execution" in (
        again.stderr
    )


def test_replay_reruns_a_flow_step_and_refuses_an_unknown_one(
    run: Any, wf_app: WorkflowApp
) -> None:
    execution = wf_app.module.pipeline.start()
    assert execution.result(timeout=20) == {"first": 1, "second": 2}
    replayed = run("flow", "replay", execution.id, "second", "--json", "--app", wf_app.spec)
    assert replayed.exit_code == 0, replayed.stderr
    data = json.loads(replayed.stdout)
    assert data["state"] == "running"
    assert [(s["step_id"], s["state"]) for s in data["steps"]][0] == ("first", "succeeded")
    assert execution.result(timeout=20) == {"first": 1, "second": 2}
    assert len(execution.steps()[1].attempts) == 2
    unknown = run("flow", "replay", execution.id, "third", "--app", wf_app.spec)
    assert unknown.exit_code == 1
    assert "has no step 'third'; its steps: 'first', 'second'" in unknown.stderr


def test_a_sub_execution_has_a_row_of_its_own(run: Any, wf_app: WorkflowApp) -> None:
    execution = wf_app.module.with_sub.start()
    assert execution.result(timeout=20) == {"first": 1, "second": 2}
    shown = run("flow", "show", execution.id, "--app", wf_app.spec)
    rows = {r[0]: r[1] for r in _timeline(shown.stdout)}
    assert rows["pipeline#0"] == "succeeded"
    assert rows["main #1"] == "suspended" and rows["main #2"] == "succeeded"
