"""Forged clicks in a real browser: a page on another port of the same host (same site,
another origin) posting the dashboard's forms, and a cookie replayed after sign-out."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from playwright.sync_api import Browser, expect

from tests.web.conftest import SeededPlatform, signed_in

pytestmark = pytest.mark.browser


class _Attacker:
    """Serves one page that posts a form to the dashboard as soon as it loads."""

    def __init__(self) -> None:
        self.page = b""
        handler = self._handler()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        attacker = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(attacker.page)))
                self.end_headers()
                self.wfile.write(attacker.page)

            def log_message(self, *args: object) -> None:
                pass

        return Handler

    def posting(self, action: str, fields: dict[str, str]) -> str:
        inputs = "".join(f'<input type="hidden" name="{k}" value="{v}">' for k, v in fields.items())
        self.page = (
            f'<!doctype html><html><body><form id="f" method="post" action="{action}">'
            f"{inputs}</form><script>document.getElementById('f').submit()</script>"
            "</body></html>"
        ).encode()
        return self.url


@pytest.fixture
def attacker() -> Iterator[_Attacker]:
    served = _Attacker()
    thread = threading.Thread(target=served.server.serve_forever, daemon=True)
    thread.start()
    yield served
    served.server.shutdown()
    served.server.server_close()
    thread.join(timeout=10)


def test_a_page_on_another_port_cannot_sign_out_or_sign_in_the_browser(
    seeded_platform: SeededPlatform, browser: Browser, attacker: _Attacker
) -> None:
    platform, alice = seeded_platform.platform, seeded_platform.alice_key
    page = signed_in(browser, platform, alice)
    # The attacker's page (same host, another port: same site, so Lax cookies go along).
    page.goto(attacker.posting(f"{platform.url}/logout", {}))
    expect(page.locator("body")).to_contain_text("another site or port")
    page.goto(f"{platform.url}/evaluations")
    expect(page).to_have_url(f"{platform.url}/evaluations")  # still signed in
    page.context.close()

    # Login CSRF: a fresh browser must not be signed in with the attacker's key.
    context = browser.new_context()
    victim = context.new_page()
    victim.goto(attacker.posting(f"{platform.url}/login", {"api_key": alice, "next": "/"}))
    expect(victim.locator("body")).to_contain_text("another site or port")
    assert not [c for c in context.cookies() if c["name"] == "proctor_session"]
    context.close()


def test_a_cookie_copied_before_sign_out_is_refused_after_it(
    seeded_platform: SeededPlatform, browser: Browser
) -> None:
    platform, alice = seeded_platform.platform, seeded_platform.alice_key
    page = signed_in(browser, platform, alice)
    copied = [c for c in page.context.cookies() if c["name"] == "proctor_session"]
    assert copied
    page.click("header.top button")
    expect(page).to_have_url(f"{platform.url}/login")
    page.context.add_cookies(copied)  # the thief's copy
    page.goto(f"{platform.url}/evaluations")
    expect(page).to_have_url(f"{platform.url}/login?next=%2Fevaluations")
    page.context.close()
