"""The dashboard's pause and resume buttons and its progress display (SPEC §13): the
HTTP routes (CSRF, read-only, bad input) and a real headless Chromium clicking them."""

from __future__ import annotations

import html
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contrib.dashboard import create_app
from queue_core import JobContext, PauseKind, Queue
from tests.contrib.dashboard.conftest import local_client, run_burst
from tests.contrib.dashboard.test_browser import shot
from tests.contrib.dashboard.test_http import csrf_of


@pytest.fixture
def mem_queue() -> Queue:
    queue = Queue("memory://")

    @queue.task(name="dash.send", queue="emails")
    def send(n: int) -> int:
        return n

    @queue.task(name="dash.copy")
    def copy(ctx: JobContext = JobContext.INJECTED) -> None:
        ctx.progress(0.4, "40 of 100 files")

    send.delay(1)
    return queue


def _kinds(queue: Queue) -> list[tuple[PauseKind, str]]:
    return [(p.kind, p.name) for p in queue.paused()]


def test_pause_and_resume_a_queue_from_the_queues_page(mem_queue: Queue) -> None:
    client = local_client(create_app(mem_queue))
    token = csrf_of(client, "/")
    page = client.get("/").text
    assert 'data-action="pause-emails"' in page and "Nothing is paused" in page
    done = client.post("/pause", data={"csrf_token": token, "kind": "queue", "name": "emails"})
    assert done.status_code == 200
    assert "Paused: workers stop claiming" in done.text
    assert 'data-paused="true"' in done.text and 'data-action="resume-emails"' in done.text
    assert _kinds(mem_queue) == [(PauseKind.QUEUE, "emails")]
    again = client.post("/pause", data={"csrf_token": token, "kind": "queue", "name": "emails"})
    assert "Nothing changed" in again.text
    client.post("/pause", data={"csrf_token": token, "kind": "task", "name": "dash.copy"})
    listed = client.get("/").text
    assert 'data-pause="task:dash.copy"' in listed
    back = client.post("/resume", data={"csrf_token": token, "kind": "queue", "name": "emails"})
    assert "Resumed" in back.text
    assert _kinds(mem_queue) == [(PauseKind.TASK, "dash.copy")]


@pytest.mark.parametrize(
    ("data", "status"),
    [
        ({"kind": "queue", "name": "emails"}, 403),  # no CSRF token
        ({"csrf_token": "forged", "kind": "queue", "name": "emails"}, 403),
    ],
)
def test_a_pause_without_a_valid_token_is_refused(
    mem_queue: Queue, data: dict[str, str], status: int
) -> None:
    client = local_client(create_app(mem_queue))
    csrf_of(client, "/")
    assert client.post("/pause", data=data).status_code == status
    assert mem_queue.paused() == []


def test_bad_kinds_and_names_are_400_and_store_nothing(mem_queue: Queue) -> None:
    client = local_client(create_app(mem_queue))
    token = csrf_of(client, "/")
    bad = client.post("/pause", data={"csrf_token": token, "kind": "worker", "name": "x"})
    assert bad.status_code == 400 and "'queue', 'task' or 'flow'" in html.unescape(bad.text)
    empty = client.post("/pause", data={"csrf_token": token, "kind": "queue", "name": " "})
    assert empty.status_code == 400
    assert mem_queue.paused() == []


def test_a_read_only_dashboard_shows_the_pauses_without_buttons(mem_queue: Queue) -> None:
    mem_queue.pause(queue="emails")
    client = local_client(create_app(mem_queue, read_only=True))
    page = client.get("/").text
    assert 'data-paused="true"' in page and 'data-pause="queue:emails"' in page
    assert 'data-action="resume-emails"' not in page and 'id="pause-form"' not in page
    token = csrf_of(client, "/")
    refused = client.post("/resume", data={"csrf_token": token, "kind": "queue", "name": "emails"})
    assert refused.status_code == 403
    assert _kinds(mem_queue) == [(PauseKind.QUEUE, "emails")]


def test_the_job_page_shows_the_latest_progress(mem_queue: Queue) -> None:
    task = mem_queue.tasks["dash.copy"]
    handle = task.delay()
    run_burst(mem_queue, queues=["default"])
    page = local_client(create_app(mem_queue)).get(f"/jobs/{handle.id}").text
    assert 'id="job-progress"' in page and "40%" in page and "40 of 100 files" in page


def test_pause_and_resume_buttons_in_a_browser(
    mem_queue: Queue, serve: Callable[[Any], str], page: Any, artifacts: Path
) -> None:
    base = serve(create_app(mem_queue))
    page.goto(base + "/")
    page.click('[data-action="pause-emails"]')
    page.wait_for_selector('tr[data-queue="emails"][data-paused="true"]')
    assert "Paused: workers stop claiming" in page.inner_text("#flash")
    page.select_option('#pause-form select[name="kind"]', "task")
    page.fill('#pause-form input[name="name"]', "dash.copy")
    page.click("#pause")
    page.wait_for_selector('tr[data-pause="task:dash.copy"]')
    shot(page, artifacts, "queues-paused")
    assert _kinds(mem_queue) == [(PauseKind.QUEUE, "emails"), (PauseKind.TASK, "dash.copy")]
    page.click('[data-action="resume-emails"]')
    page.wait_for_selector('tr[data-queue="emails"]:not([data-paused])')
    assert _kinds(mem_queue) == [(PauseKind.TASK, "dash.copy")]
