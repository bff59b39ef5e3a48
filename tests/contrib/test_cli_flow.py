"""``queue-core flow run|executions|show|cancel`` (SPEC §7), driven by click's CliRunner.

``memory://`` lives in one process, so the flow commands run in-process against an APP
module whose ``Queue("memory://")`` a real worker serves from a thread of the test: the
scripts of the flow files really run, as subprocesses of that worker.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from contrib.cli.flows import timeline_rows
from queue_core import AttemptRecord, Outcome, Queue
from queue_core.flows import ExecutionInfo, ExecutionState, StepRun, StepState
from queue_core.testing.fixtures import attempt_record
from queue_core.worker import Worker

pytest.importorskip("yaml", reason="flow files need the flows extra (PyYAML, pydantic)")

SECTION_7 = (Path(__file__).parents[1] / "data" / "sync-orders.yaml").read_text()
"""The YAML example of SPEC §7, as written (tests/data, shared with the flow file tests)."""

EXTRACT = """\
import json, os, sys
data = json.load(sys.stdin)
attempt = int(os.environ["QUEUE_CORE_ATTEMPT"])
if data["input"].get("fail_first") and attempt == 1:
    print("upstream not ready", file=sys.stderr)
    sys.exit(3)
print(json.dumps({"day": data["input"]["day"], "attempt": attempt,
                  "step": os.environ["QUEUE_CORE_STEP"]}))
"""

LOAD = """\
import json, sys
data = json.load(sys.stdin)
if data["input"].get("break_load"):
    sys.exit(4)
