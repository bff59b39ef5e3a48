"""The dashboard's HTTP rules with Starlette's TestClient: pages, CSRF, token, auth hook,
read-only, masking of secrets, degrading without a job scan, mounting under a prefix."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Mount
from starlette.testclient import TestClient

from backends.memory import MemoryStorage
from contrib.dashboard import create_app
from contrib.dashboard.security import CSRF_COOKIE, SESSION_COOKIE
from queue_core import (
    ConfigError,
    JobState,
    Queue,
    Storage,
    StorageError,
    SupportsJobScan,
    TaskError,
)
from tests.contrib.dashboard.conftest import Populated, local_client, run_burst


def csrf_of(client: TestClient, path: str = "/dead") -> str:
    """Load a page (which sets the CSRF cookie) and return the token its forms carry."""
    response = client.get(path)
    assert response.status_code == 200
    token = client.cookies.get(CSRF_COOKIE)
    assert token
    return token


def dead_entry_id(populated: Populated) -> str:
    return populated.queue.storage().list_dead(1)[0].id


# --------------------------------------------------------------------------- pages


def test_every_page_answers_200_on_a_queue_with_every_state(populated: Populated) -> None:
    client = local_client(create_app(populated.queue))
    storage = populated.queue.storage()
    dead = storage.list_dead(1)[0]
    paths = [
        "/",
        "/jobs",
        "/jobs?state=running&queue=held",
        "/jobs?task=dash.add",
        "/dead",
        "/dead?task=dash.explode",
        f"/dead/{dead.id}",
        f"/dead/retry?ids={dead.id}",
        "/dead/purge?task=dash.explode",
        "/metrics",
        "/static/dashboard.css",
        "/static/htmx.min.js",
    ] + [f"/jobs/{ids[0]}" for ids in populated.ids.values()]
    for path in paths:
        response = client.get(path)
        assert response.status_code == 200, (path, response.text[:500])


def test_the_jobs_page_filters_and_pages(tmp_path: Path) -> None:
    q = Queue(f"sqlite:///{tmp_path / 'p.db'}")
    a = [q.enqueue("t.a", args=(i,), delay=3600, allow_unregistered=True).id for i in range(7)]
    b = [
        q.enqueue("t.b", args=(i,), delay=3600, queue="other", allow_unregistered=True).id
        for i in range(5)
    ]
    client = local_client(create_app(q))

    def listed(path: str) -> list[str]:
        return re.findall(r'data-job="([0-9a-f]+)"', client.get(path).text)

    # newest first; the task filter is applied over the scan, with paging
    assert listed("/jobs?task=t.a&limit=3") == a[::-1][:3]
    assert listed("/jobs?task=t.a&limit=3&page=2") == a[::-1][3:6]
    assert listed("/jobs?task=t.a&limit=3&page=3") == a[::-1][6:]
    assert 'id="next"' in client.get("/jobs?task=t.a&limit=3&page=2").text
    assert 'id="next"' not in client.get("/jobs?task=t.a&limit=3&page=3").text
    assert listed("/jobs?queue=other") == b[::-1]
    assert listed("/jobs?state=queued&queue=other&limit=2&page=2") == b[::-1][2:4]
    assert listed("/jobs?state=succeeded") == []
    q.close()


@pytest.mark.parametrize(
    ("path", "needle"),
    [
        ("/jobs?state=nope", "invalid state 'nope': expected one of queued, running"),
        ("/jobs?page=0", "invalid page '0': expected an integer >= 1"),
        ("/dead?limit=x", "invalid limit 'x'"),
        ("/jobs/lookup?id=", "give a job id"),
    ],
)
def test_bad_query_values_get_400_naming_the_value(
    populated: Populated, path: str, needle: str
) -> None:
    response = local_client(create_app(populated.queue)).get(path)
    assert response.status_code == 400
    assert needle in html.unescape(response.text)


def test_unknown_job_and_dead_entry_get_404(populated: Populated) -> None:
    client = local_client(create_app(populated.queue))
    assert client.get("/jobs/nope").status_code == 404
    assert "no dead-letter entry with id 'nope'" in html.unescape(client.get("/dead/nope").text)
    lookup = client.get(f"/jobs/lookup?id={populated.one('dead')}", follow_redirects=False)
    assert lookup.status_code == 303
    assert lookup.headers["location"] == f"/jobs/{populated.one('dead')}"


def test_the_search_takes_any_unique_prefix_and_says_when_one_is_ambiguous() -> None:
    q = Queue(storage=MemoryStorage())
    ids = [q.enqueue("t.x", allow_unregistered=True).id for _ in range(6)]
    client = TestClient(create_app(q), base_url="http://localhost")
    target = ids[3]
    unique = next(
        n for n in range(1, 33) if not any(o.startswith(target[:n]) for o in ids if o != target)
    )
    found = client.get(f"/jobs/lookup?id={target[:unique]}", follow_redirects=False)
    assert (found.status_code, found.headers["location"]) == (303, f"/jobs/{target}")
    ambiguous = client.get(f"/jobs/lookup?id={target[: unique - 1]}")
    assert ambiguous.status_code == 400
    assert f"id prefix {target[: unique - 1]!r} is ambiguous" in html.unescape(ambiguous.text)
    missing = client.get("/jobs/lookup?id=ffff")
    assert missing.status_code == 404
    assert "no job with id 'ffff' or an id starting with it" in html.unescape(missing.text)


def test_listed_ids_are_shortened_so_that_they_differ() -> None:
    # jobs enqueued together share their time-ordered head: id[:12] was one label for all
    q = Queue(storage=MemoryStorage())
    ids = [q.enqueue("t.x", allow_unregistered=True).id for _ in range(8)]
    assert len({i[:12] for i in ids}) < len(ids)
    text = TestClient(create_app(q), base_url="http://localhost").get("/jobs").text
    shown = dict(re.findall(r'<tr data-job="(\w+)".*?<a href="/jobs/\w+">(\w+)</a>', text, re.S))
    assert set(shown) == set(ids)
    assert len(set(shown.values())) == len(ids)
    assert all(job_id.startswith(short) and len(short) >= 8 for job_id, short in shown.items())


def test_args_and_results_are_decoded_with_the_queues_serializer() -> None:
    q = Queue(storage=MemoryStorage(), serializer="pickle")
    job = q.enqueue("t.p", args=({1, 2},), kwargs={"when": (3, 4)}, allow_unregistered=True)
    client = local_client(create_app(q))
    text = html.unescape(client.get(f"/jobs/{job.id}").text)
    # a set and a tuple only survive the pickle serializer: decoded with it, not as JSON
    assert "{'args': [{1, 2}], 'kwargs': {'when': (3, 4)}}" in text

    # given only the storage, JSON is assumed: the pickle payload is shown as not decodable
    text = html.unescape(local_client(create_app(q.storage())).get(f"/jobs/{job.id}").text)
    assert "not decodable with the 'json' serializer" in text
    assert "bytes)" in text


def test_cancel_a_queued_job_from_its_page(populated: Populated) -> None:
    client = local_client(create_app(populated.queue))
    job_id = populated.one("scheduled")
    token = csrf_of(client, f"/jobs/{job_id}")
    response = client.post(f"/jobs/{job_id}/cancel", data={"csrf_token": token})
    assert response.status_code == 200
    assert "Cancel done: the job is cancelled." in response.text
    assert populated.queue.storage().get_job(job_id).state is JobState.CANCELLED  # type: ignore[union-attr]
    assert 'id="cancel"' not in response.text


def test_retry_of_entries_already_gone_is_reported(populated: Populated) -> None:
    client = local_client(create_app(populated.queue))
    storage = populated.queue.storage()
    ids = [e.id for e in storage.list_dead(10)]
    token = csrf_of(client)
    storage.retry_dead(ids[0])  # someone else was faster
    response = client.post("/dead/retry", data={"csrf_token": token, "ids": ids})
    assert response.status_code == 200
    assert "Retried 2 dead-letter entries. 1 selected entry was already gone." in response.text
    assert storage.list_dead(10) == []
    assert client.post("/dead/retry", data={"csrf_token": token}).status_code == 400


def test_purge_needs_the_confirmation_field_and_honours_the_task(populated: Populated) -> None:
    client = local_client(create_app(populated.queue))
    storage = populated.queue.storage()
    token = csrf_of(client)
    refused = client.post("/dead/purge", data={"csrf_token": token, "task": "dash.explode"})
    assert refused.status_code == 400
    assert len(storage.list_dead(10)) == 3
    confirm = client.get("/dead/purge?task=dash.explode")
    assert "deletes 2 dead-letter entries of task" in confirm.text
    done = client.post(
        "/dead/purge", data={"csrf_token": token, "task": "dash.explode", "confirm": "yes"}
    )
    assert "Purged 2 dead-letter entries." in done.text
    assert [e.task_name for e in storage.list_dead(10)] == ["dash.needs_flag"]


# --------------------------------------------------------------------------- CSRF


@pytest.mark.parametrize("action", ["retry", "purge", "cancel"])
def test_a_post_without_a_valid_csrf_token_is_refused(populated: Populated, action: str) -> None:
    app = create_app(populated.queue)
    client = local_client(app)
    storage = populated.queue.storage()
    entry = dead_entry_id(populated)
    job = populated.one("scheduled")
    path, form = {
        "retry": ("/dead/retry", {"ids": entry}),
        "purge": ("/dead/purge", {"confirm": "yes"}),
        "cancel": (f"/jobs/{job}/cancel", {}),
    }[action]
    # no cookie, no token
    assert client.post(path, data=form).status_code == 403
    token = csrf_of(client)
    # the cookie alone (what a cross-site form post sends) is not enough
    assert client.post(path, data=form).status_code == 403
    # a token that differs from the cookie
    other = local_client(app)
    assert client.post(path, data={**form, "csrf_token": csrf_of(other)}).status_code == 403
    # a cookie and token that agree but were not signed by this app
    forged = local_client(app, cookies={CSRF_COOKIE: "abc.def"})
    assert forged.post(path, data={**form, "csrf_token": "abc.def"}).status_code == 403
    # another app's (another secret's) token
    foreign = local_client(create_app(populated.queue))
    foreign_token = csrf_of(foreign)
    client.cookies.set(CSRF_COOKIE, foreign_token)
    assert client.post(path, data={**form, "csrf_token": foreign_token}).status_code == 403
    # nothing changed
    assert len(storage.list_dead(10)) == 3
    assert storage.get_job(job).state is JobState.QUEUED  # type: ignore[union-attr]
    # the header form of the token works (for scripts)
    client.cookies.set(CSRF_COOKIE, token)
    ok = client.post(path, data=form, headers={"X-CSRF-Token": token}, follow_redirects=False)
    assert ok.status_code == 303


def test_a_fixed_secret_lets_two_apps_share_csrf_tokens(populated: Populated) -> None:
    one = local_client(create_app(populated.queue, secret="shared"))
    two = local_client(create_app(populated.queue, secret="shared"))
    token = csrf_of(one)
    two.cookies.set(CSRF_COOKIE, token)
    entry = dead_entry_id(populated)
    response = two.post(
        "/dead/retry", data={"csrf_token": token, "ids": entry}, follow_redirects=False
    )
    assert response.status_code == 303


# --------------------------------------------------------------------------- token and auth


@pytest.mark.parametrize(
    "path", ["/", "/jobs", "/dead", "/metrics", "/static/htmx.min.js", "/jobs/x"]
)
def test_with_a_token_every_request_without_it_gets_401(populated: Populated, path: str) -> None:
    client = local_client(create_app(populated.queue, token="T0k"))
    response = client.get(path)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert client.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get(path, headers={"Authorization": "Basic VDBr"}).status_code == 401
    ok = client.get(path, headers={"Authorization": "Bearer T0k"})
    assert ok.status_code == (404 if path == "/jobs/x" else 200)


def test_token_in_the_query_sets_a_cookie_and_leaves_the_url(populated: Populated) -> None:
    client = local_client(create_app(populated.queue, token="T0k"))
    first = client.get("/jobs?state=dead&token=T0k", follow_redirects=False)
    assert first.status_code == 303
    assert first.headers["location"] == "/jobs?state=dead"
    cookie = first.headers["set-cookie"]
    assert SESSION_COOKIE in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert "T0k" not in cookie
    assert client.get("/jobs?state=dead").status_code == 200
    assert client.get("/metrics").status_code == 200
    # a POST with the session cookie still needs its CSRF token
    assert client.post("/dead/purge", data={"confirm": "yes"}).status_code == 403
    # the redirect stays on this site whatever the path looks like
    odd = local_client(create_app(populated.queue, token="T0k"))
    away = odd.get("http://localhost//evil.example/?token=T0k", follow_redirects=False)
    assert away.status_code == 303
    assert away.headers["location"] == "/evil.example/"
    # a wrong token in the query is refused, not redirected
    fresh = local_client(create_app(populated.queue, token="T0k"))
    assert fresh.get("/?token=nope", follow_redirects=False).status_code == 401


def test_a_tampered_session_cookie_is_refused(populated: Populated) -> None:
    client = local_client(create_app(populated.queue, token="T0k"))
    client.cookies.set(SESSION_COOKIE, "T0k")
    assert client.get("/").status_code == 401


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_an_auth_hook_decides_and_a_token_also_works(populated: Populated, kind: str) -> None:
    def sync_hook(request: Request) -> bool:
        return request.headers.get("x-user") == "ops"

    async def async_hook(request: Request) -> bool:
        return request.headers.get("x-user") == "ops"

    hook = sync_hook if kind == "sync" else async_hook
    client = local_client(create_app(populated.queue, auth=hook))
    assert client.get("/").status_code == 401
    assert client.get("/", headers={"X-User": "guest"}).status_code == 401
    assert client.get("/", headers={"X-User": "ops"}).status_code == 200

    both = local_client(create_app(populated.queue, auth=hook, token="T0k"))
    assert both.get("/", headers={"X-User": "ops"}).status_code == 200
    assert both.get("/", headers={"Authorization": "Bearer T0k"}).status_code == 200
    assert both.get("/").status_code == 401


# --------------------------------------------------------------------------- read-only


def test_read_only_renders_no_action_and_refuses_every_mutation(populated: Populated) -> None:
    normal = local_client(create_app(populated.queue, secret="s"))
    token = csrf_of(normal)
    client = local_client(create_app(populated.queue, read_only=True, secret="s"))
    client.cookies.set(CSRF_COOKIE, token)
    storage = populated.queue.storage()
    entry = dead_entry_id(populated)
    job = populated.one("scheduled")
    for path in ["/dead", f"/dead/{entry}", f"/jobs/{job}"]:
        text = client.get(path).text
        assert "read-only" in text
        assert 'method="post"' not in text and "Retry…" not in text and "Purge" not in text
    assert client.get(f"/dead/retry?ids={entry}").status_code == 403
    assert client.get("/dead/purge").status_code == 403
    for path, form in [
        ("/dead/retry", {"ids": entry}),
        ("/dead/purge", {"confirm": "yes"}),
        (f"/jobs/{job}/cancel", {}),
    ]:
        response = client.post(path, data={**form, "csrf_token": token})
        assert response.status_code == 403
        assert "read-only" in response.text
    assert len(storage.list_dead(10)) == 3
    assert storage.get_job(job).state is JobState.QUEUED  # type: ignore[union-attr]


# --------------------------------------------------------------------------- secrets


def test_no_url_password_is_rendered() -> None:
    q = Queue("memory://ops:hunter2@localhost/")
    q.enqueue("t.a", args=(1,), allow_unregistered=True)
    client = local_client(create_app(q))
    for path in ["/", "/jobs", "/dead", f"/jobs/{q.storage().list_jobs()[0].id}"]:  # type: ignore[attr-defined]
        text = client.get(path).text
        assert "memory://ops:***@localhost/" in text
        assert "hunter2" not in text


class _Failing(MemoryStorage):
    """A storage whose reads fail with an error that quotes the URL (as a driver might)."""

    url = "memory://ops:hunter2@localhost/"

    def stats(self, *, now: int | None = None) -> Any:
        raise StorageError(f"cannot reach {self.url}: connection refused")


def test_a_storage_error_is_a_503_page_with_the_password_masked() -> None:
    storage = _Failing()
    q = Queue(storage=storage)
    q.url = storage.url  # what a Queue opened from that URL holds
    client = local_client(create_app(q))
    response = client.get("/")
    assert response.status_code == 503
    assert "StorageError: cannot reach memory://ops:***@localhost/" in response.text
    assert "hunter2" not in response.text
    metrics = client.get("/metrics")
    assert metrics.status_code == 200
    assert "queue_core_storage_up 0.0" in metrics.text


# --------------------------------------------------------------------------- without a job scan


class NoScan:
    """A Storage without the optional SupportsJobScan ability (delegates to memory)."""

    def __init__(self) -> None:
        self._inner = MemoryStorage()

    def __getattribute__(self, name: str) -> Any:
        if name in _STORAGE_METHODS:
            return getattr(object.__getattribute__(self, "_inner"), name)
        return object.__getattribute__(self, name)


_STORAGE_METHODS = {
    "enqueue", "claim", "renew", "heartbeat", "finish", "reap", "prune", "cancel", "get_job",
    "list_attempts", "count_pending", "stats", "list_dead", "get_dead", "retry_dead",
    "purge_dead", "close",
}  # fmt: skip
for _name in _STORAGE_METHODS:
    setattr(NoScan, _name, None)  # visible to the runtime protocol check


def test_without_a_job_scan_the_jobs_page_says_so_and_the_rest_works() -> None:
    storage = NoScan()
    assert isinstance(storage, Storage) and not isinstance(storage, SupportsJobScan)
    q = Queue(storage=storage)

    @q.task(name="t.fatal")
    def fatal() -> None:
        raise TaskError.fatal("no")

    job = fatal.delay()
    run_burst(q)
    scans = {"scan_attempts": True, "scan_dead_letters": True}
    client = local_client(create_app(q, metrics_options=scans))
    page = client.get("/jobs")
    assert page.status_code == 200
    assert "cannot list jobs" in page.text and "SupportsJobScan.list_jobs" in page.text
    assert client.get(f"/jobs/{job.id}").status_code == 200
    assert client.get("/dead").status_code == 200
    assert client.get("/").status_code == 200
    metrics = client.get("/metrics").text
    assert 'queue_core_dead_letters{task="t.fatal"} 1.0' in metrics
    assert "queue_core_attempts{" not in metrics


# --------------------------------------------------------------------------- mounting


def test_mounted_under_a_prefix_links_and_cookies_follow_the_mount(populated: Populated) -> None:
    host = Starlette(routes=[Mount("/ops/queues", app=create_app(populated.queue))])
    client = local_client(host)
    page = client.get("/ops/queues/dead")
    assert page.status_code == 200
    assert 'href="/ops/queues/static/dashboard.css"' in page.text
    assert 'href="/ops/queues/jobs"' in page.text
    assert "Path=/ops/queues/" in page.headers["set-cookie"]
    assert client.get("/ops/queues/static/htmx.min.js").status_code == 200
    token = client.cookies.get(CSRF_COOKIE)
    entry = dead_entry_id(populated)
    done = client.post(
        "/ops/queues/dead/retry", data={"csrf_token": token, "ids": entry}, follow_redirects=False
    )
    assert done.status_code == 303
    assert done.headers["location"].startswith("/ops/queues/jobs/")


# --------------------------------------------------------------------------- bad options


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"token": ""}, "token"),
        ({"auth": "yes"}, "auth"),
        ({"refresh_seconds": -1}, "refresh_seconds"),
    ],
)
def test_bad_options_raise_config_error(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        create_app(Queue("memory://"), **kwargs)
    assert info.value.field == field


def test_not_a_queue_nor_a_storage_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="expected a queue_core.Queue"):
        create_app(object())  # type: ignore[arg-type]


def test_ids_are_quoted_in_links() -> None:
    from queue_core.records.jobs import NewJob

    storage = MemoryStorage()
    # the core's ids are uuid hex; a storage's own ids still must not break the links
    storage.enqueue([NewJob(id="a b?c#d", task_name="t", queue="default", payload=b"{}")])
    client = local_client(create_app(storage))
    text = client.get("/jobs").text
    assert 'href="/jobs/a%20b%3Fc%23d"' in text
    page = client.get("/jobs/a%20b%3Fc%23d")
    assert page.status_code == 200
    assert 'action="/jobs/a%20b%3Fc%23d/cancel"' in page.text
