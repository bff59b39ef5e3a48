"""Script steps run only where the worker's operator opted in (issue 26 item 5), and what
script steps get from the rest of the Sluice format: ``SLUICE_ATTEMPT``, templated
``args`` and ``env``, secrets only through templates."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from queue_core import ConfigError, Outcome, Queue
from queue_core.app.steps import gate
from queue_core.flows import ExecutionState, StepState
from queue_core.worker import Worker

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX scripts")


@pytest.fixture
def queue(monkeypatch: pytest.MonkeyPatch) -> Iterator[Queue]:
    monkeypatch.delenv("QUEUE_CORE_WORKER_FLOW_DIRS", raising=False)
    monkeypatch.delenv("QUEUE_CORE_WORKER_HTTP_HOSTS", raising=False)
    q = Queue("memory://")
    yield q
    q.close()


def drain(q: Queue, **options: Any) -> None:
    q.run_worker(burst=True, reap_interval=0.1, install_signal_handlers=False, **options)


def flow_file(where: Path, marker: Path, *, attempts: int = 3) -> Path:
    """A flow whose one script writes ``marker`` when it runs."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "touch.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\nprint('[1]')\n"
    )
    path = where / "flow.yaml"
    path.write_text(
        f"id: touch\nretry: {{ max_attempts: {attempts}, initial: 10ms }}\n"
        "tasks:\n  - id: touch\n    type: script\n    file: touch.py\n"
    )
    return path


