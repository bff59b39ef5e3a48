"""The dashboard's ASGI app: pages, actions and ``/metrics`` (see :func:`create_app`)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import jinja2
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from contrib.dashboard.data import (
    attempt_rows,
    decode_payload,
    decode_result,
    fmt_duration,
    fmt_time,
    scan_jobs,
)
from contrib.dashboard.flows import flow_routes
from contrib.dashboard.origin import HostGuard, check_allowed_hosts
from contrib.dashboard.pages import PAGE_SIZE, page_offset, positive_int
from contrib.dashboard.pauses import pause_routes, paused_of
from contrib.dashboard.security import CSRF_FIELD, CSRF_HEADER, AuthHook, AuthMiddleware, Csrf
from contrib.dashboard.throughput import queue_throughput
from contrib.dashboard.workers import workers_route
from contrib.metrics import STATS_STATES, make_registry, storage_of
from queue_core import (
    ConfigError,
    JobState,
    NotFound,
    Queue,
    QueueCoreError,
    Serializer,
    Storage,
    SupportsJobScan,
)
from queue_core.app.serializer import get_serializer
from queue_core.rules.ids import resolve_prefix, short_ids
from queue_core.storage.abilities import SupportsProgress
from queue_core.storage.urls import mask_url, redact

__all__ = ["create_app"]

MAX_PAGE_SIZE = 500
REFRESH_SECONDS = 5
"""Live pages (queues, jobs, a job that has not finished) reload their content this often."""


@dataclass(frozen=True)
class _Flash:
    kind: str
    text: str


class _Dashboard:
    """Holds what every page needs; its methods are the routes' endpoints."""

    def __init__(
        self,
        queue_or_storage: Queue | Storage,
        *,
        read_only: bool,
        secret: bytes,
        metrics_options: dict[str, Any],
        refresh_seconds: float,
    ) -> None:
        self.storage: Storage = storage_of(queue_or_storage)
        self.queue = queue_or_storage if isinstance(queue_or_storage, Queue) else None
        self.serializer: Serializer = (
            self.queue.serializer if self.queue is not None else get_serializer("json")
        )
        self._url = self.queue.url if self.queue is not None else None
        self.where = mask_url(self._url) if self._url else type(self.storage).__name__
        self.read_only = read_only
        self.refresh = refresh_seconds or None
        self.csrf = Csrf(secret)
        self.registry = make_registry(self.storage, **metrics_options)
        env = jinja2.Environment(
            loader=jinja2.PackageLoader("contrib.dashboard", "templates"),
            autoescape=jinja2.select_autoescape(["html"]),
            undefined=jinja2.StrictUndefined,
        )
        env.filters["time"] = fmt_time
        env.filters["duration"] = fmt_duration
        env.filters["seg"] = _quote
        self.templates = Jinja2Templates(env=env)

    # ------------------------------------------------------------------ helpers

    def masked(self, text: str) -> str:
        """``text`` with the storage URL's credentials masked (errors may quote the URL
        or a piece of its password)."""
        return redact(text, self._url)

    def render(
        self, request: Request, name: str, context: dict[str, Any], status_code: int = 200
    ) -> Response:
        token, new = self.csrf.token_for(request)
        base = str(request.scope.get("root_path") or "").rstrip("/")

        def href(path: str, **query: Any) -> str:
            pairs = [(k, v) for k, v in query.items() if v is not None and v != ""]
            return base + path + (f"?{urlencode(pairs, doseq=True)}" if pairs else "")

        full = {
            "where": self.where,
            "read_only": self.read_only,
            "csrf_field": CSRF_FIELD,
            "csrf_token": token,
            "href": href,
            "refresh": None,
            "flash": None,
            "can_scan": isinstance(self.storage, SupportsJobScan),
            "shorts": _shorts,
            **context,
        }
        response = self.templates.TemplateResponse(request, name, full, status_code=status_code)
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Referrer-Policy"] = "same-origin"
        if new:
            self.csrf.set_cookie(response, request, token)
        return response

    def redirect(self, request: Request, path: str, **query: Any) -> RedirectResponse:
        base = str(request.scope.get("root_path") or "").rstrip("/")
        pairs = [(k, v) for k, v in query.items() if v is not None]
        return RedirectResponse(base + path + (f"?{urlencode(pairs)}" if pairs else ""), 303)

    async def mutation_form(self, request: Request) -> Any:
        """The POSTed form, after the read-only and CSRF checks (403 otherwise)."""
        if self.read_only:
            raise HTTPException(403, "this dashboard is read-only")
        form = await request.form()
        submitted = form.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER)
        if not isinstance(submitted, str) or not self.csrf.check(request, submitted):
            raise HTTPException(
                403, "missing or invalid CSRF token: reload the page and submit the form again"
            )
        return form

    def _task_names(self) -> list[str]:
        return sorted(self.queue.tasks) if self.queue is not None else []

    # ------------------------------------------------------------------ pages

    def queues(self, request: Request) -> Response:
        stats = self.storage.stats()
        totals = {state: sum(getattr(s, state) for s in stats) for state in STATS_STATES}
        now_ms = int(time.time() * 1000)
        can_pause, pauses = paused_of(self)
        return self.render(
            request,
            "queues.html",
            {
                "page": "queues",
                "stats": stats,
                "states": STATS_STATES,
                "totals": totals,
                "refresh": self.refresh,
                "throughput": queue_throughput(self.storage, now_ms),
                "now": fmt_time(now_ms),
                "can_pause": can_pause,
                "pauses": pauses,
                "paused_queues": {p.name for p in pauses if p.kind.value == "queue"},
                "flash": _pause_flash(request),
            },
        )

    def jobs(self, request: Request) -> Response:
        q = request.query_params
        state_text = q.get("state") or None
        state = _parse_state(state_text)
        queue = q.get("queue") or None
        task = q.get("task") or None
        limit = min(positive_int(q.get("limit"), "limit", PAGE_SIZE), MAX_PAGE_SIZE)
        page_no, offset = page_offset(q.get("page"), limit)
        result = scan_jobs(
            self.storage,
            state=state,
            queue=queue,
            task=task,
            limit=limit,
            offset=offset,
        )
        queues = [s.queue for s in self.storage.stats()]
        filters = {"state": state_text, "queue": queue, "task": task}
        return self.render(
            request,
            "jobs.html",
            {
                "page": "jobs",
                "result": result,
                "filters": filters,
                "page_no": page_no,
                "limit": limit if limit != PAGE_SIZE else None,
                "states": [s.value for s in JobState],
                "queues": queues,
                "tasks": self._task_names(),
                "refresh": self.refresh if result is not None else None,
                "storage_name": type(self.storage).__name__,
            },
        )

    def job_lookup(self, request: Request) -> Response:
        """The search box: a job id or any unique prefix of one."""
        text = (request.query_params.get("id") or "").strip()
        if not text:
            raise HTTPException(400, "give a job id: /jobs/lookup?id=<job id or prefix>")
        storage = self.storage

        def page(limit: int, offset: int) -> list[str]:
            if not isinstance(storage, SupportsJobScan):
                return []
            return [j.id for j in storage.list_jobs(limit=limit, offset=offset)]

        try:
            job_id = resolve_prefix(
                text, kind="job", exists=lambda i: storage.get_job(i) is not None, page=page
            )
        except NotFound as exc:
            raise HTTPException(404, str(exc)) from None
        except ConfigError as exc:  # an ambiguous prefix
            raise HTTPException(400, str(exc)) from None
        return self.redirect(request, f"/jobs/{_quote(job_id)}")

    def job(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]
        record = self.storage.get_job(job_id)
        if record is None:
            raise HTTPException(404, f"no job with id {job_id!r}")
        attempts = self.storage.list_attempts(job_id)
        storage = self.storage
        progress = storage.get_progress(job_id) if isinstance(storage, SupportsProgress) else None
        return self.render(
            request,
            "job.html",
            {
                "page": "jobs",
                "job": record,
                "progress": progress,
                "args": decode_payload(self.serializer, record.payload),
                "result": decode_result(self.serializer, record.result),
                "attempts": attempt_rows(attempts),
                "cancellable": record.state in (JobState.QUEUED, JobState.RUNNING)
                and not record.cancel_requested,
                "refresh": None if record.state.finished else self.refresh,
                "flash": _flash_from(request),
            },
        )

    async def job_cancel(self, request: Request) -> Response:
        await self.mutation_form(request)
        job_id = request.path_params["job_id"]
        try:
            state = await run_in_threadpool(self.storage.cancel, job_id)
        except NotFound as exc:
            raise HTTPException(404, f"no job with id {job_id!r}") from exc
        return self.redirect(request, f"/jobs/{_quote(job_id)}", cancelled=state.value)

    def dead(self, request: Request) -> Response:
        q = request.query_params
        task = q.get("task") or None
        limit = min(positive_int(q.get("limit"), "limit", PAGE_SIZE), MAX_PAGE_SIZE)
        page_no, offset = page_offset(q.get("page"), limit)
        rows = self.storage.list_dead(limit + 1, offset, task)
        return self.render(
            request,
            "dead.html",
            {
                "page": "dead",
                "entries": rows[:limit],
                "has_next": len(rows) > limit,
                "task": task,
                "page_no": page_no,
                "limit": limit if limit != PAGE_SIZE else None,
                "tasks": self._task_names(),
                "flash": _flash_from(request),
            },
        )

    def dead_entry(self, request: Request) -> Response:
        dead_id = request.path_params["dead_id"]
        entry = self.storage.get_dead(dead_id)
        if entry is None:
            raise HTTPException(404, f"no dead-letter entry with id {dead_id!r}")
        return self.render(
            request,
            "dead_entry.html",
            {
                "page": "dead",
                "entry": entry,
                "args": decode_payload(self.serializer, entry.payload),
                "attempts": attempt_rows(entry.attempts),
            },
        )

    def dead_retry_confirm(self, request: Request) -> Response:
        """GET: the confirmation step of a retry (one or selected entries); changes nothing."""
        self._refuse_if_read_only()
        ids = _ids(request.query_params.getlist("ids"))
        entries = [e for e in (self.storage.get_dead(i) for i in ids) if e is not None]
        missing = len(ids) - len(entries)
        return self.render(
            request,
            "confirm_retry.html",
            {"page": "dead", "entries": entries, "missing": missing},
        )

    async def dead_retry(self, request: Request) -> Response:
        form = await self.mutation_form(request)
        ids = _ids([v for v in form.getlist("ids") if isinstance(v, str)])
        if not ids:
            raise HTTPException(400, "no dead-letter entry selected (field 'ids')")
        new_ids: list[str] = []
        missing = 0
        for dead_id in ids:
            try:
                new_ids.append(await run_in_threadpool(self.storage.retry_dead, dead_id, None))
            except NotFound:
                missing += 1
        if len(ids) == 1 and new_ids:
            return self.redirect(request, f"/jobs/{_quote(new_ids[0])}", replayed=ids[0])
        return self.redirect(request, "/dead", retried=len(new_ids), missing=missing or None)

    def dead_purge_confirm(self, request: Request) -> Response:
        """GET: the confirmation step of a purge, with how many entries it would remove."""
        self._refuse_if_read_only()
        task = request.query_params.get("task") or None
        count, capped = _count_dead(self.storage, task)
        return self.render(
            request,
            "confirm_purge.html",
            {"page": "dead", "task": task, "count": count, "capped": capped},
        )

    async def dead_purge(self, request: Request) -> Response:
        form = await self.mutation_form(request)
        if form.get("confirm") != "yes":
            raise HTTPException(400, "a purge needs the confirmation field confirm=yes")
        task = form.get("task") or None
        if task is not None and not isinstance(task, str):
            raise HTTPException(400, "invalid field 'task'")
        removed = await run_in_threadpool(self.storage.purge_dead, task, None)
        return self.redirect(request, "/dead", purged=removed, task=task)

    def metrics(self, request: Request) -> Response:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)

    def _refuse_if_read_only(self) -> None:
        if self.read_only:
            raise HTTPException(403, "this dashboard is read-only")

    # ------------------------------------------------------------------ errors

    def http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return self.render(
            request,
            "error.html",
            {"page": None, "status": exc.status_code, "message": self.masked(str(exc.detail))},
            status_code=exc.status_code,
        )

    def storage_error(self, request: Request, exc: Exception) -> Response:
        status = 400 if isinstance(exc, ConfigError) else 503
        message = self.masked(f"{type(exc).__name__}: {exc}")
        return self.render(
            request,
            "error.html",
            {"page": None, "status": status, "message": message},
            status_code=status,
        )


