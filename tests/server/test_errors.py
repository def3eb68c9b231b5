"""Bad input answers a 4xx JSON envelope; unexpected failures answer 500 without a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from proctor.server.app import create_app
from tests.server.conftest import Api, make_settings


def assert_envelope(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert set(body) == {"error", "detail"}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    if code is not None:
        assert body["error"]["code"] == code
    return body


@pytest.mark.parametrize(
    "body",
    [b"{not json", b'{"name": "x",}', b'"a string"', b"[1, 2]", b"\xff\xfe", b'{"name": "x"} {}'],
)
def test_malformed_json_is_a_422_envelope(api: Api, body: bytes) -> None:
    response = api.post("/evaluations/", content=body)
    assert_envelope(response, 422, "invalid_json")
    assert api.get("/evaluations/").json()["total"] == 0


def test_wrong_types_are_a_422_with_fastapis_list_detail(api: Api) -> None:
    for payload in (
        {"name": 5},
        {"name": ""},
        {},
        {"name": "x", "tags": "not-a-list"},
        {"name": "x", "metadata": [1]},
        {"name": "x", "model_name": "m" * 600},
        {"name": "a\u0000b"},
    ):
        response = api.post("/evaluations/", json=payload)
        body = assert_envelope(response, 422, "invalid_input")
        assert isinstance(body["detail"], list) and body["detail"][0]["loc"][0] == "body"
    assert api.get("/evaluations/").json()["total"] == 0


def test_nan_in_a_create_body_is_refused(api: Api) -> None:
    response = api.post("/evaluations/", content=b'{"name": "x", "metrics": {"a": NaN}}')
    assert_envelope(response, 422, "non_finite_number")


def test_unknown_routes_and_methods_answer_the_envelope(api: Api) -> None:
    assert_envelope(api.get("/no-such-thing"), 404)
    assert_envelope(api.request("DELETE", "/evaluations/"), 405, "method_not_allowed")


def test_unknown_ids_do_not_use_words_clients_match_on_for_other_errors(api: Api) -> None:
    evaluation_id = api.create()
    texts = [
        api.put(f"/evaluations/{evaluation_id}", json={"status": "COMPLETED"}).text,
        api.post("/evaluations/", json={"name": 1}).text,
        api.client.get("/api/v1/evaluations/").text,
    ]
    for text in texts:
        assert "404" not in text and "429" not in text and "not found" not in text.lower()
    unknown = api.get("/evaluations/does-not-exist")
    assert_envelope(unknown, 404, "not_found")


def test_every_success_is_a_json_object(api: Api) -> None:
    evaluation_id = api.create()
    responses = [
        api.get("/evaluations/"),
        api.get(f"/evaluations/{evaluation_id}"),
        api.put(f"/evaluations/{evaluation_id}", json={"name": "renamed"}),
        api.post(f"/evaluations/{evaluation_id}/samples", json={"samples": []}),
        api.get(f"/evaluations/{evaluation_id}/samples"),
        api.post(f"/evaluations/{evaluation_id}/finalize", json={}),
        api.post("/environmentshub/resolve", json={"name": "e"}),
        api.client.get("/healthz"),
        api.client.get("/openapi.json"),
    ]
    for response in responses:
        assert response.is_success, response.text
        assert response.headers["content-type"].startswith("application/json")
        assert isinstance(response.json(), dict)


def test_unexpected_errors_answer_500_without_a_traceback(tmp_path: Path) -> None:
    settings = make_settings(f"sqlite:///{tmp_path / 'p.db'}", tmp_path)
    app = create_app(settings)

    @app.get("/api/v1/boom")
    def boom() -> None:
        raise RuntimeError("secret internals")

    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.get("/api/v1/boom")
    body = assert_envelope(response, 500, "internal_error")
    assert "secret internals" not in response.text and "Traceback" not in response.text
    assert "log" in body["detail"]


def test_the_schema_is_served_but_no_cdn_backed_docs_pages(api: Api) -> None:
    assert api.client.get("/openapi.json").status_code == 200
    for path in ("/docs", "/redoc"):
        assert_envelope(api.client.get(path), 404)
