"""The dashboard's Host and Origin rules (contrib/dashboard/origin.py) over raw HTTP: a
live uvicorn server and requests written byte by byte, as ``curl -H 'Host: ...'`` sends
them -- a foreign ``Host`` (DNS rebinding) gets 400, a POST from another origin 403."""

from __future__ import annotations

import re
import socket
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest

from contrib.dashboard import create_app
from contrib.dashboard.security import CSRF_COOKIE
from queue_core import ConfigError
from tests.contrib.dashboard.conftest import Populated, local_client


def raw(base: str, method: str, path: str, headers: dict[str, str], body: str = "") -> Any:
    """Send one HTTP/1.1 request exactly as given (no header added but Content-Length
    and Connection); return ``(status, headers, body)``."""
    port = urlsplit(base).port
    assert port is not None
    lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.items())]
    lines += [f"Content-Length: {len(body.encode())}", "Connection: close", "", body]
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall("\r\n".join(lines).encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, payload = data.decode("utf-8", "replace").partition("\r\n\r\n")
    status_line, *header_lines = head.split("\r\n")
    answer = {}
    for line in header_lines:
        key, _, value = line.partition(":")
        answer.setdefault(key.strip().lower(), []).append(value.strip())
    return int(status_line.split()[1]), answer, payload


def token_and_cookie(base: str, host: str) -> tuple[str, str]:
    """The CSRF form token and cookie of the purge confirmation page, asked with ``host``."""
    status, headers, body = raw(base, "GET", "/dead/purge", {"Host": host})
    assert status == 200, body
    token = re.search(r'name="csrf_token" value="([^"]+)"', body)
    assert token is not None
    cookie = next(c for c in headers["set-cookie"] if c.startswith(CSRF_COOKIE))
    return token.group(1), cookie.split(";")[0]


def purge(base: str, host: str, cookie: str, token: str, **headers: str) -> Any:
    form = urlencode({"csrf_token": token, "confirm": "yes"})
    sent = {"Host": host, "Cookie": cookie,
            "Content-Type": "application/x-www-form-urlencoded", **headers}  # fmt: skip
    return raw(base, "POST", "/dead/purge", sent, form)


def test_a_foreign_host_is_refused_even_with_a_valid_csrf_token(
    populated: Populated, serve: Callable[[Any], str]
) -> None:
    """The issue's probe: ``curl -H 'Host: evil.example'`` purge POST was answered 303
    ``purged=5``. The page of a rebinding attacker reads the token, then posts."""
    base = serve(create_app(populated.queue))
    port = urlsplit(base).port
    storage = populated.queue.storage()
    evil = f"evil.example:{port}"
    status, _, body = raw(base, "GET", "/dead/purge", {"Host": evil})
    assert status == 400
    assert "does not answer to host 'evil.example:" in body and "DNS rebinding" in body
    assert "--allowed-host" in body and "csrf_token" not in body
    # even holding a token (taken through a host it answers to), the foreign host is refused
    token, cookie = token_and_cookie(base, f"127.0.0.1:{port}")
    status, _, body = purge(base, evil, cookie, token, Origin=f"http://{evil}")
    assert status == 400, body
    status, _, _ = purge(base, "evil.example", cookie, token)
    assert status == 400
    for path in ("/", "/jobs", "/metrics", "/static/htmx.min.js", "/flows", "/workers"):
        assert raw(base, "GET", path, {"Host": evil})[0] == 400, path
    assert raw(base, "GET", "/", {})[0] == 400  # no Host at all (HTTP/1.0 style)
    assert len(storage.list_dead(100)) == 3


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://evil.example"},
        {"Origin": "http://127.0.0.1:1"},  # another port of the same machine
        {"Origin": "null"},  # a sandboxed frame or a data: URL
        {"Referer": "http://evil.example/attack.html"},
        {"Origin": "https://localhost"},
    ],
    ids=["evil", "other-port", "null", "referer-only", "other-host"],
)
def test_a_post_from_another_origin_is_refused(
    populated: Populated, serve: Callable[[Any], str], headers: dict[str, str]
) -> None:
    base = serve(create_app(populated.queue))
    host = f"127.0.0.1:{urlsplit(base).port}"
    token, cookie = token_and_cookie(base, host)
    status, _, body = purge(base, host, cookie, token, **headers)
    assert status == 403, body
    assert "cross-origin POST refused" in body
    assert len(populated.queue.storage().list_dead(100)) == 3


