"""What the worker calls a script step in its log: ``<flow>.<step id>``, not the internal
task that runs every script (issue 23 item 8)."""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path

import pytest

from queue_core import Queue
from queue_core.records.flows import ExecutionState


def test_a_script_steps_attempt_line_names_the_flow_and_the_step(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="queue_core.worker")
    (tmp_path / "ok.py").write_text("print(1)\n")
    (tmp_path / "bad.py").write_text("import sys\nsys.exit(3)\n")
    path = tmp_path / "nightly.yaml"
    path.write_text(
        textwrap.dedent("""\
        id: nightly
        tasks:
          - { id: export-orders, type: script, file: ok.py }
          - { id: upload, type: script, file: bad.py, depends_on: [export-orders] }
    """)
    )
    queue = Queue("memory://")
    execution = queue.load_flow(path).start()
    queue.run_worker(burst=True, install_signal_handlers=False)
    assert execution.status() is ExecutionState.FAILED
    lines = [
        r.getMessage().splitlines()[0]
        for r in caplog.records
        if getattr(r, "event", {}).get("event") == "attempt_end"
    ]
    assert lines[0].startswith(f"nightly.export-orders job {execution.id}.0 attempt 1: succeeded")
    assert lines[1].startswith(f"nightly.upload job {execution.id}.1 attempt 1: failed (exit_code)")
    assert not any("queue_core.flows.script" in line for line in lines)