print(json.dumps({"loaded": data["results"]["extract"]}))
"""

SLEEPER = "import time\ntime.sleep(60)\n"


@dataclass
class FlowApp:
    """An APP module with a ``Queue("memory://")`` served by a worker thread."""

    spec: str
    queue: Queue
    dir: Path

    def write_flow(self, name: str, text: str) -> str:
        path = self.dir / name
        path.write_text(text)
        return str(path)


@pytest.fixture
def flow_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FlowApp]:
    name = f"flowapp_{uuid.uuid4().hex[:8]}"
    # a short lease: a running step notices a cancel when its lease is renewed
    (tmp_path / f"{name}.py").write_text(
        'from queue_core import Queue\n\nqueue = Queue("memory://", lease=3)\n'
    )
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "extract.py").write_text(EXTRACT)
    (tmp_path / "pipelines" / "load.py").write_text(LOAD)
    (tmp_path / "pipelines" / "sleeper.py").write_text(SLEEPER)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("QUEUE_CORE_URL", raising=False)
    module = importlib.import_module(name)
    queue: Queue = module.queue
    # the operator opts in to the script steps of the flow files in tmp_path
    worker = Worker(queue, install_signal_handlers=False, reap_interval=0.2, shutdown_grace=2,
                    flow_dirs=[tmp_path])
    thread = threading.Thread(target=worker.run, name="flow-cli-worker", daemon=True)
    thread.start()
    try:
        yield FlowApp(spec=f"{name}:queue", queue=queue, dir=tmp_path)
    finally:
        worker.stop()
        thread.join(timeout=15)
        queue.close()
        sys.modules.pop(name, None)
    assert not thread.is_alive(), "the worker thread did not stop"


def _timeline(stdout: str) -> list[list[str]]:
    """The rows of the timeline table of ``flow show`` / ``flow run --wait``, split on runs
    of two or more spaces (cells hold single spaces only)."""
    lines = stdout.split("Timeline (", 1)[1].splitlines()[1:]
    assert lines[0].split()[:3] == ["step", "outcome", "reason"], lines[0]
    rows = []
    for line in lines[2:]:
        if not line.strip():  # the table ends at the first blank line
            break
        rows.append(re.split(r"\s{2,}", line.strip()))
    return rows


def _field(stdout: str, key: str) -> str:
    match = re.search(rf"^{key}:\s+(.*)$", stdout, re.MULTILINE)
    assert match, (key, stdout)
    return match.group(1).strip()


def _wait_for(predicate: Any, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "condition not reached in time"
        time.sleep(0.02)


# --------------------------------------------------------------------------- flow run


def test_the_section_7_example_runs_with_wait_and_show_prints_its_timeline(
    run: Any, flow_app: FlowApp
) -> None:
    file = flow_app.write_flow("sync-orders.yaml", SECTION_7)
    ran = run("flow", "run", file, "--input", '{"day": "2026-11-30"}', "--wait",
              "--timeout", "60", "--app", flow_app.spec)
    assert ran.exit_code == 0, ran.stderr + ran.stdout
    assert _field(ran.stdout, "state") == "succeeded"
    assert _field(ran.stdout, "flow") == "sync-orders"
    execution_id = _field(ran.stdout, "id")
    # the two scripts really ran: extract got the input, load got extract's result
    result = flow_app.queue.execution(execution_id).result(timeout=1)
    extracted = {"day": "2026-11-30", "attempt": 1, "step": "extract"}
    assert result == {"extract": extracted, "load": {"loaded": extracted}}

    # any unique prefix of the id names the execution (issue 23 item 5): one execution
    shown = run("flow", "show", execution_id[:10], "--app", flow_app.spec)
    assert shown.exit_code == 0, shown.stderr
    assert _field(shown.stdout, "id") == execution_id
    assert _field(shown.stdout, "state") == "succeeded"
    assert "Timeline (2 attempts of 2 steps):" in shown.stdout
    rows = _timeline(shown.stdout)
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("extract #1", "succeeded", "-"),
        ("load #1", "succeeded", "-"),
    ]
    for row in rows:  # start, end, duration of each attempt
        started, finished = row[3], row[4]
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:]{8}\+00:00", started), row
        assert finished >= started and re.fullmatch(r"\d+\.\d{3}s", row[5]), row
    assert rows[0][4] <= rows[1][3]  # load started after extract ended
    # --wait printed the same timeline as show
    assert _timeline(ran.stdout)[0][:3] == rows[0][:3]
    # the execution's result and each step's (issue 23 item 7)
    assert json.loads(_field(shown.stdout, "result")) == result
    section = shown.stdout.split("\nResults:\n", 1)[1].splitlines()
    assert section == [f"extract: {json.dumps(extracted)}", f"load: {json.dumps(result['load'])}"]


def test_a_retried_step_shows_one_row_per_attempt(run: Any, flow_app: FlowApp) -> None:
    file = flow_app.write_flow("fast.yaml", SECTION_7.replace("initial: 30s", "initial: 50ms"))
    ran = run("flow", "run", file, "--input", '{"day": "d1", "fail_first": true}', "--wait",
              "--timeout", "60", "--json", "--app", flow_app.spec)
    assert ran.exit_code == 0, ran.stderr + ran.stdout
    data = json.loads(ran.stdout)
    assert data["state"] == "succeeded" and data["reason"] is None
    assert set(data) == {f.name for f in fields(ExecutionInfo)} | {"steps", "result"}
    # the execution's result: {step id: result} (issue 23 item 7)
    assert set(data["result"]) == {"extract", "load"}
    assert [s["step_id"] for s in data["steps"]] == ["extract", "load"]
    assert set(data["steps"][0]) == {f.name for f in fields(StepRun)}
    assert [(a["number"], a["outcome"], a["reason"]) for a in data["steps"][0]["attempts"]] == [
        (1, "failed", "exit_code"), (2, "succeeded", None)]

    shown = run("flow", "show", data["id"], "--app", flow_app.spec)
    rows = _timeline(shown.stdout)
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("extract #1", "failed", "exit_code"),
        ("extract #2", "succeeded", "-"),
        ("load #1", "succeeded", "-"),
    ]
    errors = shown.stdout.split("\nErrors:\n", 1)[1].split("\n\n")[0].splitlines()
    assert len(errors) == 1 and errors[0].startswith("extract #1: ScriptFailed: script ")
    assert errors[0].endswith("extract.py exited with code 3: upstream not ready")


def test_a_failed_execution_exits_1_naming_state_reason_and_step(
    run: Any, flow_app: FlowApp
) -> None:
    file = flow_app.write_flow("chain.yaml", SECTION_7.replace(
        "  - id: load\n", "  - id: report\n    type: script\n    file: pipelines/load.py\n"
        "    depends_on: [load]\n  - id: load\n"))
    ran = run("flow", "run", file, "--input", '{"day": "d2", "break_load": true}', "--wait",
              "--timeout", "60", "--app", flow_app.spec)
    assert ran.exit_code == 1, ran.stdout
    assert "ended failed (step_failed, step 'load')" in ran.stderr
    assert _field(ran.stdout, "state") == "failed"
    assert _field(ran.stdout, "reason") == "step_failed (step 'load')"
    # the failing step's error, beside the reason (issue 23 item 7)
    assert _field(ran.stdout, "error").startswith("load #1: ScriptFailed: script ")
    assert ran.stdout.split("\nResults:\n", 1)[1].startswith("extract: ")
    rows = _timeline(ran.stdout)
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("extract #1", "succeeded", "-"),
        ("load #1", "failed", "exit_code"),
        ("report", "not_run", "step_failed"),  # never ran: its state, no number
    ]
    assert rows[2][3:6] == ["-", "-", "-"]


def test_run_without_wait_prints_the_id_of_a_started_execution(
    run: Any, flow_app: FlowApp
) -> None:
    file = flow_app.write_flow("sync-orders.yaml", SECTION_7)
    ran = run("flow", "run", file, "--input", '{"day": "d3"}', "--app", flow_app.spec)
    assert ran.exit_code == 0, ran.stderr
    execution_id = ran.stdout.strip()
    assert re.fullmatch(r"[0-9a-f]{32}", execution_id), ran.stdout
    handle = flow_app.queue.execution(execution_id)
    assert handle.result(timeout=30)["load"] == {
        "loaded": {"day": "d3", "attempt": 1, "step": "extract"}}
    as_json = run("flow", "run", file, "--input", '{"day": "d4"}', "--json",
                  "--app", flow_app.spec)
    info = json.loads(as_json.stdout)
    assert set(info) == {f.name for f in fields(ExecutionInfo)}
    assert info["flow"] == "sync-orders" and info["state"] in ("queued", "running")


@pytest.mark.parametrize(
    ("case", "code", "path"),
    [
        ("cycle", "invalid_flow", "tasks[0].depends_on[0]"),
        ("unknown key", "invalid_flow", "retries"),
        ("bad duration", "invalid_duration", "tasks[0].timeout"),
        ("max_attempts: 21", "invalid_flow", "retry.max_attempts"),
    ],
)
def test_a_bad_file_is_refused_with_its_code_and_path_and_stores_nothing(
    run: Any, flow_app: FlowApp, case: str, code: str, path: str
) -> None:
    text = {
        "cycle": SECTION_7.replace("    file: pipelines/extract.py\n",
                                   "    file: pipelines/extract.py\n    depends_on: [load]\n"),
        "unknown key": SECTION_7 + "retries: 3\n",
        "bad duration": SECTION_7.replace("timeout: 30m", "timeout: 30 minutes"),
        "max_attempts: 21": SECTION_7.replace("max_attempts: 3", "max_attempts: 21"),
    }[case]
    assert text != SECTION_7
    file = flow_app.write_flow("bad.yaml", text)
    ran = run("flow", "run", file, "--wait", "--timeout", "5", "--app", flow_app.spec)
    assert ran.exit_code == 2, ran.stdout + ran.stderr
    assert f"invalid flow file [{code} at {path}]" in ran.stderr
    assert f"{file}: {path}" in ran.stderr  # the message names the file and the path
    if case == "cycle":
        assert "extract -> load -> extract" in ran.stderr
    assert ran.stdout == ""
    assert flow_app.queue.executions() == []
    assert flow_app.queue.stats() == []  # no step job either
    listed = run("flow", "executions", "--json", "--app", flow_app.spec)
    assert listed.exit_code == 0 and json.loads(listed.stdout) == []


def test_bad_options_are_usage_errors(run: Any, flow_app: FlowApp) -> None:
    file = flow_app.write_flow("sync-orders.yaml", SECTION_7)
    bad_json = run("flow", "run", file, "--input", "{day", "--app", flow_app.spec)
    assert bad_json.exit_code == 2 and "invalid --input '{day': not JSON" in bad_json.stderr
    no_wait = run("flow", "run", file, "--timeout", "5", "--app", flow_app.spec)
    assert no_wait.exit_code == 2 and "--timeout 5 bounds --wait" in no_wait.stderr
    bad_timeout = run("flow", "run", file, "--wait", "--timeout", "5 min", "--app", flow_app.spec)
    assert bad_timeout.exit_code == 2 and "--timeout" in bad_timeout.stderr
    missing = run("flow", "run", "nowhere.yaml", "--app", flow_app.spec)
    assert missing.exit_code == 2 and "cannot read the flow file" in missing.stderr
    assert flow_app.queue.executions() == []


# --------------------------------------------------------------------------- wait timeout, cancel


def test_wait_gives_up_at_timeout_and_cancel_stops_the_execution(
    run: Any, flow_app: FlowApp
) -> None:
    file = flow_app.write_flow("slow.yaml", SECTION_7.replace("extract.py", "sleeper.py"))
    started = time.monotonic()
    ran = run("flow", "run", file, "--input", '{"day": "d5"}', "--wait", "--timeout", "0.5",
              "--app", flow_app.spec)
    assert 0.5 <= time.monotonic() - started < 10
    assert ran.exit_code == 1, ran.stdout + ran.stderr
    assert "has not finished within --timeout 0.5 (state running)" in ran.stderr
    execution_id = _field(ran.stdout, "id")
    rows = _timeline(ran.stdout)
    assert [(r[0], r[1]) for r in rows] in (
        [("extract #1", "running"), ("load", "pending")],
        [("extract", "queued"), ("load", "pending")],  # not claimed yet
    )
    handle = flow_app.queue.execution(execution_id)
    assert handle.status() is ExecutionState.RUNNING  # giving up waiting did not stop it

    _wait_for(lambda: handle.steps()[0].attempts)  # the sleeper is running
    cancelled = run("flow", "cancel", execution_id, "--app", flow_app.spec)
    assert cancelled.exit_code == 0, cancelled.stderr
    assert f"Execution {execution_id} is cancel" in cancelled.stdout
    _wait_for(lambda: handle.status() is ExecutionState.CANCELLED, timeout=20)
    shown = run("flow", "show", execution_id, "--app", flow_app.spec)
    assert _field(shown.stdout, "state") == "cancelled"
    rows = _timeline(shown.stdout)
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("extract #1", "cancelled", "cancelled"),
        ("load", "not_run", "cancelled"),
    ]
    again = run("flow", "cancel", execution_id, "--json", "--app", flow_app.spec)
    assert again.exit_code == 0 and json.loads(again.stdout)["state"] == "cancelled"


def test_an_execution_queued_by_concurrency_is_listed_and_cancelled_at_once(
    run: Any, flow_app: FlowApp
) -> None:
    file = flow_app.write_flow("slow.yaml", SECTION_7.replace("extract.py", "sleeper.py"))
    first = run("flow", "run", file, "--input", '{"day": "1"}', "--app", flow_app.spec)
    second = run("flow", "run", file, "--input", '{"day": "2"}', "--json", "--app", flow_app.spec)
    first_id, queued = first.stdout.strip(), json.loads(second.stdout)
    assert queued["state"] == "queued"  # concurrency { limit: 1, behavior: queue }
    listed = run("flow", "executions", "sync-orders", "--state", "queued", "--json",
                 "--app", flow_app.spec)
    assert [e["id"] for e in json.loads(listed.stdout)] == [queued["id"]]
    cancelled = run("flow", "cancel", queued["id"], "--app", flow_app.spec)
    assert cancelled.exit_code == 0
    assert cancelled.stdout.strip() == f"Execution {queued['id']} is cancelled."
    shown = run("flow", "show", queued["id"], "--app", flow_app.spec)
    assert [(r[0], r[1], r[2]) for r in _timeline(shown.stdout)] == [
        ("extract", "not_run", "cancelled"), ("load", "not_run", "cancelled")]
    assert run("flow", "cancel", first_id, "--app", flow_app.spec).exit_code == 0
    first_handle = flow_app.queue.execution(first_id)
    _wait_for(lambda: first_handle.status() is ExecutionState.CANCELLED, timeout=20)


def test_cancel_of_a_finished_execution_or_an_unknown_id_exits_1(
    run: Any, flow_app: FlowApp
) -> None:
    file = flow_app.write_flow("sync-orders.yaml", SECTION_7)
    done = run("flow", "run", file, "--input", '{"day": "d6"}', "--wait", "--timeout", "60",
               "--json", "--app", flow_app.spec)
    execution_id = json.loads(done.stdout)["id"]
    late = run("flow", "cancel", execution_id, "--app", flow_app.spec)
    assert late.exit_code == 1
    assert "had already finished (succeeded): nothing to cancel" in late.stderr
    assert flow_app.queue.execution(execution_id).status() is ExecutionState.SUCCEEDED
    for command in ("cancel", "show"):
        unknown = run("flow", command, "nope", "--app", flow_app.spec)
        assert unknown.exit_code == 1
        assert "no flow execution with id 'nope'" in unknown.stderr


# --------------------------------------------------------------------------- executions


def test_executions_lists_newest_first_with_filters_and_pages(
    run: Any, flow_app: FlowApp
) -> None:
    sync = flow_app.write_flow("sync-orders.yaml", SECTION_7)
    other = flow_app.write_flow("other.yaml", SECTION_7.replace("id: sync-orders", "id: other"))
    ids = []
    for file, day in ((sync, "a"), (other, "b"), (sync, "c")):
        ran = run("flow", "run", file, "--input", json.dumps({"day": day}), "--wait",
                  "--timeout", "60", "--json", "--app", flow_app.spec)
        assert ran.exit_code == 0, ran.stderr
        ids.append(json.loads(ran.stdout)["id"])
    failed = run("flow", "run", sync, "--input", '{"day": "d", "break_load": true}', "--wait",
                 "--timeout", "60", "--json", "--app", flow_app.spec)
    assert failed.exit_code == 1
    ids.append(json.loads(failed.stdout)["id"])

    listed = run("flow", "executions", "--json", "--app", flow_app.spec)
    data = json.loads(listed.stdout)
    assert [e["id"] for e in data] == ids[::-1]
    assert all(set(e) == {f.name for f in fields(ExecutionInfo)} for e in data)
    of_sync = json.loads(run("flow", "executions", "sync-orders", "--state", "succeeded",
                             "--json", "--app", flow_app.spec).stdout)
    assert [e["id"] for e in of_sync] == [ids[2], ids[0]]

    table = run("flow", "executions", "sync-orders", "--limit", "2", "--app", flow_app.spec)
    assert table.exit_code == 0
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["id", "flow", "state", "reason", "created_at", "started_at",
                                "finished_at", "duration"]
    assert [line.split()[:4] for line in lines[2:4]] == [
        [ids[3], "sync-orders", "failed", "step_failed"],
        [ids[2], "sync-orders", "succeeded", "-"],
    ]
    assert ("Executions 1-2; more exist. Next page: queue-core flow executions sync-orders "
            f"--offset 2 --limit 2 --app {flow_app.spec}") in table.stdout
    last = run("flow", "executions", "sync-orders", "--limit", "2", "--offset", "2",
               "--app", flow_app.spec)
    assert ids[0] in last.stdout and "Executions 3-3; no more executions." in last.stdout
    none = run("flow", "executions", "nightly", "--state", "queued", "--app", flow_app.spec)
    assert none.exit_code == 0
    assert "No flow executions (flow 'nightly', state 'queued') at offset 0" in none.stdout
    bad_state = run("flow", "executions", "--state", "sleeping", "--app", flow_app.spec)
    assert bad_state.exit_code == 2


# --------------------------------------------------------------------------- storages


def test_a_storage_without_flows_is_refused_naming_the_ability(
    run: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("QUEUE_CORE_URL", raising=False)
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "extract.py").write_text(EXTRACT)
    (tmp_path / "pipelines" / "load.py").write_text(LOAD)
    (tmp_path / "flow.yaml").write_text(SECTION_7)
    name = f"noflows_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "from backends.memory import MemoryStorage\n"
        "from queue_core import Queue\n"
        "from tests.unit.flows.no_flows import NoFlows\n\n"
        "queue = Queue(storage=NoFlows(MemoryStorage()))\n"
    )
    try:
        for command in (["run", "flow.yaml"], ["executions"], ["show", "x"], ["cancel", "x"]):
            refused = run("flow", *command, "--app", f"{name}:queue")
            assert refused.exit_code == 1, (command, refused.stdout)
            assert "cannot run flows: it lacks the SupportsFlows ability" in refused.stderr
            assert "memory://" in refused.stderr and "sqlite://" in refused.stderr
    finally:
        sys.modules.pop(name, None)
    # read-only commands never create storage; memory:// of another process is empty
    missing = run("flow", "executions", "--url", f"sqlite:///{tmp_path / 'none.db'}")
    assert missing.exit_code == 1 and "does not exist" in missing.stderr
    assert not (tmp_path / "none.db").exists()
    memory = run("flow", "show", "x", "--url", "memory://")
    assert memory.exit_code == 1 and "outside the process that created it" in memory.stderr


def test_read_only_commands_read_the_memory_storage_of_an_app_already_imported(
    run: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"flowapp_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text('from queue_core import Queue\n\nqueue = Queue("memory://")\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        # imported by the command itself: a new, empty memory:// is refused, not read
        fresh = run("flow", "executions", "--app", f"{name}:queue")
        assert fresh.exit_code == 1
        assert "outside the process that created it" in fresh.stderr
        sys.modules.pop(name)
        module = importlib.import_module(name)  # the app lives in this process already
        listed = run("flow", "executions", "--app", f"{name}:queue")
        assert listed.exit_code == 0, listed.stderr
        assert "No flow executions at offset 0" in listed.stdout
        stats = run("stats", "--app", f"{name}:queue")
        assert stats.exit_code == 0 and "No jobs" in stats.stdout
        module.queue.close()
    finally:
        sys.modules.pop(name, None)


# --------------------------------------------------------------------------- timeline rows


def _attempt(
    number: int, start: int | None, end: int | None, outcome: str | None
) -> AttemptRecord:
    def at(second: int | None) -> datetime | None:
        return None if second is None else datetime(2026, 11, 30, 12, 0, second, tzinfo=UTC)

    return attempt_record(
        number, None if outcome is None else Outcome(outcome),
        reason="exit_code" if outcome == "failed" else None,
        started_at=at(start), finished_at=at(end), mode="async",
    )


def test_timeline_rows_order_attempts_by_start_and_add_steps_not_running() -> None:
    steps = [
        StepRun(step_id="a", state=StepState.QUEUED, reason=None, job_id="e.0",
                attempts=[_attempt(1, 0, 2, "failed"), _attempt(2, 5, 7, "failed")]),
        StepRun(step_id="b", state=StepState.RUNNING, reason=None, job_id="e.1",
                attempts=[_attempt(1, 1, None, None)]),
        StepRun(step_id="c", state=StepState.PENDING, reason=None, job_id=None),
        StepRun(step_id="d", state=StepState.SUCCEEDED, reason=None, job_id="e.3",
                attempts=[_attempt(1, 3, 4, "succeeded")]),
    ]
    rows = timeline_rows(steps)
    assert [(r[0], r[1], r[5]) for r in rows] == [
        ("a #1", "failed", "2.000s"),
        ("b #1", "running", None),     # still running: no end, no duration
        ("d #1", "succeeded", "1.000s"),
        ("a #2", "failed", "2.000s"),
        ("a", "queued", None),          # waiting out its retry backoff
        ("c", "pending", None),         # never ran
    ]


# --------------------------------------------------------------------------- no app


def test_a_yaml_only_flow_runs_on_a_worker_without_an_app(tmp_path: Path) -> None:
    # issue 23 item 11: `queue-core worker --url URL` (or env QUEUE_CORE_URL) needs no APP
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "extract.py").write_text(EXTRACT)
    (tmp_path / "pipelines" / "load.py").write_text(LOAD)
    (tmp_path / "flow.yaml").write_text(SECTION_7)
    url = f"sqlite:///{tmp_path / 'flows.db'}"
    script = str(Path(sys.executable).with_name("queue-core"))
    env = {k: v for k, v in os.environ.items() if k != "QUEUE_CORE_URL"}

    def cli(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([script, *args], cwd=tmp_path, env={**env, **extra},
                              capture_output=True, text=True, timeout=120)

    for how in ("--url", "env"):
        started = cli("flow", "run", "flow.yaml", "--input", '{"day": "d9"}', "--json",
                      "--url", url)
        assert started.returncode == 0, started.stderr
        execution_id = json.loads(started.stdout)["id"]
        worker = (cli("worker", "--url", url, "--burst") if how == "--url"
                  else cli("worker", "--burst", QUEUE_CORE_URL=url))
        assert worker.returncode == 0, worker.stderr
        assert "0 tasks (it runs the script steps of flow files)" in worker.stderr
        shown = cli("flow", "show", execution_id, "--json", "--url", url)
        assert json.loads(shown.stdout)["state"] == "succeeded", (how, shown.stdout)
    both = cli("worker", "some.app:queue", "--url", url, "--burst")
    assert both.returncode == 2 and "give APP or --url, not both" in both.stderr


def test_flow_run_refuses_a_task_step_the_app_does_not_declare(
    run: Any, flow_app: FlowApp
) -> None:
    # issue 23 item 12: as `enqueue` refuses an unknown task, instead of exit 0 and a
    # dead letter later
    @flow_app.queue.task(name="shop.count")
    def count(input: Any) -> int:
        return 1

    text = ("id: shop\ntasks:\n  - { id: count, type: task, task: shop.count }\n"
            "  - { id: ship, type: task, task: shop.ship, depends_on: [count] }\n")
    file = flow_app.write_flow("shop.yaml", text)
    refused = run("flow", "run", file, "--app", flow_app.spec)
    assert refused.exit_code == 2
    assert "[unknown_task at tasks[1].task]" in refused.stderr
    assert "step 'ship' runs task 'shop.ship'" in refused.stderr
    assert "tasks declared: shop.count" in refused.stderr
    assert flow_app.queue.executions() == []  # nothing stored
    fixed = flow_app.write_flow("ok.yaml", text.replace("shop.ship", "shop.count"))
    assert run("flow", "run", fixed, "--app", flow_app.spec).exit_code == 0
