"""``queue-core dashboard`` (contrib.dashboard.cli.dashboard_command) and
``python -m contrib.dashboard``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import click
import httpx
import pytest
from click.testing import CliRunner

from contrib.dashboard.cli import dashboard_command
from queue_core import Queue
from tests.servers.ports import free_port

ROOT = Path(__file__).resolve().parents[3]


def test_help_names_every_option() -> None:
    result = CliRunner().invoke(dashboard_command, ["--help"])
    assert result.exit_code == 0
    for option in ("--app", "--url", "--host", "--port", "--token", "--read-only"):
        assert option in result.output
    assert "127.0.0.1" in result.output and "8080" in result.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--port", "70000"], "70000"),
        (["--url", "nosuch://x"], "nosuch"),
        (["--app", "no_such_module_xyz:queue"], "no_such_module_xyz"),
        (["--url", "memory://", "--token", " "], "--token"),
    ],
)
def test_bad_options_exit_2_naming_the_value(args: list[str], needle: str) -> None:
    result = CliRunner().invoke(dashboard_command, args)
    assert result.exit_code == 2, result.output
    assert needle in result.output


def _stored(db: Path) -> None:
    """A SQLite file with queue-core's schema: the dashboard refuses storage that does not
    exist or holds no schema, as the read-only commands do."""
    queue = Queue(f"sqlite:///{db}")
    queue.migrate()
    queue.close()


def _wait_listening(base: str, proc: subprocess.Popen[str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"dashboard exited early: {proc.communicate()[1]}")
        try:
            httpx.get(base + "/metrics", timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError("dashboard did not start listening")


def test_python_m_contrib_dashboard_serves_pages_and_metrics(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    url = f"sqlite:///{db}"
    q = Queue(url)
    q.enqueue("c.task", args=(1,), delay=3600, allow_unregistered=True)
    q.close()
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QUEUE_CORE_DASHBOARD_TOKEN": "envtok"}
    env.pop("QUEUE_CORE_URL", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "contrib.dashboard", "--url", url, "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_listening(base, proc)
        assert httpx.get(base + "/").status_code == 401
        auth = {"Authorization": "Bearer envtok"}
        page = httpx.get(base + "/", headers=auth)
        assert page.status_code == 200
        assert 'data-queue="default"' in page.text
        metrics = httpx.get(base + "/metrics", headers=auth).text
        assert 'queue_core_jobs{queue="default",state="scheduled"} 1.0' in metrics
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert f"at http://127.0.0.1:{port}/ (token required)" in err
    assert "envtok" not in err


def test_binding_beyond_localhost_without_a_token_warns(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    db = tmp_path / "q.db"
    _stored(db)
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "contrib.dashboard", "--url", f"sqlite:///{db}",
            "--host", "0.0.0.0", "--port", str(port), "--read-only",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        _wait_listening(f"http://127.0.0.1:{port}", proc)
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert "warning: serving on 0.0.0.0 without --token" in err
    assert "(read-only)" in err


def test_under_a_group_the_groups_app_and_url_are_used() -> None:
    @click.group()
    @click.option("--url", default=None)
    @click.pass_context
    def group(ctx: click.Context, url: str | None) -> None:
        ctx.obj = {"app": None, "url": url}  # what contrib.cli's group stores

    group.add_command(dashboard_command)
    result = CliRunner().invoke(group, ["--url", "nosuch://x", "dashboard"])
    assert result.exit_code == 2
    assert "unknown storage URL scheme 'nosuch'" in result.output
    # the command's own option wins over the group's
    result = CliRunner().invoke(group, ["--url", "nosuch://x", "dashboard", "--url", "other://y"])
    assert "'other'" in result.output


def test_without_the_extra_the_command_imports_and_names_the_extra(tmp_path: Path) -> None:
    # a process where starlette cannot be imported, as without queue-core[dashboard]
    script = (
        "import sys; sys.modules['starlette'] = None; sys.modules['uvicorn'] = None\n"
        "from contrib.dashboard.cli import dashboard_command\n"
        "dashboard_command.main(['--url', 'memory://'], prog_name='queue-core dashboard')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 1
    assert "pip install 'queue-core[dashboard]'" in done.stderr


def _serve(tmp_path: Path, *args: str) -> tuple[str, subprocess.Popen[str]]:
    db = tmp_path / "cli.db"
    _stored(db)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QUEUE_CORE_DASHBOARD_TOKEN": "T0k-5e3cret"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "contrib.dashboard", "--url", f"sqlite:///{db}",
         "--port", str(port), *args],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    _wait_listening(base, proc)
    return base, proc


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    return out + err  # uvicorn writes its access log to stdout


def test_the_access_log_never_shows_the_token(tmp_path: Path) -> None:
    """``?token=`` logins -- right, wrong, on a POST -- are logged as ``token=***``."""
    base, proc = _serve(tmp_path)
    try:
        first = httpx.get(base + "/jobs?state=dead&token=T0k-5e3cret")
        assert first.status_code == 303 and first.headers["location"] == "/jobs?state=dead"
        assert httpx.get(base + "/?token=T0k-5e3creX").status_code == 401
        assert httpx.post(base + "/dead/purge?token=T0k-5e3cret").status_code == 403  # no CSRF
    finally:
        log = _stop(proc)
    assert 'GET /jobs?state=dead&token=*** HTTP/1.1" 303' in log
    assert 'GET /?token=*** HTTP/1.1" 401' in log
    assert 'POST /dead/purge?token=*** HTTP/1.1" 403' in log
    assert "T0k-5e3cre" not in log


def test_allowed_host_names_a_host_the_dashboard_answers_to(tmp_path: Path) -> None:
    base, proc = _serve(tmp_path, "--allowed-host", "Queues.Example.com")
    port = base.rpartition(":")[2]
    try:
        named = httpx.get(base + "/", headers={"Host": f"queues.example.com:{port}"})
        assert named.status_code == 401  # answered (the token is still needed)
        refused = httpx.get(base + "/", headers={"Host": f"evil.example:{port}"})
        assert refused.status_code == 400 and "DNS rebinding" in refused.text
    finally:
        log = _stop(proc)
    assert "answers to IP addresses, localhost and *.localhost, queues.example.com" in log
