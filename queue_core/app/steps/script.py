"""Running a ``type: script`` step as a subprocess (SPEC §7 "Flow files").

- ``.py`` files run with the current Python interpreter (``sys.executable``); any other
  file runs as an executable (it needs the execute bit and a ``#!`` line).
- The script leads its own process group (``start_new_session``), so stopping it stops
  everything it started.
- stdin: the JSON object ``{"input": …, "results": {dependency id: result}}`` (``{}``
  for a step with no dependencies), then EOF.
- argv: the file (after the interpreter for ``.py``), then ``args``.
- env: the worker's environment without its ``QUEUE_CORE_SECRET_*`` variables (a secret
  reaches a script only through a template, ``env: {TOKEN: "{{ secrets.TOKEN }}"}``),
  plus ``env``, ``QUEUE_CORE_ATTEMPT`` (1-based) and the same number as
  ``SLUICE_ATTEMPT`` (so Sluice scripts run unchanged), ``QUEUE_CORE_EXECUTION_ID`` and
  ``QUEUE_CORE_STEP``.
- result: stdout parsed as JSON, else the text (at most ``stdout_cap`` bytes, trailing
  newlines stripped).
- A non-zero exit raises :class:`ScriptFailed` with reason ``exit_code`` and the code in
  the message (a retryable failure, like any error of §3).
- At ``timeout`` (the attempt's own timeout) and when the caller cancels (the flow's
  deadline, a cancel, worker shutdown) the group gets SIGTERM, then SIGKILL after
  ``kill_grace`` seconds if anything of it is still alive (§4). A timeout raises
  :class:`ScriptTimedOut`; a cancellation propagates once the group is gone.

A script that leaves a background process holding its stdout open keeps the step
running until that process exits (or the timeout stops the whole group).
"""

from __future__ import annotations

import errno
import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import anyio.abc

from queue_core.app.steps.failures import StepFailed
from queue_core.app.steps.names import SECRET_ENV_PREFIX
from queue_core.records.errors import SerializationError

__all__ = ["ScriptCall", "ScriptFailed", "ScriptTimedOut", "run_script"]

STDOUT_CAP: Final = 1024 * 1024
"""Bytes of stdout kept as the result; the rest is read and dropped."""
STDERR_TAIL: Final = 4096
"""Bytes of the end of stderr quoted in a failure's message."""
_POLL: Final = 0.02


class ScriptFailed(StepFailed):
    """A script step's attempt failed: non-zero exit (``reason == "exit_code"``).

    Attributes:
        reason: ``"exit_code"`` (or ``"timeout"`` for :class:`ScriptTimedOut`).
        exit_code: the exit status; negative when a signal ended the script (``-9``).
        stderr: the last :data:`STDERR_TAIL` bytes of its stderr, decoded.
    """

    reason: str = "exit_code"

    def __init__(self, message: str, *, exit_code: int | None, stderr: str = "") -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.stderr = stderr


class ScriptTimedOut(ScriptFailed):
    """The script ran past its ``timeout`` and was stopped (``reason == "timeout"``).

    Attributes:
        sigkill: ``True`` when SIGTERM did not end the group within ``kill_grace``.
    """

    reason = "timeout"

    def __init__(
        self, message: str, *, exit_code: int | None, stderr: str = "", sigkill: bool
    ) -> None:
        super().__init__(message, exit_code=exit_code, stderr=stderr)
        self.sigkill = sigkill


@dataclass(frozen=True, slots=True, kw_only=True)
class ScriptCall:
    """One attempt of a script step."""

    file: str
    """Absolute path of the script (``StepSpec.file``)."""
    execution_id: str
    step_id: str
    attempt: int
    """1-based attempt number (``QUEUE_CORE_ATTEMPT``)."""
    input: Any = None
    """The execution's input (JSON-ready)."""
    results: Mapping[str, Any] = field(default_factory=dict)
    """The results of the step's dependencies, by step id."""
    timeout: float | None = None
    """Seconds before the attempt is stopped (``None``: no limit of its own)."""
    kill_grace: float = 10.0
    """Seconds between SIGTERM and SIGKILL."""
    cwd: str | None = None
    """Working directory; ``None`` = the worker's."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment variables (the QUEUE_CORE_* ones win)."""
    args: tuple[str, ...] = ()
    """Arguments after the file on the command line."""
    flow: str | None = None
    """The flow's name: the worker names the step ``<flow>.<step id>`` in its log."""
    stdout_cap: int = STDOUT_CAP

    def __post_init__(self) -> None:
        if isinstance(self.attempt, bool) or not isinstance(self.attempt, int) or self.attempt < 1:
            raise ValueError(f"attempt must be an integer >= 1, got {self.attempt!r}")
        if self.timeout is not None and not self.timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds or None, got {self.timeout!r}")
        if not self.kill_grace >= 0:
            raise ValueError(f"kill_grace must be >= 0 seconds, got {self.kill_grace!r}")
        if self.stdout_cap < 0:
            raise ValueError(f"stdout_cap must be >= 0 bytes, got {self.stdout_cap!r}")
        object.__setattr__(self, "args", tuple(self.args))
        if not all(isinstance(a, str) for a in self.args):
            raise ValueError(f"args must be strings, got {self.args!r}")


