"""Credentials in storage URLs are masked in every output path (SECURITY.md), for every
shape of ``tests/url_shapes.py``: ``repr(Queue)``, ``repr`` of the storage, the errors
raised while opening and using it (``ConfigError`` and the storage errors), ``queue-core
config`` (table and ``--json``), the CLI's error output, a worker's log lines (its start
line and its warnings) and the dashboard's page header -- the last three through real
subprocesses and real HTTP.

A shape whose driver would read a piece of the password as a host name is never
connected to (``connects_to_loopback_only``): its connecting paths would be DNS queries.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from markupsafe import escape
from starlette.applications import Starlette
from starlette.routing import Mount

from contrib.cli.output import cell
from contrib.dashboard import create_app
from queue_core import Queue, QueueCoreError
from tests.contrib.dashboard.conftest import start_server, stop_server
from tests.url_shapes import SHAPES, Shape, connects_to_loopback_only

ROOT = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).parent / "queue-core")
SAFE = [s for s in SHAPES if connects_to_loopback_only(s)]
PARALLEL = 4
EVERY = pytest.mark.parametrize(
    "shapes",
    [
        pytest.param(SHAPES[::4], id="every-4th-shape"),
        pytest.param(SHAPES, id="every-shape", marks=pytest.mark.soak),
    ],
)
"""The subprocess paths (a CLI run or a worker per shape) run a quarter of the table in the
default run and the whole table in ``nox -s soak`` (CI runs both); the in-process paths
and the dashboard check every shape in both."""


def _leaks(shape: Shape, text: str) -> list[str]:
    """The fragments of ``shape``'s secret in ``text``, once the paths of this checkout
    and of its interpreter (tracebacks name them) are taken out: a temporary directory's
    random name may hold a fragment (a CI clone in ``/tmp/tmp.DGvKYWx9Lc`` did)."""
    for path in _PATHS:
        text = text.replace(path, "<path>")
    return [s for s in shape.secrets if s in text]


_PATHS = sorted({str(ROOT), sys.prefix, sys.base_prefix, sys.exec_prefix}, key=len, reverse=True)


def _bad_option(shape: Shape) -> str:
    """``shape.url`` with an option its backend refuses (the error names the URL)."""
    if shape.scheme.startswith("postgres"):
        option = "pgbouncer=maybe"
    elif shape.scheme.startswith("redis"):
        option = "socket_timeout=soon"
    else:
        option = "qc_bogus=1"
    return shape.url + ("&" if "?" in shape.masked else "?") + option


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUE_CORE_")}
    return {**env, "PYTHONPATH": f"{ROOT}", **extra}


def _run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, *args], cwd=cwd, env=_env(**env), capture_output=True, text=True, timeout=120
    )


def _each(fn: Callable[[Shape], list[str]], shapes: list[Shape]) -> None:
    """Run ``fn`` on every shape (a few at once); fail with every problem found."""
    with ThreadPoolExecutor(PARALLEL) as pool:
        problems = [p for found in pool.map(fn, shapes) for p in found]
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------- in process


def _check_error(shape: Shape, exc: BaseException, where: str) -> list[str]:
    shown = f"{exc}\n{exc!r}\n{getattr(exc, 'value', '')}"
    return [f"{where}: {shape.url!r} leaks {s!r}: {shown}" for s in _leaks(shape, shown)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.url)
def test_reprs_and_errors_in_process(shape: Shape) -> None:
    problems: list[str] = []
    try:
        queue = Queue(shape.url)
    except QueueCoreError as exc:  # refused (or, for a cluster, not reached) at once
        problems += _check_error(shape, exc, "Queue()")
    else:
        try:
            shown = f"{queue!r} {queue.storage()!r}"
            assert shape.masked in repr(queue)
            problems += [f"repr leaks {s!r}: {shown}" for s in _leaks(shape, shown)]
            if connects_to_loopback_only(shape):
                try:
                    queue.stats()
                except QueueCoreError as exc:
                    problems += _check_error(shape, exc, "stats()")
        finally:
            queue.close()
    with pytest.raises(QueueCoreError) as bad:
        Queue(_bad_option(shape)).close()
    problems += _check_error(shape, bad.value, "bad option")
    with pytest.raises(QueueCoreError) as unknown:
        Queue("x" + shape.url)
    assert ("x" + shape.masked) in str(unknown.value)
    problems += _check_error(shape, unknown.value, "unknown scheme")
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------- the CLI


@pytest.mark.timeout(600)
@EVERY
def test_queue_core_config_shows_every_url_masked(tmp_path: Path, shapes: list[Shape]) -> None:
    """The table with the URL from ``--url``, the JSON with the URL from the env."""

    def check(shape: Shape) -> list[str]:
        table = _run(["config", "--url", shape.url], tmp_path)
        by_env = _run(["config", "--json"], tmp_path, QUEUE_CORE_URL=shape.url)
        problems = []
        for result in (table, by_env):
            output = result.stdout + result.stderr
            if result.returncode != 0:
                problems.append(f"{result.args} with {shape.url!r} failed: {output}")
            problems += [f"{result.args} leaks {s!r}: {output}" for s in _leaks(shape, output)]
        if cell(shape.masked) not in table.stdout:
            problems.append(f"config does not show {shape.masked!r}: {table.stdout}")
        settings = json.loads(by_env.stdout)["settings"] if by_env.returncode == 0 else []
        if {"key": "url", "value": shape.masked, "source": "env QUEUE_CORE_URL"} not in settings:
            problems.append(f"config --json does not show {shape.masked!r}: {by_env.stdout}")
        return problems

    _each(check, shapes)


@pytest.mark.timeout(600)
@EVERY
def test_cli_errors_never_show_a_credential(tmp_path: Path, shapes: list[Shape]) -> None:
    """The storage error of a closed port for every shape the CLI may connect to (the URL
    from ``--url`` or from the env, in turn); a refused URL (exit 2) for the others."""

    def check(item: tuple[int, Shape]) -> list[str]:
        i, shape = item
        if not connects_to_loopback_only(shape):
            result = _run(["--url", _bad_option(shape), "stats"], tmp_path)
        elif i % 2:
            result = _run(["--url", shape.url, "dlq", "list"], tmp_path)
        else:
            result = _run(["jobs", "show", "some-id"], tmp_path, QUEUE_CORE_URL=shape.url)
        output = result.stdout + result.stderr
        problems = [f"{result.args} leaks {s!r}: {output}" for s in _leaks(shape, output)]
        if result.returncode == 0 or not result.stderr.startswith("Error: "):
            problems.append(f"{result.args} with {shape.url!r} gave no error: {output}")
        return problems

    with ThreadPoolExecutor(PARALLEL) as pool:
        problems = [p for found in pool.map(check, enumerate(shapes)) for p in found]
    assert not problems, "\n".join(problems)


WORKER_APP = """
import os
from queue_core import Queue
queue = Queue(os.environ["QC_MASK_URL"])

