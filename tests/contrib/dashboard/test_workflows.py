"""The dashboard's execution page for workflows (SPEC §12): its steps, sleeps, waits and
children in the timeline, and the Retry and Replay buttons (POST with the CSRF token;
none on a read-only dashboard), over HTTP and in a real browser."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from contrib.dashboard import create_app
from queue_core import DurableContext, Queue
from queue_core.flows import ExecutionState
from tests.contrib.dashboard.conftest import local_client, run_burst

E = ExecutionState


@pytest.fixture
def wf() -> Iterator[tuple[Queue, dict[str, Any]]]:
    """memory:// with a workflow waiting for an event and one that failed at step b."""
    queue = Queue("memory://")
    broken = {"b": True}

    @queue.task
    def mail(address: str) -> str:
        return address

    def b() -> str:
        if broken["b"]:
            raise ValueError("b is broken")
        return "B"

    @queue.workflow
    async def onboard(ctx: DurableContext, user: str) -> str:
        await ctx.step("fetch", lambda: user)
        await ctx.gather(ctx.run(mail, user))
        return str(await ctx.wait_for_event("approval", key=user))

    @queue.workflow
    def steps(ctx: DurableContext) -> str:
        return str(ctx.step("a", lambda: "A")) + str(ctx.step("b", b))

    waiting, failed = onboard.start("ann"), steps.start()
    run_burst(queue, reap_interval=0.1)
    assert (waiting.status(), failed.status()) == (E.WAITING, E.FAILED)
    yield queue, {"waiting": waiting, "failed": failed, "broken": broken}
    queue.close()


def _labels(text: str) -> list[tuple[str, str]]:
    return re.findall(r'data-attempt="([^"]+)" data-outcome="([^"]+)"', text)


def test_the_timeline_shows_steps_children_and_waits(wf: tuple[Queue, dict[str, Any]]) -> None:
    queue, made = wf
    client = local_client(create_app(queue))
    page = client.get(f"/flows/{made['waiting'].id}")
    assert page.status_code == 200
    labels = _labels(page.text)
    assert ("step fetch", "done") in labels
    assert ("wait approval [ann]", "waiting") in labels
    assert any(label.endswith("mail#0 #1") and o == "succeeded" for label, o in labels), labels
    assert ("main #1", "suspended") in labels
    assert 'id="retry"' not in page.text and 'id="replay"' not in page.text  # not finished


def test_retry_and_replay_buttons_post_with_the_csrf_token(
    wf: tuple[Queue, dict[str, Any]],
) -> None:
    queue, made = wf
    failed = made["failed"]
    client = local_client(create_app(queue))
    page = client.get(f"/flows/{failed.id}")
    assert 'id="retry"' in page.text and 'id="replay"' in page.text
    options = re.findall(r'<option value="([^"]+)">', page.text)
    assert options == ["main", "a"]  # the function step and the ctx.step ids stored
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert token is not None
    refused = client.post(f"/flows/{failed.id}/retry", data={})
    assert refused.status_code == 403 and failed.status() is E.FAILED
    made["broken"]["b"] = False
    done = client.post(f"/flows/{failed.id}/retry", data={"csrf_token": token.group(1)})
    assert done.status_code == 200 and "The execution runs again." in done.text
    run_burst(queue, reap_interval=0.1)
    assert failed.result(timeout=5) == "AB"
    again = client.post(f"/flows/{failed.id}/retry", data={"csrf_token": token.group(1)})
    assert again.status_code == 409 and "retry() resumes a failed" in again.text
    replay = client.post(
        f"/flows/{failed.id}/replay", data={"csrf_token": token.group(1), "step_id": "a"}
    )
    assert replay.status_code == 200 and failed.status() is E.RUNNING


def test_a_read_only_dashboard_shows_no_button_and_refuses_the_post(
    wf: tuple[Queue, dict[str, Any]],
) -> None:
    queue, made = wf
    failed = made["failed"]
    client = local_client(create_app(queue, read_only=True))
    page = client.get(f"/flows/{failed.id}")
    assert 'id="retry"' not in page.text and 'id="replay"' not in page.text
    assert client.post(f"/flows/{failed.id}/retry", data={}).status_code == 403
    assert failed.status() is E.FAILED


def test_retry_from_the_page_in_a_browser(
    wf: tuple[Queue, dict[str, Any]], serve: Callable[[Any], str], page: Any, artifacts: Path
) -> None:
    from tests.contrib.dashboard.test_browser import shot

    queue, made = wf
    failed = made["failed"]
    base = serve(create_app(queue))
    page.goto(base + f"/flows/{made['waiting'].id}")
    labels = page.locator("#timeline .tl-row").evaluate_all("rs => rs.map(r => r.dataset.attempt)")
    assert "wait approval [ann]" in labels and "step fetch" in labels
    shot(page, artifacts, "workflow-waiting")
    page.goto(base + f"/flows/{failed.id}")
    made["broken"]["b"] = False
    page.click("#retry")
    page.wait_for_url(re.compile(r"resumed=running"))
    assert "The execution runs again." in page.locator("#flash").inner_text()
    run_burst(queue, reap_interval=0.1)
    page.reload()
    assert page.locator("#execution-state").inner_text() == "succeeded"
    shot(page, artifacts, "workflow-retried")
