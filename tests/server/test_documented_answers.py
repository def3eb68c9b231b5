"""Answers the OpenAPI fuzz found off the published document, pinned without the fuzz.

The fuzz (`test_fuzz_openapi.py`) reaches them only when its fixed seed happens to draw them:
a 404 for an unknown id named in a query (not a path) must be documented on its operation,
and a `run_type` outside prime-traces' run types (the empty one too) is refused with the
422 envelope, as its published enum says.
"""

from __future__ import annotations

from typing import Any

from tests.server.conftest import Api


def _operation(api: Api, method: str, path: str) -> dict[str, Any]:
    document = api.client.get("/openapi.json").json()
    operation: dict[str, Any] = document["paths"][f"/api/v1{path}"][method]
    return operation


def _documented(api: Api, method: str, path: str, status: int) -> None:
    """`status` is one the operation documents, with the error envelope as its body."""
    response = _operation(api, method, path)["responses"][str(status)]
    schema = response["content"]["application/json"]["schema"]["$ref"]
    body = "ValidationErrorBody" if status == 422 else "ErrorBody"
    assert schema == f"#/components/schemas/{body}", response


def test_compare_documents_the_404_it_answers_for_an_id_this_key_cannot_see(api: Api) -> None:
    mine = api.key("mine", user="alice")
    own, other = api.create(mine), api.create(api.key("theirs", user="bob"))
    for ids in (f"{own},nope", f"{own},{other}"):
        response = api.get(f"/evaluations/compare?ids={ids}", mine)
        assert response.status_code == 404, response.text
        assert response.json()["error"]["code"] == "not_found"
    _documented(api, "get", "/evaluations/compare", 404)
    _documented(api, "get", "/evaluations/compare", 400)


def test_runs_take_only_prime_traces_run_types_and_refuse_others_with_the_envelope(
    api: Api,
) -> None:
    for query in ("", "?run_type=eval", "?run_type=train&run_type=unknown"):
        response = api.get(f"/runs{query}")
        assert response.status_code == 200, (query, response.text)
        assert response.json() == {"items": [], "next_cursor": None}
    for query in ("?run_type=", "?run_type=EVAL", "?run_type=eval&run_type=rl"):
        response = api.get(f"/runs{query}")
        assert response.status_code == 422, (query, response.text)
        body = response.json()
        assert body["error"]["code"] == "invalid_input"
        assert [issue["loc"][:2] for issue in body["detail"]] == [["query", "run_type"]]
    (parameter,) = [
        p for p in _operation(api, "get", "/runs")["parameters"] if p["name"] == "run_type"
    ]
    array = next(s for s in parameter["schema"]["anyOf"] if s.get("type") == "array")
    assert array["items"]["enum"] == ["eval", "train", "unknown"]
    _documented(api, "get", "/runs", 422)
