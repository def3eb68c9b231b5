"""Evaluation records: create, get, list, PUT, finalize and the statistics task."""

from __future__ import annotations

import json
from typing import Any

from tests.server.conftest import PUBLIC_URL, Api
from tests.support.waiting import wait_until


def wait_status(api: Api, evaluation_id: str, status: str, timeout: float = 10.0) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        record: dict[str, Any] = api.get(f"/evaluations/{evaluation_id}").json()
        return record if record["status"] == status else None

    return wait_until(reached, timeout=timeout, interval=0.02, what=f"{evaluation_id} {status}")


def test_create_answers_id_name_and_viewer_url(api: Api) -> None:
    response = api.post("/evaluations/", json={"name": "run-1", "environments": [], "tags": []})
    assert response.status_code == 201
    body = response.json()
    assert body["name"] == "run-1"
    assert body["viewer_url"] == f"{PUBLIC_URL}/evaluations/{body['evaluation_id']}"
    record = api.get(f"/evaluations/{body['evaluation_id']}").json()
    assert record["status"] == "RUNNING"
    assert record["id"] == record["evaluation_id"] == body["evaluation_id"]
    assert record["metadata"] == {} and record["metrics"] == {}
    assert record["total_samples"] == 0 and record["avg_score"] is None


def test_create_without_trailing_slash_is_served_not_redirected(api: Api) -> None:
    response = api.post("/evaluations", json={"name": "no-slash"}, follow_redirects=False)
    assert response.status_code == 201
    listing = api.get("/evaluations", follow_redirects=False)
    assert listing.status_code == 200 and listing.json()["total"] == 1


def test_metadata_is_returned_byte_for_byte(api: Api) -> None:
    metadata = '{ "z": 1.50,  "a": ["é", 1e3, {"nested": null}], "big": 12345678901234567890 }'
    body = '{"name": "meta", "metadata": ' + metadata + "}"
    created = api.post(
        "/evaluations/", content=body.encode(), headers={"Content-Type": "application/json"}
    )
    evaluation_id = created.json()["evaluation_id"]
    raw = api.get(f"/evaluations/{evaluation_id}").content.decode("utf-8")
    assert '"metadata":' + metadata in raw
    listing = api.get("/evaluations/").content.decode("utf-8")
    assert '"metadata":' + metadata in listing


def test_record_carries_every_contract_field(api: Api) -> None:
    body = {"name": "alphabet-sort", "framework": "proctor"}
    env = api.post("/environmentshub/resolve", json=body).json()["data"]
    evaluation_id = api.create(
        name="full",
        environments=[{"id": env["id"], "version_id": "v1"}],
        tags=["a", "b"],
        model_name="demo/model",
        dataset="alphabet-sort",
        framework="proctor",
        description="d",
        task_type="single-turn",
        metrics={"m": 1},
        is_public=False,
    )
    record = api.get(f"/evaluations/{evaluation_id}").json()
    for field in (
        "evaluation_id", "id", "name", "status", "error_message", "viewer_url", "environments",
        "environment_ids", "environment_names", "model_name", "dataset", "framework",
        "task_type", "description", "tags", "metadata", "metrics", "total_samples",
        "avg_score", "min_score", "max_score", "is_hosted", "is_public", "team_id", "user_id",
        "created_at", "updated_at", "started_at", "completed_at", "finalized_at",
    ):  # fmt: skip
        assert field in record, field
    assert record["environment_ids"] == [env["id"]]
    assert record["environment_names"] == ["alphabet-sort"]
    # As sent, with what ran as the hub names it (no version "v1": the server's install).
    ref = "proctor/alphabet-sort@0.1.0"
    assert record["environments"] == [{"id": env["id"], "version_id": "v1", "ref": ref}]
    assert record["tags"] == ["a", "b"] and record["model_name"] == "demo/model"
    assert record["is_hosted"] is False and record["metrics"] == {"m": 1}


def test_list_pages_filters_and_always_has_object_metadata(api: Api) -> None:
    env = api.post("/environmentshub/resolve", json={"name": "reverse-text"}).json()["data"]
    for i in range(5):
        api.create(name=f"e{i}")
    api.create(name="with-env", environments=[{"id": env["id"]}], metadata={"k": 1})
    page = api.get("/evaluations/", params={"skip": 0, "limit": 4}).json()
    assert page["total"] == 6 and len(page["evaluations"]) == 4
    assert page["evaluations"][0]["name"] == "with-env"  # newest first
    rest = api.get("/evaluations/", params={"skip": 4, "limit": 4}).json()
    assert [e["name"] for e in rest["evaluations"]] == ["e1", "e0"]
    assert all(isinstance(e["metadata"], dict) for e in page["evaluations"] + rest["evaluations"])
    filtered = api.get("/evaluations/", params={"environment_name": "reverse-text"}).json()
    assert [e["name"] for e in filtered["evaluations"]] == ["with-env"]
    assert filtered["total"] == 1


def test_put_changes_only_the_fields_sent(api: Api) -> None:
    evaluation_id = api.create(name="p", model_name="m", metadata={"a": 1}, metrics={"x": 1})
    response = api.put(
        f"/evaluations/{evaluation_id}",
        content=b'{"metrics": {"avg_reward": 0.5},  "metadata": {"b":  2}}',
    )
    assert response.status_code == 200
    raw = api.get(f"/evaluations/{evaluation_id}").content.decode()
    record = json.loads(raw)
    assert record["metrics"] == {"avg_reward": 0.5}
    assert '"metadata":{"b":  2}' in raw
    assert record["model_name"] == "m" and record["name"] == "p"
    assert record["status"] == "RUNNING"