def test_by_default_a_stored_script_outside_the_workers_project_is_refused(
    queue: Queue, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A definition someone else stored (this process never loaded its file) names a
    script outside the worker's working directory: refused, not run."""
    marker = tmp_path / "ran"
    run = queue.load_flow(flow_file(tmp_path / "flows", marker)).start()
    monkeypatch.setattr(gate, "_LOADED_DIRS", set())  # as a worker that loaded no flow file
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    drain(queue)
    step = run.steps()[0]
    assert [(a.outcome, a.reason) for a in step.attempts] == [(Outcome.FAILED, "not_allowed")]
    message = step.attempts[0].message or ""
    assert "touch.py was not run" in message and "--flow-dir" in message
    assert str(project) in message  # the directories it may run scripts from
    assert step.state is StepState.DEAD and step.reason == "fatal"  # not retried
    assert run.status() is ExecutionState.FAILED
    assert not marker.exists()


def test_by_default_scripts_of_the_workers_project_run(
    queue: Queue, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "ran"
    run = queue.load_flow(flow_file(tmp_path / "flows", marker)).start()
    monkeypatch.setattr(gate, "_LOADED_DIRS", set())
    monkeypatch.chdir(tmp_path)  # the flow's directory is inside the working directory
    drain(queue)
    assert run.status() is ExecutionState.SUCCEEDED and marker.exists()


def test_by_default_the_flow_files_the_application_loaded_are_trusted(
    queue: Queue, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gate, "_LOADED_DIRS", set())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    marker = tmp_path / "ran"
    run = queue.load_flow(flow_file(tmp_path / "flows", marker)).start()  # this process
    drain(queue)
    assert run.status() is ExecutionState.SUCCEEDED and marker.exists()


def test_the_filesystem_root_is_never_a_default_flow_directory(tmp_path: Path) -> None:
    assert Path("/") not in gate.default_flow_dirs(Path("/"))
    assert tmp_path.resolve() in gate.default_flow_dirs(tmp_path)


def test_an_empty_list_of_flow_directories_runs_no_script(queue: Queue, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    run = queue.load_flow(flow_file(tmp_path / "flows", marker)).start()
    drain(queue, flow_dirs=[])
    assert run.steps()[0].attempts[0].reason == "not_allowed"
    assert not marker.exists()


def test_a_script_outside_the_allowed_directories_is_refused(queue: Queue, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    other = tmp_path / "other"
    other.mkdir()
    run = queue.load_flow(flow_file(tmp_path / "flows", marker)).start()
    drain(queue, flow_dirs=[other])
    attempt = run.steps()[0].attempts[0]
    assert attempt.reason == "not_allowed" and str(other) in (attempt.message or "")
    assert not marker.exists()


def test_a_symlink_out_of_an_allowed_directory_is_refused(queue: Queue, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    outside = flow_file(tmp_path / "outside", marker)
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "touch.py").symlink_to(outside.parent / "touch.py")
    (allowed / "flow.yaml").write_text(outside.read_text())
    run = queue.load_flow(allowed / "flow.yaml").start()
    drain(queue, flow_dirs=[allowed])
    assert run.steps()[0].attempts[0].reason == "not_allowed"
    assert not marker.exists()


@pytest.mark.parametrize("how", ["argument", "parent", "env", "config"])
def test_a_script_inside_an_allowed_directory_runs(
    queue: Queue, tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "ran"
    run = queue.load_flow(flow_file(tmp_path / "flows" / "deeper", marker)).start()
    if how == "argument":
        drain(queue, flow_dirs=[tmp_path / "flows" / "deeper"])
    elif how == "parent":  # any depth below an allowed directory
        drain(queue, flow_dirs=str(tmp_path / "flows"))
    elif how == "env":
        (tmp_path / "elsewhere").mkdir()
        dirs = f"{tmp_path / 'elsewhere'}{os.pathsep}{tmp_path / 'flows'}"
        monkeypatch.setenv("QUEUE_CORE_WORKER_FLOW_DIRS", dirs)
        drain(queue)
    else:
        (tmp_path / "queue-core.toml").write_text('[worker]\nflow_dirs = ["flows"]\n')
        monkeypatch.chdir(tmp_path)
        drain(queue)
    assert run.result(timeout=1) == {"touch": [1]}
    assert marker.read_text() == "ran"


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"flow_dirs": ["/no/such/dir"]}, "flow_dirs"),
        ({"flow_dirs": [""]}, "flow_dirs"),
        ({"flow_dirs": 3}, "flow_dirs"),
        ({"http_hosts": ["a/b"]}, "http_hosts"),
        ({"http_hosts": ["*x*"]}, "http_hosts"),
        ({"http_hosts": [""]}, "http_hosts"),
        ({"http_hosts": [3]}, "http_hosts"),
    ],
)
def test_bad_opt_ins_are_refused_when_the_worker_is_made(
    queue: Queue, options: dict[str, Any], field: str
) -> None:
    with pytest.raises(ConfigError) as info:
        Worker(queue, install_signal_handlers=False, **options)
    assert (info.value.code, info.value.field) == ("invalid_option", field)


def test_a_bad_environment_opt_in_names_the_variable(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QUEUE_CORE_WORKER_FLOW_DIRS", "/no/such/dir")
    with pytest.raises(ConfigError) as info:
        Worker(queue, install_signal_handlers=False)
    assert info.value.field == "QUEUE_CORE_WORKER_FLOW_DIRS"


ATTEMPTS = """
import json, os, sys
if os.environ["SLUICE_ATTEMPT"] == "1":
    sys.exit(2)
print(json.dumps({
    "sluice": os.environ["SLUICE_ATTEMPT"], "ours": os.environ["QUEUE_CORE_ATTEMPT"],
    "argv": sys.argv[1:], "day": os.environ.get("DAY"), "token": os.environ.get("TOKEN"),
    "secret_vars": sorted(k for k in os.environ if k.startswith("QUEUE_CORE_SECRET_")),
}))
"""


def test_a_sluice_script_reads_its_attempt_and_gets_rendered_args_and_env(
    queue: Queue, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QUEUE_CORE_SECRET_TOKEN", "t0k3n")
    monkeypatch.setenv("QUEUE_CORE_SECRET_OTHER", "never-handed-over")
    (tmp_path / "attempts.py").write_text(ATTEMPTS)
    (tmp_path / "flow.yaml").write_text(
        "id: sluice\nretry: { max_attempts: 2, initial: 10ms }\n"
        "tasks:\n  - id: run\n    type: script\n    file: attempts.py\n"
        "    args: ['--attempt={{ attempt }}', '{{ input.day }}', plain]\n"
        "    env: { DAY: '{{ input.day }}', TOKEN: '{{ secrets.TOKEN }}' }\n"
    )
    run = queue.load_flow(tmp_path / "flow.yaml").start({"day": "2026-11-30"})
    drain(queue, flow_dirs=[tmp_path])
    attempts = run.steps()[0].attempts
    assert [(a.outcome, a.reason) for a in attempts] == [
        (Outcome.FAILED, "exit_code"),
        (Outcome.SUCCEEDED, None),
    ]
    out = run.result(timeout=1)["run"]
    assert (out["sluice"], out["ours"]) == ("2", "2")
    assert out["argv"] == ["--attempt=2", "2026-11-30", "plain"]
    assert out["day"] == "2026-11-30"
    assert out["token"] == "***"  # the script got it; its echo in the result is masked
    assert out["secret_vars"] == []  # secrets reach a script only through templates
    job = queue.storage().get_job(run.steps()[0].job_id or "")
    assert job is not None and b"t0k3n" not in (job.result or b"")
    assert json.loads(job.result or b"{}")["token"] == "***"


def test_a_template_error_in_args_fails_the_attempt_before_the_script_runs(
    queue: Queue, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    path = flow_file(tmp_path, marker, attempts=2)
    path.write_text(path.read_text() + "    args: ['{{ results.nothing }}']\n")
    run = queue.load_flow(path).start()
    drain(queue, flow_dirs=[tmp_path])
    step = run.steps()[0]
    assert [a.reason for a in step.attempts] == ["template_error", "template_error"]
    assert "results.nothing" in (step.attempts[0].message or "")
    assert not marker.exists()
