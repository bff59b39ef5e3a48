"""A Sluice flow file with ``type: http``, templates and ``{{ secrets.TOKEN }}`` runs
unchanged with ``queue-core flow run FILE --wait`` (SPEC §7, issue 27), served by a real
``queue-core worker`` subprocess that opted in (``--flow-dir``, ``--http-host``) against a
real HTTP server on 127.0.0.1; the token reaches the server and appears in no stored
byte, log line, CLI output or dashboard page. And a script step interrupted by the
worker's shutdown is recorded ``worker_shutdown`` and retried, reading ``SLUICE_ATTEMPT``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from queue_core import Outcome, Queue
from queue_core.flows import ExecutionState, StepState
from tests.servers.http_echo import EchoServer, echo_server

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "sk_live_7Qz/9+Xy=secret"
"""The secret: with characters that URL-encode and JSON-escape differently."""
TOKEN_FORMS = (TOKEN, "sk_live_7Qz%2F9%2BXy%3Dsecret", "7Qz/9+Xy", "7Qz%2F9%2BXy")

SLUICE_FLOW = """\
id: nightly-sync
retry: {{ max_attempts: 3, backoff: fixed, initial: 100ms }}
timeout: 2m
tasks:
  - id: extract
    type: script
    file: pipelines/extract.py
    timeout: 30s
  - id: fetch-users
    type: http
    url: {api}/flaky?attempt={{{{ attempt }}}}&day={{{{ input.day }}}}
    headers:
      Authorization: Bearer {{{{ secrets.TOKEN }}}}
    timeout: 10s
    depends_on: [extract]
  - id: report
    type: http
    method: POST
    url: {api}/echo?token={{{{ secrets.TOKEN }}}}
    body:
      users: "{{{{ results['fetch-users'].path }}}}"
      rows: "{{{{ results.extract.rows }}}}"
      token: "{{{{ secrets.TOKEN }}}}"
      execution: "{{{{ execution_id }}}}"
    expect: [200, 201]
    depends_on: [extract, fetch-users]
"""

BROKEN_FLOW = """\
id: broken-report
tasks:
  - id: notify
    type: http
    url: {api}/status/500?token={{{{ secrets.TOKEN }}}}
"""

EXTRACT = """\
import json, os, sys
attempt = os.environ["SLUICE_ATTEMPT"]
if attempt == "1":
    print("source not ready", file=sys.stderr)
    sys.exit(3)
print(json.dumps({"rows": 2, "attempt": attempt}))
"""


def _script() -> str:
    path = Path(sys.executable).with_name("queue-core")
    assert path.exists(), f"console script not installed next to {sys.executable}"
    return str(path)


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("QUEUE_CORE_") and k != "PYTHONPATH"
    }
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_script(), *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@contextmanager
def _worker(cwd: Path, log: Path, *args: str, **env: str) -> Iterator[subprocess.Popen[bytes]]:
    """``queue-core worker app:queue ARGS`` in the background, its output in ``log``;
    SIGTERM at the end of the block."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [
                _script(),
                "worker",
                "app:queue",
                "--reap-interval",
                "0.2",
                "--log-level",
                "DEBUG",
                *args,
            ],
            cwd=cwd,
            env=_env(**env),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _project(tmp_path: Path, server: EchoServer) -> tuple[Path, str]:
    (tmp_path / "flows" / "pipelines").mkdir(parents=True)
    (tmp_path / "flows" / "pipelines" / "extract.py").write_text(EXTRACT)
    (tmp_path / "flows" / "sync.yaml").write_text(SLUICE_FLOW.format(api=server.url))
    (tmp_path / "flows" / "broken.yaml").write_text(BROKEN_FLOW.format(api=server.url))
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    (tmp_path / "app.py").write_text(f"from queue_core import Queue\nqueue = Queue({url!r})\n")
    q = Queue(url)
    q.migrate()
    q.close()
    return tmp_path, url


