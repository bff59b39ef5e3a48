"""``queue-core flow retry|replay``: resume a flow or workflow execution (SPEC §12).

Built on ``ExecutionHandle.retry()`` / ``.replay(step_id)``; the commands are added to
the ``flow`` group of :mod:`contrib.cli.flows` when this module is imported (the command
registry imports it). Storages without the ``SupportsWorkflows`` ability refuse both.
"""

from __future__ import annotations

import click

from contrib.cli.common import CliError, _storage_options
from contrib.cli.flows import _flows_queue, _handle, flow
from contrib.cli.output import echo_json, table
from queue_core import ConfigError
from queue_core.flows import ExecutionState, StepState
from queue_core.flows.api import ExecutionHandle

__all__ = ["COMMANDS", "flow_replay", "flow_retry"]

_AGAIN = (StepState.PENDING, StepState.QUEUED, StepState.RUNNING)


def _report(handle: ExecutionHandle, state: ExecutionState, what: str, as_json: bool) -> None:
    if as_json:
        echo_json({**handle.info().to_dict(), "steps": [s.to_dict() for s in handle.steps()]})
        return
    steps = handle.steps()
    again = [s for s in steps if s.state in _AGAIN]
    if state is ExecutionState.QUEUED:
        click.echo(f"Execution {handle.id} {what}: queued for a concurrency place.")
    else:
        click.echo(f"Execution {handle.id} {what}: {state.value} again.")
    click.echo(
        table(
            ("step", "state", "attempts"),
            [[s.step_id, s.state, len(s.attempts)] for s in steps],
        )
    )
    click.echo(
        f"\n{len(again)} step{'' if len(again) == 1 else 's'} to run; follow it with "
        f"`queue-core flow show {handle.id}`."
    )


def _refused(exc: ConfigError, execution_id: str) -> CliError:
    if exc.code == "unsupported":
        return CliError(f"{exc}")
    return CliError(f"execution {execution_id}: {exc}")


@flow.command("retry")
@click.argument("execution_id")
@click.option("--json", "as_json", is_flag=True, help="Print the ExecutionInfo and its steps.")
@_storage_options
def flow_retry(execution_id: str, as_json: bool, app: str | None, url: str | None) -> None:
    """Resume a failed, timed_out or cancelled execution (a flow's or a workflow's) from
    where it failed: succeeded steps keep their results and do not run; failed and
    not_run steps run again with a fresh retry budget; the deadline starts anew. Exit 1
    for an execution in another state."""
    queue, where = _flows_queue(app, url)
    handle = _handle(queue, execution_id, where)
    try:
        state = handle.retry()
    except ConfigError as exc:
        raise _refused(exc, handle.id) from exc
    _report(handle, state, "resumes", as_json)


@flow.command("replay")
@click.argument("execution_id")
@click.argument("step_id")
@click.option("--json", "as_json", is_flag=True, help="Print the ExecutionInfo and its steps.")
@_storage_options
def flow_replay(
    execution_id: str, step_id: str, as_json: bool, app: str | None, url: str | None
) -> None:
    """Re-run STEP_ID of a finished execution and what depends on it, keeping the rest:
    in a flow, the step and its dependents; in a workflow, the ctx.step (or child) and
    every step the function took after it (main: the whole function). Exit 1 for an
    unfinished execution or a step it does not have."""
    queue, where = _flows_queue(app, url)
    handle = _handle(queue, execution_id, where)
    try:
        state = handle.replay(step_id)
    except ConfigError as exc:
        raise _refused(exc, handle.id) from exc
    _report(handle, state, f"replays {step_id!r}", as_json)


COMMANDS: tuple[click.Command, ...] = (flow,)
"""The ``flow`` group, with ``retry`` and ``replay`` added (the registry adds it once)."""
