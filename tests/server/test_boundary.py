"""What PostgreSQL would refuse answers 422 naming the field, on SQLite and PostgreSQL alike.

Each case here answered 500 on at least one backend before `proctor.server.boundary` (found
by the OpenAPI fuzz test and by hand).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select

from proctor.server.boundary import INT32_MAX, INT64_MAX, page_max
from proctor.server.db.models import Evaluation
from proctor.server.errors import InvalidInput
from tests.server.conftest import Api
from tests.server.test_errors import assert_envelope
from tests.support.platform import BOOTSTRAP_KEY

HUGE = "9" * 5000  # past Python's 4300-digit limit for int()


def assert_422(response: Any, *words: str) -> str:
    body = assert_envelope(response, 422)
    assert isinstance(body["detail"], list) and body["detail"], body
    message: str = body["error"]["message"]
    for word in words:
        assert word in message, message
    return message


def test_nul_in_path_and_query_is_a_422_naming_the_parameter(api: Api) -> None:
    evaluation_id = api.create()
    cases = [
        ("GET", "/evaluations/a%00b", "evaluation_id"),
        ("GET", "/evaluations/a%00b/samples", "evaluation_id"),
        ("PUT", "/evaluations/a%00b", "evaluation_id"),
        ("GET", "/hosted-evaluations/a%00b/logs", "evaluation_id"),
        ("PATCH", "/hosted-evaluations/a%00b/cancel", "evaluation_id"),
        ("GET", "/environmentshub/o%00/n/@latest", "owner"),
        ("GET", "/evaluations/?team_id=a%00", "team_id"),
        ("GET", "/evaluations/?environment_name=%00", "environment_name"),
        ("GET", "/evaluations/?suite_id=x%00", "suite_id"),
        ("GET", "/evaluations/?status=R%00", "status"),
        ("GET", f"/evaluations/{evaluation_id}/samples?x%00=1", "x"),
    ]
    for method, path, name in cases:
        kwargs = {"json": {}} if method == "PUT" else {}
        message = assert_422(api.request(method, path, **kwargs), name, "NUL")
        assert "remove it" in message
    assert api.get(f"/evaluations/{evaluation_id}").status_code == 200


def test_nul_in_body_strings_is_a_422_naming_the_field(api: Api) -> None:
    evaluation_id = api.create()
    cases: list[tuple[str, str, dict[str, Any], str]] = [
        ("POST", "/evaluations/", {"name": "a\u0000b"}, "name"),
        ("POST", "/evaluations/", {"name": "x", "tags": ["\u0000"]}, "tags"),
        ("POST", "/evaluations/", {"name": "x", "team_id": "t\u0000"}, "team_id"),
        ("PUT", f"/evaluations/{evaluation_id}", {"model_name": "m\u0000"}, "model_name"),
        ("POST", "/environmentshub/resolve", {"name": "env\u0000"}, "name"),
        ("POST", "/environmentshub/resolve", {"name": "e", "team_id": "\u0000"}, "team_id"),
        ("POST", "/environmentshub/lookup", {"id": "\u0000"}, "id"),
        (
            "POST",
            "/hosted-evaluations",
            {"environment_ids": ["e\u0000"], "inference_model": "m"},
            "environment_ids",
        ),
        (
            "POST",
            f"/evaluations/{evaluation_id}/samples",
            {"samples": [{"sample_id": "s\u0000"}]},
            "sample_id",
        ),
    ]
    for method, path, body, field in cases:
        assert_422(api.request(method, path, json=body), field)
    assert api.get("/evaluations/").json()["total"] == 1


def test_nul_inside_a_stored_json_document_is_kept(api: Api) -> None:
    # Documents are stored as JSON text, where U+0000 is the escape `\u0000`: nothing to refuse.
    evaluation_id = api.create(metadata={"note": "a\u0000b"})
    assert api.get(f"/evaluations/{evaluation_id}").json()["metadata"] == {"note": "a\u0000b"}
    sample = {"sample_id": "s", "completion": [{"role": "assistant", "content": "\u0000"}]}
    posted = api.post(f"/evaluations/{evaluation_id}/samples", json={"samples": [sample]})
    assert posted.status_code == 200, posted.text
    stored = api.get(f"/evaluations/{evaluation_id}/samples").json()["samples"][0]
    assert stored["completion"][0]["content"] == "\u0000"


def test_a_sample_holding_nul_keeps_its_evaluations_stats(api: Api) -> None:
    # PostgreSQL's JSON parsers refuse the escape `\u0000`: stats answered 500 there.
    evaluation_id = api.create()
    usage = {"token_usage": {"prompt_tokens": 3, "completion_tokens": 2}}
    timing = {"timing": {"duration_s": 1.5, "model_s": 1.0}}
    samples = [
        {"sample_id": "nul", "reward": 1.0, **usage, **timing, "metadata": {"\u0000": "\u0000"}},
        # A literal backslash before `u0000` and an escaped backslash before a NUL.
        {
            "sample_id": "slash",
            "reward": 0.0,
            **usage,
            "completion": [{"role": "assistant", "content": "\\u0000"}],
        },
        {
            "sample_id": "both",
            "reward": 0.5,
            **usage,
            "completion": [{"role": "assistant", "content": "\\\u0000"}],
        },
    ]
    posted = api.post(f"/evaluations/{evaluation_id}/samples", json={"samples": samples})
    assert posted.status_code == 200, posted.text
    body = api.get(f"/evaluations/{evaluation_id}/stats").json()
    assert body["reward"]["n_samples"] == 3, body
    assert body["usage"] == {
        "prompt_tokens": 9,
        "completion_tokens": 6,
        "model_s": 1.0,
        "duration_s": 1.5,
    }
    stored = api.get(f"/evaluations/{evaluation_id}/samples").json()["samples"]
    contents = {s["sample_id"]: s.get("completion") for s in stored}
    assert contents["slash"] == [{"role": "assistant", "content": "\\u0000"}]
    assert contents["both"] == [{"role": "assistant", "content": "\\\u0000"}]


def test_text_longer_than_its_column_is_a_422(api: Api) -> None:
    # An environment name past its 200-character column answered 500 on PostgreSQL.
    assert_422(api.post("/environmentshub/resolve", json={"name": "e" * 201}), "name")
    assert_422(api.post("/environmentshub/resolve", json={"name": f"{'o' * 201}/e"}), "name")
    assert api.post("/environmentshub/resolve", json={"name": "e" * 200}).status_code == 200
    assert api.get(f"/environmentshub/{'o' * 201}/e/@latest").status_code == 422
    # Ids longer than any id are unknown (404), not invalid.
    assert_envelope(api.get(f"/evaluations/{'x' * 65}"), 404)
    assert_envelope(api.post("/environmentshub/lookup", json={"id": "x" * 64}), 404)
    created = api.post("/evaluations/", json={"name": "x", "environments": [{"id": "e" * 200}]})
    assert created.status_code == 201, created.text


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/evaluations/", '{"name": "x", "metadata": {"n": %s}}'),
        ("PUT", "/evaluations/{id}", '{"metrics": {"n": %s}}'),
        ("POST", "/evaluations/{id}/samples", '{"samples": [{"sample_id": "s", "n": %s}]}'),
        ("POST", "/evaluations/{id}/finalize", '{"metrics": {"n": %s}}'),
        ("POST", "/environmentshub/resolve", '{"name": "e", "n": %s}'),
        ("POST", "/hosted-evaluations", '{"environment_ids": ["e"], "inference_model": %s}'),
    ],
)
def test_an_integer_past_the_digit_limit_is_a_422(
    api: Api, method: str, path: str, body: str
) -> None:
    evaluation_id = api.create()
    response = api.request(
        method,
        path.replace("{id}", evaluation_id),
        content=(body % HUGE).encode(),
        headers={"Content-Type": "application/json"},
    )
    message = assert_422(response, "4300 digits")
    assert response.json()["error"]["code"] == "invalid_json" and "sys." not in message


def test_integers_past_their_column_are_a_422(api: Api) -> None:
    evaluation_id = api.create()
    for sample in (
        {"sample_id": "a", "example_id": INT64_MAX + 1},
        {"sample_id": "b", "rollout_number": INT32_MAX + 1},
    ):
        response = api.post(f"/evaluations/{evaluation_id}/samples", json={"samples": [sample]})
        assert_422(response, "samples[0]")
    config = {"num_examples": 1_000_001, "rollouts_per_example": 3}
    hosted = {"environment_ids": ["e"], "inference_model": "m", "eval_config": config}
    assert_422(api.post("/hosted-evaluations", json=hosted), "num_examples")


def test_the_database_guard_refuses_what_a_column_cannot_hold(api: Api) -> None:
    # The net under every endpoint: the same refusal on SQLite, which would store anything.
    for bad in ({"total_samples": INT32_MAX + 1}, {"name": "n" * 513}, {"model_name": "\u0000"}):
        with pytest.raises(InvalidInput) as caught, api.db.write() as session:
            evaluation = session.scalars(select(Evaluation)).first() or Evaluation(
                name="x", status="RUNNING", user_id="u"
            )
            for key, value in bad.items():
                setattr(evaluation, key, value)
            session.add(evaluation)
        assert next(iter(bad)) in caught.value.message
    with pytest.raises(InvalidInput, match="example_id"), api.db.read() as session:
        from proctor.server.db.models import SampleRow

        session.scalars(select(SampleRow).where(SampleRow.example_id == INT64_MAX + 1)).all()


def test_page_windows_stay_within_a_32_bit_row_position(api: Api) -> None:
    evaluation_id = api.create()
    limit = 1000
    last = page_max(limit)
    assert (last * limit) <= INT32_MAX
    ok = api.get(f"/evaluations/{evaluation_id}/samples?page={last}&limit={limit}")
    assert ok.status_code == 200 and ok.json()["samples"] == []
    assert_422(api.get(f"/evaluations/{evaluation_id}/samples?page={last + 1}&limit=1"), "page")


def _sign_in(api: Api) -> None:
    signed = api.client.post("/login", data={"api_key": BOOTSTRAP_KEY}, follow_redirects=False)
    assert signed.status_code == 303, signed.text


def test_dashboard_example_past_64_bits_and_huge_page_windows_are_400(api: Api) -> None:
    evaluation_id = api.create()
    _sign_in(api)
    base = f"/evaluations/{evaluation_id}"
    for path in (f"{base}/samples", base):
        for query in (f"example={INT64_MAX + 1}", f"example=-{INT64_MAX + 2}", "example=%00"):
            page = api.client.get(f"{path}?{query}&format=json")
            assert page.status_code in (400, 422), page.text
            assert page.json()["error"]["code"] in ("bad_request", "invalid_input")
        assert api.client.get(f"{path}?example={INT64_MAX}&format=json").status_code == 200
        for query in ("page=4294968&limit=500", "page=10000000&limit=500"):
            page = api.client.get(f"{path}?{query}&format=json")
            assert page.status_code == 400, page.text
        assert api.client.get(f"{path}?page=4294967&limit=500&format=json").status_code == 200
    html = api.client.get(f"{base}?example={INT64_MAX + 1}")
    assert html.status_code == 400 and "(64-bit)" in html.text


def test_the_hub_and_hosted_schemas_state_what_the_server_checks(api: Api) -> None:
    # Each of these was a schema-valid request refused, or an answer off its schema (fuzz).
    document = api.client.get("/openapi.json").json()
    schemas = document["components"]["schemas"]
    listing = document["paths"]["/api/v1/environmentshub/"]["get"]["parameters"]
    by_name = {p["name"]: p["schema"] for p in listing}
    assert by_name["sort_order"]["enum"] == ["asc", "desc"]
    assert "pattern" in by_name["visibility"]["anyOf"][0]
    for body in ("WheelRequest", "VersionRequest"):
        assert schemas[body]["properties"]["content_hash"]["pattern"] == "^[0-9a-fA-F]{64}$"
    assert schemas["HostedEvalConfig"]["additionalProperties"] is False

    assert_422(api.get("/environmentshub/?sort_order=up"), "sort_order")
    assert_422(api.get("/environmentshub/?visibility=0"), "visibility")
    resolve = api.post("/environmentshub/resolve", json={"name": "e", "visibility": "0"})
    assert_422(resolve, "visibility")
    listed = api.get("/environmentshub/?visibility=public&sort_order=asc")
    assert listed.status_code == 200, listed.text
    for row in listed.json()["data"]:  # timestamps carry their offset, as date-time requires
        assert datetime.fromisoformat(row["created_at"]).utcoffset() == timedelta(0), row
    env_id = api.post("/environmentshub/resolve", json={"name": "e"}).json()["data"]["id"]
    push = {"content_hash": "", "filename": "e-0.1.0-py3-none-any.whl", "sha256": "a" * 64}
    for kind in ("wheels", "versions"):
        assert_422(api.post(f"/environmentshub/{env_id}/{kind}", json=push), "content_hash")
    hosted = {"environment_ids": ["e"], "inference_model": "m", "eval_config": {"bogus": 1}}
    assert_422(api.post("/hosted-evaluations", json=hosted), "eval_config.bogus")
