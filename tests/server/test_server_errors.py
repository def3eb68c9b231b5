"""A server error, should one happen, answers the JSON envelope and keeps the connection.

The fault is real: the samples table is dropped under a running `proctor server`, so reading
samples fails in the database. Before, Starlette's handler answered and then re-raised, uvicorn
logged the error a second time and closed the keep-alive connection, and the client's next
request on it was reset.
"""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from urllib.parse import urlparse

import pytest
from sqlalchemy import create_engine, text

from tests.support.platform import start_platform

pytestmark = pytest.mark.e2e


def test_a_500_keeps_the_connection_and_is_logged_once_with_its_request_id(
    db_url: str, tmp_path: Path
) -> None:
    platform = start_platform(tmp_path, database_url=db_url)
    try:
        with platform.client() as client:
            evaluation_id = client.post("/evaluations/", json={"name": "e"}).json()["id"]
            samples = {"samples": [{"sample_id": "s", "reward": 1.0}]}
            assert client.post(f"/evaluations/{evaluation_id}/samples", json=samples).is_success
        engine = create_engine(db_url)
        with engine.begin() as conn:
            conn.execute(text("DROP TABLE samples"))
        engine.dispose()

        address = urlparse(platform.url)
        conn = http.client.HTTPConnection(address.hostname or "", address.port, timeout=30)
        auth = {"Authorization": f"Bearer {platform.api_key}"}
        conn.request("GET", f"/api/v1/evaluations/{evaluation_id}/samples", headers=auth)
        failed = conn.getresponse()
        body = json.loads(failed.read())
        assert failed.status == 500
        assert failed.getheader("content-type") == "application/json"
        assert failed.getheader("connection") != "close"
        request_id = failed.getheader("x-request-id")
        assert request_id and request_id in body["error"]["message"]
        assert body["error"]["code"] == "internal_error" and body["detail"]
        assert "samples" not in body["error"]["message"]  # no internals in the answer
        socket_before = conn.sock.getsockname() if conn.sock else None

        conn.request("GET", "/healthz")  # the same keep-alive connection
        healthy = conn.getresponse()
        assert healthy.status == 200 and json.loads(healthy.read())["status"] == "ok"
        assert conn.sock is not None and conn.sock.getsockname() == socket_before
        conn.close()
    finally:
        platform.process.stop()
    log = platform.process.output()
    assert log.count(f"request {request_id} failed") == 1, log[-3000:]
    # One log record (its traceback chains the driver's error), not a second one from uvicorn.
    assert log.count(" ERROR ") == 1 and "Exception in ASGI application" not in log
