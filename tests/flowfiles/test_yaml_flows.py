"""YAML flow files run by a worker: script steps with their inputs on stdin, a failing
script's exit code, a dashed step id."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from queue_core import ExecutionFailed, Outcome, Queue
from queue_core.records.flows import ExecutionReason, ExecutionState


@pytest.fixture
def queue() -> Iterator[Queue]:
    q = Queue("memory://")
    yield q
    q.close()


def drain(q: Queue, **options: object) -> None:
    q.run_worker(burst=True, reap_interval=0.1, install_signal_handlers=False, **options)  # type: ignore[arg-type]


def _tasks_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Queue:
    name = "dashed_ids_tasks"
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent("""
        from queue_core import Queue

        queue = Queue("memory://")

        @queue.task(name="users.fetch")
        def fetch(input):
            return ["ann", "bob"]

        @queue.task(name="users.report")
        def report(input):
            return "reported"
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    module = __import__(name)
    return module.queue  # type: ignore[no-any-return]


def test_a_yaml_flow_with_a_dashed_step_id_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = _tasks_module(tmp_path, monkeypatch)
    (tmp_path / "count.py").write_text(
        "import json, sys\nprint(len(json.load(sys.stdin)['results']['fetch-users']))\n"
    )
    path = tmp_path / "users.yaml"
    path.write_text(
        textwrap.dedent("""\
        id: users
        tasks:
          - { id: fetch-users, type: task, task: users.fetch }
          - { id: report, type: task, task: users.report, depends_on: [fetch-users] }
          - { id: count-users, type: script, file: count.py, depends_on: [fetch-users] }
    """)
    )
    flow = queue.load_flow(path)
    execution = flow.start({"day": "2026-12-01"})
    queue.run_worker(burst=True, install_signal_handlers=False)
    assert execution.status() is ExecutionState.SUCCEEDED
    assert execution.result(timeout=1) == {
        "fetch-users": ["ann", "bob"],
        "report": "reported",
        "count-users": 2,
    }


def test_yaml_script_steps_run_with_results_on_stdin(queue: Queue, tmp_path: Path) -> None:
    (tmp_path / "first.py").write_text("print('[1, 2]')\n")
    (tmp_path / "second.py").write_text(
        "import json, sys\n"
        "data = json.load(sys.stdin)\n"
        "print(json.dumps({'sum': sum(data['results']['first']), 'in': data['input']}))\n"
    )
    (tmp_path / "flow.yaml").write_text(
        "id: scripts\n"
        "tasks:\n"
        "  - id: first\n    type: script\n    file: first.py\n"
        "  - id: second\n    type: script\n    file: second.py\n    depends_on: [first]\n"
    )
    flow = queue.load_flow(tmp_path / "flow.yaml")
    execution = flow.start({"x": 1})
    drain(queue, flow_dirs=[tmp_path])
    assert execution.result(timeout=5) == {"first": [1, 2], "second": {"sum": 3, "in": {"x": 1}}}


def test_a_script_exiting_non_zero_fails_with_exit_code(queue: Queue, tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text("import sys\nprint('nope', file=sys.stderr)\nsys.exit(3)\n")
    (tmp_path / "flow.yaml").write_text(
        "id: bad-script\ntasks:\n  - id: bad\n    type: script\n    file: bad.py\n"
    )
    execution = queue.load_flow(tmp_path / "flow.yaml").start()
    drain(queue, flow_dirs=[tmp_path])
    with pytest.raises(ExecutionFailed) as failed:
        execution.result(timeout=5)
    assert (failed.value.reason, failed.value.step_id) == (ExecutionReason.STEP_FAILED, "bad")
    attempt = execution.steps()[0].attempts[0]
    assert (attempt.outcome, attempt.reason) == (Outcome.FAILED, "exit_code")
    assert "3" in (attempt.message or "")