@queue.task(name="mask.noop")
def noop() -> None:
    return None
"""


@pytest.mark.timeout(600)
@EVERY
def test_worker_log_lines_never_show_a_credential(tmp_path: Path, shapes: list[Shape]) -> None:
    """A worker at debug level on each shape it may connect to: its start line names
    the storage masked, and its warnings (storage refused) never show a credential."""
    (tmp_path / "maskapp.py").write_text(WORKER_APP)

    def check(shape: Shape) -> list[str]:
        env = _env(QC_MASK_URL=shape.url, PYTHONPATH=f"{ROOT}:{tmp_path}")
        args = [CLI, "worker", "maskapp:queue", "--burst", "--log-level", "debug",
                "--shutdown-grace", "1"]  # fmt: skip
        log = tmp_path / f"worker-{abs(hash(shape.url))}.log"
        with log.open("w") as out:
            proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=out, stderr=out)
            deadline = time.monotonic() + 30
            while proc.poll() is None and time.monotonic() < deadline:
                if " WARNING " in log.read_text():  # the storage refused it: logged
                    break
                time.sleep(0.1)
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        output = log.read_text()
        problems = [f"worker on {shape.url!r} leaks {s!r}: {output}" for s in _leaks(shape, output)]
        started = [line for line in output.splitlines() if " starting: " in line]
        if started and f"storage {shape.masked}," not in started[0]:
            problems.append(f"start line does not name {shape.masked!r}: {started[0]}")
        if not started and not (proc.returncode and output.startswith("Error: ")):
            # a refused URL (exit 2) or a cluster not reached (exit 1) ends before starting
            problems.append(f"worker on {shape.url!r} neither started nor was refused: {output}")
        return problems

    _each(check, [s for s in shapes if s in SAFE])


# --------------------------------------------------------------------------- the dashboard


@pytest.fixture
def dashboards() -> Iterator[tuple[str, list[tuple[int, Shape]]]]:
    """One uvicorn server with a dashboard per shape that opens, under ``/s<i>/``."""
    queues: list[Queue] = []
    mounts: list[Any] = []
    shown: list[tuple[int, Shape]] = []
    for i, shape in enumerate(SHAPES):
        try:
            queue = Queue(shape.url)
        except QueueCoreError:  # refused when opened: checked in test_reprs_and_errors
            continue
        queues.append(queue)
        shown.append((i, shape))
        mounts.append(Mount(f"/s{i}", app=create_app(queue)))
    live = start_server(Starlette(routes=mounts))
    try:
        yield live.url, shown
    finally:
        stop_server(live)
        for queue in queues:
            queue.close()


def test_the_dashboard_header_never_shows_a_credential(
    dashboards: tuple[str, list[tuple[int, Shape]]],
) -> None:
    """The header of a page that reads no storage (404), and for a shape it may connect
    to, of the queues page (the storage refused: an error page quoting the error)."""
    base, shown = dashboards
    assert len(shown) >= 30

    def check(item: tuple[int, Shape]) -> list[str]:
        i, shape = item
        paths = [f"/s{i}/no-such-page"]
        if connects_to_loopback_only(shape):
            paths.append(f"/s{i}/")
        problems = []
        with httpx.Client(base_url=base, timeout=60) as client:
            for path in paths:
                page = client.get(path)
                header = f'<span class="where" title="storage">{escape(shape.masked)}</span>'
                if header not in page.text:
                    problems.append(f"{path}: no header {header!r}: {page.text[:2000]}")
                problems += [f"{path} leaks {s!r}" for s in _leaks(shape, page.text)]
        return problems

    with ThreadPoolExecutor(PARALLEL) as pool:
        problems = [p for found in pool.map(check, shown) for p in found]
    assert not problems, "\n".join(problems)
