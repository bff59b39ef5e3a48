"""Host and Origin checks of the dashboard: no DNS rebinding, no cross-origin POST.

* **Host.** A page on another site can make a browser send requests to a dashboard on
  ``127.0.0.1`` through a name of its own that it re-points at ``127.0.0.1`` (DNS
  rebinding); the browser then treats the dashboard as that site, so the page can read
  every answer -- the jobs, the CSRF token -- and post actions. Such a request names the
  page's host in ``Host``. So every request must name a host the dashboard answers to:
  an IP address (a page cannot re-point an address), ``localhost`` and its subdomains
  (browsers resolve those to loopback themselves), and the names given in
  ``allowed_hosts`` (``--allowed-host``). Anything else gets ``400``.
* **Origin.** Every POST (the actions) that carries ``Origin`` -- or, without it,
  ``Referer`` -- must come from the dashboard's own origin (the same host and port as
  ``Host``) or from an allowed name; anything else gets ``403``, on top of the CSRF token
  (which a page on the same site, e.g. another local port, could otherwise borrow
  cookies for). A POST with neither header (a script, ``curl``) is judged by the CSRF
  token alone.

The answers are plain text: ``Host`` and ``Origin`` are the requester's, never echoed
into HTML.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from queue_core import ConfigError

__all__ = ["ALWAYS_ALLOWED", "HostGuard", "check_allowed_hosts"]

ALWAYS_ALLOWED = "IP addresses, localhost and *.localhost"
"""The hosts every dashboard answers to, as the refusal message names them."""

_UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def check_allowed_hosts(hosts: Sequence[str] | None) -> tuple[str, ...]:
    """Normalize ``allowed_hosts``: host names (lower case, no port), ``.example.com``
    for a domain and its subdomains, or ``*`` for any host (when a proxy in front checks
    ``Host``).

    Raises:
        ConfigError: ``invalid_option`` for a value that is not such a name (a URL, a
            port, a path, an empty string) or a plain string instead of a list.
    """
    if hosts is None:
        return ()
    if isinstance(hosts, str) or not isinstance(hosts, Sequence):
        raise ConfigError(
            f"invalid allowed_hosts: {hosts!r} -- expected a list of host names, "
            "e.g. ['queues.example.com']",
            code="invalid_option",
            field="allowed_hosts",
            value=repr(hosts),
        )
    out: list[str] = []
    for host in hosts:
        name = host.strip().lower() if isinstance(host, str) else ""
        bare = name.lstrip(".")
        if name != "*" and (not bare or any(c in bare for c in ":/@?# *[]")):
            raise ConfigError(
                f"invalid allowed host {host!r}: expected a host name without scheme or "
                "port ('queues.example.com'), '.example.com' for a domain and its "
                "subdomains, or '*' for any host",
                code="invalid_option",
                field="allowed_hosts",
                value=host,
            )
        out.append(name)
    return tuple(out)


def _split_host(value: str) -> tuple[str, str | None] | None:
    """``(host, port or None)`` of a ``Host`` header value, or ``None`` if it does not
    parse (``[::1]:8080`` -> ``("::1", "8080")``)."""
    try:
        parts = urlsplit(f"//{value}")
        port = parts.port
    except ValueError:
        return None
    host = parts.hostname
    if not host or parts.username is not None or parts.path or parts.query:
        return None
    return host, (None if port is None else str(port))


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class HostGuard:
    """ASGI middleware: the Host and Origin rules of the module docstring."""

    def __init__(self, app: ASGIApp, *, allowed_hosts: Sequence[str] = ()) -> None:
        self.app = app
        self.allowed = tuple(allowed_hosts)
        self.any_host = "*" in self.allowed

    def named(self, host: str) -> bool:
        """Whether ``host`` (lower case, no port) is one of the allowed names."""
        return any(
            host == name or (name.startswith(".") and (host == name[1:] or host.endswith(name)))
            for name in self.allowed
        )

    def answers_to(self, host: str) -> bool:
        """Whether a request naming ``host`` (lower case, no port) is let through."""
        return (
            self.any_host
            or _is_ip(host)
            or host == "localhost"
            or host.endswith(".localhost")
            or self.named(host)
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        refusal = self._refusal(scope, headers)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, message = refusal
        await PlainTextResponse(message + "\n", status_code=status)(scope, receive, send)

    def _refusal(self, scope: Scope, headers: Headers) -> tuple[int, str] | None:
        raw = headers.get("host", "")
        own = _split_host(raw)
        if own is None or not self.answers_to(own[0]):
            return 400, self._host_message(raw)
        if scope.get("method") not in _UNSAFE_METHODS:
            return None
        origin = headers.get("origin")
        source = "Origin" if origin is not None else "Referer"
        value = origin if origin is not None else headers.get("referer")
        if value is None or self._same_origin(value, own):
            return None
        return 403, (
            f"403 Forbidden: cross-origin {scope.get('method')} refused. Its {source} "
            f"{value!r} is not this dashboard ({raw}): actions are accepted only from the "
            "dashboard's own pages. Behind a proxy that changes the Host header, start "
            "the dashboard with --allowed-host NAME (create_app(allowed_hosts=[NAME])) "
            "for the name its users open."
        )

    def _same_origin(self, value: str, own: tuple[str, str | None]) -> bool:
        try:
            parts = urlsplit(value)
            port = parts.port
        except ValueError:
            return False
        host = parts.hostname
        if not host or parts.scheme not in ("http", "https"):
            return False  # "null" (a sandboxed frame, a data: URL) or garbage
        if self.any_host or self.named(host):
            return True
        return (host, None if port is None else str(port)) == own

    def _host_message(self, raw: str) -> str:
        names = ", ".join(self.allowed)
        return (
            f"400 Bad Request: this queue-core dashboard does not answer to host {raw!r}. "
            "A request naming another host may come from a web page that re-pointed its "
            "own name at this machine (DNS rebinding), so it is refused. The dashboard "
            f"answers to {ALWAYS_ALLOWED}"
            + (f" and {names}" if names else "")
            + ". If it is served under that name, start it with --allowed-host NAME "
            "(create_app(allowed_hosts=[NAME]))."
        )
