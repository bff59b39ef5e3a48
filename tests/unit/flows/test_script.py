"""queue_core.app.steps.script: script steps run as real subprocesses in their own group."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from queue_core.app.steps.script import (
    ScriptCall,
    ScriptFailed,
    ScriptTimedOut,
    command,
    parse_output,
    run_script,
)
from queue_core.records.errors import SerializationError

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups")


def script(tmp_path: Path, name: str, body: str, *, executable: bool = False) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body).lstrip())
    if executable:
        path.chmod(0o755)
    return str(path)


def call(file: str, **kw: Any) -> ScriptCall:
    base: dict[str, Any] = {
        "file": file, "execution_id": "ex-1", "step_id": "load", "attempt": 2,
    }
    base.update(kw)
    return ScriptCall(**base)


def run(c: ScriptCall) -> Any:
    return anyio.run(run_script, c)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_gone(pid: int, within: float = 5.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if not alive(pid):
            return True
        time.sleep(0.02)
    return False


ECHO = """
    import json, os, sys
    data = json.load(sys.stdin)
    print(json.dumps({
        "stdin": data,
        "attempt": os.environ["QUEUE_CORE_ATTEMPT"],
        "execution": os.environ["QUEUE_CORE_EXECUTION_ID"],
        "step": os.environ["QUEUE_CORE_STEP"],
        "extra": os.environ.get("EXTRA"),
        "leads_group": os.getpgrp() == os.getpid(),
        "python": sys.executable,
    }))
"""


def test_a_python_script_gets_stdin_json_env_and_its_own_group(tmp_path: Path) -> None:
    f = script(tmp_path, "echo.py", ECHO)
    result = run(call(f, input={"day": "2026-11-30"}, results={"extract": [1, 2]},
                      env={"EXTRA": "x", "QUEUE_CORE_STEP": "spoofed"}))
    assert result == {
        "stdin": {"input": {"day": "2026-11-30"}, "results": {"extract": [1, 2]}},
        "attempt": "2",
        "execution": "ex-1",
        "step": "load",
        "extra": "x",
        "leads_group": True,
        "python": sys.executable,
    }


SLUICE = """
    import json, os, sys
    print(json.dumps({
        "sluice": os.environ["SLUICE_ATTEMPT"],
        "ours": os.environ["QUEUE_CORE_ATTEMPT"],
        "argv": sys.argv[1:],
        "secrets": sorted(k for k in os.environ if k.startswith("QUEUE_CORE_SECRET_")),
        "token": os.environ.get("TOKEN"),
    }))