@pytest.mark.parametrize("same", ["origin", "referer", "neither"])
def test_a_post_from_the_dashboard_itself_or_a_script_goes_through(
    populated: Populated, serve: Callable[[Any], str], same: str
) -> None:
    base = serve(create_app(populated.queue))
    host = f"127.0.0.1:{urlsplit(base).port}"
    token, cookie = token_and_cookie(base, host)
    extra = {"origin": {"Origin": f"http://{host}"},
             "referer": {"Referer": f"http://{host}/dead/purge"}, "neither": {}}[same]  # fmt: skip
    status, headers, body = purge(base, host, cookie, token, **extra)
    assert status == 303, body
    assert "purged=3" in headers["location"][0]
    assert populated.queue.storage().list_dead(100) == []


@pytest.mark.parametrize(
    ("allowed", "host", "status"),
    [
        (None, "localhost", 200),
        (None, "app.localhost:8080", 200),
        (None, "127.0.0.1:8080", 200),
        (None, "[::1]:8080", 200),
        (None, "10.1.2.3", 200),  # an address cannot be re-pointed
        (None, "queues.example.com", 400),
        (None, "localhost.evil.example", 400),
        (None, "127.0.0.1.nip.io", 400),
        (None, "user@localhost", 400),
        (None, "", 400),
        (["queues.example.com"], "queues.example.com", 200),
        (["queues.example.com"], "Queues.Example.COM:443", 200),
        (["queues.example.com"], "other.example.com", 400),
        ([".example.com"], "a.b.example.com", 200),
        ([".example.com"], "example.com", 200),
        ([".example.com"], "badexample.com", 400),
        (["*"], "anything.example", 200),
    ],
)
def test_which_hosts_the_dashboard_answers_to(
    populated: Populated, allowed: list[str] | None, host: str, status: int
) -> None:
    client = local_client(create_app(populated.queue, allowed_hosts=allowed))
    response = client.get("/", headers={"Host": host})
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(
        "text/html" if status == 200 else "text/plain"
    )


def test_an_allowed_name_may_post_from_its_own_origin_behind_a_proxy(
    populated: Populated,
) -> None:
    """A proxy that rewrites Host to the upstream address: the browser's Origin names the
    public name, which is allowed."""
    client = local_client(create_app(populated.queue, allowed_hosts=["queues.example.com"]))
    page = client.get("/dead/purge")
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert token is not None
    form = {"csrf_token": token.group(1), "confirm": "yes"}
    headers = {"Host": "127.0.0.1:8080", "Origin": "https://evil.example.com"}
    assert client.post("/dead/purge", data=form, headers=headers).status_code == 403
    headers["Origin"] = "https://queues.example.com"
    done = client.post("/dead/purge", data=form, headers=headers, follow_redirects=False)
    assert done.status_code == 303


@pytest.mark.parametrize(
    "allowed",
    ["queues.example.com", ["http://queues.example.com"], ["queues.example.com:8080"],
     [""], ["a/b"], [42], ["user@host"]],
)  # fmt: skip
def test_bad_allowed_hosts_are_a_config_error(populated: Populated, allowed: Any) -> None:
    with pytest.raises(ConfigError) as info:
        create_app(populated.queue, allowed_hosts=allowed)
    assert info.value.code == "invalid_option"
    assert info.value.field == "allowed_hosts"
