"""An attach rides out a platform that is down for a moment (a server restarting under a
launcher's shard), and fails in one sentence once `ATTACH_WAIT_S` has passed."""

from __future__ import annotations

import httpx
import pytest

from proctor.errors import AttachError
from proctor.runs import PlatformClient, _evaluations
from proctor.runs._evaluations import check_attachable


def _platform(down_for: int) -> tuple[PlatformClient, list[str]]:
    """A client whose platform refuses the first `down_for` connections, then answers."""
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        if len(seen) <= down_for:
            raise httpx.ConnectError("connection refused", request=request)
        if request.method == "GET":
            return httpx.Response(200, json={"evaluation_id": "e1", "status": "RUNNING"})
        return httpx.Response(200, json={"accepted": 0})

    http = httpx.Client(transport=httpx.MockTransport(answer))
    return PlatformClient("http://platform.test", "pk-attach", http=http), seen


def test_an_attach_rides_out_a_platform_restart() -> None:
    client, seen = _platform(down_for=2)
    record = check_attachable(client, "e1")
    assert record["status"] == "RUNNING"
    get, post = "GET /api/v1/evaluations/e1", "POST /api/v1/evaluations/e1/samples"
    assert seen == [get, get, get, post]


def test_an_attach_fails_once_the_platform_stays_down(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_evaluations, "ATTACH_WAIT_S", 0.3)
    client, seen = _platform(down_for=1_000_000)
    with pytest.raises(AttachError) as caught:
        check_attachable(client, "e1")
    assert str(caught.value) == (
        "cannot attach to evaluation e1: the platform at http://platform.test is unreachable; "
        "check PROCTOR_API_URL and that the server is up"
    )
    assert len(seen) >= 2  # tried again before giving up