def _dashboard_pages(url: str, execution_ids: list[str]) -> list[str]:
    from starlette.testclient import TestClient

    from contrib.dashboard import create_app

    queue = Queue(url)
    try:
        client = TestClient(create_app(queue), base_url="http://localhost")
        pages = ["/", "/flows", "/jobs", "/dead"]
        for execution_id in execution_ids:
            pages.append(f"/flows/{execution_id}")
            pages += [
                f"/jobs/{s.job_id}" for s in queue.execution(execution_id).steps() if s.job_id
            ]
        pages += [f"/dead/{d.id}" for d in queue.dead_letters(limit=100)]
        texts = []
        for page in pages:
            response = client.get(page)
            assert response.status_code == 200, (page, response.status_code)
            texts.append(response.text)
        return texts
    finally:
        queue.close()


def test_a_sluice_flow_file_with_http_templates_and_a_secret_runs_unchanged(
    tmp_path: Path,
) -> None:
    with echo_server() as server:
        cwd, url = _project(tmp_path, server)
        log = tmp_path / "worker.log"
        opt_in = ("--flow-dir", "flows", "--http-host", "127.0.0.1")
        with _worker(cwd, log, *opt_in, QUEUE_CORE_SECRET_TOKEN=TOKEN):
            wait = ("--wait", "--timeout", "90", "--url", url)
            ran = _cli(cwd, "flow", "run", "flows/sync.yaml", "--input", '{"day": "d1"}', *wait)
            broken = _cli(cwd, "flow", "run", "flows/broken.yaml", *wait)
        seen = server.seen()

    assert ran.returncode == 0, ran.stdout + ran.stderr + log.read_text()
    assert "state:       succeeded" in ran.stdout
    for row in (
        "extract #1 failed",
        "extract #2 succeeded",
        "fetch-users #1 failed",
        "fetch-users #2 succeeded",
        "report #1 succeeded",
    ):
        assert row in " ".join(ran.stdout.split()), ran.stdout
    assert broken.returncode == 1 and "ended failed (step_failed, step 'notify')" in broken.stderr
    _check_the_server_got_the_token(seen)
    ids = _check_the_records(url)
    outputs = {
        "flow run": ran.stdout + ran.stderr,
        "flow run (broken)": broken.stdout + broken.stderr,
        "worker log": log.read_text(),
        **_cli_outputs(cwd, url, ids),
    }
    for i, page in enumerate(_dashboard_pages(url, ids)):
        outputs[f"dashboard page {i}"] = page
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("jobs.db*"))
    assert b"nightly-sync" in stored and b"secrets.TOKEN" in stored  # the template, stored
    for form in TOKEN_FORMS:
        assert form.encode() not in stored, f"{form!r} in the database file"
        for where, text in outputs.items():
            assert form not in text, f"{form!r} in {where}"
    assert "***" in outputs["flow show " + ids[1]] and "***" in outputs["dlq show"]
    assert any("***" in text for where, text in outputs.items() if where.startswith("dash"))
    assert "HTTP Request: POST" in outputs["worker log"]  # httpx's log line, masked
    assert "token=***" in outputs["worker log"]


def _check_the_server_got_the_token(seen: list[Any]) -> None:
    """The token reached the server, rendered in every field it was templated in."""
    assert [r.path.split("?")[0] for r in seen] == ["/flaky", "/flaky", "/echo", "/status/500"]
    assert seen[0].path == "/flaky?attempt=1&day=d1" and seen[1].path == "/flaky?attempt=2&day=d1"
    assert all(r.headers.get("Authorization") == f"Bearer {TOKEN}" for r in seen[:2])
    assert seen[2].path == f"/echo?token={TOKEN}" and seen[3].path.endswith(f"token={TOKEN}")
    sent = json.loads(seen[2].body)
    assert sent["token"] == TOKEN and sent["users"] == "/flaky?attempt=2&day=d1"
    assert sent["rows"] == "2"


