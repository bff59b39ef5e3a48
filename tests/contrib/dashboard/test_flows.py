"""The dashboard's flow pages: executions and one execution's timeline (one bar per
attempt, ``extract #1``, ``extract #2``), over HTTP and in a real browser."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from backends.memory import MemoryStorage
from contrib.dashboard import create_app
from contrib.dashboard.flows import timeline
from queue_core import JobContext, Queue, RetryPolicy, Storage
from queue_core.flows import ExecutionState, StepState
from queue_core.records.flows import StepRun
from queue_core.records.jobs import AttemptRecord, Outcome
from queue_core.testing.fixtures import attempt_record
from tests.contrib.dashboard.conftest import local_client, run_burst


class _NoFlows:
    """A storage that hides every optional ability (flows included)."""

    def __init__(self, inner: Storage) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in (
            "start_execution",
            "list_executions",
            "get_execution",
            "list_steps",
            "cancel_execution",
            "get_step_inputs",
            "list_jobs",
        ):
            raise AttributeError(name)
        return getattr(self._inner, name)


@pytest.fixture
def flowed() -> Iterator[tuple[Queue, list[str]]]:
    """memory:// with three executions: succeeded after a retry, failed, pending."""
    queue = Queue("memory://")
    flow = queue.flow("etl", retry=RetryPolicy(max_attempts=2, initial=0.01, jitter=0))

    @flow.step
    def extract(input: dict[str, Any], ctx: JobContext) -> list[int]:
        if ctx.attempt == 1:
            raise RuntimeError("source not ready")
        return [1, 2, 3]

    @flow.step(depends_on=[extract])
    def load(extract: list[int], input: dict[str, Any]) -> int:
        if input.get("fail"):
            raise ValueError("load failed")
        return sum(extract)

    ok = flow.start({"day": 1})
    bad = flow.start({"fail": True})
    run_burst(queue, reap_interval=0.1)  # a thread of its own: see run_burst
    waiting = flow.start({"day": 2})  # never run: its steps stay queued / pending
    assert ok.status() is ExecutionState.SUCCEEDED and bad.status() is ExecutionState.FAILED
    yield queue, [ok.id, bad.id, waiting.id]
    queue.close()


def test_timeline_has_one_bar_per_attempt_in_start_order(flowed: tuple[Queue, list[str]]) -> None:
    queue, (ok, _, waiting) = flowed
    bars, not_started = timeline(queue.execution(ok).steps(), now_ms=0)
    assert [b.label for b in bars] == ["extract #1", "extract #2", "load #1"]
    assert [b.outcome for b in bars] == ["failed", "succeeded", "succeeded"]
    assert bars[0].left == 0 and all(0 <= b.left <= 100 and b.width >= 0.5 for b in bars)
    assert bars[0].left < bars[1].left <= bars[2].left and not not_started
    assert {b.job_id for b in bars} == {s.job_id for s in queue.execution(ok).steps()}
    bars, not_started = timeline(queue.execution(waiting).steps(), now_ms=0)
    assert bars == [] and [s.step_id for s in not_started] == ["extract", "load"]
    assert not_started[1].state is StepState.PENDING


def _attempt(number: int, start_ms: int, end_ms: int, outcome: Outcome) -> AttemptRecord:
    at = datetime.fromtimestamp(start_ms / 1000, tz=timezone.utc)
    end = datetime.fromtimestamp(end_ms / 1000, tz=timezone.utc)
    return attempt_record(number, outcome, started_at=at, finished_at=end)