def test_put_status_failed_then_terminal_changes_answer_409(api: Api) -> None:
    evaluation_id = api.create()
    long_message = "x" * 5000
    response = api.put(
        f"/evaluations/{evaluation_id}", json={"status": "FAILED", "error_message": long_message}
    )
    assert response.status_code == 200
    record = api.get(f"/evaluations/{evaluation_id}").json()
    assert record["status"] == "FAILED" and len(record["error_message"]) == 4096
    again = api.put(f"/evaluations/{evaluation_id}", json={"status": "CANCELLED"})
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "evaluation_closed"
    # Closed means closed: its metrics are part of its result.
    refused = api.put(f"/evaluations/{evaluation_id}", json={"metrics": {"a": 1}})
    assert refused.status_code == 409 and "metrics" in refused.json()["error"]["message"]
    # A client retrying its own PUT (same values) succeeds and changes nothing.
    same = {"status": "FAILED", "error_message": long_message}
    assert api.put(f"/evaluations/{evaluation_id}", json=same).status_code == 200
    assert api.get(f"/evaluations/{evaluation_id}").json() == record


def test_put_status_completed_or_unknown_is_refused_with_422(api: Api) -> None:
    evaluation_id = api.create()
    for status in ("COMPLETED", "RUNNING", "DONE"):
        response = api.put(f"/evaluations/{evaluation_id}", json={"status": status})
        assert response.status_code == 422
        assert response.json()["error"]["code"] == "invalid_status"
    assert (
        "finalize"
        in api.put(f"/evaluations/{evaluation_id}", json={"status": "COMPLETED"}).json()["error"][
            "message"
        ]
    )
    assert api.get(f"/evaluations/{evaluation_id}").json()["status"] == "RUNNING"


def test_finalize_computes_statistics_and_completes(api: Api) -> None:
    evaluation_id = api.create()
    samples = [{"sample_id": f"s{i}", "reward": r} for i, r in enumerate([0.0, 0.5, 1.0, None])]
    assert api.post(f"/evaluations/{evaluation_id}/samples", json={"samples": samples}).is_success
    response = api.post(f"/evaluations/{evaluation_id}/finalize", json={"metrics": {"avg": 0.5}})
    assert response.status_code == 200
    assert response.json()["status"] in {"PROCESSING", "COMPLETED"}
    record = wait_status(api, evaluation_id, "COMPLETED")
    assert record["total_samples"] == 4
    assert record["avg_score"] == 0.5
    assert record["min_score"] == 0.0 and record["max_score"] == 1.0
    assert record["metrics"] == {"avg": 0.5}
    assert record["finalized_at"] and record["completed_at"]


def test_refinalize_of_completed_succeeds_and_empty_metrics_keep_the_document(api: Api) -> None:
    evaluation_id = api.create(metrics={"kept": True})
    assert api.post(f"/evaluations/{evaluation_id}/finalize", json={"metrics": {}}).is_success
    wait_status(api, evaluation_id, "COMPLETED")
    again = api.post(f"/evaluations/{evaluation_id}/finalize", content=b"")
    assert again.status_code == 200 and again.json()["status"] == "COMPLETED"
    assert api.get(f"/evaluations/{evaluation_id}").json()["metrics"] == {"kept": True}


def test_finalize_of_failed_or_cancelled_answers_409(api: Api) -> None:
    for status in ("FAILED", "CANCELLED"):
        evaluation_id = api.create()
        api.put(f"/evaluations/{evaluation_id}", json={"status": status})
        response = api.post(f"/evaluations/{evaluation_id}/finalize", json={})
        assert response.status_code == 409
        assert api.get(f"/evaluations/{evaluation_id}").json()["status"] == status


def test_processing_left_behind_is_completed_on_next_start(api: Api) -> None:
    from fastapi.testclient import TestClient

    from proctor.server.app import create_app
    from proctor.server.db.models import Evaluation

    evaluation_id = api.create()
    with api.db.write() as session:
        evaluation = session.get(Evaluation, evaluation_id)
        assert evaluation is not None
        evaluation.status = "PROCESSING"
    with TestClient(create_app(api.settings)) as client:
        record = client.get(f"/api/v1/evaluations/{evaluation_id}", headers=api.headers()).json()
    assert record["status"] == "COMPLETED"


def test_reads_never_scan_samples_and_pages_are_ranges_not_offsets(api: Api) -> None:
    from sqlalchemy import event

    evaluation_id = api.create()
    samples = [{"sample_id": f"s{i}", "reward": 0.5} for i in range(30)]
    api.post(f"/evaluations/{evaluation_id}/samples", json={"samples": samples})
    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement.lower())

    event.listen(api.db.engine, "before_cursor_execute", record)
    try:
        assert api.get(f"/evaluations/{evaluation_id}").json()["total_samples"] == 30
        record_reads = list(statements)
        page = api.get(f"/evaluations/{evaluation_id}/samples", params={"page": 3, "limit": 10})
        assert [s["sample_id"] for s in page.json()["samples"]] == [f"s{i}" for i in range(20, 30)]
    finally:
        event.remove(api.db.engine, "before_cursor_execute", record)
    assert record_reads and not any(" samples" in s for s in record_reads)
    page_reads = [s for s in statements[len(record_reads) :] if "from samples" in s]
    assert page_reads and all("offset" not in s and "count(" not in s for s in page_reads)
