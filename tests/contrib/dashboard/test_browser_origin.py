"""The Host and Origin rules in a real headless Chromium (Playwright): a page that
re-points its own name at the dashboard (DNS rebinding, played by Chromium's
``--host-resolver-rules``: ``evil.example`` resolves to 127.0.0.1) and a page of another
origin on the same machine that posts a purge form carrying a stolen CSRF token."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Route

from contrib.dashboard import create_app
from tests.contrib.dashboard.conftest import CHROMIUM, CHROMIUM_ARGS, Populated


@pytest.fixture(scope="module")
def rebinding_browser(browser: Any) -> Iterator[Any]:
    """A second Chromium (from the same Playwright) in which ``evil.example`` resolves to
    127.0.0.1 -- what an attacker's DNS answers once its page has loaded (no query
    leaves the machine)."""
    rules = "--host-resolver-rules=MAP evil.example 127.0.0.1, EXCLUDE localhost"
    rebound = browser.browser_type.launch(
        executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, rules], headless=True
    )
    try:
        yield rebound
    finally:
        rebound.close()


def test_a_rebound_name_gets_400_and_cannot_purge(
    populated: Populated, serve: Callable[[Any], str], rebinding_browser: Any
) -> None:
    base = serve(create_app(populated.queue))
    port = urlsplit(base).port
    storage = populated.queue.storage()
    context = rebinding_browser.new_context()
    try:
        page = context.new_page()
        # the attacker's page, now at "its" origin evil.example:port, opens the purge form
        response = page.goto(f"http://evil.example:{port}/dead/purge")
        assert response is not None and response.status == 400
        text = page.locator("body").inner_text()
        assert "does not answer to host 'evil.example:" in text and "DNS rebinding" in text
        assert page.locator("#confirm").count() == 0
        # and a script of that page reading the dead letters gets the refusal, not the data
        read = page.evaluate("fetch('/dead').then(r => r.status)")
        assert read == 400
        # the same browser on the dashboard's own address works
        assert page.goto(base + "/dead").status == 200
        assert page.locator("#dead tbody tr").count() == 3
    finally:
        context.close()
    assert len(storage.list_dead(100)) == 3


def test_a_form_posted_from_another_origin_is_refused(
    populated: Populated, serve: Callable[[Any], str], page: Any
) -> None:
    """A page on another port of the same machine (same site: the browser sends the
    SameSite=Strict cookies along) posts a purge with the CSRF token it somehow got."""
    base = serve(create_app(populated.queue))
    storage = populated.queue.storage()
    page.goto(base + "/dead/purge")  # the operator's browser holds the CSRF cookie
    token = page.locator("input[name=csrf_token]").first.get_attribute("value")
    assert token

    attack = f"""<!doctype html><html><body>
    <form id="f" method="post" action="{base}/dead/purge">
      <input name="csrf_token" value="{token}"><input name="confirm" value="yes">
    </form><script>document.getElementById('f').submit()</script></body></html>"""
    attacker = serve(Starlette(routes=[Route("/", lambda _: HTMLResponse(attack))]))
    assert urlsplit(attacker).port != urlsplit(base).port
    with page.expect_navigation(url=re.compile(r"/dead/purge$")) as nav:
        page.goto(attacker + "/")
    answer = nav.value
    assert answer is not None and answer.status == 403
    assert "cross-origin POST refused" in page.locator("body").inner_text()
    assert len(storage.list_dead(100)) == 3
    # the dashboard's own confirmation page still purges
    page.goto(base + "/dead/purge")
    page.click("#confirm")
    page.wait_for_url(re.compile(r"/dead\?purged=3"))
    assert storage.list_dead(100) == []