def _shorts(ids: Any) -> dict[str, str]:
    """Templates: ``{id: abbreviation}`` for the ids of one listing (they all differ)."""
    return short_ids([str(i) for i in ids])


def _quote(value: str) -> str:
    from urllib.parse import quote

    return quote(value, safe="")


def _parse_state(text: str | None) -> JobState | None:
    if text is None:
        return None
    try:
        return JobState(text)
    except ValueError:
        accepted = ", ".join(s.value for s in JobState)
        raise HTTPException(400, f"invalid state {text!r}: expected one of {accepted}") from None


def _ids(values: list[str]) -> list[str]:
    seen: dict[str, None] = {}
    for v in values:
        v = v.strip()
        if v:
            seen[v] = None
    if len(seen) > MAX_PAGE_SIZE:
        raise HTTPException(400, f"too many entries selected: at most {MAX_PAGE_SIZE} at once")
    return list(seen)


def _count_dead(storage: Storage, task: str | None, cap: int = 100_000) -> tuple[int, bool]:
    count = 0
    while count < cap:
        page = storage.list_dead(1000, count, task)
        count += len(page)
        if len(page) < 1000:
            return count, False
    return count, True


def _pause_flash(request: Request) -> _Flash | None:
    """The flash after a pause or resume button (``?paused=1``): fixed text, never echoed;
    the list of pauses below says which."""
    q = request.query_params
    texts = {
        "paused": "Paused: workers stop claiming its jobs within a second.",
        "resumed": "Resumed: its jobs are claimed again.",
        "unchanged": "Nothing changed: it was already so.",
    }
    key = next((k for k in texts if q.get(k) == "1"), None)
    return None if key is None else _Flash("ok", texts[key])


