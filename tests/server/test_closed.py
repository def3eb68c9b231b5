"""Closed means closed (platform-api.md, "Status"): a finalized or ended evaluation's result
never changes; only name, description and tags stay editable."""

from __future__ import annotations

from typing import Any

from tests.server.conftest import Api
from tests.server.test_evaluations import wait_status


def _completed(api: Api) -> str:
    evaluation_id = api.create(metadata={"env": "e"})
    samples = [{"sample_id": f"s{i}", "reward": i / 4} for i in range(4)]
    assert api.post(f"/evaluations/{evaluation_id}/samples", json={"samples": samples}).is_success
    finalized = api.post(
        f"/evaluations/{evaluation_id}/finalize", json={"metrics": {"avg_reward": 0.375}}
    )
    assert finalized.status_code == 200
    wait_status(api, evaluation_id, "COMPLETED")
    return evaluation_id


def _snapshot(api: Api, evaluation_id: str) -> tuple[bytes, bytes]:
    record = api.get(f"/evaluations/{evaluation_id}").content
    samples = api.get(f"/evaluations/{evaluation_id}/samples").content
    return record, samples


def test_a_completed_evaluation_stays_byte_identical(api: Api) -> None:
    evaluation_id = _completed(api)
    before = _snapshot(api, evaluation_id)
    path = f"/evaluations/{evaluation_id}"

    # A repeated finalize with the same content answers 200 and changes nothing.
    for body in ({"metrics": {"avg_reward": 0.375}}, {"metrics": {}}, {}):
        again = api.post(f"{path}/finalize", json=body)
        assert again.status_code == 200 and again.json()["status"] == "COMPLETED"
    assert _snapshot(api, evaluation_id) == before

    # What a second run attached to it sends (vf-eval's close-out) is refused, naming it.
    refusals: list[tuple[str, dict[str, Any], str]] = [
        ("POST", {"samples": [{"sample_id": "new", "reward": 0.0}]}, "/samples"),
        ("POST", {"metrics": {"avg_reward": 0.0, "avg_error": 1.0}}, "/finalize"),
        ("PUT", {"metrics": {"avg_reward": 0.0, "avg_error": 1.0}}, ""),
        ("PUT", {"metadata": {"env": "other"}}, ""),
        ("PUT", {"status": "CANCELLED"}, ""),
        ("PUT", {"model_name": "another"}, ""),
    ]
    for method, body, suffix in refusals:
        response = api.request(method, f"{path}{suffix}", json=body)
        assert response.status_code == 409, (method, suffix, body, response.text)
        error = response.json()["error"]
        assert error["code"] == "evaluation_closed"
        named = next(iter(body)) if suffix != "/samples" else "samples"
        assert named in error["message"], error["message"]
    assert _snapshot(api, evaluation_id) == before

    # name, description and tags stay editable.
    edit = {"name": "renamed", "description": "why", "tags": ["kept"]}
    assert api.put(path, json=edit).status_code == 200
    record = api.get(path).json()
    assert {k: record[k] for k in edit} == edit
    assert record["metrics"] == {"avg_reward": 0.375} and record["avg_score"] == 0.375