def command(file: str, args: tuple[str, ...] = ()) -> list[str]:
    """The argv that runs ``file`` with ``args``: the current interpreter for ``.py``,
    else the file itself."""
    if file.endswith(".py"):
        return [sys.executable, file, *args]
    return [file, *args]


def script_env(call: ScriptCall) -> dict[str, str]:
    """The environment of the script: the worker's without its secrets, then
    ``call.env``, then the attempt's variables."""
    attempt = str(call.attempt)
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(SECRET_ENV_PREFIX)},
        **call.env,
        "QUEUE_CORE_ATTEMPT": attempt,
        "SLUICE_ATTEMPT": attempt,
        "QUEUE_CORE_EXECUTION_ID": call.execution_id,
        "QUEUE_CORE_STEP": call.step_id,
    }


def parse_output(data: bytes) -> Any:
    """A script's result from its stdout: JSON if it parses, else the text.

    The text is decoded as UTF-8 (bad bytes replaced) with trailing newlines stripped.
    """
    text = data.decode("utf-8", "replace")
    try:
        return json.loads(text)
    except ValueError:
        return text.rstrip("\r\n")


def _stdin(call: ScriptCall) -> bytes:
    try:
        return json.dumps(
            {"input": call.input, "results": dict(call.results)},
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
        ).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise SerializationError(
            f"script step {call.step_id!r}: input and results must be JSON: {exc}"
        ) from None


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:  # pragma: no cover - a recycled pgid of another user
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except OSError as exc:  # pragma: no cover - EPERM: the group exists
        return exc.errno == errno.EPERM
    return True


async def _stop_group(process: anyio.abc.Process, grace: float) -> bool:
    """SIGTERM the script's group; SIGKILL it after ``grace`` s. Returns ``sigkill``."""
    pgid = process.pid
    _signal_group(pgid, signal.SIGTERM)
    with anyio.move_on_after(grace):
        await process.wait()
        while _group_alive(pgid):  # noqa: ASYNC110 - no event says a process group is gone
            await anyio.sleep(_POLL)
        return False
    _signal_group(pgid, signal.SIGKILL)
    await process.wait()
    return True


async def run_script(call: ScriptCall) -> Any:
    """Run one attempt of a script step and return its result.

    Raises:
        ScriptFailed: non-zero exit (reason ``exit_code``, the code in the message).
        ScriptTimedOut: ran past ``call.timeout``; the group was stopped.
        SerializationError: ``input`` or ``results`` cannot be encoded as JSON (nothing
            was started).
        OSError: the file cannot be executed.
    """
    payload = _stdin(call)
    process = await anyio.open_process(
        command(call.file, call.args),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=call.cwd,
        env=script_env(call),
        start_new_session=True,
    )
    stdout = bytearray()
    stderr = bytearray()
    timeout = math.inf if call.timeout is None else call.timeout
    try:
        with anyio.move_on_after(timeout) as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_feed, process, payload)
                tg.start_soon(_collect, process.stdout, stdout, call.stdout_cap, False)
                tg.start_soon(_collect, process.stderr, stderr, STDERR_TAIL, True)
            await process.wait()
        if scope.cancelled_caught:
            with anyio.CancelScope(shield=True):
                sigkill = await _stop_group(process, call.kill_grace)
            via = "SIGTERM, then SIGKILL" if sigkill else "SIGTERM"
            raise ScriptTimedOut(
                f"script {call.file} ran past its timeout of {call.timeout:g} s and was "
                f"stopped ({via})",
                exit_code=process.returncode,
                stderr=_text(stderr),
                sigkill=sigkill,
            )
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            await _stop_group(process, call.kill_grace)
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await process.aclose()
    code = process.returncode
    if code:
        raise ScriptFailed(
            _exit_message(call.file, code, _text(stderr)), exit_code=code, stderr=_text(stderr)
        )
    return parse_output(bytes(stdout))


def _text(data: bytearray) -> str:
    return data.decode("utf-8", "replace")


def _exit_message(file: str, code: int, stderr: str) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        what = f"was killed by {name} (exit code {code})"
    else:
        what = f"exited with code {code}"
    tail = stderr.strip()
    return f"script {file} {what}" + (f": {tail[-1000:]}" if tail else "")


async def _feed(process: anyio.abc.Process, payload: bytes) -> None:
    stream = process.stdin
    assert stream is not None
    try:
        await stream.send(payload)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, BrokenPipeError):
        pass  # the script did not read its stdin: fine
    finally:
        try:
            await stream.aclose()
        except (anyio.BrokenResourceError, BrokenPipeError, OSError):
            pass


async def _collect(
    stream: anyio.abc.ByteReceiveStream | None, into: bytearray, cap: int, tail: bool
) -> None:
    """Read ``stream`` to EOF, keeping the first (or, with ``tail``, last) ``cap`` bytes."""
    assert stream is not None
    async for chunk in stream:
        into.extend(chunk)
        if len(into) > cap:
            if tail:
                del into[: len(into) - cap]
            else:
                del into[cap:]
