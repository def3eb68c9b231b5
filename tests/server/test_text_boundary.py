"""Text that cannot be encoded (a lone surrogate half, what a model cut mid-emoji returns) and
non-finite numbers answer one 4xx naming the field on every route, never a 500, on SQLite and
PostgreSQL; the six cases of issue #21 (D5) first."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from typing import Any

import pytest

from tests.server.conftest import Api

HALF = "\ud800"


def _send(api: Api, method: str, path: str, body: str) -> Any:
    """`body` is JSON text with `\\ud800` escapes, as a client with ensure_ascii sends it."""
    return api.request(
        method, path, content=body.encode(), headers={"Content-Type": "application/json"}
    )


def _refused(response: Any, status: int, *words: str) -> str:
    assert response.status_code == status, response.text
    message: str = response.json()["error"]["message"]
    for word in words:
        assert word in message, message
    return message


def _upload_traces(api: Api, records: list[dict[str, Any]], *, episodes: bool) -> Any:
    body = b"".join(json.dumps(r).encode() + b"\n" for r in records)  # ensure_ascii: escapes
    headers = {"Idempotency-Key": "sha256:" + hashlib.sha256(body).hexdigest()}
    if episodes:
        headers["X-Prime-Line-Format"] = "episode"
    meta = json.dumps({"schema_version": 1, "context": {"source": "test"}}).encode()
    return api.post(
        "/traces",
        headers=headers,
        files={
            "metadata": (None, meta, "application/json"),
            "traces": (
                "traces.jsonl",
                gzip.compress(body, mtime=0),
                "application/x-ndjson",
                {"Content-Encoding": "gzip"},
            ),
        },
    )


def _trace(trace_id: str, run_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": trace_id,
        "task": {"type": "Task", "data": {"idx": 0}},
        "nodes": [],
        "rewards": {"exact": {"score": 1.0, "weight": 1.0}},
        "run": {"id": run_id, "type": "eval"},
        **extra,
    }


def test_the_six_cases_of_the_issue_are_4xx_naming_the_field(api: Api) -> None:
    evaluation_id = api.create()
    path = f"/evaluations/{evaluation_id}"
    # 1. metrics PUT
    _refused(_send(api, "PUT", path, '{"metrics": {"avg": "\\ud800"}}'), 422, "'metrics.avg'")
    # 2. a sample's sample_id
    body = '{"samples": [{"sample_id": "\\ud800", "reward": 1.0}]}'
    _refused(_send(api, "POST", f"{path}/samples", body), 422, "'samples[0].sample_id'")
    # 3. a trace record's id, and 4. a member trace's sample_id inside an episode
    _refused(
        _upload_traces(api, [_trace(HALF, evaluation_id)], episodes=False), 400, "Line 1", "'id'"
    )
    episode = {
        "id": "ep-0",
        "run": {"id": evaluation_id, "type": "eval"},
        "traces": [_trace("ep-0-t0", evaluation_id, sample_id=HALF)],
    }
    _refused(_upload_traces(api, [episode], episodes=True), 400, "Line 1", "'traces[0].sample_id'")
    # 5. and 6. a hosted run's timeout_minutes: Infinity, or a literal past the float range
    for literal in ("Infinity", "1e309"):
        body = (
            '{"environment_ids": ["alphabet-sort"], "inference_model": "demo", '
            f'"eval_config": {{"num_examples": 1, "timeout_minutes": {literal}}}}}'
        )
        _refused(
            _send(api, "POST", "/hosted-evaluations", body), 422, "'eval_config.timeout_minutes'"
        )
    # Nothing was stored, and every read still answers.
    record = api.get(path)
    assert record.status_code == 200 and record.json()["metrics"] == {}
    assert api.get(f"{path}/samples").json()["samples"] == []
    assert api.get("/traces", params={"run_id": evaluation_id}).status_code == 200


@pytest.mark.parametrize(
    ("method", "suffix", "body", "field"),
    [
        ("POST", "", '{"name": "a\\udfff"}', "'name'"),
        ("POST", "", '{"name": "n", "tags": ["ok", "\\ud83d"]}', "'tags[1]'"),
        ("POST", "", '{"name": "n", "metadata": {"\\ud800key": 1}}', "'metadata.\\ud800key'"),
        ("PUT", "/E", '{"description": "x\\ud800y"}', "'description'"),
        ("PUT", "/E", '{"metrics": {"avg": NaN}}', "'metrics.avg'"),
        ("PUT", "/E", '{"metrics": {"deep": [1, -Infinity]}}', "'metrics.deep[1]'"),
        ("POST", "/E/samples", '{"samples": [{"sample_id": "s", "reward": 1e309}]}', "reward"),
        ("POST", "/E/finalize", '{"metrics": {"m": "\\udc00"}}', "'metrics.m'"),
    ],
)
def test_every_string_and_number_field_refuses_what_cannot_be_stored(
    api: Api, method: str, suffix: str, body: str, field: str
) -> None:
    evaluation_id = api.create()
    path = "/evaluations/" + suffix.replace("E", evaluation_id).lstrip("/")
    _refused(_send(api, method, path, body), 422, field)
    assert api.get(f"/evaluations/{evaluation_id}").status_code == 200


def test_a_surrogate_pair_is_text_and_is_stored(api: Api) -> None:
    evaluation_id = _send(api, "POST", "/evaluations/", '{"name": "ok \\ud83d\\ude00"}').json()[
        "evaluation_id"
    ]
    assert api.get(f"/evaluations/{evaluation_id}").json()["name"] == "ok \U0001f600"


def _json_operations(api: Api) -> list[tuple[str, str, list[str]]]:
    """(method, path, top-level body fields) of every operation with a JSON request body."""
    document = api.client.get("/openapi.json").json()
    found = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            body = (operation.get("requestBody") or {}).get("content", {})
            schema = (body.get("application/json") or {}).get("schema") or {}
            ref = schema.get("$ref", "")
            if ref.startswith("#/components/schemas/"):
                schema = document["components"]["schemas"][ref.rsplit("/", 1)[1]]
            fields = sorted(schema.get("properties") or {})
            if fields:
                found.append((method.upper(), path, fields))
    return found


def test_every_json_route_answers_a_4xx_to_a_half_or_a_non_finite_number_in_any_field(
    api: Api,
) -> None:
    """A sweep of the published API: each top-level field of each JSON body in turn holds
    `"\\ud800"`, then `NaN`; no answer is a 5xx, and each refusal names the field."""
    evaluation_id = api.create()
    operations = _json_operations(api)
    assert len(operations) >= 8
    tried = 0
    for method, path, fields in operations:
        url = re.sub(r"\{[^}]+\}", evaluation_id, path)
        for field in fields:
            for value in ('"\\ud800"', "NaN"):
                response = api.client.request(
                    method,
                    url,
                    content=f'{{"{field}": {value}}}'.encode(),
                    headers={**api.headers(), "Content-Type": "application/json"},
                )
                tried += 1
                assert response.status_code < 500, (method, url, field, response.text)
                if response.status_code == 422 and value == "NaN":
                    assert field in response.text, (method, url, field, response.text)
    assert tried >= 40
