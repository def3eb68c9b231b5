"""The dashboard's guard against forged requests, and no caching of its pages.

Every state-changing request (POST, PUT, PATCH, DELETE) to a path outside the API — sign-in,
sign-out, cancel, and any form added later — must come from the dashboard itself:

- a `Sec-Fetch-Site` header, when the browser sends one, must be `same-origin` (or `none`, a
  request the user made directly). `same-site` is refused: a page on another port of the same
  host is same-site but another origin, and may be someone else's;
- otherwise an `Origin` header, when sent, must be the host the request was addressed to (or
  the configured public URL); `null` is refused;
- a request with neither comes from no browser made since 2020 (every one sends `Origin` on
  a POST), so it cannot have been forged by a page; it is let through, as curl's are.

This is OWASP's "verifying origin with standard headers" defence; it covers login CSRF too
(the sign-in form is guarded like every other), and needs no token in the forms. The API
(`/api/v1`) is left alone: it authenticates with a bearer key that a browser never attaches
on its own.

Every page answer also gets `Cache-Control: no-store` (unless it set its own caching, as the
static files do), so a signed-in page is never kept by the browser or a proxy.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proctor.server.errors import error_body
from proctor.server.settings import Settings

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
ALLOWED_FETCH_SITES = frozenset({"same-origin", "none"})
REFUSAL = (
    "This request came from another site or port, not from the dashboard; "
    "open the dashboard itself and submit the form there."
)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value.decode("latin-1")).strip()
    return None


def _netloc(url: str) -> str:
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    default = {"http": 80, "https": 443}.get(parts.scheme)
    port = parts.port
    if ":" in host:
        host = f"[{host}]"
    return host if port is None or port == default else f"{host}:{port}"


def forged(scope: Scope, settings: Settings) -> bool:
    """Whether a state-changing request to the dashboard came from another origin."""
    fetch_site = _header(scope, b"sec-fetch-site")
    if fetch_site is not None:
        return fetch_site.lower() not in ALLOWED_FETCH_SITES
    origin = _header(scope, b"origin")
    if origin is None:
        return False
    if origin == "null" or not origin.startswith(("http://", "https://")):
        return True
    claimed = _netloc(origin)
    host = _header(scope, b"host")
    scheme = str(scope.get("scheme", "http"))
    if host is not None and claimed == _netloc(f"{scheme}://{host}"):
        return False
    return not (settings.public_url and claimed == _netloc(settings.resolved_public_url()))


class DashboardGuard:
    """ASGI middleware: refuses forged state changes and marks page answers `no-store`."""

    def __init__(self, app: ASGIApp, settings: Settings, api_prefix: str) -> None:
        self.app = app
        self.settings = settings
        self.api_prefix = api_prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope["type"] != "http" or path.startswith(self.api_prefix):
            await self.app(scope, receive, send)
            return
        if scope.get("method") in UNSAFE_METHODS and forged(scope, self.settings):
            await _refuse(scope, send)
            return

        async def send_no_store(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                if not any(key.lower() == b"cache-control" for key, _ in headers):
                    headers.append((b"cache-control", b"no-store"))
                    message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_no_store)


async def _refuse(scope: Scope, send: Send) -> None:
    accept = _header(scope, b"accept") or ""
    if "text/html" in accept:
        body = (
            '<!doctype html><html lang="en"><head><meta charset="utf-8">'
            "<title>Refused · proctor</title></head><body><main><h1>Refused</h1>"
            f"<p>{REFUSAL}</p></main></body></html>"
        ).encode()
        content_type = b"text/html; charset=utf-8"
    else:
        body = json.dumps(error_body("cross_site_request", REFUSAL)).encode()
        content_type = b"application/json"
    await send(
        {
            "type": "http.response.start",
            "status": 403,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
