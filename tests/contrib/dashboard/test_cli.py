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
from tests.contrib.dashboard.conftest import free_port

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
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "contrib.dashboard", "--url", "memory://",
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