def _check_the_records(url: str) -> list[str]:
    """The two executions as recorded; returns their ids (succeeded, failed)."""
    queue = Queue(url)
    try:
        [sync_info] = queue.executions(flow="nightly-sync")
        [broken_info] = queue.executions(flow="broken-report")
        execution = queue.execution(sync_info.id)
        assert execution.status() is ExecutionState.SUCCEEDED
        result = execution.result(timeout=1)
        assert result["extract"] == {"rows": 2, "attempt": "2"}
        assert json.loads(result["report"]["body"])["token"] == "***"
        assert result["fetch-users"]["headers"]["Authorization"] == "Bearer ***"
        assert execution.steps()[0].attempts[0].reason == "exit_code"
        [notify] = queue.execution(broken_info.id).steps()
        assert notify.state is StepState.DEAD
        attempt = notify.attempts[0]
        assert (attempt.outcome, attempt.reason) == (Outcome.FAILED, "http_status")
        assert "answered 500" in (attempt.message or "")
        assert "token=***" in (attempt.message or "")
        return [sync_info.id, broken_info.id]
    finally:
        queue.close()


def _cli_outputs(cwd: Path, url: str, ids: list[str]) -> dict[str, str]:
    """What the read commands print about the executions, their jobs and dead letters."""
    outputs: dict[str, str] = {}
    commands: list[tuple[str, ...]] = [
        ("flow", "executions", "--json"),
        ("dlq", "list"),
        ("dlq", "list", "--json"),
        ("jobs", "list", "--json"),
    ]
    for execution_id in ids:
        commands += [("flow", "show", execution_id), ("flow", "show", execution_id, "--json")]
    for args in commands:
        done = _cli(cwd, *args, "--url", url)
        assert done.returncode == 0, done.stderr
        outputs[" ".join(args)] = done.stdout + done.stderr
    dead = json.loads(outputs["dlq list --json"])
    assert len(dead) == 1
    shown = _cli(cwd, "dlq", "show", dead[0]["id"], "--url", url)
    assert shown.returncode == 0, shown.stderr
    outputs["dlq show"] = shown.stdout + shown.stderr
    return outputs


SLEEPER = """\
import json, os, sys, time
from pathlib import Path
Path(sys.argv[1]).write_text(f"{os.getpid()} {os.environ['SLUICE_ATTEMPT']}\\n")
if os.environ["SLUICE_ATTEMPT"] == "1":
    time.sleep(60)
print(json.dumps({"sluice": os.environ["SLUICE_ATTEMPT"],
                  "ours": os.environ["QUEUE_CORE_ATTEMPT"]}))
"""


def _wait_for(predicate: Any, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out waiting"
        time.sleep(0.05)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_script_step_stopped_by_worker_shutdown_is_retried_with_sluice_attempt_2(
    tmp_path: Path,
) -> None:
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "sleeper.py").write_text(SLEEPER)
    pid_file = tmp_path / "pid"
    (tmp_path / "flows" / "sleep.yaml").write_text(
        "id: sleepy\nretry: { max_attempts: 2, initial: 100ms }\n"
        "tasks:\n  - id: sleep\n    type: script\n    file: sleeper.py\n"
        f"    args: ['{pid_file}']\n"
    )
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    (tmp_path / "app.py").write_text(f"from queue_core import Queue\nqueue = Queue({url!r})\n")
    started = _cli(tmp_path, "flow", "run", "flows/sleep.yaml", "--url", url)
    assert started.returncode == 0, started.stderr
    execution_id = started.stdout.strip()
    log = tmp_path / "worker.log"
    with _worker(tmp_path, log, "--flow-dir", "flows", "--shutdown-grace", "0.5") as first:
        _wait_for(lambda: pid_file.exists() and pid_file.read_text().endswith(" 1\n"))
        script_pid = int(pid_file.read_text().split()[0])
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=60) == 0, log.read_text()
    assert _gone(script_pid), "the script's process group outlived its released attempt"
    queue = Queue(url)
    try:
        [attempt] = queue.execution(execution_id).steps()[0].attempts
        assert (attempt.outcome, attempt.reason) == (Outcome.LOST, "worker_shutdown")
        with _worker(tmp_path, log, "--flow-dir", "flows", "--burst"):
            _wait_for(lambda: queue.execution(execution_id).status().finished)
        run = queue.execution(execution_id)
        assert run.result(timeout=1) == {"sleep": {"sluice": "2", "ours": "2"}}
        assert [a.reason for a in run.steps()[0].attempts] == ["worker_shutdown", None]
    finally:
        queue.close()
