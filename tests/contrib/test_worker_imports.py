"""A worker imports only what running a plain job needs: the flow modules, dashboard,
metrics, OpenTelemetry, SQLAlchemy, YAML/pydantic, zoneinfo, difflib, pickle and the
periodic-task modules load on first use, never for a queue with no flow or schedule (a
worker's start-up time is its imports). The lazy names stay importable from the same
modules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from queue_core import Queue
from tests.integration.helpers.drain_app import APP, register

ROOT = Path(__file__).resolve().parents[2]

_WORKER = """
import json, sys
from contrib.cli import main
sys.argv = ["queue-core", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""

# Modules a plain job never needs (prefix match on the dotted name).
_NEVER = (
    "queue_core.flows.api",
    "queue_core.app.steps.calls",
    "queue_core.rules.flows.dag",
    "queue_core.rules.flows.decide",
    "queue_core.rules.flows.decide_fast",
    "queue_core.app.steps.jobs",
    "queue_core.rules.flows.spec",
    "queue_core.flows.scheduled",
    "queue_core.app.steps.script",
    "queue_core.storage.flows",
    "queue_core.app.steps.run",
    "queue_core.app.steps.templates",
    "queue_core.app.steps.http",
    "jinja2",
    "httpx",
    "backends.sql.flows",  # SQLStorage's flows part is built on first use
    "backends.sql.schedules",
    "backends.sql.tables",
    "contrib.dashboard",
    "contrib.metrics",
    "contrib.otel",
    "contrib.cli.flows",
    "sqlalchemy",
    "yaml",
    "pydantic",
    "opentelemetry",
    "prometheus_client",
    "zoneinfo",
    "difflib",
    "pickle",  # JSON is the default serializer
    "queue_core.rules.ticks",  # periodic tasks: only for a queue that declares one
    "queue_core.worker.scheduler",  # never in a burst worker
)


def _run(
    code: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT), **(env or {})),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _loaded(modules: list[str], prefixes: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes)]