def test_attempts_started_in_one_millisecond_keep_the_order_they_ran_in() -> None:
    """A dependency's retry that ends in the millisecond its dependent starts in (a fast
    body): the timeline shows the retry first, not the dependent's lower attempt number."""
    t = 1_700_000_000_000
    steps = [
        StepRun(step_id="extract", state=StepState.SUCCEEDED, reason=None, job_id="e.0",
                attempts=[_attempt(1, t, t + 5, Outcome.FAILED),
                          _attempt(2, t + 20, t + 20, Outcome.SUCCEEDED)]),
        StepRun(step_id="load", state=StepState.SUCCEEDED, reason=None, job_id="e.1",
                attempts=[_attempt(1, t + 20, t + 21, Outcome.SUCCEEDED)]),
    ]  # fmt: skip
    bars, _ = timeline(steps, now_ms=0)
    assert [b.label for b in bars] == ["extract #1", "extract #2", "load #1"]
    steps[1] = StepRun(step_id="load", state=StepState.SUCCEEDED, reason=None, job_id="e.1",
                       attempts=[_attempt(1, t + 20, t + 20, Outcome.SUCCEEDED)])  # fmt: skip
    bars, _ = timeline(steps, now_ms=0)  # ended in the same millisecond too: step order
    assert [b.label for b in bars] == ["extract #1", "extract #2", "load #1"]


def test_pages_over_http(flowed: tuple[Queue, list[str]]) -> None:
    queue, (ok, bad, waiting) = flowed
    client = local_client(create_app(queue))
    page = client.get("/flows")
    assert page.status_code == 200
    for execution_id in (ok, bad, waiting):
        assert f'data-execution="{execution_id}"' in page.text
    failed = client.get("/flows", params={"state": "failed"}).text
    assert bad in failed and ok not in failed and waiting not in failed
    assert client.get("/flows", params={"state": "nope"}).status_code == 400
    one = client.get(f"/flows/{bad}")
    assert one.status_code == 200
    assert one.text.count('class="tl-row"') == 4  # extract #1, #2, load #1, #2
    assert 'data-attempt="load #2" data-outcome="failed"' in one.text
    # the failing step's error is on the page (issue 23 item 7)
    assert '<dd id="execution-error"><span class="mono">load #2</span>: ' in one.text
    assert "ValueError</span>: load failed</dd>" in one.text
    assert 'id="execution-error"' not in client.get(f"/flows/{ok}").text
    assert client.get("/flows/nope").status_code == 404


def test_a_storage_without_flows_says_so() -> None:
    client = local_client(create_app(_NoFlows(MemoryStorage())))  # type: ignore[arg-type]
    page = client.get("/flows")
    assert page.status_code == 200 and "SupportsFlows" in page.text
    assert client.get("/flows/x").status_code == 404


def test_flow_pages_in_a_browser(
    flowed: tuple[Queue, list[str]], serve: Callable[[Any], str], page: Any, artifacts: Path
) -> None:
    from tests.contrib.dashboard.test_browser import shot

    queue, (ok, bad, _) = flowed
    base = serve(create_app(queue))
    assert page.goto(base + "/flows").status == 200
    rows = page.locator("#executions tbody tr")
    assert rows.count() == 3
    shot(page, artifacts, "flows")
    page.click(f"a[href$='/flows/{ok}']")
    page.wait_for_selector("#timeline")
    labels = page.locator("#timeline .tl-row").evaluate_all("rs => rs.map(r => r.dataset.attempt)")
    assert labels == ["extract #1", "extract #2", "load #1"]
    bars = page.locator("#timeline .tl-bar")
    boxes = [bars.nth(i).bounding_box() for i in range(3)]
    assert all(b is not None and b["width"] >= 2 for b in boxes)
    assert boxes[0]["x"] < boxes[1]["x"] <= boxes[2]["x"]  # type: ignore[index]
    assert page.locator("#execution-state").inner_text() == "succeeded"
    shot(page, artifacts, "execution")
    page.goto(base + f"/flows/{bad}")
    assert page.locator("#timeline .tl-row[data-outcome='failed']").count() == 3
    # a failed execution's badge is red like a dead job's, and its error is shown
    badge = page.locator("h1 .badge")
    assert badge.inner_text() == "failed"
    assert badge.evaluate("b => getComputedStyle(b).color") == "rgb(180, 35, 24)"
    assert page.locator("#execution-error").inner_text() == "load #2: ValueError: load failed"
    page.click("#timeline .tl-row[data-attempt='load #1'] a")
    assert page.locator("h1").inner_text().startswith("Job")
