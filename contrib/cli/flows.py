"""``queue-core flow run|executions|show|cancel``: flow executions from the command line
(SPEC §7).

Built on the public flow API of :class:`~queue_core.Queue` (``queue.load_flow``,
``flow.start``, ``queue.execution(s)``, :class:`~queue_core.flows.api.ExecutionHandle`).
Flows need a storage with the ``SupportsFlows`` ability; on any other storage every
command exits 1 naming the ability and the storages that have it.

The group registers itself on the ``queue-core`` group when this module is imported
(the end of ``contrib.cli.commands`` imports it), so it can be imported in either order.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import click

import queue_core
from contrib.cli.common import (
    CliError,
    CliUsage,
    _Group,
    _json_value,
    _queue,
    _storage_options,
    next_page_command,
)
from contrib.cli.output import cell, echo_json, kv_block, table
from queue_core import (
    AttemptRecord,
    ConfigError,
    ExecutionFailed,
    NotFound,
    SupportsFlows,
    parse_duration,
)
from queue_core.flows import (
    ExecutionInfo,
    ExecutionState,
    FlowSpec,
    HistoryEntry,
    StepRun,
    StepState,
)
from queue_core.flows.api import ExecutionHandle
from queue_core.storage.registry import backend_class, supported_schemes

__all__ = ["POLL_INTERVAL", "flow", "flow_storages", "timeline_rows"]

POLL_INTERVAL = 0.1
"""Seconds between two reads of the execution while ``flow run --wait`` waits."""

_EXECUTION_STATES = [s.value for s in ExecutionState]
_NOT_STARTED = frozenset({StepState.PENDING, StepState.QUEUED, StepState.NOT_RUN})
"""Step states with no attempt running: shown as a row of their own in the timeline."""


@click.group(cls=_Group)
def flow() -> None:
    """Run flow files and inspect, list and cancel flow executions."""


# --------------------------------------------------------------------------- helpers


def flow_storages() -> list[str]:
    """The storage URL schemes whose backend has the ``SupportsFlows`` ability
    (``memory://``, ...), found from the registry; a backend whose driver is not
    installed here is left out."""
    found = []
    for scheme in supported_schemes():
        try:
            factory = backend_class(f"{scheme}://")
        except ConfigError:
            continue
        if isinstance(factory, type) and issubclass(factory, SupportsFlows):
            found.append(f"{scheme}://")
    return found


def _require_flows(queue: queue_core.Queue, where: str) -> None:
    """Refuse (exit 1) a storage that cannot hold flow executions."""
    storage = queue.storage()
    if not isinstance(storage, SupportsFlows):
        have = ", ".join(flow_storages()) or "none installed here"
        raise CliError(
            f"storage {where} ({type(storage).__name__}) cannot run flows: it lacks the "
            f"SupportsFlows ability (flow executions in storage); storages that have it: {have}"
        )


def _flows_queue(app: str | None, url: str | None) -> tuple[queue_core.Queue, str]:
    """The queue of a command that reads (or cancels) executions: never created."""
    queue, where = _queue(app, url)
    _require_flows(queue, where)
    return queue, where


def _handle(queue: queue_core.Queue, execution_id: str, where: str) -> ExecutionHandle:
    """The execution ``execution_id`` (a whole id or a unique prefix) names."""
    from contrib.cli.lookup import execution_id_of

    try:
        return queue.execution(execution_id_of(queue, execution_id))
    except NotFound as exc:
        raise CliError(f"{exc} ({where})") from exc


def _blamed_step(handle: ExecutionHandle, info: ExecutionInfo) -> str | None:
    """The step a finished, unsuccessful execution blames (``ExecutionFailed.step_id``)."""
    if not info.state.finished or info.state is ExecutionState.SUCCEEDED:
        return None
    try:
        handle.result(timeout=0)
    except ExecutionFailed as exc:
        return exc.step_id
    return None


def _duration(start: datetime | None, end: datetime | None) -> str | None:
    """``0.250s``, ``2m03.1s``, ``1h02m``; ``None`` unless both ends are known."""
    if start is None or end is None:
        return None
    seconds = max(0.0, (end - start).total_seconds())
    if seconds < 60:
        return f"{seconds:.3f}s"
    minutes, rest = divmod(seconds, 60)
    if minutes < 60:
        return f"{int(minutes)}m{rest:04.1f}s"
    hours, minutes = divmod(int(minutes), 60)
    return f"{hours}h{minutes:02d}m"


def _error(attempt: AttemptRecord) -> str | None:
    if attempt.message and attempt.error_class:
        return f"{attempt.error_class}: {attempt.message}"
    return attempt.message or attempt.error_class


_TIMELINE_HEADERS = ("step", "outcome", "reason", "started_at", "finished_at", "duration")
_MAX_ERROR = 2000
"""Characters of one attempt's error shown below the timeline (``--json`` has it all)."""


def timeline_rows(
    steps: list[StepRun], history: Sequence[HistoryEntry] = ()
) -> list[list[Any]]:
    """The timeline of ``flow show``: one row per attempt of each step (``extract #2``),
    oldest start first; a step with no attempt running (``pending``, ``queued`` for a
    retry or its first attempt, ``not_run``) gets a row of its own after its attempts,
    its state in the ``outcome`` column and its reason. A workflow's ``history`` adds a
    row per ``ctx.step`` (``step fetch``), sleep (``sleep #1``) and event wait (``wait
    approval [42]``) and sub-execution (``sync-orders#1``), its state in the ``outcome``
    column and a sleep's or a wait's end in ``reason`` (its child jobs are steps: their
    attempts are rows already)."""
    rows: list[tuple[tuple[float, int, int], list[Any]]] = []
    last = float("inf")
    with_attempts = {s.step_id for s in steps if s.attempts}
    for seq, entry in enumerate(history):
        if entry.kind == "child" and entry.name in with_attempts:
            continue  # a child job: its attempts are rows
        at = entry.started_at or entry.ended_at
        label = {"step": "step ", "sleep": "", "wait": "wait ", "child": ""}[entry.kind]
        label += entry.name
        if entry.key is not None:
            label += f" [{entry.key}]"
        until = None if entry.until is None else f"until {entry.until.isoformat()}"
        rows.append(
            (
                (at.timestamp() if at else last, len(steps), seq),
                [label, entry.state, until, entry.started_at, entry.ended_at,
                 _duration(entry.started_at, entry.ended_at)],
            )
        )  # fmt: skip
    for index, step in enumerate(steps):
        for attempt in step.attempts:
            started = attempt.started_at.timestamp() if attempt.started_at else last
            outcome = attempt.outcome.value if attempt.outcome is not None else "running"
            rows.append(
                (
                    (started, index, attempt.number),
                    [
                        f"{step.step_id} #{attempt.number}",
                        outcome,
                        attempt.reason,
                        attempt.started_at,
                        attempt.finished_at,
                        _duration(attempt.started_at, attempt.finished_at),
                    ],
                )
            )
        if step.state in _NOT_STARTED:
            rows.append(
                (
                    (last, index, len(step.attempts) + 1),
                    [step.step_id, step.state.value, step.reason, None, None, None],
                )
            )
    return [row for _, row in sorted(rows, key=lambda item: item[0])]


def _info_pairs(
    info: ExecutionInfo, blamed: str | None, steps: list[StepRun], value: Any
) -> list[tuple[str, Any]]:
    reason = None if info.reason is None else info.reason.value
    if reason is not None and blamed is not None:
        reason = f"{reason} (step {blamed!r})"
    pairs: list[tuple[str, Any]] = [
        ("id", info.id),
        ("flow", info.flow),
        ("state", info.state),
        ("reason", reason),
        ("created_at", info.created_at),
        ("started_at", info.started_at),
        ("finished_at", info.finished_at),
        ("duration", _duration(info.started_at, info.finished_at)),
    ]
    if info.state is ExecutionState.SUCCEEDED:
        pairs.append(("result", cell(_json(value), width=_MAX_ERROR)))
    failing = next((s for s in steps if s.step_id == blamed), None)
    last = failing.attempts[-1] if failing is not None and failing.attempts else None
    if last is not None and _error(last):
        pairs.append(("error", f"{blamed} #{last.number}: {cell(_error(last), width=_MAX_ERROR)}"))
    return pairs


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _step_results(queue: queue_core.Queue, steps: list[StepRun]) -> dict[str, Any]:
    """``{step id: result}`` of the steps that succeeded, in definition order."""
    return {
        s.step_id: queue.job(s.job_id).info().result
        for s in steps
        if s.state is StepState.SUCCEEDED and s.job_id
    }


def _print_execution(
    queue: queue_core.Queue, handle: ExecutionHandle, *, as_json: bool
) -> tuple[ExecutionInfo, str | None]:
    """Print the execution, its result (or its failing step's error), its timeline and
    each step's result (or its JSON, with ``result``); return its info and the step it
    blames."""
    info = handle.info()
    steps = handle.steps()
    workflow = handle.kind == "workflow"
    history = handle.history() if workflow else []
    blamed = _blamed_step(handle, info)
    results = _step_results(queue, steps)
    value: Any = None
    if info.state is ExecutionState.SUCCEEDED:  # a workflow's: its function's return value
        value = handle.result(timeout=0) if workflow else results
    if as_json:
        data = {**info.to_dict(), "result": value, "steps": [s.to_dict() for s in steps]}
        if workflow:
            data["history"] = [e.to_dict() for e in history]
        echo_json(data)
        return info, blamed
    click.echo(kv_block(_info_pairs(info, blamed, steps, value)))
    attempts = sum(len(s.attempts) for s in steps)
    click.echo(
        f"\nTimeline ({attempts} attempt{'' if attempts == 1 else 's'} of "
        f"{len(steps)} step{'' if len(steps) == 1 else 's'}):"
    )
    click.echo(table(_TIMELINE_HEADERS, timeline_rows(steps, history)))
    errors = [
        f"{step.step_id} #{attempt.number}: {cell(_error(attempt), width=_MAX_ERROR)}"
        for step in steps
        for attempt in step.attempts
        if _error(attempt)
    ]
    if errors:
        click.echo("\nErrors:\n" + "\n".join(errors))
    if results:
        lines = [
            f"{step}: {cell(_json(value), width=_MAX_ERROR)}" for step, value in results.items()
        ]
        click.echo("\nResults:\n" + "\n".join(lines))
    return info, blamed


def _ended(info: ExecutionInfo, blamed: str | None) -> str:
    reason = "" if info.reason is None else f" ({info.reason.value}"
    if reason and blamed is not None:
        reason += f", step {blamed!r}"
    return f"execution {info.id} of flow {info.flow!r} ended {info.state.value}" + (
        f"{reason})" if reason else ""
    )


# --------------------------------------------------------------------------- run


def _check_task_steps(spec: FlowSpec, queue: queue_core.Queue, app: str | None) -> None:
    """With ``--app``, refuse (exit 2, nothing stored) a ``type: task`` step naming a task
    the app does not declare, as ``enqueue`` refuses an unknown task: a worker of that app
    would dead-letter the step (``unknown_task``). Without ``--app`` nothing is known."""
    if not app:
        return
    where = f"--app {app}"
    known = queue.tasks
    for i, step in enumerate(spec.steps):
        if step.kind == "task" and step.task not in known:
            listed = ", ".join(sorted(known)) or "none"
            raise CliUsage(
                f"invalid flow file [unknown_task at tasks[{i}].task]: step {step.id!r} runs "
                f"task {step.task!r}, which {where} does not declare, so a worker of it would "
                f"dead-letter the step; import the module that declares it in the app module "
                f"(tasks declared: {listed})"
            )


@flow.command("run")
@click.argument("file", metavar="FILE")
@click.option(
    "--input",
    "input_json",
    default=None,
    metavar="JSON",
    help='The execution input as JSON, e.g. \'{"day": "2026-11-30"}\' (default null).',
)
@click.option(
    "--wait",
    is_flag=True,
    help="Wait for workers to end the execution, print its timeline, exit 0 only if it succeeded.",
)
@click.option(
    "--timeout",
    default=None,
    metavar="S",
    help="With --wait: give up waiting after this long (seconds or e.g. 30s, 10m); "
    "the execution goes on.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the ExecutionInfo as JSON (with --wait: and its steps).",
)
@_storage_options
def flow_run(
    file: str,
    input_json: str | None,
    wait: bool,
    timeout: str | None,
    as_json: bool,
    app: str | None,
    url: str | None,
) -> None:
    """Start an execution of the YAML flow FILE and print its id.

    A bad file is refused whole (exit 2, the error's code and the path of the bad value)
    and nothing is stored. With --wait, workers of the storage must run the steps.
    """
    value = None if input_json is None else _json_value(input_json, "--input")
    seconds = None
    if timeout is not None:
        if not wait:
            raise CliUsage(f"--timeout {timeout} bounds --wait; add --wait or leave it out")
        seconds = parse_duration(timeout, field="--timeout")
    queue, where = _queue(app, url, create=True)
    try:
        loaded = queue.load_flow(file)
    except ConfigError as exc:
        at = f" at {exc.field}" if exc.field else ""
        raise CliUsage(f"invalid flow file [{exc.code}{at}]: {exc}") from exc
    _require_flows(queue, where)
    root = click.get_current_context().find_root().obj or {}
    _check_task_steps(loaded.spec, queue, app if app is not None else root.get("app"))
    handle = loaded.start(value)
    if not wait:
        if as_json:
            echo_json(handle.info().to_dict())
        else:
            click.echo(handle.id)
        return
    if not as_json:
        click.echo(
            f"Execution {handle.id} of flow {loaded.name!r} started ({handle.status().value}); "
            f"waiting for workers of {where}...",
            err=True,
        )
    end = None if seconds is None else time.monotonic() + seconds
    while True:
        state = handle.status()
        if state.finished or (end is not None and time.monotonic() >= end):
            break
        time.sleep(
            POLL_INTERVAL if end is None else max(0.0, min(POLL_INTERVAL, end - time.monotonic()))
        )
    info, blamed = _print_execution(queue, handle, as_json=as_json)
    if not info.state.finished:
        raise CliError(
            f"execution {info.id} has not finished within --timeout {timeout} "
            f"(state {info.state.value}); it goes on: follow it with `queue-core flow show "
            f"{info.id}`, stop it with `queue-core flow cancel {info.id}`"
        )
    if info.state is not ExecutionState.SUCCEEDED:
        raise CliError(_ended(info, blamed))


# --------------------------------------------------------------------------- executions


@flow.command("executions")
@click.argument("flow_name", metavar="[FLOW]", required=False)
@click.option(
    "--state",
    type=click.Choice(_EXECUTION_STATES),
    default=None,
    help="Only executions in this state.",
)
@click.option("--limit", type=click.IntRange(min=1, max=1000), default=20, show_default=True)
@click.option("--offset", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of ExecutionInfo.")
@_storage_options
def flow_executions(
    flow_name: str | None,
    state: str | None,
    limit: int,
    offset: int,
    as_json: bool,
    app: str | None,
    url: str | None,
) -> None:
    """List flow executions (of flow FLOW), newest first, one page at a time."""
    queue, where = _flows_queue(app, url)
    # One extra execution tells whether a next page exists without a count query.
    page = queue.executions(flow=flow_name, state=state, limit=limit + 1, offset=offset)
    more = len(page) > limit
    page = page[:limit]
    if as_json:
        echo_json([info.to_dict() for info in page])
        return
    filters = [f"{k} {v!r}" for k, v in (("flow", flow_name), ("state", state)) if v]
    if not page:
        scope = f" ({', '.join(filters)})" if filters else ""
        click.echo(f"No flow executions{scope} at offset {offset} ({where}).")
        return
    click.echo(
        table(
            (
                "id",
                "flow",
                "state",
                "reason",
                "created_at",
                "started_at",
                "finished_at",
                "duration",
            ),
            [
                [
                    i.id,
                    i.flow,
                    i.state,
                    i.reason,
                    i.created_at,
                    i.started_at,
                    i.finished_at,
                    _duration(i.started_at, i.finished_at),
                ]
                for i in page
            ],
        )
    )
    shown = f"Executions {offset + 1}-{offset + len(page)}"
    if more:
        nxt = ["queue-core", "flow", "executions"]
        if flow_name:
            nxt.append(flow_name)
        nxt += [f"--offset {offset + limit}", f"--limit {limit}"]
        if state:
            nxt.append(f"--state {state}")
        click.echo(f"\n{shown}; more exist. Next page: {next_page_command(nxt, app, url)}")
    else:
        click.echo(f"\n{shown}; no more executions.")


# --------------------------------------------------------------------------- show / cancel


@flow.command("show")
@click.argument("execution_id")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the ExecutionInfo as JSON, with its StepRun records under 'steps'.",
)
@_storage_options
def flow_show(execution_id: str, as_json: bool, app: str | None, url: str | None) -> None:
    """Show one execution and its timeline: one row per attempt of each step."""
    queue, where = _flows_queue(app, url)
    _print_execution(queue, _handle(queue, execution_id, where), as_json=as_json)


@flow.command("cancel")
@click.argument("execution_id")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the ExecutionInfo after the cancel as JSON."
)
@_storage_options
def flow_cancel(execution_id: str, as_json: bool, app: str | None, url: str | None) -> None:
    """Cancel an execution: no step starts any more; running steps are stopped (it is
    cancelling until they end), then it is cancelled. Exit 1 for an unknown id or an
    execution that had already finished otherwise."""
    queue, where = _flows_queue(app, url)
    handle = _handle(queue, execution_id, where)
    execution_id = handle.id
    state = handle.cancel()
    if as_json:
        echo_json(handle.info().to_dict())
    elif state is ExecutionState.CANCELLED:
        click.echo(f"Execution {execution_id} is cancelled.")
    elif state is ExecutionState.CANCELLING:
        click.echo(
            f"Execution {execution_id} is cancelling: its running steps are being stopped; "
            f"it ends cancelled when they have (`queue-core flow show {execution_id}`)."
        )
    if state not in (ExecutionState.CANCELLED, ExecutionState.CANCELLING):
        raise CliError(
            f"execution {execution_id!r} had already finished ({state.value}): nothing to cancel"
        )


COMMANDS: tuple[click.Command, ...] = (flow,)
"""The commands of this module (:func:`contrib.cli.commands.load_commands` adds them)."""