def test_a_sqlite_worker_runs_a_plain_job_without_flow_or_extra_modules(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    log = tmp_path / "executions.log"
    q = Queue(url)
    q.migrate()  # migrated: the worker only checks the version (no SQLAlchemy)
    register(q).delay(7)
    q.close()
    proc = _run(
        _WORKER, "worker", APP, "--burst", env={"QC_DRAIN_LOG": str(log), "QUEUE_CORE_URL": url}
    )
    modules: list[str] = json.loads(proc.stderr.strip().splitlines()[-1])
    assert log.read_text().split()[:2] == ["S", "7"], proc.stderr[-2000:]  # the job ran
    assert "queue_core.worker.flowsteps" in modules
    assert _loaded(modules, _NEVER) == []


def test_a_postgresql_worker_imports_neither_importlib_metadata_nor_sqlite3(
    postgres_url: str, tmp_path: Path
) -> None:
    """psycopg's two version look-ups are answered from the dist-info directories
    (backends.sql.postgresql), and the SQL backend's error translation does not import sqlite3."""
    log = tmp_path / "executions.log"
    q = Queue(postgres_url)
    register(q).delay(8)
    q.close()
    proc = _run(
        _WORKER,
        "worker",
        APP,
        "--burst",
        env={"QC_DRAIN_LOG": str(log), "QUEUE_CORE_URL": postgres_url},
    )
    modules: list[str] = json.loads(proc.stderr.strip().splitlines()[-1])
    assert log.read_text().split()[:2] == ["S", "8"], proc.stderr[-2000:]  # the job ran
    assert "psycopg" in modules
    never = tuple(m for m in _NEVER if m != "zoneinfo")  # psycopg imports zoneinfo itself
    assert _loaded(modules, (*never, "importlib.metadata", "sqlite3")) == []


def test_a_redis_worker_builds_no_flow_schedule_or_throughput_part(
    redis_url: str, tmp_path: Path
) -> None:
    """RedisStorage builds those parts on first use (storage.lazy.Lazy): a worker that
    runs a plain job never imports their modules."""
    log = tmp_path / "executions.log"
    q = Queue(redis_url)
    register(q).delay(9)
    q.close()
    env = {"QC_DRAIN_LOG": str(log), "QUEUE_CORE_URL": redis_url}
    proc = _run(_WORKER, "worker", APP, "--burst", env=env)
    modules: list[str] = json.loads(proc.stderr.strip().splitlines()[-1])
    assert log.read_text().split()[:2] == ["S", "9"], proc.stderr[-2000:]  # the job ran
    assert "backends.redis.jobs" in modules
    lazy = ("backends.redis.flows", "backends.redis.schedules", "backends.redis.throughput")
    never = tuple(m for m in _NEVER if m != "opentelemetry")  # redis-py imports it itself
    assert _loaded(modules, (*never, *lazy)) == []


def test_a_flow_step_loads_the_flow_modules_on_demand(tmp_path: Path) -> None:
    """The other side of the laziness: a worker that meets a flow step loads them."""
    code = """
import json, sys
from queue_core import Queue
q = Queue(sys.argv[1])
before = "queue_core.rules.flows.spec" in sys.modules
seen = []
flow = q.flow("f")
@flow.step()
def a() -> int:
    seen.append(1)
    return 1
ex = flow.start()
q.run_worker(burst=True, install_signal_handlers=False)
print(json.dumps([before, seen, ex.status().value,
                  "backends.sql.flows" in sys.modules]))
"""
    proc = _run(code, f"sqlite:///{tmp_path / 'jobs.db'}")
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [
        False,
        [1],
        "succeeded",
        True,
    ], proc.stderr[-2000:]


def test_lazy_names_stay_importable_from_the_same_modules() -> None:
    code = """
import json, sys
import queue_core, queue_core.storage.protocol, queue_core.flows
out = {"eager": sorted(m for m in sys.modules if m.startswith("queue_core.flows."))}
from queue_core import SupportsFlows as a
from queue_core.storage.abilities import SupportsFlows as b
from queue_core.storage.abilities import SupportsFlows as c
from queue_core.flows import FlowSpec, StepState
from queue_core.rules.flows.spec import FlowSpec as F2
from queue_core.records.flows import StepState as S2
from queue_core.app.steps.jobs import SCRIPT_TASK
from queue_core.app.steps.names import SCRIPT_TASK as T2
out["lazy"] = [m in sys.modules for m in ("queue_core.rules.ticks", "pickle")]
from queue_core import SupportsSchedules as d
from queue_core.storage.abilities import SupportsSchedules as e
out["same"] = [a is b is c, FlowSpec is F2, StepState is S2, SCRIPT_TASK == T2, d is e]
errors = []
for mod, name in (
    (queue_core, "Nope"),
    (queue_core.storage.protocol, "Nope"),
    (queue_core.flows, "Nope"),
):
    try:
        getattr(mod, name)
    except AttributeError as exc:
        errors.append(str(exc))
out["errors"] = errors
print(json.dumps(out))
"""
    proc = _run(code)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["eager"] == ["queue_core.flows.facade"], proc.stderr[-2000:]
    assert out["lazy"] == [False, False]
    assert out["same"] == [True, True, True, True, True]
    assert out["errors"] == [
        "module 'queue_core' has no attribute 'Nope'",
        "module 'queue_core.storage.protocol' has no attribute 'Nope'",
        "module 'queue_core.flows' has no attribute 'Nope'",
    ]


def test_a_step_failure_is_told_with_or_without_the_flow_modules() -> None:
    code = """
import json, sys
from queue_core.worker.flowsteps import step_failure_reason
first = [step_failure_reason(RuntimeError("x")), "queue_core.app.steps.failures" in sys.modules]
from queue_core.app.steps.script import ScriptFailed, ScriptTimedOut
from queue_core.app.steps.http import HttpStatusError
from queue_core.app.steps.templates import TemplateError
from queue_core.app.steps.failures import StepNotAllowed
print(json.dumps(first + [step_failure_reason(e) for e in (
    ScriptFailed("exit 3", exit_code=3),
    ScriptTimedOut("late", exit_code=None, sigkill=False),
    HttpStatusError("503", status=503),
    TemplateError("undefined"),
    StepNotAllowed("outside"),
    ValueError("x"),
)]))
"""
    proc = _run(code)
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [
        None,
        False,
        "exit_code",
        "timeout",
        "http_status",
        "template_error",
        "not_allowed",
        None,
    ], proc.stderr[-2000:]
