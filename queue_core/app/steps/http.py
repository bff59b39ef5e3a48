"""Running a ``type: http`` step: one HTTP request per attempt, with httpx (SPEC §7).

- ``method`` (default ``GET``) to ``url`` with ``headers``; ``body`` is sent as text
  when it is a string (``text/plain; charset=utf-8`` unless a ``Content-Type`` header
  says otherwise), as JSON when it is a mapping, a list, a number or a boolean, and not
  at all when it is ``None``.
- A response whose status is in ``expect`` (default: any 2xx) succeeds; its result is the
  body parsed as JSON, else its text, read up to ``body_cap`` bytes (the rest is not
  read). Any other status raises :class:`HttpStatusError` (attempt reason
  ``http_status``, the status and the start of the body in the message), retried by the
  flow's policy.
- Redirects are not followed (a 3xx is a status like any other: list it in ``expect`` to
  accept it). A request that fails (connection refused, reset, a bad URL) raises
  :class:`HttpRequestFailed` (reason ``error``), retried by the policy.
- No time limit of its own: the caller bounds the request (the worker cancels it at the
  step's ``timeout``, and the attempt ends ``timed_out`` with reason ``timeout``).

httpx (the ``flows`` extra) is imported on first use.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from queue_core.app.steps.failures import StepFailed
from queue_core.records.errors import ConfigError
from queue_core.rules.flows.spec import HTTP_METHODS

__all__ = [
    "BODY_CAP",
    "METHODS",
    "HttpCall",
    "HttpRequestFailed",
    "HttpStatusError",
    "expected",
    "run_http",
]

BODY_CAP: Final = 1024 * 1024
"""Bytes of a response body kept as the result; the rest is not read."""
METHODS: Final = HTTP_METHODS
"""The methods an http step may use."""
_SHOWN: Final = 500
"""Characters of a response body quoted in an :class:`HttpStatusError`."""


class HttpStatusError(StepFailed):
    """The response's status is outside the step's ``expect`` (reason ``http_status``).

    Attributes:
        status: the response's status code.
    """

    reason = "http_status"

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class HttpRequestFailed(StepFailed):
    """The request got no response: connection refused or reset, a bad URL, a protocol
    error (reason ``error``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpCall:
    """One attempt of an http step, its templates already rendered."""

    url: str
    method: str = "GET"
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Any = None
    """A string is sent as text, other data as JSON; ``None``: no body."""
    expect: tuple[int, ...] = ()
    """Accepted statuses; empty: any 2xx."""
    body_cap: int = BODY_CAP


def expected(expect: tuple[int, ...]) -> str:
    """``expect`` in words: ``any 2xx`` or ``200, 204``."""
    return ", ".join(str(s) for s in expect) if expect else "any 2xx"


def _accepts(expect: tuple[int, ...], status: int) -> bool:
    return status in expect if expect else 200 <= status < 300


def parse_body(data: bytes, encoding: str | None) -> Any:
    """A response's result: the body parsed as JSON, else its text."""
    text = data.decode(encoding or "utf-8", "replace")
    try:
        return json.loads(text)
    except ValueError:
        return text


class _MaskSecrets(logging.Filter):
    """Masks the worker's secrets in the records of the ``httpx`` logger (its INFO line
    names each request's URL, which a template may have filled with a secret)."""

    def filter(self, record: logging.LogRecord) -> bool:
        from queue_core.app.steps.templates import Masker, secrets_from_env

        masker = Masker(secrets_from_env().values())
        if masker:
            message = record.getMessage()
            if masker.found_in(message):
                record.msg, record.args = masker.text(message), ()
        return True


_LOG_MASK = _MaskSecrets()


def _imports() -> Any:
    logger = logging.getLogger("httpx")
    if _LOG_MASK not in logger.filters:
        logger.addFilter(_LOG_MASK)
    try:
        import httpx
    except ImportError as exc:
        raise ConfigError(
            f"http steps need httpx ({exc.name} is missing) — install the extra: "
            "pip install 'queue-core[flows]'",
            code="missing_driver",
            value=exc.name,
        ) from None
    return httpx


def _request_args(call: HttpCall) -> dict[str, Any]:
    headers = dict(call.headers)
    args: dict[str, Any] = {"headers": headers}
    if call.body is None:
        return args
    if isinstance(call.body, str):
        if not any(k.lower() == "content-type" for k in headers):
            headers["Content-Type"] = "text/plain; charset=utf-8"
        args["content"] = call.body.encode("utf-8")
    else:
        args["json"] = call.body
    return args


async def run_http(call: HttpCall, *, allow: Callable[[str, str], None] | None = None) -> Any:
    """Send the request of one attempt and return its result.

    Args:
        call: the request.
        allow: called with the URL's scheme and host (as httpx parsed them, the host it
            will connect to) before anything is sent; it raises to refuse.

    Raises:
        HttpStatusError: the status is outside ``call.expect``.
        HttpRequestFailed: no response (connection refused, a bad URL, …).
    """
    httpx = _imports()
    try:
        url = httpx.URL(call.url)
    except (httpx.InvalidURL, TypeError) as exc:
        raise HttpRequestFailed(f"{call.method} {call.url}: invalid URL: {exc}") from None
    if allow is not None:
        allow(url.scheme, url.host)
    where = f"{call.method} {call.url}"
    try:
        async with httpx.AsyncClient(follow_redirects=False, timeout=None) as client:
            request = client.build_request(call.method, url, **_request_args(call))
            response = await client.send(request, stream=True)
            try:
                data = await _read(response, call.body_cap)
            finally:
                await response.aclose()
    except httpx.HTTPError as exc:
        raise HttpRequestFailed(f"{where} failed: {type(exc).__name__}: {exc}") from None
    result = parse_body(data, response.encoding)
    status = response.status_code
    if not _accepts(call.expect, status):
        shown = data[: _SHOWN * 4].decode(response.encoding or "utf-8", "replace")[:_SHOWN]
        raise HttpStatusError(
            f"{where} answered {status} {response.reason_phrase} "
            f"(expected {expected(call.expect)})" + (f": {shown.strip()}" if shown.strip() else ""),
            status=status,
        )
    return result


async def _read(response: Any, cap: int) -> bytes:
    data = bytearray()
    async for chunk in response.aiter_bytes():
        data.extend(chunk)
        if len(data) >= cap:
            del data[cap:]
            break
    return bytes(data)