def _flash_from(request: Request) -> _Flash | None:
    """A message after a redirect, built from numbers and states only (never echoed text)."""
    q = request.query_params
    parts: list[str] = []
    if q.get("retried", "").isdigit():
        n = int(q["retried"])
        parts.append(f"Retried {n} dead-letter {'entry' if n == 1 else 'entries'}.")
    if q.get("missing", "").isdigit():
        n = int(q["missing"])
        parts.append(f"{n} selected {'entry was' if n == 1 else 'entries were'} already gone.")
    if q.get("purged", "").isdigit():
        n = int(q["purged"])
        parts.append(f"Purged {n} dead-letter {'entry' if n == 1 else 'entries'}.")
    if q.get("replayed"):
        parts.append("This job replays a dead-letter entry; it is queued with a fresh budget.")
    cancelled = q.get("cancelled")
    if cancelled in {s.value for s in JobState}:
        parts.append(
            "Cancel requested: the job stops when its worker sees the request."
            if cancelled == JobState.RUNNING.value
            else f"Cancel done: the job is {cancelled}."
        )
    return _Flash("ok", " ".join(parts)) if parts else None


def create_app(
    queue_or_storage: Queue | Storage,
    *,
    token: str | None = None,
    read_only: bool = False,
    auth: AuthHook | None = None,
    secret: bytes | str | None = None,
    metrics_options: dict[str, Any] | None = None,
    refresh_seconds: float = REFRESH_SECONDS,
    allowed_hosts: Sequence[str] | None = None,
) -> Starlette:
    """The web dashboard as an ASGI app (Starlette), to serve or mount.

    Args:
        queue_or_storage: a :class:`~queue_core.Queue` (its serializer decodes arguments
            and results, its registered tasks fill the task filters) or any
            :class:`~queue_core.Storage` (JSON is assumed for decoding).
        token: when set, every request (pages, actions, static files and ``/metrics``)
            must present it (``Authorization: Bearer <token>``, or once ``?token=`` which
            sets a session cookie), else ``401``.
        read_only: hide the retry/purge/cancel actions and refuse them with ``403``.
        auth: ``auth(request) -> bool`` (or awaitable); ``True`` lets a request through.
            With ``token`` as well, either one is enough.
        secret: key that signs CSRF tokens; default random per app (give the same one to
            every process when several serve the same users).
        metrics_options: keyword arguments for :class:`contrib.metrics.StorageCollector`.
        refresh_seconds: how often live pages (queues, jobs, an unfinished job) reload
            their content in the browser (htmx); ``0`` turns live refresh off.
        allowed_hosts: host names the dashboard answers to besides IP addresses,
            ``localhost`` and ``*.localhost`` (``["queues.example.com"]``;
            ``".example.com"`` for a domain and its subdomains; ``["*"]`` for any host,
            when a proxy in front checks ``Host``). A request naming another host gets
            ``400`` (DNS rebinding), a POST whose ``Origin``/``Referer`` is another site
            ``403`` (see :mod:`contrib.dashboard.origin`).

    Mount it in your own app with ``Mount("/queues", app=create_app(queue))``; links
    follow the mount point.

    Raises:
        ConfigError: a bad ``queue_or_storage``, ``token``, ``auth`` or ``allowed_hosts``.
    """
    hosts = check_allowed_hosts(allowed_hosts)
    if token is not None and (not isinstance(token, str) or not token.strip()):
        raise ConfigError(
            "invalid token: expected a non-empty string or None",
            code="invalid_option",
            field="token",
            value="<empty>" if isinstance(token, str) else type(token).__name__,
        )
    if auth is not None and not callable(auth):
        raise ConfigError(
            f"invalid auth: {type(auth).__name__} is not callable -- expected "
            "auth(request) -> bool or None",
            code="invalid_option",
            field="auth",
            value=type(auth).__name__,
        )
    if (
        isinstance(refresh_seconds, bool)
        or not isinstance(refresh_seconds, (int, float))
        or not 0 <= refresh_seconds <= 3600
    ):
        raise ConfigError(
            f"invalid refresh_seconds: {refresh_seconds!r} -- expected a number from 0 to 3600",
            code="invalid_option",
            field="refresh_seconds",
            value=refresh_seconds,
        )
    key = secret.encode("utf-8") if isinstance(secret, str) else secret
    dash = _Dashboard(
        queue_or_storage,
        read_only=bool(read_only),
        secret=key if key else secrets.token_bytes(32),
        metrics_options=metrics_options or {},
        refresh_seconds=refresh_seconds,
    )
    routes = [
        Route("/", dash.queues, name="queues"),
        Route("/jobs", dash.jobs, name="jobs"),
        Route("/jobs/lookup", dash.job_lookup, name="job_lookup"),
        Route("/jobs/{job_id}", dash.job, name="job"),
        Route("/jobs/{job_id}/cancel", dash.job_cancel, methods=["POST"], name="job_cancel"),
        Route("/dead", dash.dead, name="dead"),
        Route("/dead/retry", dash.dead_retry_confirm, methods=["GET"], name="dead_retry_confirm"),
        Route("/dead/retry", dash.dead_retry, methods=["POST"], name="dead_retry"),
        Route("/dead/purge", dash.dead_purge_confirm, methods=["GET"], name="dead_purge_confirm"),
        Route("/dead/purge", dash.dead_purge, methods=["POST"], name="dead_purge"),
        Route("/dead/{dead_id}", dash.dead_entry, name="dead_entry"),
        Route("/metrics", dash.metrics, name="metrics"),
        *flow_routes(dash),
        *pause_routes(dash),
        workers_route(dash),
        Mount(
            "/static",
            app=StaticFiles(packages=[("contrib.dashboard", "static")]),
            name="static",
        ),
    ]
    handlers: dict[Any, Callable[[Request, Exception], Any]] = {
        HTTPException: dash.http_error,
        QueueCoreError: dash.storage_error,
    }
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(HostGuard, allowed_hosts=hosts),
            Middleware(AuthMiddleware, token=token, auth=auth),
        ],
        exception_handlers=handlers,
    )
    app.state.dashboard = dash
    return app
