"""Hosted evaluations whose sandbox runs a stand-in command (the template is configuration):
a run that exits 0 without uploading, and what the sandbox's scoped key may touch."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.e2e.hosted_helpers import create_hosted, wait_closed, wait_status
from tests.support.platform import Platform, start_platform

pytestmark = pytest.mark.e2e

# Saves the sandbox's key, then lingers {rollouts} seconds and exits 0 without uploading.
COMMAND = 'printf "%s" "$PROCTOR_API_KEY" > key.txt; sleep {rollouts}'


@pytest.fixture(scope="module")
def template_platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    env = {
        "PROCTOR_HOSTED_COMMAND": COMMAND,
        "PROCTOR_HOSTED_POLL_SECONDS": "0.1",
        "PROCTOR_HOSTED_STOP_GRACE_SECONDS": "1",
    }
    plat = start_platform(tmp_path_factory.mktemp("template-platform"), extra_env=env)
    yield plat
    plat.process.stop()


def _sandbox_key(platform: Platform, evaluation_id: str) -> str:
    path = Path(platform.data_dir) / "sandboxes" / evaluation_id / "work" / "key.txt"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError("the sandbox never wrote its key")


def test_exit_zero_without_uploading_is_incomplete(template_platform: Platform) -> None:
    client = template_platform.client()
    evaluation_id = create_hosted(client, num_examples=4, rollouts_per_example=1)
    record = wait_closed(client, template_platform, evaluation_id)
    assert record["status"] == "FAILED"
    assert record["error_message"].startswith("incomplete: 0 of 4 samples")


def test_scoped_key_reaches_its_own_evaluation_only(template_platform: Platform) -> None:
    admin = template_platform.client()
    mine = create_hosted(admin, num_examples=2, rollouts_per_example=30)
    other = create_hosted(admin, num_examples=2, rollouts_per_example=30)
    try:
        key = _sandbox_key(template_platform, mine)
        sandbox = template_platform.client(key)
        assert sandbox.get(f"/evaluations/{mine}").status_code == 200
        assert sandbox.post(f"/evaluations/{mine}/samples", json={"samples": []}).status_code == 200
        for request in (
            sandbox.build_request("GET", f"/evaluations/{other}"),
            sandbox.build_request("POST", f"/evaluations/{other}/samples", json={"samples": []}),
            sandbox.build_request("PUT", f"/evaluations/{other}", json={"status": "FAILED"}),
            sandbox.build_request("POST", f"/evaluations/{other}/finalize", json={}),
            sandbox.build_request("PATCH", f"/hosted-evaluations/{other}/cancel"),
            sandbox.build_request("GET", f"/hosted-evaluations/{other}/logs"),
            sandbox.build_request("GET", "/evaluations/"),
            sandbox.build_request(
                "POST",
                "/hosted-evaluations",
                json={"environment_ids": ["alphabet-sort"], "inference_model": "demo"},
            ),
        ):
            answer = sandbox.send(request)
            assert answer.status_code == 403, (request.method, request.url, answer.text)
            assert answer.json()["error"]["code"] == "scope_denied"
        assert admin.get(f"/evaluations/{other}").json()["status"] == "RUNNING"
    finally:
        for evaluation_id in (mine, other):
            admin.patch(f"/hosted-evaluations/{evaluation_id}/cancel")
    for evaluation_id in (mine, other):
        assert wait_closed(admin, template_platform, evaluation_id)["status"] == "CANCELLED"
    # Once the sandbox has ended its key is revoked.
    answer = template_platform.client(key).get(f"/evaluations/{mine}")
    assert answer.status_code == 401


def test_create_validates_input_with_json_errors(template_platform: Platform) -> None:
    client = template_platform.client()
    for body in (
        {"environment_ids": [], "inference_model": "demo"},
        {"environment_ids": ["alphabet-sort"]},
        {
            "environment_ids": ["alphabet-sort"],
            "inference_model": "demo",
            "eval_config": {"num_examples": 0},
        },
        {
            "environment_ids": ["alphabet-sort"],
            "inference_model": "demo",
            "eval_config": {"rollouts_per_example": 0},
        },
    ):
        answer = client.post("/hosted-evaluations", json=body)
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"]["code"] == "invalid_input"
    unauthenticated = httpx.post(
        f"{template_platform.url}/api/v1/hosted-evaluations",
        json={"environment_ids": ["alphabet-sort"], "inference_model": "demo"},
    )
    assert unauthenticated.status_code == 401
    # A plain (not hosted) evaluation has no sandbox logs and cannot be cancelled here.
    plain = client.post("/evaluations/", json={"name": "plain", "environments": []}).json()
    for answer in (
        client.get(f"/hosted-evaluations/{plain['evaluation_id']}/logs"),
        client.patch(f"/hosted-evaluations/{plain['evaluation_id']}/cancel"),
    ):
        assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_hosted"
    wait_status(client, plain["evaluation_id"], ("RUNNING",))


def test_one_evaluation_per_environment(template_platform: Platform) -> None:
    client = template_platform.client()
    body = {
        "environment_ids": ["alphabet-sort", "reverse-text"],
        "inference_model": "demo",
        "eval_config": {"num_examples": 1, "rollouts_per_example": 1},
        "name": "pair",
    }
    answer = client.post("/hosted-evaluations", json=body)
    assert answer.status_code == 200, answer.text
    ids = answer.json()["evaluation_ids"]
    assert len(ids) == 2 and answer.json()["evaluation_id"] == ids[0]
    records = [client.get(f"/evaluations/{i}").json() for i in ids]
    assert [r["environment_names"] for r in records] == [["alphabet-sort"], ["reverse-text"]]
    assert [r["name"] for r in records] == ["pair--alphabet-sort", "pair--reverse-text"]
    assert [r["metadata"]["environment"] for r in records] == ["alphabet-sort", "reverse-text"]
    for evaluation_id in ids:  # the stand-in command uploads nothing
        assert wait_closed(client, template_platform, evaluation_id)["status"] == "FAILED"
