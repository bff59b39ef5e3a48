"""``queue-core worker`` imports only what a worker needs (its start-up is imports)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from contrib.cli import cli
from queue_core import Queue

ROOT = Path(__file__).resolve().parents[2]

_PROBE = """
import json, sys
from contrib.cli import main
sys.argv = ["queue-core", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
names = ("contrib.cli.jobs", "contrib.cli.dlq", "contrib.cli.flows", "contrib.dashboard.cli",
         "contrib.cli.worker", "importlib.metadata", "importlib.resources", "zipfile")
print(json.dumps({n: n in sys.modules for n in names}), file=sys.stderr)
"""


def _modules_after(*args: str, url: str = "memory://") -> dict[str, bool]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), QUEUE_CORE_URL=url)
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    loaded: dict[str, bool] = json.loads(proc.stderr.strip().splitlines()[-1])
    return loaded


def test_a_burst_worker_imports_no_other_command_module(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    Queue(url).migrate()  # a migrated database: the worker only checks the version
    loaded = _modules_after(
        "worker", "tests.integration.helpers.drain_app:queue", "--burst", url=url
    )
    assert loaded["contrib.cli.worker"]
    assert not any(
        loaded[n]
        for n in (
            "contrib.cli.jobs",
            "contrib.cli.dlq",
            "contrib.cli.flows",
            "contrib.dashboard.cli",
        )
    )
    assert not loaded["importlib.metadata"]
    assert not loaded["importlib.resources"] and not loaded["zipfile"]


def test_listing_the_commands_imports_them_all() -> None:
    loaded = _modules_after("--help")
    assert all(
        loaded[n]
        for n in (
            "contrib.cli.jobs",
            "contrib.cli.dlq",
            "contrib.cli.flows",
            "contrib.dashboard.cli",
            "contrib.cli.worker",
        )
    )


def test_version_still_prints_the_package_version() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.output.startswith("queue-core, version ")
    assert result.output.strip() != "queue-core, version"
