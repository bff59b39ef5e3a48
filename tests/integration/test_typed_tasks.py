"""Typed tasks: mypy, run on user code, reports a wrong argument of ``.delay()`` and a wrong
use of ``result()``'s type, and nothing on correct code (sync, async and ``ctx`` bodies)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from mypy import api as mypy_api  # the lint extra; CI installs it with the test extra

ROOT = Path(__file__).resolve().parents[2]

GOOD = """
    from queue_core import JobContext, JobHandle, Queue

    queue = Queue("memory://")


    @queue.task(max_retries=2)
    def add(a: int, b: int, ctx: JobContext = JobContext.INJECTED) -> int:
        return a + b


    @queue.task
    async def shout(text: str) -> str:
        return text.upper()


    @queue.task
    def plain(name: str) -> list[str]:
        return [name]


    def use() -> None:
        h: JobHandle[int] = add.delay(1, 2)
        total: int = h.result(timeout=1) + 1
        s: str = shout.delay("x").result().lower()
        first: str = plain.apply(args=("n",), timeout=5).result()[0]
        print(total, s, first, add(1, 2) + 1)


    async def use_async() -> None:
        h = await add.delay_async(1, b=2)
        n: int = await h.result_async(timeout=1)
        c = await shout("inline")
        handle = await queue.job_async(h.id)
        print(n, c.lower(), await handle.status_async())
"""

BAD = """
    from queue_core import Queue

    queue = Queue("memory://")


    @queue.task(max_retries=2)
    def add(a: int, b: int) -> int:
        return a + b


    add.delay(1, "two")
    add.delay(1)
    text: str = add.delay(1, 2).result()


    async def use_async() -> None:
        await add.delay_async("one", 2)
        value: str = await (await add.delay_async(1, 2)).result_async()
"""


def _mypy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str) -> tuple[int, str]:
    (tmp_path / "snippet.py").write_text(textwrap.dedent(source))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MYPYPATH", str(ROOT))
    out, err, status = mypy_api.run(
        [
            "--strict",
            "--no-error-summary",
            "--cache-dir",
            str(tmp_path / ".mypy_cache"),
            "snippet.py",
        ]
    )
    return status, out + err


def test_mypy_reports_wrong_arguments_and_wrong_result_types(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    status, report = _mypy(tmp_path, monkeypatch, BAD)
    errors = {
        int(m.group(1)): m.group(2)
        for m in re.finditer(r"^snippet\.py:(\d+): error: (.*)$", report, re.M)
    }
    assert status == 1, report
    assert (
        'Argument 2 to "delay" of "Task" has incompatible type "str"; expected "int"'
        in (errors[12])
    ), report
    assert 'Missing positional argument "b"' in errors[13], report
    assert "Incompatible types in assignment" in errors[14], report
    assert 'expression has type "int", variable has type "str"' in errors[14], report
    assert 'Argument 1 to "delay_async" of "Task" has incompatible type "str"' in errors[18]
    assert 'expression has type "int", variable has type "str"' in errors[19], report
    assert len(errors) == 5, report


def test_mypy_accepts_correct_typed_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    status, report = _mypy(tmp_path, monkeypatch, GOOD)
    assert (status, report.strip()) == (0, "")
