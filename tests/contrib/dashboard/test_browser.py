"""The dashboard in a real headless browser (Debian's chromium driven by Playwright) against a
real SQLite queue holding jobs in every state. Screenshots land in tests/artifacts/dashboard."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from contrib.dashboard import create_app
from queue_core import JobState
from tests.contrib.dashboard.conftest import Populated


def shot(page: Any, artifacts: Path, name: str) -> None:
    path = artifacts / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 5_000, f"{path} looks empty"


def test_every_page_renders_with_jobs_in_every_state(
    populated: Populated, serve: Callable[[Any], str], page: Any, artifacts: Path
) -> None:
    base = serve(create_app(populated.queue))
    storage = populated.queue.storage()

    # queues: one row per queue, every cell equal to Storage.stats()
    response = page.goto(base + "/")
    assert response.status == 200
    for stats in storage.stats():
        row = page.locator(f"#queues tr[data-queue='{stats.queue}']")
        for state in ("ready", "scheduled", "running", "succeeded", "dead", "cancelled", "skipped"):
            cell = row.locator(f"td[data-state='{state}']")
            assert cell.inner_text().strip() == str(getattr(stats, state)), (stats.queue, state)
    # htmx was served from the package and loaded
    assert page.evaluate("typeof window.htmx") == "object"
    shot(page, artifacts, "queues")

    # jobs: every state shows up in the unfiltered list; each state filter keeps only its own
    page.goto(base + "/jobs")
    shown = set(page.locator("#jobs tbody tr").evaluate_all("rs => rs.map(r => r.dataset.state)"))
    assert shown == {"queued", "running", "succeeded", "dead", "cancelled", "skipped"}
    shot(page, artifacts, "jobs")
    for state in ("queued", "running", "succeeded", "dead", "cancelled", "skipped"):
        page.goto(base + "/jobs")
        page.select_option("select[name=state]", state)
        page.click("form.filters button[type=submit]")
        page.wait_for_url(re.compile(rf"state={state}"))
        states = page.locator("#jobs tbody tr").evaluate_all("rs => rs.map(r => r.dataset.state)")
        assert states and set(states) == {state}
    page.goto(base + "/jobs?task=dash.explode")
    ids = page.locator("#jobs tbody tr").evaluate_all("rs => rs.map(r => r.dataset.job)")
    assert sorted(ids) == sorted(populated.ids["dead"])

    # a succeeded job: decoded args, decoded result, its attempt
    page.goto(base + f"/jobs/{populated.one('succeeded')}")
    assert page.locator("#job-state").inner_text().startswith("succeeded")
    body = page.locator("main").inner_text()
    assert "'args': [0]" in body and "'kwargs': {'b': 0}" in body
    assert "{'sum': 0}" in body
    assert page.locator("#attempts tr.attempt").count() == 1
    shot(page, artifacts, "job-succeeded")

    # a dead job: the error, the traceback behind a click, a link to its dead-letter entry
    dead_id = populated.ids["dead"][0]
    page.goto(base + f"/jobs/{dead_id}")
    attempt = page.locator("#attempts tr.attempt").first
    assert "failed" in attempt.inner_text() and "boom 0" in attempt.inner_text()
    attempt.locator("details summary").click()
    assert "Traceback (most recent call last)" in attempt.locator("details pre").inner_text()
    shot(page, artifacts, "job-dead")
    page.click("a[href*='/dead/']")
    assert page.locator("h1").inner_text().startswith("Dead letter")
    shot(page, artifacts, "dead-entry")

    # the running job offers a cancel; the dead-letter list has every entry
    page.goto(base + f"/jobs/{populated.one('running')}")
    assert page.locator("#cancel").is_visible()
    shot(page, artifacts, "job-running")
    page.goto(base + "/dead")
    rows = page.locator("#dead tbody tr")
    assert rows.count() == len(storage.list_dead(100))
    shot(page, artifacts, "dead")


def test_retry_a_dead_job_from_the_page_then_a_worker_runs_it(
    populated: Populated, serve: Callable[[Any], str], page: Any, artifacts: Path
) -> None:
    base = serve(create_app(populated.queue))
    storage = populated.queue.storage()
    dead = storage.get_job(populated.one("needs_flag"))
    assert dead is not None and dead.state is JobState.DEAD and dead.dead_id

    page.goto(base + "/dead")
    page.locator(f"tr[data-dead='{dead.dead_id}'] a.retry-one").click()
    page.wait_for_url(re.compile(r"/dead/retry\?"))
    assert storage.get_dead(dead.dead_id) is not None, "the confirmation step changed nothing"
    assert dead.dead_id in page.locator("#to-retry").inner_text()
    shot(page, artifacts, "confirm-retry")
    page.click("#confirm")
    page.wait_for_url(re.compile(r"/jobs/[0-9a-f]+"))
    new_id = page.url.split("/jobs/")[1].split("?")[0]
    assert page.locator("#job-state").inner_text().startswith("queued")
    assert "replays a dead-letter entry" in page.locator("#flash").inner_text()
    assert storage.get_dead(dead.dead_id) is None
    shot(page, artifacts, "job-replayed")

    populated.flag.write_text("ok")
    populated.drain()
    page.reload()
    assert page.locator("#job-state").inner_text().startswith("succeeded")
    assert "'flag found'" in page.locator("main").inner_text()
    job = storage.get_job(new_id)
    assert job is not None and job.state is JobState.SUCCEEDED and job.replay_of == dead.dead_id


def test_retry_selected_and_purge_with_confirmation(
    populated: Populated, serve: Callable[[Any], str], page: Any, artifacts: Path
) -> None:
    base = serve(create_app(populated.queue))
    storage = populated.queue.storage()
    explode = [e.id for e in storage.list_dead(100, 0, "dash.explode")]
    assert len(explode) == 2

    page.goto(base + "/dead")
    for dead_id in explode:
        page.check(f"input[name=ids][value='{dead_id}']")
    page.click("#retry-selected")
    page.wait_for_url(re.compile(r"/dead/retry\?"))
    assert page.locator("#to-retry tbody tr").count() == 2
    page.click("#confirm")
    page.wait_for_url(re.compile(r"/dead\?retried=2"))
    assert page.locator("#flash").inner_text() == "Retried 2 dead-letter entries."
    assert [e.task_name for e in storage.list_dead(100)] == ["dash.needs_flag"]

    page.click("#purge")
    page.wait_for_url(re.compile(r"/dead/purge"))
    assert "deletes 1 dead-letter entry" in page.locator(".notice.bad").inner_text()
    assert len(storage.list_dead(100)) == 1, "the confirmation step changed nothing"
    shot(page, artifacts, "confirm-purge")
    page.click("#confirm")
    page.wait_for_url(re.compile(r"/dead\?purged=1"))
    assert storage.list_dead(100) == []
    assert "No dead-letter entry" in page.locator("main").inner_text()


def test_a_post_without_the_csrf_token_is_refused(
    populated: Populated, serve: Callable[[Any], str], page: Any
) -> None:
    base = serve(create_app(populated.queue))
    storage = populated.queue.storage()
    entry = storage.list_dead(1)[0]
    page.goto(base + "/dead")  # the browser now holds the CSRF cookie
    # the browser's cookies go along (as in a cross-site form post), the form token does not
    refused = page.request.post(base + "/dead/retry", form={"ids": entry.id})
    assert refused.status == 403
    assert "CSRF" in refused.text()
    assert storage.get_dead(entry.id) is not None
    refused = page.request.post(base + "/dead/purge", form={"confirm": "yes"})
    assert refused.status == 403
    assert len(storage.list_dead(100)) == 3


def test_with_a_token_a_request_without_it_gets_401(
    populated: Populated, serve: Callable[[Any], str], page: Any, artifacts: Path
) -> None:
    base = serve(create_app(populated.queue, token="s3cret-token"))
    response = page.goto(base + "/dead")
    assert response.status == 401
    assert "needs a token" in page.locator("body").inner_text()
    assert page.goto(base + "/dead?token=wrong").status == 401

    response = page.goto(base + "/dead?token=s3cret-token")
    assert response.status == 200
    assert "token" not in page.url, "the token is dropped from the address after the first use"
    # the session cookie carries the next pages, the static files and the live refresh
    assert page.goto(base + "/").status == 200
    assert page.evaluate("typeof window.htmx") == "object"
    assert "s3cret-token" not in page.content()
    shot(page, artifacts, "queues-with-token")
    cookies = {c["name"]: c for c in page.context.cookies()}
    assert cookies["qc_dashboard_session"]["httpOnly"] is True
    assert cookies["qc_dashboard_session"]["value"] != "s3cret-token"


def test_read_only_hides_and_refuses_mutations(
    populated: Populated, serve: Callable[[Any], str], page: Any, artifacts: Path
) -> None:
    base = serve(create_app(populated.queue, read_only=True))
    storage = populated.queue.storage()
    page.goto(base + "/dead")
    assert page.locator(".badge.readonly").is_visible()
    assert page.locator("#dead tbody tr").count() == 3
    assert page.locator("a.retry-one, #retry-selected, #purge, input[name=ids]").count() == 0
    shot(page, artifacts, "dead-read-only")
    page.goto(base + f"/jobs/{populated.one('running')}")
    assert page.locator("#cancel").count() == 0
    entry = storage.list_dead(1)[0]
    assert page.goto(base + f"/dead/retry?ids={entry.id}").status == 403
    # even with a valid CSRF token taken from a normal dashboard on the same storage
    assert page.request.post(base + "/dead/retry", form={"ids": entry.id}).status == 403
    assert storage.get_dead(entry.id) is not None


def test_live_refresh_updates_the_queues_page_without_a_reload(
    populated: Populated, serve: Callable[[Any], str], page: Any
) -> None:
    base = serve(create_app(populated.queue, refresh_seconds=0.3))
    page.goto(base + "/")
    cell = page.locator("#queues tr[data-queue='parked'] td[data-state='ready']")
    assert cell.inner_text().strip() == "1"
    page.evaluate("window.__marker = 'same document'")
    populated.queue.tasks["dash.parked"].delay(8)
    page.wait_for_function(
        "document.querySelector(\"#queues tr[data-queue='parked'] td[data-state='ready']\")"
        ".innerText.trim() === '2'",
        timeout=10_000,
    )
    assert page.evaluate("window.__marker") == "same document"


def test_live_refresh_of_the_jobs_list_keeps_a_half_typed_filter(
    populated: Populated, serve: Callable[[Any], str], page: Any
) -> None:
    base = serve(create_app(populated.queue, refresh_seconds=0.3))
    page.goto(base + "/jobs?queue=parked")
    assert page.locator("#jobs tbody tr").count() == 1
    page.fill("input[name=task]", "dash.par")
    populated.queue.tasks["dash.parked"].delay(9)
    page.wait_for_function("document.querySelectorAll('#jobs tbody tr').length === 2")
    assert page.input_value("input[name=task]") == "dash.par"
