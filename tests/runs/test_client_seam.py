"""`PlatformClient(..., http=...)` sends through the HTTP client it is given."""

from __future__ import annotations

import http.server
import threading

import httpx
import pytest

from proctor.errors import APIError, PlatformUnreachable
from proctor.runs import PlatformClient


def test_requests_go_through_the_given_client_with_the_key() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path.endswith("/missing"):
            return httpx.Response(404, json={"error": {"code": "not_found", "message": "no"}})
        return httpx.Response(200, json={"ok": True})

    http = httpx.Client(transport=httpx.MockTransport(answer))
    client = PlatformClient("http://platform.test", "pk-seam", http=http)

    assert client.request("GET", "/evaluations/e1") == {"ok": True}
    assert client.request("POST", "/evaluations/e1/samples", content=b'{"samples":[]}') == {
        "ok": True
    }
    with pytest.raises(APIError) as caught:
        client.request("GET", "/missing")
    assert caught.value.status_code == 404 and caught.value.code == "not_found"

    assert [str(r.url) for r in seen[:2]] == [
        "http://platform.test/api/v1/evaluations/e1",
        "http://platform.test/api/v1/evaluations/e1/samples",
    ]
    assert all(r.headers["authorization"] == "Bearer pk-seam" for r in seen)
    assert seen[1].headers["content-type"] == "application/json"
    client.close()
    assert not http.is_closed  # the caller's client stays open
    http.close()


def test_https_to_a_plain_http_platform_names_the_scheme() -> None:
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    client = PlatformClient(f"https://127.0.0.1:{port}", "pk-test")
    try:
        with pytest.raises(PlatformUnreachable) as caught:
            client.request("GET", "/evaluations")
    finally:
        client.close()
        server.shutdown()
    assert f"answered in plain HTTP, not TLS; use http://127.0.0.1:{port} instead" in str(
        caught.value
    )