"""


def test_sluice_attempt_args_and_no_inherited_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QUEUE_CORE_SECRET_TOKEN", "abc")
    f = script(tmp_path, "sluice.py", SLUICE)
    assert command(f, ("a b", "--x")) == [sys.executable, f, "a b", "--x"]
    result = run(call(f, attempt=3, args=("a b", "--x"), env={"TOKEN": "given"}))
    assert result == {"sluice": "3", "ours": "3", "argv": ["a b", "--x"], "secrets": [],
                      "token": "given"}
    with pytest.raises(ValueError, match="args must be strings"):
        call(f, args=(1,))


def test_an_executable_runs_itself_and_a_text_result_loses_its_newlines(tmp_path: Path) -> None:
    f = script(tmp_path, "hello.sh", """
        #!/bin/sh
        cat > "$(dirname "$0")/stdin.json"
        printf 'hello %s\\n\\n' "$QUEUE_CORE_STEP"
    """, executable=True)
    assert command(f) == [f]
    assert run(call(f)) == "hello load"
    assert json.loads((tmp_path / "stdin.json").read_text()) == {"input": None, "results": {}}


def test_a_script_that_ignores_stdin_still_succeeds(tmp_path: Path) -> None:
    f = script(tmp_path, "quiet.py", "print(42)\n")
    big = {"blob": "x" * 500_000}  # more than a pipe buffer, never read
    assert run(call(f, input=big)) == 42


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b'{"a": [1, 2]}\n', {"a": [1, 2]}),
        (b"3\n", 3),
        (b"null", None),
        (b"plain text\n", "plain text"),
        (b"line1\nline2\r\n", "line1\nline2"),
        (b"", ""),
        (b"\xff\xfebad\n", "\ufffd\ufffdbad"),
    ],
)
def test_parse_output(data: bytes, expected: Any) -> None:
    assert parse_output(data) == expected


def test_stdout_is_capped(tmp_path: Path) -> None:
    f = script(tmp_path, "loud.py", "import sys\nsys.stdout.write('y' * 100_000)\n")
    assert run(call(f, stdout_cap=1000)) == "y" * 1000


def test_non_zero_exit_fails_with_reason_exit_code(tmp_path: Path) -> None:
    f = script(tmp_path, "bad.py", """
        import sys
        print("some output")
        sys.stderr.write("database is down\\n")
        sys.exit(3)
    """)
    with pytest.raises(ScriptFailed) as info:
        run(call(f))
    assert (info.value.reason, info.value.exit_code) == ("exit_code", 3)
    assert "exited with code 3" in str(info.value)
    assert "database is down" in str(info.value) and "database is down" in info.value.stderr
    assert not isinstance(info.value, ScriptTimedOut)


def test_a_script_killed_by_a_signal_names_it(tmp_path: Path) -> None:
    f = script(tmp_path, "suicide.py", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    with pytest.raises(ScriptFailed, match=r"killed by SIGKILL \(exit code -9\)") as info:
        run(call(f))
    assert (info.value.reason, info.value.exit_code) == ("exit_code", -9)


def test_timeout_sends_sigterm_and_a_polite_script_stops(tmp_path: Path) -> None:
    marker = tmp_path / "terminated"
    f = script(tmp_path, "polite.py", f"""
        import signal, sys, time
        def bye(*_):
            open({str(marker)!r}, "w").write("partial output saved")
            sys.exit(0)
        signal.signal(signal.SIGTERM, bye)
        print("started", flush=True)
        time.sleep(30)
    """)
    started = time.monotonic()
    with pytest.raises(ScriptTimedOut) as info:
        run(call(f, timeout=0.5, kill_grace=5.0))
    assert time.monotonic() - started < 4.0  # did not wait for the grace
    assert (info.value.reason, info.value.sigkill) == ("timeout", False)
    assert "ran past its timeout of 0.5 s" in str(info.value)
    assert marker.read_text() == "partial output saved"


def test_timeout_kills_the_whole_group_after_the_grace(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    f = script(tmp_path, "stubborn.sh", f"""
        #!/bin/sh
        trap '' TERM
        sh -c 'trap "" TERM; sleep 30' &
        echo $! > {pidfile}
        sleep 30
    """, executable=True)
    started = time.monotonic()
    with pytest.raises(ScriptTimedOut) as info:
        run(call(f, timeout=0.5, kill_grace=0.3))
    elapsed = time.monotonic() - started
    assert info.value.sigkill is True
    assert 0.75 <= elapsed < 5.0
    grandchild = int(pidfile.read_text())
    assert wait_gone(grandchild), "the script's background child survived"


def test_cancellation_from_outside_stops_the_group_and_propagates(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    f = script(tmp_path, "long.py", f"""
        import os, time
        open({str(pidfile)!r}, "w").write(str(os.getpid()))
        time.sleep(30)
    """)

    async def main() -> bool:
        with anyio.move_on_after(0.5) as scope:  # e.g. the flow's deadline
            await run_script(call(f, kill_grace=1.0))
        return scope.cancelled_caught

    started = time.monotonic()
    assert anyio.run(main) is True
    assert time.monotonic() - started < 4.0
    assert wait_gone(int(pidfile.read_text()), within=0.5)


def test_unserializable_input_starts_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    f = script(tmp_path, "never.py", f"open({str(marker)!r}, 'w')\n")
    with pytest.raises(SerializationError, match="'load'"):
        run(call(f, input={"when": object()}))
    assert not marker.exists()


def test_a_missing_file_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        run(call(str(tmp_path / "absent.sh")))


@pytest.mark.parametrize(
    "bad", [{"attempt": 0}, {"attempt": True}, {"timeout": 0}, {"timeout": -1.0},
            {"kill_grace": -0.1}, {"stdout_cap": -1}],
)
def test_bad_call_values_are_refused(bad: dict[str, Any]) -> None:
    field = next(iter(bad))
    with pytest.raises(ValueError, match=field):
        call("/bin/true", **bad)
