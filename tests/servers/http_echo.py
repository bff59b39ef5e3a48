"""A real HTTP server on 127.0.0.1 (a random port) for the tests of ``type: http`` flow
steps: it answers what each path asks for and records every request it got.

Paths (the query string is ignored by the routing, kept in the record):

- ``/status/N``: answers status N with a JSON body ``{"status": N}``;
- ``/echo``: answers 200 with the request as JSON (method, path, headers, body);
- ``/text``: answers 200 with ``text/plain`` ``hello``;
- ``/slow/S``: waits S seconds, then answers 200 (the client may be gone by then);
- ``/flaky``: answers 503 unless the query has ``attempt=2`` or more, then echoes;
- ``/big/N``: answers N bytes of ``x``;
- ``/redirect``: answers 302 to ``/echo``.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Seen:
    """One request the server got."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class EchoServer:
    """The running server: its base URL and the requests it got, oldest first."""

    url: str
    requests: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def seen(self) -> list[Seen]:
        with self.lock:
            return list(self.requests)


class _Handler(BaseHTTPRequestHandler):
    state: EchoServer
    protocol_version = "HTTP/1.1"

    def _answer(
        self,
        status: int,
        body: bytes,
        ctype: str = "application/json",
        extra: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        seen = Seen(self.command, self.path, dict(self.headers.items()), body)
        with self.state.lock:
            self.state.requests.append(seen)
        url = urllib.parse.urlsplit(self.path)
        parts = url.path.strip("/").split("/")
        route = getattr(self, f"_route_{parts[0]}", None)
        if route is None or not route(parts, urllib.parse.parse_qs(url.query)):
            echo = {
                "method": seen.method,
                "path": seen.path,
                "headers": seen.headers,
                "body": body.decode("utf-8", "replace"),
            }
            self._answer(200, json.dumps(echo).encode())

    # each route answers, or returns False to let /echo answer
    def _route_status(self, parts: list[str], query: Any) -> bool:
        self._answer(int(parts[1]), json.dumps({"status": int(parts[1])}).encode())
        return True

    def _route_text(self, parts: list[str], query: Any) -> bool:
        self._answer(200, b"hello", "text/plain; charset=utf-8")
        return True

    def _route_slow(self, parts: list[str], query: Any) -> bool:
        time.sleep(float(parts[1]))
        try:
            self._answer(200, b'{"slow": true}')
        except OSError:
            pass  # the client gave up
        return True

    def _route_flaky(self, parts: list[str], query: Any) -> bool:
        if int(query.get("attempt", ["1"])[0]) >= 2:
            return False
        self._answer(503, b'{"error": "try again"}')
        return True

    def _route_big(self, parts: list[str], query: Any) -> bool:
        self._answer(200, b"x" * int(parts[1]), "text/plain")
        return True

    def _route_redirect(self, parts: list[str], query: Any) -> bool:
        self._answer(302, b"", extra={"Location": "/echo"})
        return True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _handle

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def echo_server() -> Iterator[EchoServer]:
    """Serve on 127.0.0.1 (a free port) in a thread until the block ends."""
    state = EchoServer(url="")
    handler = type("Handler", (_Handler,), {"state": state})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, name="echo-server", daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)
