"""Access rules of the dashboard: an optional token or auth hook, and CSRF tokens.

* **Token** (``create_app(token=...)``): every request must present it, as a header
  ``Authorization: Bearer <token>``, or once as ``?token=<token>`` -- which answers with a
  redirect to the same page without the token in the URL and a session cookie (HttpOnly,
  SameSite=Strict) holding an HMAC of the token, never the token itself. Anything else
  gets ``401``. The server's access log shows ``?token=***``, right or wrong.
* **Auth hook** (``create_app(auth=...)``): a callable receiving the Starlette
  ``Request`` and returning (or awaiting to) ``True`` to let it through. With both a token
  and a hook, either one is enough.
* **CSRF**: every mutation is a POST that must carry a signed double-submit token: the
  cookie ``qc_dashboard_csrf`` holds ``nonce.signature`` (HMAC-SHA256 with the app's
  secret), and the form field ``csrf_token`` (or header ``X-CSRF-Token``) must repeat it.
  A missing, unsigned or mismatched token gets ``403``.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import secrets
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qsl, urlencode

from starlette.datastructures import URL
from starlette.requests import HTTPConnection, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = [
    "CSRF_COOKIE",
    "CSRF_FIELD",
    "CSRF_HEADER",
    "SESSION_COOKIE",
    "AuthHook",
    "AuthMiddleware",
    "Csrf",
    "cookie_path",
]

SESSION_COOKIE = "qc_dashboard_session"
CSRF_COOKIE = "qc_dashboard_csrf"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"

AuthHook = Callable[[Request], "bool | Awaitable[bool]"]
"""``auth(request) -> bool`` (or an awaitable of it): ``True`` lets the request through."""

_UNAUTHORIZED_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>401 - queue-core dashboard</title></head>
<body style="font-family: sans-serif; margin: 3rem;">
<h1>401 Unauthorized</h1>
<p>This queue-core dashboard needs a token. Open it once with <code>?token=&lt;token&gt;</code>
in the address, or send the header <code>Authorization: Bearer &lt;token&gt;</code>.</p>
</body></html>
"""


def cookie_path(scope: Scope) -> str:
    """The cookie path: the mount point of the dashboard (``/`` at the root)."""
    root = str(scope.get("root_path") or "").rstrip("/")
    return root + "/"


def _session_value(token: str) -> str:
    return hmac.new(
        token.encode("utf-8"), b"queue-core dashboard session", hashlib.sha256
    ).hexdigest()


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("utf-8"), b.encode("utf-8"))


def _hide_token(scope: Scope) -> None:
    """Replace the value of ``?token=`` in the request's query string with ``***``, in
    the scope itself: the server's access log (uvicorn, hypercorn) writes the path and
    query string of this scope when the answer starts, so the token never reaches it.
    The request was already read into ``HTTPConnection`` objects that keep the original."""
    pairs = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
    hidden = [(k, "***" if k == "token" else v) for k, v in pairs]
    scope["query_string"] = urlencode(hidden, safe="*").encode("latin-1")


class AuthMiddleware:
    """ASGI middleware: lets a request through only with the token or the auth hook."""

    def __init__(self, app: ASGIApp, *, token: str | None, auth: AuthHook | None) -> None:
        self.app = app
        self.token = token
        self.auth = auth
        self._session = _session_value(token) if token is not None else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or (self.token is None and self.auth is None):
            await self.app(scope, receive, send)
            return
        conn = HTTPConnection(scope)
        given = conn.query_params.get("token") if self.token is not None else None
        if given is not None:
            _hide_token(scope)
        if self.token is not None:
            if self._bearer_ok(conn) or self._cookie_ok(conn):
                await self.app(scope, receive, send)
                return
            if given is not None and _same(given, self.token):
                if scope["type"] == "http" and scope.get("method") in ("GET", "HEAD"):
                    await self._set_session(conn)(scope, receive, send)
                else:
                    await self.app(scope, receive, send)
                return
        if self.auth is not None and await self._hook_ok(scope, receive):
            await self.app(scope, receive, send)
            return
        response = HTMLResponse(_UNAUTHORIZED_PAGE, status_code=401)
        response.headers["WWW-Authenticate"] = 'Bearer realm="queue-core dashboard"'
        await response(scope, receive, send)

    def _bearer_ok(self, conn: HTTPConnection) -> bool:
        assert self.token is not None
        header = conn.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        return scheme.lower() == "bearer" and _same(value.strip(), self.token)

    def _cookie_ok(self, conn: HTTPConnection) -> bool:
        assert self._session is not None
        value = conn.cookies.get(SESSION_COOKIE)
        return value is not None and _same(value, self._session)

    async def _hook_ok(self, scope: Scope, receive: Receive) -> bool:
        assert self.auth is not None
        verdict = self.auth(Request(scope, receive))
        if inspect.isawaitable(verdict):
            verdict = await verdict
        return verdict is True

    def _set_session(self, conn: HTTPConnection) -> Response:
        """Redirect to the same URL without ``token`` and set the session cookie."""
        assert self._session is not None
        query = [(k, v) for k, v in conn.query_params.multi_items() if k != "token"]
        url: URL = conn.url.replace(query=urlencode(query))
        # one leading slash: "//host/..." would be a redirect to another site
        path = "/" + url.path.lstrip("/")
        response = RedirectResponse(path + (f"?{url.query}" if url.query else ""), 303)
        response.set_cookie(
            SESSION_COOKIE,
            self._session,
            path=cookie_path(conn.scope),
            httponly=True,
            samesite="strict",
            secure=conn.url.scheme == "https",
        )
        return response


class Csrf:
    """Signed double-submit CSRF tokens (``nonce.hmac(secret, nonce)``)."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def _sign(self, nonce: str) -> str:
        return hmac.new(self._secret, nonce.encode("ascii"), hashlib.sha256).hexdigest()

    def new_token(self) -> str:
        nonce = secrets.token_urlsafe(24)
        return f"{nonce}.{self._sign(nonce)}"

    def is_signed(self, value: str | None) -> bool:
        """``True`` when ``value`` is a token this app signed."""
        if not value or value.count(".") != 1:
            return False
        nonce, sig = value.split(".")
        try:
            nonce.encode("ascii")
        except UnicodeEncodeError:
            return False
        return _same(sig, self._sign(nonce))

    def token_for(self, request: Request) -> tuple[str, bool]:
        """The request's CSRF token and whether it is new (then the cookie must be set)."""
        current = request.cookies.get(CSRF_COOKIE)
        if self.is_signed(current):
            assert current is not None
            return current, False
        return self.new_token(), True

    def set_cookie(self, response: Response, request: Request, token: str) -> None:
        response.set_cookie(
            CSRF_COOKIE,
            token,
            path=cookie_path(request.scope),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )

    def check(self, request: Request, submitted: str | None) -> bool:
        """``True`` when the cookie is signed and the submitted token repeats it."""
        cookie = request.cookies.get(CSRF_COOKIE)
        if not self.is_signed(cookie) or not submitted:
            return False
        assert cookie is not None
        return _same(cookie, submitted)
