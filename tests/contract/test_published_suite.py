"""The published suite as a backend author meets it: an out-of-tree project whose storage
is broken fails with the values it compared and a sentence saying what was expected,
however the project loads queue-core's pytest plugin.

Each test writes a tiny project to a temporary directory -- a storage that hands out
claimed jobs in the wrong order, or that says every ``finish`` took -- and runs pytest
on it in a subprocess, as the author would.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

BROKEN = '''
import pytest
from backends.memory import MemoryStorage
from queue_core.testing import StorageContract


class WrongOrder(MemoryStorage):
    """Hands out the claimed jobs last first."""

    def claim(self, *args, **kwargs):
        return list(reversed(super().claim(*args, **kwargs)))


class EveryFinishTakes(MemoryStorage):
    """Says that every end took, also the ends of an attempt that already ended."""

    def finish(self, ends, *, now=None):
        super().finish(ends, now=now)
        return [True] * len(ends)


class TestWrongOrder(StorageContract):
    @pytest.fixture
    def storage(self):
        storage = WrongOrder()
        yield storage
        storage.close()


class TestEveryFinishTakes(StorageContract):
    @pytest.fixture
    def storage(self):
        storage = EveryFinishTakes()
        yield storage
        storage.close()
'''

# How a project may load the plugin: (environment, pytest arguments, conftest.py).
NO_AUTOLOAD = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
LOADS = {
    "entry point": ({}, [], None),
    "-p option": (NO_AUTOLOAD, ["-p", "queue_core.testing.pytest_plugin"], None),
    "pytest_plugins": (NO_AUTOLOAD, [], 'pytest_plugins = ["queue_core.testing.pytest_plugin"]\n'),
    "conftest import": (
        NO_AUTOLOAD,
        [],
        "from queue_core.testing import StorageContract  # noqa\n",
    ),
}


def _run_project(tmp_path: Path, load: str, select: str) -> str:
    env_extra, args, conftest = LOADS[load]
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # the project's own rootdir
    (tmp_path / "test_broken_storage.py").write_text(BROKEN)
    if conftest is not None:
        (tmp_path / "conftest.py").write_text(conftest)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTEST_", "QUEUE_CORE_"))
    }
    env.update(env_extra, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", select, *args]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode == 1, f"pytest should report failed tests (exit 1):\n{out}"
    return out


@pytest.mark.parametrize("load", list(LOADS))
def test_a_wrong_claim_order_fails_with_the_compared_values(tmp_path: Path, load: str) -> None:
    out = _run_project(tmp_path, load, "TestWrongOrder and test_higher_priority_first")
    assert "1 failed" in out, out
    # the sentence: what was expected, in words and by name
    assert (
        "claim hands out ready jobs by higher priority, then earlier ready time, then "
        "enqueue order" in out
    ), out
    assert "expected [high, mid, low], got [low, mid, high]" in out, out
    named = dict(re.findall(r"\b(high|mid|low)='([0-9a-f]{32})'", out))
    assert set(named) == {"high", "mid", "low"}, out
    # pytest's own comparison of the two lists: the assert was rewritten
    assert re.search(r"^E\s+assert \[.*\] == \[.*\]$", out, re.MULTILINE), out
    assert f"At index 0 diff: '{named['low']}' != '{named['high']}'" in out, out
    assert not re.search(r"^E\s+AssertionError$", out, re.MULTILINE), "a bare AssertionError"


@pytest.mark.parametrize("load", ["entry point", "conftest import"])
def test_a_lost_race_says_that_exactly_one_caller_must_win(tmp_path: Path, load: str) -> None:
    out = _run_project(
        tmp_path, load, "TestEveryFinishTakes and test_concurrent_finishes_of_one_attempt"
    )
    assert "1 failed" in out, out
    assert re.search(
        r"finish of one attempt, called by 8 threads released together by a barrier: "
        r"exactly one caller must win",
        out,
    ), out
    assert re.search(r"^E\s+assert 8 == 1$", out, re.MULTILINE), out
